"""Moved to ``sweep.synthetic`` (importable by tests, benchmarks and Ray workers alike).

This alias keeps ``from tests.synthetic import ...`` working for branches written before the move.
"""

from sweep.synthetic import *  # noqa: F401,F403
from sweep.synthetic import Planted, expected_slope_counts, make_synthetic_store, write_store  # noqa: F401
