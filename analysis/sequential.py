"""``--seeds auto``'s statistics (SPEC §8): a group-sequential paired t-test per claim.

Pure numpy/scipy, no Ray. A claim is one (condition, metric, predicted direction) on the paired
final-epoch differences to the matched ``none`` runs, ``x`` of shape [n_seeds] in seed order.

Design (Lan & DeMets 1983; Jennison & Turnbull 2000, sections 3.8 and 7.2): looks at ``n_1 < … < n_K``
seeds (``look_schedule``); the two-sided error α is spent over the looks with the Lan–DeMets
Pocock-type function ``α(τ) = α · ln(1 + (e − 1) τ)``, ``τ_k = n_k / n_K``. Look k rejects when
the one-sample t statistic ``T_k = mean / (sd / sqrt(n_k))`` of the first n_k differences has
``|T_k| ≥ c_k``, where the boundaries solve, for the null law of the sequence ``T_1..T_K``,

    P(|T_1| < c_1, …, |T_{k-1}| < c_{k-1}, |T_k| ≥ c_k) = α(τ_k) − α(τ_{k-1}).

That law is pivotal (free of the spread σ for normal differences) but has no closed form, and
scipy has none: the "significance level approach" (normal-theory boundaries from
``scipy.stats.multivariate_normal``, applied as nominal t levels, J&T section 3.8) gave an error of
0.0566 at looks 3, 5, 7, 10 (LOG.md), so the boundaries are set on ``CALIBRATION_PATHS``
simulated null paths with a fixed generator (the same design every run; Monte-Carlo error of α
≈ 0.0003). Each look's nominal p-level is ``2 · t.sf(c_k, n_k − 1)`` (``scipy.stats.t``). The
first look that rejects decides the claim: as predicted when the mean difference has the
predicted sign, else against it; a claim no look rejects is undecided at ``n_K``.
``tests/test_analysis_sequential.py`` checks the error, the naive rule's and the savings by
simulation.

Why Pocock-type: it spends a large share of α early (≈ 0.42 α at n = 3 of 10), so a strong effect
can stop at the first look; O'Brien–Fleming-type spending leaves ≈ 0.0003 for n = 3, a t of ≈ 54
with 2 degrees of freedom, which no seed-to-seed spread allows.

Multiplicity: each claim is its own test at α. A condition with three predicted metrics has
three tests; no correction across claims or conditions (as for the fixed-seed scorecard).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

#: The first look: the preset's first 3 seeds (t with 2 degrees of freedom).
FIRST_LOOK = 3
#: Seeds added per round until the maximum is near (``look_schedule``).
STEP = 2

AS_PREDICTED = "as predicted"
AGAINST = "against the prediction"


def look_schedule(max_seeds: int, first: int = FIRST_LOOK, step: int = STEP) -> tuple[int, ...]:
    """Cumulative seeds at each look: ``first``, then ``step`` more per round; a last gap of at
    most ``step + 1`` goes straight to ``max_seeds`` (10 → 3, 5, 7, 10; 8 → 3, 5, 8; 3 → 3)."""
    if max_seeds < first:
        raise ValueError(f"max_seeds {max_seeds} is below the first look ({first})")
    looks = [first]
    while looks[-1] < max_seeds:
        looks.append(max_seeds if max_seeds - looks[-1] <= step + 1 else looks[-1] + step)
    return tuple(looks)


def pocock_spending(tau: np.ndarray | float, alpha: float) -> np.ndarray:
    """Lan–DeMets Pocock-type spending ``α ln(1 + (e − 1) τ)``: the error spent by information ``τ``."""
    return alpha * np.log1p((math.e - 1.0) * np.asarray(tau, float))


@dataclass(frozen=True)
class Design:
    """A group-sequential design: looks (cumulative seeds), α, and each look's nominal level."""

    looks: tuple[int, ...]
    alpha: float
    spent: tuple[float, ...]  # cumulative α spent by each look
    bounds: tuple[float, ...]  # |t| each look needs (its t statistic with n_k - 1 df)
    nominal: tuple[float, ...]  # two-sided nominal p-value level of each look's t-test

    @property
    def max_seeds(self) -> int:
        return self.looks[-1]

    def describe(self) -> list[str]:
        """One line per look: seeds, cumulative α spent, nominal level, |t| needed."""
        return [f"look {k + 1} of {len(self.looks)}: n = {n:>2} seeds, α spent {s:.4f}, nominal p ≤ {p:.4f} "
                f"(|t| ≥ {t:.2f}, {n - 1} df)"
                for k, (n, s, p, t) in enumerate(zip(self.looks, self.spent, self.nominal, self.bounds,
                                                      strict=True))]


#: Paths of the null simulation that sets the boundaries (fixed generator: the same design every run).
CALIBRATION_PATHS = 400_000
CALIBRATION_SEED = 20260


@functools.lru_cache(maxsize=32)
def _t_bounds(looks: tuple[int, ...], spent: tuple[float, ...]) -> tuple[float, ...]:
    """|t| boundaries c_k with P(no earlier crossing, |T_k| ≥ c_k) = spent_k − spent_{k−1} under the
    exact null law of the sequence of one-sample t statistics (normal differences: the law is free
    of the mean-zero spread σ), estimated on ``CALIBRATION_PATHS`` simulated paths."""
    rng = np.random.default_rng(CALIBRATION_SEED)
    x = rng.standard_normal((CALIBRATION_PATHS, looks[-1]), dtype=np.float64)
    alive = np.ones(CALIBRATION_PATHS, bool)
    bounds, before = [], 0.0
    for n, total in zip(looks, spent, strict=True):
        t = np.abs(_t_stat(x[:, :n]))
        share = (total - before) * CALIBRATION_PATHS / alive.sum()  # of the paths still running
        c = float(np.quantile(t[alive], 1.0 - share)) if share < 1.0 else 0.0
        bounds.append(c)
        alive &= t < c
        before = total
    return tuple(bounds)


