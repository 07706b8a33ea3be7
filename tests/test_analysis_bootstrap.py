"""analysis/bootstrap.py: the scorecard's reducers against numpy, and the seed bootstrap's interval
against its closed form for two seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from analysis.bootstrap import (
    column,
    fraction,
    pearson_rows,
    seed_bootstrap,
    spearman_rows,
    unit_bootstrap,
)


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


def test_spearman_rows_equal_scipy_over_the_finite_columns_with_ties() -> None:
    rng = np.random.default_rng(1)
    a = np.tile([0.0, 0.0, 0.05, 0.05, 0.2, 0.2], (3, 1))  # strengths: ties, as in a dose–response
    b = rng.normal(size=(3, 6))
    b[1, 3] = np.nan
    b[2, :4] = np.nan  # two finite pairs: undefined
    r = spearman_rows(a, b)
    assert r[0] == pytest.approx(sps.spearmanr(a[0], b[0]).statistic, rel=1e-12)
    keep = np.isfinite(b[1])
    assert r[1] == pytest.approx(sps.spearmanr(a[1][keep], b[1][keep]).statistic, rel=1e-12)
    assert math.isnan(r[2])


def test_unit_bootstrap_value_is_the_statistic_on_every_unit() -> None:
    x = np.array([[1.0, 2.0], [2.0, 5.0], [0.0, 1.0]])

    def statistic(units: np.ndarray) -> np.ndarray:  # [B, n, 2] -> [B]: max over units of the sums
        return units.sum(-1).max(-1)

    value, lo, hi = unit_bootstrap(x, statistic)
    assert value == 7.0 and lo <= hi <= 7.0 and lo >= 1.0
    assert unit_bootstrap(x[:1], statistic) == (3.0, None, None)
    # seed_bootstrap is unit_bootstrap with the mean over units first
    assert seed_bootstrap(x, column(1)) == unit_bootstrap(x, lambda u: u.mean(axis=1)[:, 1])
