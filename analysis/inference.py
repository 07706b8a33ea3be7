"""How a scorecard claim is decided (SPEC §8): a test on independent units, Holm across the family.

Pure numpy/scipy. A counted claim reduces the store to one statistic per independent unit
(``y`` [n]: per seed, or per checkpoint series) and names the value ``c`` it is tested against.
Its test gives a two-sided p-value of H0: E[y] = c:

* ``"t"``: the one-sample t-test (``scipy.stats.ttest_1samp``), exact at any n >= 2 when the
  per-unit statistic is normal (symmetry alone is not enough at small n: uniform and bimodal laws
  inflate it, ``bench/verdicts.py``); its 95 % t interval is the row's interval. A sample with no
  spread (every unit equal, but not equal to c) gets the sign-flip test's exact p-value
  ``2 · 2⁻ⁿ`` (the smallest any test that assumes only symmetry can give) instead of p = 0, and
  the interval that test gives: the point when that p is below the level, else unbounded;
* ``"binomial"``: for a 0/1 statistic (a fraction of units), the exact binomial test
  (``scipy.stats.binomtest``) with its Clopper–Pearson interval.

``holm`` adjusts the p-values of a scorecard's counted claims for the family (Holm's step-down,
family-wise error <= α under any dependence between claims); ``holm_tarone`` is the same procedure
where a claim whose smallest attainable p exceeds the level it would face leaves the multiplier
(Tarone 1990: it cannot be decided with its units), and gives each claim the level α/k its
test faced, whose interval (``interval``) excludes the null exactly when the claim is decided;
``direction`` turns an adjusted p-value and the estimate's side into the row's verdict.
``signflip_p``, ``shapiro_p`` and ``driving_unit`` are the assumption-light checks shown beside a
decision. A false "direction reproduced" under no
effect therefore happens at most α/2 of the time per claim for a symmetric test, and the
scorecard as a whole calls any no-effect claim decided at most α of the time.
``bench/verdicts.py`` measures both on simulated stores with no effect.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: The scorecard's family-wise error: a no-effect claim is called decided at most this often.
ALPHA = 0.05
#: The row's interval.
CONFIDENCE = 0.95
#: Units whose values differ by less than this (relative) have no spread: rounding, not variation.
SPREAD_RTOL = 1e-9

REPRODUCED = "direction reproduced"
UNDECIDED = "undecided"
REVERSED = "direction reversed"
#: Tarone: no outcome of this many units could reach the claim's level (the row says why).
CANNOT = "cannot be decided"
NOT_MEASURED = "not measured"
#: A counted claim's verdicts, in the order the summary counts them.
VERDICTS = (REPRODUCED, UNDECIDED, REVERSED, CANNOT, NOT_MEASURED)
#: A decided two-sided claim (expected side ``≠``: no direction predicted) names the side of its null
#: value c its estimate is on; undecided, cannot and not measured as above.
FOUND_POSITIVE = "direction found: positive"
FOUND_NEGATIVE = "direction found: negative"
FOUND = (FOUND_POSITIVE, FOUND_NEGATIVE)
#: Every verdict of a decided claim.
DECIDED = (REPRODUCED, REVERSED, *FOUND)
#: The scorecard's own family (``Claim.family``): the paper's claims, Holm–Tarone at ``ALPHA``. A claim
#: of another family is adjusted within that family only, at its own ``ALPHA`` (SPEC §8).
SCORECARD_FAMILY = "scorecard"
#: A sanity check's (a direction that follows from the initialisation or a metric's bound).
HOLDS, FAILS = "sanity: holds", "sanity: fails"
#: Verdicts of a row that has no direction to test (a level compared with the paper's range).
MAGNITUDE_ONLY = "magnitude only"


@dataclass(frozen=True)
class UnitTest:
    """One claim's test on its units: the estimate, its interval, the two-sided p of E[y] = c."""

    value: float | None  # the mean of the per-unit statistic (None: nothing finite)
    ci_low: float | None
    ci_high: float | None
    p: float | None  # None: no test (fewer than 2 units)
    n: int
    method: str  # "t" or "binomial"
    #: the smallest two-sided p any outcome of these units could give (Tarone): 0 for a t test on
    #: values with spread, 2·2⁻ⁿ for values without (the sign-flip test), the binomial's extremes
    p_min: float = 0.0
    zero_spread: bool = False  # every unit has the same value (the sign-flip test stands in)


def zero_spread_interval(value: float, n: int, level: float) -> tuple[float, float]:
    """The interval the sign-flip test gives n equal values: every other centre has p = 2·2⁻ⁿ, so
    the point itself when that is at most ``level`` (1 − confidence), else the whole line."""
    return (value, value) if 2.0 * 2.0 ** -n <= level else (-math.inf, math.inf)


