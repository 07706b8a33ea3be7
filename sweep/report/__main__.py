"""``python -m sweep.report`` (see sweep/report/cli.py)."""

import sys

from sweep.report.cli import main

sys.exit(main())
