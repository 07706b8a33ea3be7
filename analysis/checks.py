"""What the scorecard says beside a verdict (SPEC §8): whether a decision rests on normality, how many
seeds an undecided claim would need, and whether a decision survives its lost runs.

Pure numpy/scipy, on one claim's per-unit values ``y`` [n] (the statistic its test used on the side it
decided, on Fisher's z scale for correlations) and the level ``a`` (α/k) its test faced in the family:

* ``assumption_check``: the exact sign-flip test over the same units (valid for any law symmetric
  about the null; its smallest p is 2·2⁻ⁿ), Shapiro–Wilk's p and the one unit that alone carries
  the direction, so that a reader sees which decisions rest on the t test's normality;
* ``seeds_needed``: the seeds a fixed two-sided t test at level ``a`` needs for 80 % power at the
  observed standardized effect (noncentral t) — a planning figure from this run: an effect estimated
  on few seeds is optimistic (the winner's curse);
* ``worst_case``: the test again with every seed that lost a run given the observed value least
  favourable to the verdict — a bound, within the observed range, on what the lost runs could do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from analysis.inference import UnitTest, driving_unit, shapiro_p, signflip_p, t_test
from analysis.sequential import fixed_n_for_power, fixed_power

#: Power a planning figure aims at.
POWER = 0.8
#: Shapiro–Wilk p below which the per-seed values are flagged as not looking normal.
NORMALITY_FLAG = 0.05
#: Most seeds a planning figure names; beyond it the claim is "out of reach".
MOST_SEEDS = 1000

AGREES = "agrees"
RESTS = "rests on normality"


@dataclass(frozen=True)
class Check:
    """The assumption-light view of one decided claim."""

    signflip_p: float | None
    normal_p: float | None  # Shapiro–Wilk
    driver: object | None  # the unit (seed) that alone carries the direction
    #: AGREES: the sign-flip test (any law symmetric about the null) decides it at the same level too;
    #: else RESTS. The flags (not normal-looking, one driving unit) are shown beside it
    verdict: str

    def text(self, unit: str = "seed") -> str:
        parts = [f"sign-flip p {self.signflip_p:.2g}" if self.signflip_p is not None else "no sign-flip test"]
        if self.normal_p is not None and self.normal_p < NORMALITY_FLAG:
            parts.append(f"values do not look normal (Shapiro–Wilk p {self.normal_p:.2g})")
        if self.driver is not None:
            parts.append(f"{unit} {self.driver} alone carries the direction")
        return f"{self.verdict} ({'; '.join(parts)})"


def assumption_check(y: np.ndarray, c: float, level: float, ids: tuple | None = None) -> Check:
    """``y`` [n] the values the decision's test used, ``level`` the level it was decided at."""
    p = signflip_p(y, c)
    finite = np.flatnonzero(np.isfinite(np.asarray(y, float)))
    i = driving_unit(y, c)
    driver = None if i is None else (ids[i] if ids is not None and i < len(ids) else int(np.searchsorted(finite, i)))
    normal = shapiro_p(y)
    return Check(p, normal, driver, AGREES if p is not None and p <= level else RESTS)


@dataclass(frozen=True)
class Needed:
    """Seeds an undecided claim would need (None with the reason where undefined)."""

    seeds: int | None
    reason: str | None
    effect: float | None = None  # the observed standardized effect the figure is at
    note: str = ""  # what the figure is for (a new --seeds auto experiment)

    def text(self) -> str:
        tail = f"; {self.note}" if self.note else ""
        if self.seeds is None:
            return f"seeds needed: — ({self.reason}{tail})"
        if self.effect is None:
            return f"≈ {self.seeds} seeds would decide it ({self.reason}{tail})"
        return (f"≈ {self.seeds} seeds would decide it at this effect (d = {self.effect:.2g}; a planning "
                f"estimate{tail})")


def seeds_needed(y: np.ndarray, c: float, level: float, method: str = "t", side: int = 0) -> Needed:
    """The seeds at which a fixed two-sided t test at ``level`` has 80 % power at the standardized
    effect d = |mean − c| / sd that ``y`` [n] shows (``side`` ±1: on that side of c only, else no
    effect); for values without spread, the seeds at which the sign-flip floor 2·2⁻ⁿ reaches ``level``."""
    if method != "t":
        return Needed(None, "the units are checkpoint series (exact binomial test): more series, not seeds")
    v = np.asarray(y, float)
    v = v[np.isfinite(v)]
    if v.size < 2:
        return Needed(None, "fewer than 2 seeds: no effect to plan from")
    t = t_test(v, c)
    if side and np.sign(float(v.mean()) - c) != side:
        return Needed(None, "no effect estimated on this side of the null")
    if t.zero_spread:
        if t.value == c:
            return Needed(None, "no effect estimated (every seed at the null)")
        n = max(v.size, math.ceil(math.log2(2.0 / level)))
        return Needed(n, "every seed equal: the sign-flip test's smallest p 2·2⁻ⁿ reaches the level")
    d = abs(float(v.mean()) - c) / float(v.std(ddof=1))
    if d == 0:
        return Needed(None, "no effect estimated (mean at the null)")
    n = first_n_with_power(d, level)
    if n is None:
        return Needed(None, f"over {MOST_SEEDS} seeds at the observed effect d = {d:.2g}", d)
    return Needed(n, "80 % power, noncentral t at the observed effect", d)


def first_n_with_power(d: float, level: float) -> int | None:
    """The smallest n in [2, ``MOST_SEEDS``] at which the fixed two-sided t test at ``level`` has
    ``POWER`` at effect d (``analysis.sequential.fixed_n_for_power``); None when no such n."""
    if fixed_power(d, MOST_SEEDS, level) < POWER:
        return None
    return fixed_n_for_power(d, POWER, level, MOST_SEEDS)


def worst_case(y: np.ndarray, ids: tuple | None, affected: set, c: float, side: int, level: float,
               against: np.ndarray | None = None) -> tuple[float | None, bool]:
    """(p, holds): the claim's t test with every unit in ``affected`` (present or lost) given the
    observed value least favourable to a decision on ``side`` (+1: above c) — the smallest for +1, the
    largest for −1 — and whether its p stays at or below ``level``. ``ids`` label y's units; a lost
    unit absent from them is added. ``against``: for a bracketed claim, the statistic its reversal
    is tested on (use it when ``side`` is against the prediction)."""
    v = np.asarray(y if against is None else against, float).copy()
    fin = v[np.isfinite(v)]
    if fin.size == 0:
        return None, False
    worst = float(fin.min() if side > 0 else fin.max())
    labels = list(ids) if ids is not None else list(range(v.size))
    for i, u in enumerate(labels):
        if u in affected:
            v[i] = worst
    extra = [u for u in affected if u not in labels]
    v = np.concatenate([v, np.full(len(extra), worst)])
    t = t_test(v, c)
    if t.p is None:
        return None, False
    one_sided = t.p / 2 if np.sign((t.value or 0.0) - c) == side else 1.0 - t.p / 2
    p = min(1.0, 2.0 * one_sided)
    return p, p <= level


def as_test_values(t: UnitTest | None) -> tuple[float | None, float | None]:
    """An interval's ends with ±inf as None (JSON has no infinity)."""
    if t is None:
        return None, None
    lo = t.ci_low if t.ci_low is not None and math.isfinite(t.ci_low) else None
    hi = t.ci_high if t.ci_high is not None and math.isfinite(t.ci_high) else None
    return lo, hi
