"""analysis/bootstrap.py: the scorecard's reducers against numpy, and the seed bootstrap's interval
against its closed form for two seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.bootstrap import column, fraction, pearson_rows, seed_bootstrap


def test_pearson_rows_equal_corrcoef_over_the_finite_columns() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 6)), rng.normal(size=(3, 6))
    a[1, 2] = np.nan  # row 1: column 2 is left out of both
    b[2, :4] = np.nan  # row 2: two finite pairs, too few for a correlation
    r = pearson_rows(a, b)
    assert r[0] == pytest.approx(np.corrcoef(a[0], b[0])[0, 1], rel=1e-12)
    keep = [0, 1, 3, 4, 5]
    assert r[1] == pytest.approx(np.corrcoef(a[1, keep], b[1, keep])[0, 1], rel=1e-12)
    assert math.isnan(r[2])


def test_fraction_counts_signs_of_the_finite_cells() -> None:
    avg = np.array([[0.5, -1.0, np.nan, 2.0], [0.0, -3.0, -1.0, np.nan], [np.nan] * 4])
    pos, neg = fraction(+1)(avg), fraction(-1)(avg)
    assert pos[:2].tolist() == [2 / 3, 0.0] and neg[:2].tolist() == [1 / 3, 2 / 3]  # zero is neither
    assert math.isnan(pos[2]) and math.isnan(neg[2])


def test_two_seed_interval_is_their_range_and_one_seed_has_none() -> None:
    # resampling two units gives means a, (a+b)/2 or b, a and b each with probability 1/4 > 2.5 %:
    # the 95 % percentile interval is exactly [min, max]
    value, lo, hi = seed_bootstrap(np.array([[3.0], [1.0]]), column(0))
    assert (value, lo, hi) == (2.0, 1.0, 3.0)
    assert seed_bootstrap(np.array([[5.0]]), column(0)) == (5.0, None, None)
    assert seed_bootstrap(np.empty((0, 1)), column(0)) == (None, None, None)
