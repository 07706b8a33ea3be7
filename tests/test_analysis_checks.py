"""analysis/checks.py: the assumption-light check beside a decision, the seeds an undecided claim
needs (against the noncentral t in closed form), and the worst case of lost runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from analysis.checks import AGREES, RESTS, assumption_check, seeds_needed, worst_case


def test_a_clear_normal_decision_agrees_and_a_six_seed_one_rests_on_normality() -> None:
    rng = np.random.default_rng(1)
    y = 1.0 + 0.2 * rng.standard_normal(12)
    assert assumption_check(y, 0.0, 0.002).verdict == AGREES  # 2·2⁻¹² ≈ 5e-4 <= 0.002
    six = assumption_check(y[:6], 0.0, 0.002)  # the sign-flip floor 2·2⁻⁶ = 0.031 > 0.002
    assert six.verdict == RESTS and six.signflip_p == pytest.approx(2 * 2.0 ** -6)
    assert "sign-flip p 0.031" in six.text()


def test_the_check_flags_bimodal_values_and_a_driving_seed() -> None:
    bimodal = np.array([-1.0, -0.98, 1.01, 0.99, 1.02, 1.0, 0.98, 1.03, 1.01, 0.99, 1.0, 1.02, 0.97, 1.0])
    c = assumption_check(bimodal, 0.0, 0.004)  # 12 of 14 seeds near +1: the t test decides, the sign-flip not
    assert stats.ttest_1samp(bimodal, 0).pvalue < 0.004
    assert c.normal_p < 0.05 and "do not look normal" in c.text() and c.signflip_p > 0.004 and c.verdict == RESTS
    c = assumption_check(np.array([0.1, -0.2, -0.1, 5.0]), 0.0, 0.5, ids=(11, 12, 13, 14))
    assert c.driver == 14 and "seed 14 alone carries the direction" in c.text()


def _power_closed_form(d: float, n: int, level: float) -> float:
    """Two-sided t test power from the noncentral t's cdf (``scipy.special.nctdtr``), not scipy.stats."""
    crit = special.stdtrit(n - 1, 1 - level / 2)
    nc = d * math.sqrt(n)
    return float(1 - special.nctdtr(n - 1, nc, crit) + special.nctdtr(n - 1, nc, -crit))


def test_seeds_needed_is_the_first_n_with_80_percent_power_at_the_observed_effect() -> None:
    y = np.array([0.3, 0.9, -0.2, 0.5, 0.8, 0.1])
    d = y.mean() / y.std(ddof=1)
    for level in (0.05, 0.002):
        got = seeds_needed(y, 0.0, level)
        assert got.effect == pytest.approx(d)
        assert _power_closed_form(d, got.seeds, level) >= 0.8 > _power_closed_form(d, got.seeds - 1, level)
    assert seeds_needed(np.full(4, 0.1), 0.0, 0.002).seeds == 10  # 2·2⁻¹⁰ <= 0.002 < 2·2⁻⁹
    assert seeds_needed(np.zeros(4), 0.0, 0.05).seeds is None
    assert seeds_needed(y, 0.0, 0.05, side=-1).seeds is None  # no effect on that side
    assert seeds_needed(np.array([0, 1, 1.0]), 0.5, 0.05, "binomial").seeds is None


def test_worst_case_gives_lost_seeds_the_least_favourable_value() -> None:
    y = np.array([1.0, 1.1, 0.9, 1.05, 0.2])
    ids = (1, 2, 3, 4, 5)
    p_all = stats.ttest_1samp(y, 0).pvalue
    p, holds = worst_case(y, ids, {2}, 0.0, +1, 0.05)  # seed 2 takes 0.2
    want = stats.ttest_1samp(np.array([1.0, 0.2, 0.9, 1.05, 0.2]), 0).pvalue
    assert p == pytest.approx(want) and p > p_all and holds == (want <= 0.05)
    p, _ = worst_case(y, ids, {9}, 0.0, +1, 0.05)  # a seed with no value at all: added
    assert p == pytest.approx(stats.ttest_1samp(np.append(y, 0.2), 0).pvalue)
