"""``--seeds auto``'s statistics (SPEC §8): group-sequential paired t-tests with the family-wise
error over all claims held at α by a Holm-type procedure.

Pure numpy/scipy, no Ray. A claim is one (condition, strength cell, init, depth, metric, predicted
direction) on the paired final-epoch differences to the matched ``none`` runs, in seed order; the
*family* is every claim one experiment decides, m of them.

One claim's test (Lan & DeMets 1983; Jennison & Turnbull 2000, sections 3.8 and 7.2): looks at
``n_1 < … < n_K`` seeds (``look_schedule``); the two-sided error a is spent over the looks with the
Lan–DeMets Pocock-type function ``a(τ) = a · ln(1 + (e − 1) τ)``, ``τ_k = n_k / n_K``. Look k
crosses when the one-sample t statistic ``T_k = mean / (sd / sqrt(n_k))`` of the first n_k
differences has ``|T_k| ≥ c_k(a)``, the boundaries solving, under the null law of ``T_1..T_K``,

    P(|T_1| < c_1, …, |T_{k-1}| < c_{k-1}, |T_k| ≥ c_k) = a(τ_k) − a(τ_{k-1}).

That law is pivotal (free of σ for normal differences) but has no closed form: ``c_1`` is the t
quantile, the others are set on ``CALIBRATION_PATHS`` simulated null paths with a fixed generator
(the same design every run), one simulation for every level ``α/j``, j = 1..m (``_bounds``).
Normal-theory boundaries used as nominal t levels gave 0.0566 > α (LOG.md).

The family (Maurer & Bretz 2013, *Stat. Biopharm. Res.* 5:311, "Multiple testing in group
sequential trials using graphical approaches": closed testing with weighted-Bonferroni
group-sequential tests, Holm's graph): with r claims rejected so far (over all looks), an open
claim is rejected at look k when its t path has crossed, at this or any earlier look, the
boundaries at level ``α/(m − r)``; rejections are repeated within a look until none is new
(``holm_update``). Before the first true null claim is rejected at most ``m − m_0`` are, so that
rejection needs one of the m_0 null paths to cross the level-``α/m_0`` boundaries, each with
probability ``α/m_0``: the family-wise error is at most α for any dependence between claims, when
each null path has the law the boundaries assume (differences independent across seeds and
symmetric about 0; skewed ones break it: docs/seeds.md). A rejected claim is decided *as
predicted* when T has the predicted sign at its first crossing at the rejecting level, else
*against the prediction*; a claim never rejected is undecided.
``tests/test_analysis_sequential.py`` and ``bench/sequential_error.py`` check it by simulation.

A look whose values have no spread gets the fixed path's rule (``analysis.inference.t_test``): the
sign-flip p ``2 · 2⁻ⁿ`` (1 when every value is the null), as the |t| with that p (``zero_spread_t``),
never |t| = ∞ and p = 0. A claim tested on two statistics (``against_reach``: the predicted side on
x − the largest reference, the reversal on x − the smallest) uses one-sided boundaries at α/(2j)
per side (``Design.upper``, the same simulation). ``run_timeline`` runs the procedure over looks
of several experiments of one family (``sweep.demo --seeds auto``: the baseline's, then the
interventions').

Why Pocock-type: it spends ≈ 0.42 a at n = 3 of 10, so a strong effect can stop at the first look;
O'Brien–Fleming-type spending leaves ≈ 0.0003 α there, a t of ≈ 54 with 2 degrees of freedom.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

# the first look and the most seeds: plain constants that a sweep's parser reads without scipy
from analysis.inference import SPREAD_RTOL
from analysis.sequential_limits import FIRST_LOOK, MAX_SEEDS

#: Seeds added per round until the maximum is near (``look_schedule``).
STEP = 2
#: Paths of the null simulation that sets the boundaries (fixed generator: the same design every run).
CALIBRATION_PATHS = 400_000
CALIBRATION_SEED = 20260

AS_PREDICTED = "as predicted"
AGAINST = "against the prediction"
PROCEDURE = "holm-group-sequential"


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
    """A group-sequential design for a family of ``family_size`` claims: each look's |t| boundary
    at every level α/j, j = 1..m (``bounds[j - 1][k]``; non-decreasing in j)."""

    looks: tuple[int, ...]
    alpha: float
    family_size: int
    bounds: tuple[tuple[float, ...], ...]

    @property
    def max_seeds(self) -> int:
        return self.looks[-1]

    @property
    def n_looks(self) -> int:
        return len(self.looks)

    @functools.cached_property
    def table(self) -> np.ndarray:
        """``bounds`` as an array [m, K]."""
        return np.asarray(self.bounds, float)

    @functools.cached_property
    def upper(self) -> np.ndarray:
        """One-sided upper boundaries [m, K] at level α/(2j) on each side (``_bounds`` with ``sided``
        1): a claim tested on two statistics, one per side (``against_reach``)."""
        return np.asarray(_bounds(self.looks, self.alpha, self.family_size, 1), float)

    def spent(self, j: int) -> tuple[float, ...]:
        """Cumulative error spent by each look at level α/j."""
        n = np.asarray(self.looks, float)
        return tuple(float(v) for v in pocock_spending(n / n[-1], self.alpha / j))

    def nominal(self, j: int) -> tuple[float, ...]:
        """Each look's two-sided nominal p-value level at level α/j."""
        return tuple(float(2.0 * stats.t.sf(c, n - 1)) for c, n in zip(self.bounds[j - 1], self.looks, strict=True))

    def describe(self) -> list[str]:
        """One line per look: |t| needed and nominal level at the start (α/m) and for a last claim (α)."""
        m = self.family_size
        first, last = self.nominal(m), self.nominal(1)
        start = f"α/{m} = {self.alpha / m:.4g}" if m > 1 else f"α = {self.alpha:g}"
        out = []
        for k, n in enumerate(self.looks):
            line = (f"look {k + 1} of {self.n_looks}: n = {n:>2} seeds, |t| ≥ {self.bounds[m - 1][k]:.2f} "
                    f"(p ≤ {first[k]:.2g}) at {start}")
            if m > 1:
                line += f" … |t| ≥ {self.bounds[0][k]:.2f} (p ≤ {last[k]:.2g}) at α = {self.alpha:g}"
            out.append(line + f", {n - 1} df")
        return out


