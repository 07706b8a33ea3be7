"""analysis/primitives.py: Hedges' g, Welch, Pearson and counts against hand values and numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.primitives import count_desc, hedges_g, pearson, welch


def test_hedges_g_hand_values():
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 9.0]
    sp = math.sqrt((3 * np.var(a, ddof=1) + 2 * np.var(b, ddof=1)) / 5)
    assert hedges_g(a, b) == pytest.approx((2.5 - 5.0) / sp * (1 - 3 / (4 * 7 - 9)))
    assert hedges_g([1.0], b) is None
    assert hedges_g([1.0, 1.0], [1.0, 1.0]) is None
    assert welch([1.0], [2.0, 3.0]) == (None, None)


def test_pearson_degenerate_inputs():
    assert pearson([1.0, 2.0], [2.0, 3.0])["r"] is None
    c = pearson([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0])
    assert c["r"] is None and c["p"] is None and c["note"] == "constant input"
    nan = pearson([1.0, np.nan, 3.0, 4.0], [1.0, 2.0, 2.0, 5.0])
    assert nan["n"] == 3 and nan["r"] == pytest.approx(np.corrcoef([1, 3, 4], [1, 2, 5])[0, 1])


def test_slope_counts_treat_zero_as_neither():
    d = count_desc(np.array([0.5, 0.0, -0.25, np.nan]))
    assert (d["positive"], d["negative"], d["n"]) == (1, 1, 3)
    assert d["mean"] == pytest.approx(0.25 / 3)
