"""analysis/units.py: the scorecard's per-unit reductions against numpy and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from analysis.units import cell_mean, column, fraction, pearson_rows, slope_rows, spearman_rows


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


def test_slope_rows_equal_polyfit_over_the_finite_pairs() -> None:
    rng = np.random.default_rng(2)
    x = np.tile([0.0, 0.0, 0.05, 0.05, 0.2, 0.2], (3, 1))
    y = rng.normal(size=(3, 6))
    y[1, 4] = np.nan
    y[2, 2:] = np.nan  # x constant over the finite pairs: undefined
    s = slope_rows(x, y)
    assert s[0] == pytest.approx(np.polyfit(x[0], y[0], 1)[0], rel=1e-10)
    keep = np.isfinite(y[1])
    assert s[1] == pytest.approx(np.polyfit(x[1][keep], y[1][keep], 1)[0], rel=1e-10)
    assert math.isnan(s[2])


def test_cell_mean_and_column_reduce_each_unit_on_its_own() -> None:
    x = np.array([[1.0, 3.0, np.nan], [np.nan, np.nan, np.nan], [2.0, 2.0, 5.0]])
    assert cell_mean(x)[[0, 2]].tolist() == [2.0, 3.0] and math.isnan(cell_mean(x)[1])
    assert column(2)(x)[2] == 5.0