def _t_stat(total: np.ndarray, squares: np.ndarray, n: int) -> np.ndarray:
    """One-sample t statistics from running sums (±inf for constant non-zero, NaN for all-zero)."""
    mean = total / n
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.maximum(squares - n * mean * mean, 0.0) / (n - 1)
        return mean / np.sqrt(var / n)


@functools.lru_cache(maxsize=1)
def _null_paths(looks: tuple[int, ...]) -> np.ndarray:
    """T_k [K, paths] of ``CALIBRATION_PATHS`` null normal paths (float32, signed), generated look by
    look: memory O(paths × looks), not O(paths × seeds)."""
    rng = np.random.default_rng(CALIBRATION_SEED)
    total = np.zeros(CALIBRATION_PATHS)
    squares = np.zeros(CALIBRATION_PATHS)
    out = np.empty((len(looks), CALIBRATION_PATHS), np.float32)
    prev = 0
    for k, n in enumerate(looks):
        block = rng.standard_normal((CALIBRATION_PATHS, n - prev))
        total += block.sum(axis=1)
        squares += np.square(block).sum(axis=1)
        out[k] = _t_stat(total, squares, n)
        prev = n
    return out


def _top(values: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` largest of ``values`` in descending order, and their indices."""
    idx = np.argpartition(-values, count - 1)[:count] if count < len(values) else np.arange(len(values))
    idx = idx[np.argsort(-values[idx], kind="stable")]
    return values[idx], idx


@functools.lru_cache(maxsize=32)
def _bounds(looks: tuple[int, ...], alpha: float, m: int, sided: int = 2) -> tuple[tuple[float, ...], ...]:
    """Boundaries at every level α/j, j = 1..m, on one simulation (module docstring). ``sided`` 2:
    |t| boundaries, the first crossing of either side spends ``a(τ)``; ``sided`` 1: upper boundaries of
    a one-sided test at ``a/2``, any crossing of the upper side spending ``a(τ)/2`` (a path that crossed
    the lower side runs on). No level crosses more than ≈ α of the paths by any look, so only the top
    ``α · paths`` (+ a margin) of each look are sorted."""
    signed = _null_paths(looks)
    t = np.abs(signed) if sided == 2 else signed
    n_paths = t.shape[1]
    keep = min(n_paths, int(alpha * n_paths) + 2000)
    tops = [_top(row, keep) for row in t]
    n = np.asarray(looks, float)
    rows: list[tuple[float, ...]] = []
    for j in range(1, m + 1):
        spent = pocock_spending(n / n[-1], alpha / j) / (3 - sided)  # one-sided: half on the upper side
        dead = np.zeros(n_paths, bool)  # paths that crossed an earlier look
        row, before = [], 0.0
        for k, (values, order) in enumerate(tops):
            if k == 0:  # the t quantile: the same at both sidednesses
                c = float(stats.t.isf(spent[0] / sided, looks[0] - 1))
            else:
                target = max(1, round((spent[k] - before) * n_paths))
                live = np.flatnonzero(~dead[order])[:target]  # the top `target` paths still running
                if len(live) < target:
                    raise RuntimeError(f"calibration: look {k + 1} needs more than the top {keep} paths")
                c = float(values[live[-1]])
            if rows:  # a smaller level never needs a smaller boundary (simulation noise aside)
                c = max(c, rows[-1][k])
            row.append(c)
            crossed = int(np.searchsorted(-values, -np.float32(c), side="right"))
            if crossed >= keep < n_paths:
                raise RuntimeError(f"calibration: look {k + 1} crosses more than the top {keep} paths")
            dead[order[:crossed]] = True
            before = float(spent[k])
        rows.append(tuple(row))
    return tuple(rows)


def make_design(max_seeds: int, alpha: float = 0.05, family_size: int = 1) -> Design:
    """The Pocock-type Lan–DeMets design over ``look_schedule(max_seeds)`` for ``family_size`` claims."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if not FIRST_LOOK <= max_seeds <= MAX_SEEDS:
        raise ValueError(f"max_seeds must be in [{FIRST_LOOK}, {MAX_SEEDS}], got {max_seeds}")
    if family_size < 1:
        raise ValueError(f"family_size must be >= 1, got {family_size}")
    looks = look_schedule(max_seeds)
    return Design(looks, float(alpha), int(family_size), _bounds(looks, float(alpha), int(family_size)))


def naive_design(looks: tuple[int, ...], level: float = 0.05) -> Design:
    """"Stop when the 95 % interval excludes 0": every look at the fixed level (no spending), one
    claim; for the simulation that shows the real design has teeth."""
    return Design(tuple(looks), level, 1, (tuple(float(stats.t.isf(level / 2, n - 1)) for n in looks),))


def zero_spread_t(n: int) -> float:
    """The |t| whose two-sided p with ``n`` values is the sign-flip floor ``2 · 2⁻ⁿ``: what a look
    whose values have no spread (all equal, ≠ the null) stands for (``analysis.inference.t_test``'s
    rule; p = 0 from |t| = ∞ would cross every boundary)."""
    return float(stats.t.isf(2.0 ** -n, n - 1))


def t_stats(x: np.ndarray, looks: tuple[int, ...]) -> np.ndarray:
    """t statistics [..., K] of the first n_k values of ``x`` [..., N] against 0 at each look; NaN
    where n_k > N or a value is not finite. Values without spread (``SPREAD_RTOL``) get the
    sign-flip rule: all 0 → t = 0 (p = 1), all equal ≠ 0 → ±``zero_spread_t(n_k)`` (p = 2 · 2⁻ⁿ)."""
    x = np.asarray(x, float)
    out = np.full((*x.shape[:-1], len(looks)), np.nan)
    for k, n in enumerate(looks):
        if n > x.shape[-1]:
            break
        head = x[..., :n]
        total = head.sum(axis=-1)
        t = _t_stat(total, np.square(head).sum(axis=-1), n)
        with np.errstate(invalid="ignore"):
            mean = total / n
            flat = np.ptp(head, axis=-1) <= SPREAD_RTOL * np.maximum(np.abs(mean), 1.0)
        t = np.where(flat, np.sign(mean) * zero_spread_t(n), t)
        out[..., k] = np.where(np.isfinite(head).all(axis=-1), t, np.nan)
    return out


#: The smallest p a record stores: a t-test p that underflows (|t| of 10⁹ with 49 df) is not 0.
P_FLOOR = float(np.finfo(float).tiny)


@dataclass(frozen=True)
class LookStat:
    """One claim's statistic at one look: the first n values' mean and sd, t against the null c
    (``t_stats``' rule: zero spread gives ±``zero_spread_t`` or 0; NaN: a value not finite), and its
    two-sided p (zero spread: ``2 · 2⁻ⁿ``, or 1 at c; never below ``P_FLOOR``)."""

    n: int
    mean: float
    sd: float
    t: float
    p: float
    zero_spread: bool = False

    def one_sided_p(self, side: int) -> float:
        """P of T at least this far on ``side`` (+1 / −1) under the null (zero spread: ``2⁻ⁿ``)."""
        if not math.isfinite(self.t):
            return 1.0
        return max(P_FLOOR, float(stats.t.sf(side * self.t, self.n - 1)))


def look_stat(y: np.ndarray, c: float = 0.0) -> LookStat:
    """``LookStat`` of the values y [n], n >= 2, tested against ``c``."""
    y = np.asarray(y, float)
    n = int(y.size)
    if n < 2 or not np.isfinite(y).all():
        return LookStat(n, math.nan, math.nan, math.nan, math.nan)
    mean, sd = float(y.mean()), float(y.std(ddof=1))
    if float(np.ptp(y)) <= SPREAD_RTOL * max(abs(mean), abs(c), 1.0):
        if mean == c:
            return LookStat(n, mean, 0.0, 0.0, 1.0, True)
        return LookStat(n, mean, 0.0, math.copysign(zero_spread_t(n), mean - c), min(1.0, 2.0 * 2.0 ** -n), True)
    t = (mean - c) / (sd / math.sqrt(n))
    return LookStat(n, mean, sd, t, max(P_FLOOR, float(2.0 * stats.t.sf(abs(t), n - 1))))


def crossing_level(t: np.ndarray, design: Design) -> np.ndarray:
    """The largest j [...] at which some look of ``t`` [..., K'] (NaN: not reached) crosses the
    level-α/j |t| boundaries (0: none)."""
    return _reach(np.abs(t), design.table)


def upper_level(t: np.ndarray, design: Design) -> np.ndarray:
    """The largest j [...] at which some look of ``t`` [..., K'] reaches the one-sided upper
    boundaries of level α/j (``Design.upper``; 0: none)."""
    return _reach(t, design.upper)


def against_reach(t: np.ndarray, t_against: np.ndarray, sign: np.ndarray | int, design: Design) -> np.ndarray:
    """The reach (``crossing_level``'s j) of a claim tested on two statistics per seed (``analysis.
    inference.against_test``: y = x − the largest reference, y_against = x − the smallest): the
    predicted side on ``t`` [..., K'] and the reversal on ``t_against``, each a one-sided
    group-sequential test at α/(2j) (``Design.upper``). Under a null on either side at most one of
    them errs, with probability ≤ α/(2j); under no effect at all, ≤ α/j together."""
    s = np.asarray(sign, float)[..., None]
    return np.maximum(upper_level(s * t, design), upper_level(-s * t_against, design))


def _reach(v: np.ndarray, table: np.ndarray) -> np.ndarray:
    best = np.zeros(v.shape[:-1], int)
    for k in range(v.shape[-1]):
        a = v[..., k]
        j = np.searchsorted(table[:, k], np.where(np.isnan(a), -np.inf, a), side="right")
        best = np.maximum(best, j)
    return best


def holm_update(t: np.ndarray, design: Design, level: np.ndarray) -> np.ndarray:
    """One look of the Holm-type procedure: ``t`` [..., m, K'] the claims' t paths so far (NaN: look
    not reached), ``level`` [..., m] 0 for an open claim, j for one rejected at level α/j. An open
    claim whose path crossed at α/(m − r) is rejected; repeated until no rejection is new."""
    m = design.family_size
    if t.shape[-2] != m:
        raise ValueError(f"{t.shape[-2]} claims for a design of family size {m}")
    return holm_levels(crossing_level(t, design), m, level)


def holm_levels(reach: np.ndarray, m: int, level: np.ndarray) -> np.ndarray:
    """``holm_update`` on the claims' reaches [..., m]: each claim's largest j whose boundaries its
    path crossed (``crossing_level``, ``against_reach``: a crossing at j is one at every j' < j)."""
    if reach.shape[-1] != m:
        raise ValueError(f"{reach.shape[-1]} claims for a design of family size {m}")
    level = np.array(level, int, copy=True)
    while True:
        j = m - (level > 0).sum(axis=-1, keepdims=True)
        new = (level == 0) & (reach >= j) & (j >= 1)
        if not new.any():
            return level
        level = np.where(new, j, level)


def first_crossing(t: np.ndarray, design: Design, level: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of each rejected claim (``level`` > 0): the 0-based first look whose |t| crosses its rejecting
    level and the sign of T there; (-1, 0) for open claims."""
    j = np.maximum(level, 1) - 1
    crossed = np.abs(np.nan_to_num(t, nan=0.0)) >= design.table[j][..., : t.shape[-1]]
    crossed &= (level > 0)[..., None]
    look = np.where(crossed.any(axis=-1), crossed.argmax(axis=-1), -1)
    sign = np.sign(np.take_along_axis(np.nan_to_num(t, nan=0.0), np.maximum(look, 0)[..., None], -1)[..., 0])
    return look, np.where(look >= 0, sign, 0.0)


@dataclass(frozen=True)
class FamilyOutcome:
    """``run_family``'s result, each [..., m]."""

    round: np.ndarray  # 0-based look at which the claim was rejected (-1: never)
    level: np.ndarray  # j of the rejecting level α/j (0: never)
    look: np.ndarray  # 0-based look whose statistic crossed (-1: never)
    sign: np.ndarray  # sign of T at that look (0: never)


def run_family(x: np.ndarray, design: Design) -> FamilyOutcome:
    """The procedure on many experiments at once: ``x`` [..., m, N] each claim's differences in seed
    order, every look reached (N >= n_K); a rejected claim's later values are never used."""
    t = t_stats(x, design.looks)
    level = np.zeros(t.shape[:-1], int)
    round_ = np.full(t.shape[:-1], -1)
    for k in range(design.n_looks):
        new = holm_update(t[..., : k + 1], design, level)
        round_ = np.where((level == 0) & (new > 0), k, round_)
        level = new
    look, sign = first_crossing(t, design, level)
    return FamilyOutcome(round_, level, look, sign)


def run_timeline(reaches: list[np.ndarray], m: int) -> tuple[np.ndarray, np.ndarray]:
    """The Holm-type procedure over a timeline of looks, each of which may belong to a different
    experiment of one family (``sweep.demo --seeds auto``: the baseline's looks, then the
    interventions'): ``reaches[e]`` [..., m] every claim's reach with the data seen by event e (a
    claim of an experiment that has not started: 0; one that has finished: its final reach).
    Returns (level [..., m], the 0-based event that rejected each claim, -1: never)."""
    level = np.zeros(reaches[0].shape, int)
    event = np.full(reaches[0].shape, -1)
    for e, reach in enumerate(reaches):
        new = holm_levels(reach, m, level)
        event = np.where((level == 0) & (new > 0), e, event)
        level = new
    return level, event


def fixed_power(effect: float, n: int, alpha: float) -> float:
    """Power of the fixed two-sided one-sample t-test with ``n`` seeds at standardised effect
    ``effect`` (noncentral t, ``scipy.stats.nct``)."""
    crit = stats.t.isf(alpha / 2, n - 1)
    nc = effect * math.sqrt(n)
    # P(T <= -c) as the upper tail at -nc: scipy's nct.cdf returns NaN far in that tail
    power = float(stats.nct.sf(crit, n - 1, nc) + stats.nct.sf(crit, n - 1, -nc))
    if not math.isfinite(power):
        raise ValueError(f"noncentral t power not finite at effect {effect}, n {n}, alpha {alpha}")
    return power


def fixed_n_for_power(effect: float, power: float, alpha: float, limit: int = 1000) -> int:
    """The smallest fixed n in [2, ``limit``] whose two-sided t-test reaches ``power`` at ``effect``
    (``limit`` when none does), by bisection: the power grows with n."""
    if fixed_power(effect, limit, alpha) < power:
        return limit
    lo, hi = 1, limit  # power(lo) < power <= power(hi); n = 1 has no test
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fixed_power(effect, mid, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi
