"""The Tune driver: ``run_sweep`` and how a sweep runs besides its grid (settings, the flags every
sweep command shares, ``--resume``, ``--dry-run``, the progress line, the closing summary)."""