def t_test(y: np.ndarray, c: float = 0.0, confidence: float = CONFIDENCE) -> UnitTest:
    """One-sample t-test of the finite values of y [n] against c (module docstring); the interval at
    ``confidence``."""
    y = np.asarray(y, float)
    y = y[np.isfinite(y)]
    n = int(y.size)
    if n == 0:
        return UnitTest(None, None, None, None, 0, "t")
    mean = float(y.mean())
    if n < 2:
        return UnitTest(mean, None, None, None, n, "t")
    if float(np.ptp(y)) <= SPREAD_RTOL * max(abs(mean), abs(c), 1.0):  # no spread but rounding: t is ±inf or undefined
        floor = min(1.0, 2.0 * 2.0 ** -n)
        p = 1.0 if mean == c else floor
        lo, hi = zero_spread_interval(mean, n, 1.0 - confidence)
        return UnitTest(mean, lo, hi, p, n, "t", p_min=floor, zero_spread=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_1samp(y, c)
        ci = res.confidence_interval(confidence)
    return UnitTest(mean, float(ci.low) + 0.0, float(ci.high) + 0.0, float(res.pvalue), n, "t")


def binomial_test(y: np.ndarray, c: float = 0.5, confidence: float = CONFIDENCE) -> UnitTest:
    """Exact binomial test of the fraction of units with y = 1 against c, y [n] of 0/1; its
    Clopper–Pearson interval at ``confidence`` (dual to the test when c = ½, where the two-sided p is
    twice the smaller tail)."""
    y = np.asarray(y, float)
    y = y[np.isfinite(y)]
    n = int(y.size)
    if n == 0:
        return UnitTest(None, None, None, None, 0, "binomial")
    k = int(round(float(y.sum())))
    res = stats.binomtest(k, n, c)
    ci = res.proportion_ci(confidence, method="exact")
    p_min = min(float(stats.binomtest(0, n, c).pvalue), float(stats.binomtest(n, n, c).pvalue))
    return UnitTest(k / n, float(ci.low), float(ci.high), float(res.pvalue), n, "binomial", p_min=p_min)


TESTS = {"t": t_test, "binomial": binomial_test}


def _one_sided(t: UnitTest, c: float, sign: int) -> float:
    """One-sided p of E[y] on the ``sign`` side of c, from a two-sided t test."""
    if t.p is None or t.value is None:
        return 1.0
    return t.p / 2 if np.sign(t.value - c) == sign else 1.0 - t.p / 2


def against_test(y: np.ndarray, y_against: np.ndarray, c: float, sign: int,
                 shown: np.ndarray | None = None, confidence: float = CONFIDENCE) -> UnitTest:
    """A bracketed claim (``sign`` +1: x exceeds several references): y is the statistic on which the
    predicted side is tested (x − the largest), y_against the one on which a reversal is (x − the
    smallest), per unit [n], y <= y_against. Predicted side: the one-sided t test of y; reversed: that
    of y_against on the other side; p = 2 · the smaller of the two (each one-sided test is valid,
    conservative, for its composite null). Value: the mean of ``shown`` (the quantity the row names,
    between the two; default y); interval: y's lower bound and y_against's upper (for ``sign`` −1 the
    roles swap), so that it excludes c exactly when one of the two one-sided tests rejects."""
    t, ta = t_test(y, c, confidence), t_test(y_against, c, confidence)
    value = t.value if shown is None else t_test(shown, c).value
    if t.p is None or ta.p is None:
        return UnitTest(value, t.ci_low, t.ci_high, t.p, t.n, t.method, t.p_min, t.zero_spread)
    p = min(1.0, 2.0 * min(_one_sided(t, c, sign), _one_sided(ta, c, -sign)))
    lo, hi = (t.ci_low, ta.ci_high) if sign > 0 else (ta.ci_low, t.ci_high)
    return UnitTest(value, lo, hi, p, t.n, t.method, min(t.p_min, ta.p_min), t.zero_spread and ta.zero_spread)


def holm(p: list[float | None] | np.ndarray) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and is not counted in the family):
    ``p_adj(i) = max over j <= i (in ascending order) of min(1, (m − j + 1) · p(j))``."""
    idx = [i for i, v in enumerate(p) if v is not None and math.isfinite(v)]
    out: list[float | None] = [None] * len(p)
    m, running = len(idx), 0.0
    for rank, i in enumerate(sorted(idx, key=lambda i: p[i])):
        running = max(running, min(1.0, (m - rank) * float(p[i])))
        out[i] = running
    return out


@dataclass(frozen=True)
class FamilyResult:
    """``holm_tarone``'s outcome, one entry per claim (None where the claim has no p)."""

    p_adj: list[float | None]  # step-down adjusted p (None: no test, or cannot be decided)
    level: list[float | None]  # α/k: the level its test faced (rejected: its step's; else where Holm stopped)
    rejected: list[bool]
    cannot: list[bool]  # Tarone: its smallest attainable p exceeds the level it would face


