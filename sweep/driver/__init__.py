"""The Tune driver: ``run_sweep`` and how a sweep runs besides its grid (settings and the plan they
make, the flags every sweep command shares, ``--resume``, ``--dry-run``, the progress line, the
closing summary). Imports ``sweep.trial``, ``sweep.placement``, ``sweep.hooks``, the store and the
trackers; never ``sweep.sequential`` or a command (tests/test_imports.py)."""
