"""``python -m sweep.tiny_series``, the docs' command (docs/checkpoints.md): the module is sweep/extension/tiny_series.py.

Kept only so that the command keeps working; import from ``sweep.extension.tiny_series``.
"""

import sys

from sweep.extension.tiny_series import main

if __name__ == "__main__":
    sys.exit(main())