def holm_tarone(p: list[float | None], p_min: list[float], alpha: float = ALPHA) -> FamilyResult:
    """Holm's step-down with Tarone's rule (Tarone 1990; Hommel & Krummenauer 1998). At each step,
    with K the claims not yet rejected, k is the smallest integer such that at most k of K have a
    smallest attainable p ``p_min`` <= α/k; those are the family at this step, the others leave the
    multiplier. The smallest p among the family is rejected when <= α/k; else the procedure stops.
    A claim never rejected whose ``p_min`` exceeds the level it faced at the stop "cannot be decided".
    With every p_min = 0 this is Holm's procedure. Family-wise error <= α under any dependence (a
    claim outside the multiplier can never be rejected at the level it would need)."""
    n = len(p)
    live = [i for i, v in enumerate(p) if v is not None and math.isfinite(v)]
    p_adj: list[float | None] = [None] * n
    level: list[float | None] = [None] * n
    rejected = [False] * n
    running, stop = 0.0, None  # stop: the level α/k at which the procedure stopped rejecting
    while live:  # every step, so that each claim gets its step-down adjusted p (Holm's)
        k = next(k for k in range(1, len(live) + 1) if sum(p_min[i] <= alpha / k for i in live) <= k)
        family = [i for i in live if p_min[i] <= alpha / k]
        if not family:
            stop = alpha / k if stop is None else stop
            break
        best = min(family, key=lambda i: p[i])
        running = max(running, min(1.0, k * float(p[best])))
        if stop is None and running > alpha:
            stop = alpha / k
        p_adj[best], level[best], rejected[best] = running, (alpha / k if stop is None else stop), stop is None
        live.remove(best)
    stop = alpha if stop is None else stop
    cannot = [not rejected[i] and p_adj[i] is not None and p_min[i] > stop for i in range(n)]
    cannot = [c or (i in live) for i, c in enumerate(cannot)]
    for i in range(n):
        if cannot[i]:
            p_adj[i], level[i] = None, stop
    return FamilyResult(p_adj, level, rejected, cannot)


def direction(test: UnitTest, c: float, sign: int, p_adj: float | None, alpha: float = ALPHA) -> str:
    """The verdict of a counted claim whose expected side of ``c`` is ``sign`` (+1: above)."""
    if test.value is None:
        return NOT_MEASURED
    if p_adj is None or p_adj > alpha or test.value == c:
        return UNDECIDED
    return REPRODUCED if np.sign(test.value - c) == sign else REVERSED


def fisher_z(r: np.ndarray) -> np.ndarray:
    """atanh of correlations (clipped inside ±1): the scale on which per-unit r are averaged and tested."""
    return np.arctanh(np.clip(np.asarray(r, float), -1 + 1e-12, 1 - 1e-12))


#: Sign patterns enumerated exactly up to this many units; a fixed-seed Monte Carlo above.
SIGNFLIP_EXACT = 16
SIGNFLIP_DRAWS = 65_536


def signflip_p(y: np.ndarray, c: float = 0.0) -> float | None:
    """Two-sided sign-flip (paired permutation) p of E[y] = c over the finite units of y [n]: exact
    under the sole assumption that y − c is symmetric about 0, whatever its law; its smallest value
    is 2·2⁻ⁿ (``scipy.stats.permutation_test``, every sign pattern up to ``SIGNFLIP_EXACT`` units)."""
    d = np.asarray(y, float)
    d = d[np.isfinite(d)] - c
    if d.size < 2:
        return None
    if not d.any():
        return 1.0
    draws = np.inf if d.size <= SIGNFLIP_EXACT else SIGNFLIP_DRAWS
    res = stats.permutation_test((d,), np.mean, permutation_type="samples", alternative="two-sided",
                                 n_resamples=draws, rng=np.random.default_rng(0))
    return float(min(1.0, res.pvalue))


def shapiro_p(y: np.ndarray) -> float | None:
    """Shapiro–Wilk p that the finite units of y [n] come from a normal law (``scipy.stats.shapiro``;
    None with fewer than 3 units or no spread): a small p flags per-seed values that do not look
    normal — a bimodal or outlying set — on which the t test's level is not guaranteed."""
    v = np.asarray(y, float)
    v = v[np.isfinite(v)]
    if v.size < 3 or float(np.ptp(v)) <= SPREAD_RTOL * max(float(np.abs(v).max()), 1.0):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(stats.shapiro(v).pvalue)


def driving_unit(y: np.ndarray, c: float = 0.0) -> int | None:
    """The index of the one unit without which the mean of the finite y [n] is no longer on the same
    side of c (it alone carries the direction), else None; with several such units, the most extreme."""
    v = np.asarray(y, float)
    idx = np.flatnonzero(np.isfinite(v))
    if idx.size < 3:
        return None
    d = v[idx] - c
    side = np.sign(d.mean())
    if side == 0:
        return None
    rest = (d.sum() - d) / (d.size - 1)
    drivers = np.flatnonzero(np.sign(rest) != side)
    if drivers.size == 0:
        return None
    return int(idx[drivers[np.argmax(np.abs(d[drivers]))]])
