"""``python -m sweep.extension`` (see sweep/extension/cli.py)."""

import sys

from sweep.extension.cli import main

sys.exit(main())
