"""Where trials run: ``--pack`` and ``--dry-run`` (``flags``), which runs share a trial (``packing``),
how trials fill the GPUs (``schedule``, priced by sweep/costs.json), the plan made once of them
(``plan``), and the one place that starts Ray and reads its GPUs (``ray_env``). Imports ``model``,
``interventions`` and sweep/'s shared modules only (tests/test_imports.py)."""
