"""One Tune trial: the run spec that crosses into it (``spec``, ``options``, ``gpu_flags``), the
trainable, and a failed attempt told to the driver (``failfast``). Imports the store and
``sweep.hooks``; never the driver (tests/test_imports.py)."""
