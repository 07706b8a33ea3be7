"""analysis/inference.py: the scorecard's tests against closed forms and hand computation, Holm's
procedure against a worked example, and the verdict rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from analysis.inference import (
    REPRODUCED,
    REVERSED,
    UNDECIDED,
    against_test,
    binomial_test,
    direction,
    driving_unit,
    fisher_z,
    holm,
    holm_tarone,
    shapiro_p,
    signflip_p,
    t_test,
)


def test_t_test_is_the_closed_form_in_float64() -> None:
    y = np.array([0.31, -0.12, 0.54, 0.22, 0.08])
    n, mean = y.size, y.sum() / y.size
    sd = math.sqrt(((y - mean) ** 2).sum() / (n - 1))
    t = (mean - 0.05) / (sd / math.sqrt(n))
    p = 2.0 * special.stdtr(n - 1, -abs(t))  # Student's t cdf, not scipy.stats
    half = special.stdtrit(n - 1, 0.975) * sd / math.sqrt(n)
    r = t_test(y, 0.05)
    assert (r.value, r.n, r.method) == (pytest.approx(mean, rel=1e-14), 5, "t")
    assert r.p == pytest.approx(p, rel=1e-10)
    assert (r.ci_low, r.ci_high) == (pytest.approx(mean - half, rel=1e-10), pytest.approx(mean + half, rel=1e-10))


def test_t_test_edges() -> None:
    assert t_test(np.array([np.nan, 1.0])).p is None  # one finite unit: an estimate, no test
    assert t_test(np.array([])).value is None
    r = t_test(np.array([2.0, 2.0, 2.0, 2.0]))  # no spread: the sign-flip test's exact p, not 0
    assert (r.value, r.p) == (2.0, 2 * 2.0 ** -4)
    assert t_test(np.zeros(3)).p == 1.0
    assert t_test(np.array([1.0, 1.0 + 1e-15, 1.0])).p == 2 * 2.0 ** -3  # rounding is no spread


def test_binomial_test_is_the_exact_sum() -> None:
    r = binomial_test(np.array([1, 1, 1, 1, 0, 1, 1, 1.0]), 0.5)
    # P(X >= 7) + P(X <= 1) for X ~ Bin(8, 1/2)
    p = sum(math.comb(8, k) for k in (0, 1, 7, 8)) / 2**8
    assert (r.value, r.n) == (7 / 8, 8) and r.p == pytest.approx(p, rel=1e-12)
    assert r.ci_low < 7 / 8 < r.ci_high


def test_holm_adjusts_step_down_and_ignores_missing() -> None:
    # hand: sorted 0.01, 0.02, 0.03, 0.04 with m = 4 -> 0.04, 0.06, 0.06 (max with 0.06), 0.06
    assert holm([0.03, None, 0.01, 0.04, 0.02]) == pytest.approx([0.06, None, 0.04, 0.06, 0.06])
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1, monotone
    assert holm([]) == []


def test_direction_names_the_side_only_when_decided() -> None:
    pos, neg = t_test(np.array([1.0, 1.2, 0.9])), t_test(np.array([-1.0, -1.2, -0.9]))
    assert direction(pos, 0.0, +1, 0.01) == REPRODUCED
    assert direction(neg, 0.0, +1, 0.01) == REVERSED
    assert direction(pos, 0.0, +1, 0.2) == UNDECIDED and direction(pos, 0.0, -1, None) == UNDECIDED


def test_fisher_z_is_atanh_and_stays_finite_at_the_bounds() -> None:
    assert fisher_z(np.array([0.5]))[0] == pytest.approx(math.atanh(0.5))
    assert np.isfinite(fisher_z(np.array([1.0, -1.0]))).all()


def test_no_effect_is_decided_at_most_alpha_of_the_time() -> None:
    """The promise itself, on 4,000 simulated families of 10 claims, 5 seeds (normal): per claim
    and family-wise (MC error of 0.05 at 4,000: 0.0034)."""
    rng = np.random.default_rng(7)
    y = rng.standard_normal((4000, 10, 5))
    p = stats.ttest_1samp(y, 0.0, axis=-1).pvalue  # t_test's own p, vectorised (checked on a family)
    assert [t_test(c).p for c in y[0]] == pytest.approx(list(p[0]), rel=1e-12)
    decided = np.array([[v <= 0.05 for v in holm(list(fam))] for fam in p])
    assert decided.mean() <= 0.05 and decided.any(axis=1).mean() <= 0.05 + 3 * 0.0034


def test_a_claim_against_the_larger_of_two_is_decided_at_most_alpha_under_no_effect() -> None:
    """x above both y and z: x − max(y, z) has a negative mean when all three are equal, so its plain
    t test calls the claim reversed far more than α; ``against_test`` stays within α (3,000 no-effect
    samples of 6 seeds, MC error of 0.05: 0.004)."""
    rng = np.random.default_rng(11)
    x, y, z = rng.standard_normal((3, 3000, 6))
    hi, lo = x - np.maximum(y, z), x - np.minimum(y, z)
    plain = np.mean([t_test(a).p <= 0.05 for a in hi])
    ours = np.array([against_test(a, b, 0.0, +1).p for a, b in zip(hi, lo, strict=True)])
    assert plain > 0.1 and np.mean(ours <= 0.05) <= 0.05 + 3 * 0.004


def test_against_test_is_twice_the_smaller_one_sided_p() -> None:
    """By hand: the predicted side from x − max, the reversal from x − min, each a one-sided t test."""
    hi, lo = np.array([0.3, 0.5, 0.4, 0.6]), np.array([0.9, 1.1, 1.0, 1.3])
    got = against_test(hi, lo, 0.0, +1)
    assert got.p == pytest.approx(stats.ttest_1samp(hi, 0.0, alternative="greater").pvalue * 2, rel=1e-12)
    assert got.value == pytest.approx(hi.mean()) and got.ci_low == t_test(hi).ci_low
    down = against_test(-lo, -hi, 0.0, +1)  # x below both: decided on x − min
    assert down.p == pytest.approx(stats.ttest_1samp(-hi, 0.0, alternative="less").pvalue * 2, rel=1e-12)
    assert direction(down, 0.0, +1, down.p) == REVERSED


def test_signflip_p_by_enumeration() -> None:
    """Every sign pattern of |y − c|, by hand: the share whose mean is at least as far from 0."""
    import itertools

    y = np.array([0.4, -0.1, 0.7, 0.3, 0.2])
    d = y - 0.05
    means = [abs(np.mean(np.array(s) * np.abs(d))) for s in itertools.product((-1, 1), repeat=d.size)]
    want = np.mean(np.array(means) >= abs(d.mean()) - 1e-12)
    assert signflip_p(y, 0.05) == pytest.approx(want)
    assert signflip_p(np.full(6, 0.1)) == pytest.approx(2 * 2.0 ** -6)  # its floor
    assert signflip_p(np.zeros(4)) == 1.0 and signflip_p(np.array([1.0])) is None


def test_shapiro_flags_a_bimodal_set_and_driving_unit_finds_the_one_seed() -> None:
    rng = np.random.default_rng(0)
    assert shapiro_p(rng.standard_normal(12)) > 0.05
    assert shapiro_p(np.array([-1.02, -0.98, -1.01, 1.0, 0.99, 1.03, 1.01, -0.99, 1.02, -1.0])) < 0.05
    assert shapiro_p(np.ones(5)) is None
    assert driving_unit(np.array([-0.1, -0.2, 0.1, 3.0]), 0.0) == 3  # without it the mean is negative
    assert driving_unit(np.array([0.5, 0.6, 0.4, 0.7]), 0.0) is None


def test_zero_spread_interval_is_the_sign_flip_tests() -> None:
    """No spread: the point when 2·2⁻ⁿ is at most the level, else unbounded — never a point that
    excludes the null while the claim is undecided."""
    r = t_test(np.full(4, 0.1))  # 2·2⁻⁴ = 0.125 > 0.05
    assert r.p == 0.125 and r.p_min == 0.125 and r.zero_spread
    assert (r.ci_low, r.ci_high) == (-math.inf, math.inf)
    r = t_test(np.full(6, 0.1))  # 0.031 <= 0.05
    assert (r.ci_low, r.ci_high) == (pytest.approx(0.1), pytest.approx(0.1))
    assert t_test(np.array([0.1, 0.2, 0.3])).p_min == 0.0


def test_holm_tarone_leaves_out_what_cannot_be_decided() -> None:
    """Three claims at α = 0.05: one can never reach α/2 (its smallest p is 1/32): it leaves the
    multiplier, the others are tested at α/2 instead of α/3, and it reads "cannot be decided"."""
    f = holm_tarone([0.02, 0.03125, 0.2], [0.0, 0.03125, 0.0])
    assert f.rejected == [True, False, False] and f.cannot == [False, True, False]
    assert f.level == [0.025, 0.025, 0.025] and f.p_adj == [pytest.approx(0.04), None, pytest.approx(0.4)]
    plain = holm([0.02, 0.03125, 0.2])  # Holm counts it: 0.06 > 0.05, nothing decided
    assert plain[0] > 0.05
    same = holm_tarone([0.03, None, 0.01, 0.04, 0.02], [0.0] * 5)
    assert same.p_adj == pytest.approx(holm([0.03, None, 0.01, 0.04, 0.02]))
    assert holm_tarone([0.03125] * 3, [0.03125] * 3).cannot == [True] * 3


@pytest.mark.parametrize("seed", range(6))
def test_the_level_interval_agrees_with_the_decision(seed: int) -> None:
    """The 1 − α/k interval at each claim's Holm step excludes 0 exactly when the claim is rejected."""
    rng = np.random.default_rng(seed)
    ys = [rng.standard_normal(6) + rng.choice([0.0, 0.6, 1.5, 3.0]) for _ in range(12)]
    tests = [t_test(y) for y in ys]
    f = holm_tarone([t.p for t in tests], [t.p_min for t in tests])
    for y, rej, level in zip(ys, f.rejected, f.level, strict=True):
        adj = t_test(y, 0.0, 1 - level)
        assert rej == (not adj.ci_low <= 0 <= adj.ci_high)