def make_design(max_seeds: int, alpha: float = 0.05, first: int = FIRST_LOOK) -> Design:
    """The Pocock-type Lan–DeMets design over ``look_schedule(max_seeds, first)`` (module docstring)."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    looks = look_schedule(max_seeds, first)
    n = np.asarray(looks, float)
    spent = tuple(float(v) for v in pocock_spending(n / n[-1], alpha))
    bounds = _t_bounds(looks, spent)
    nominal = tuple(float(2.0 * stats.t.sf(c, k - 1)) for c, k in zip(bounds, looks, strict=True))
    return Design(looks, alpha, spent, bounds, nominal)


def _t_stat(head: np.ndarray) -> np.ndarray:
    """One-sample t statistics of ``head`` [..., n] along the last axis (±inf for constant non-zero
    rows, NaN for all-zero ones)."""
    n = head.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        return head.mean(axis=-1) / (head.std(axis=-1, ddof=1) / math.sqrt(n))


def t_pvalues(x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided one-sample t p-values and mean signs of the first ``n`` values of ``x`` [..., N].

    Constant non-zero differences reject (p = 0); all-zero or non-finite ones never do (p = 1).
    """
    head = np.asarray(x, float)[..., :n]
    t = _t_stat(head)
    mean = head.mean(axis=-1)
    p = 2.0 * stats.t.sf(np.abs(t), n - 1)
    p = np.where(np.isnan(t), 1.0, p)
    p = np.where(np.isfinite(head).all(axis=-1), p, 1.0)
    return p, np.sign(mean)


def run_design(x: np.ndarray, design: Design) -> tuple[np.ndarray, np.ndarray]:
    """Apply the design to many sequential experiments at once.

    x: [..., N] differences in seed order (N >= the looks reached; missing seeds as NaN are
    never looked at beyond the available prefix). Returns (look index [...]: the 0-based look
    that decided, -1 = undecided; sign [...]: the mean's sign at that look, 0 when undecided).
    """
    x = np.asarray(x, float)
    look = np.full(x.shape[:-1], -1)
    sign = np.zeros(x.shape[:-1])
    for k, n in enumerate(design.looks):
        if n > x.shape[-1]:
            break
        p, s = t_pvalues(x, n)
        new = (look < 0) & (p <= design.nominal[k])
        look = np.where(new, k, look)
        sign = np.where(new, s, sign)
    return look, sign


def naive_design(looks: tuple[int, ...], level: float = 0.05) -> Design:
    """"Stop when the 95 % interval excludes 0": every look at the fixed level (no spending);
    for the simulation that shows the real design has teeth."""
    bounds = tuple(float(stats.t.isf(level / 2, n - 1)) for n in looks)
    return Design(tuple(looks), level, tuple(level for _ in looks), bounds, tuple(level for _ in looks))


@dataclass(frozen=True)
class Decision:
    """One claim's state after the looks its seeds reach."""

    outcome: str | None  # AS_PREDICTED, AGAINST, or None (undecided so far)
    look: int | None  # 1-based look that decided
    n: int  # seeds at that look, or the seeds looked at so far
    n_looks: int  # K
    p: float | None  # the deciding (or last) look's t-test p-value

    @property
    def decided(self) -> bool:
        return self.outcome is not None

    def text(self, max_seeds: int | None = None) -> str:
        """``decided at n seeds (look k of K)`` / ``undecided at N`` (N: the seeds looked at)."""
        if self.decided:
            return f"{self.outcome}, decided at {self.n} seeds (look {self.look} of {self.n_looks})"
        return f"undecided at {self.n if max_seeds is None else max_seeds}"


def decide(x: np.ndarray, design: Design, predicted: int) -> Decision:
    """The claim's decision from its differences ``x`` [n] (seed order; only full looks count)."""
    x = np.asarray(x, float)
    reached = [k for k, n in enumerate(design.looks) if n <= len(x)]
    p_last = None
    for k in reached:
        n = design.looks[k]
        p, s = t_pvalues(x, n)
        p_last = float(p)
        if p <= design.nominal[k]:
            outcome = AS_PREDICTED if int(s) == int(np.sign(predicted)) else AGAINST
            return Decision(outcome, k + 1, n, len(design.looks), p_last)
    n_seen = design.looks[reached[-1]] if reached else 0
    return Decision(None, None, n_seen, len(design.looks), p_last)


def fixed_power(effect: float, n: int, alpha: float) -> float:
    """Power of the fixed two-sided one-sample t-test with ``n`` seeds at standardised effect
    ``effect`` (noncentral t, ``scipy.stats.nct``)."""
    crit = stats.t.isf(alpha / 2, n - 1)
    nc = effect * math.sqrt(n)
    return float(stats.nct.sf(crit, n - 1, nc) + stats.nct.cdf(-crit, n - 1, nc))


def fixed_n_for_power(effect: float, power: float, alpha: float, limit: int = 200) -> int:
    """The smallest fixed n >= 2 whose two-sided t-test reaches ``power`` at ``effect``."""
    for n in range(2, limit + 1):
        if fixed_power(effect, n, alpha) >= power:
            return n
    return limit
