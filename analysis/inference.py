"""How a scorecard claim is decided (SPEC §8): a test on independent units, Holm across the family.

Pure numpy/scipy. A counted claim reduces the store to one statistic per independent unit
(``y`` [n]: per seed, or per checkpoint series) and names the value ``c`` it is tested against.
Its test gives a two-sided p-value of H0: E[y] = c:

* ``"t"``: the one-sample t-test (``scipy.stats.ttest_1samp``), exact at any n >= 2 when the
  per-unit statistic is normal; its 95 % t interval is the row's interval. A sample with no
  spread (every unit equal, but not equal to c) gets the sign-flip test's exact p-value
  ``2 · 2⁻ⁿ`` (the smallest any test that assumes only symmetry can give) instead of p = 0;
* ``"binomial"``: for a 0/1 statistic (a fraction of units), the exact binomial test
  (``scipy.stats.binomtest``) with its Clopper–Pearson interval.

``holm`` adjusts the p-values of a scorecard's counted claims for the family (Holm's step-down,
family-wise error <= α under any dependence between claims); ``direction`` turns an adjusted
p-value and the estimate's side into the row's verdict. A false "direction reproduced" under no
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
NOT_MEASURED = "not measured"
#: A counted claim's verdicts, in the order the summary counts them.
VERDICTS = (REPRODUCED, UNDECIDED, REVERSED, NOT_MEASURED)
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


def t_test(y: np.ndarray, c: float = 0.0) -> UnitTest:
    """One-sample t-test of the finite values of y [n] against c (module docstring)."""
    y = np.asarray(y, float)
    y = y[np.isfinite(y)]
    n = int(y.size)
    if n == 0:
        return UnitTest(None, None, None, None, 0, "t")
    mean = float(y.mean())
    if n < 2:
        return UnitTest(mean, None, None, None, n, "t")
    if float(np.ptp(y)) <= SPREAD_RTOL * max(abs(mean), abs(c), 1.0):  # no spread but rounding: t is ±inf or undefined
        p = 1.0 if mean == c else min(1.0, 2.0 * 2.0 ** -n)
        return UnitTest(mean, mean, mean, p, n, "t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = stats.ttest_1samp(y, c)
        ci = res.confidence_interval(CONFIDENCE)
    return UnitTest(mean, float(ci.low) + 0.0, float(ci.high) + 0.0, float(res.pvalue), n, "t")


def binomial_test(y: np.ndarray, c: float = 0.5) -> UnitTest:
    """Exact binomial test of the fraction of units with y = 1 against c, y [n] of 0/1."""
    y = np.asarray(y, float)
    y = y[np.isfinite(y)]
    n = int(y.size)
    if n == 0:
        return UnitTest(None, None, None, None, 0, "binomial")
    k = int(round(float(y.sum())))
    res = stats.binomtest(k, n, c)
    ci = res.proportion_ci(CONFIDENCE, method="exact")
    return UnitTest(k / n, float(ci.low), float(ci.high), float(res.pvalue), n, "binomial")


TESTS = {"t": t_test, "binomial": binomial_test}


def _one_sided(t: UnitTest, c: float, sign: int) -> float:
    """One-sided p of E[y] on the ``sign`` side of c, from a two-sided t test."""
    if t.p is None or t.value is None:
        return 1.0
    return t.p / 2 if np.sign(t.value - c) == sign else 1.0 - t.p / 2


def against_test(y: np.ndarray, y_against: np.ndarray, c: float, sign: int) -> UnitTest:
    """A claim that x exceeds several references (``sign`` +1): y = x − the largest, y_against = x −
    the smallest, per unit [n]. Predicted side: the one-sided t test of y; reversed: that of y_against
    on the other side; p = 2 · the smaller of the two (each one-sided test is valid, conservative, for
    its composite null). Value and interval are y's."""
    t, ta = t_test(y, c), t_test(y_against, c)
    if t.p is None or ta.p is None:
        return t
    p = min(1.0, 2.0 * min(_one_sided(t, c, sign), _one_sided(ta, c, -sign)))
    return UnitTest(t.value, t.ci_low, t.ci_high, p, t.n, t.method)


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
