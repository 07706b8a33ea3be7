"""``python -m sweep.store {validate,compact} [--store URI]`` (see sweep/store/cli.py)."""

import sys

from sweep.store.cli import main

sys.exit(main())
