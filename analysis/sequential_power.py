"""What ``--seeds auto``'s design (``analysis.sequential``) costs and buys, by simulation: pure numpy/scipy.

* ``family_differences``: simulated paired differences of a family of m claims that share one
  control run per seed (as the demo's claims share the ``none`` run), under a null law or a planted
  effect; the tests and ``bench/sequential_error.py`` measure the errors on them.
* ``design_power`` / ``effect_for_power``: one claim's power at a fixed level α/j (no α recycled
  from other claims: the procedure's floor), and the standardised effect δ* at which it is 80 %.
* ``fixed_same_power``: the fixed-n two-sided t-test at the same level with the same power at δ*
  (noncentral t): the design a sequential experiment's run-epochs are compared with.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize

from analysis.sequential import Design, fixed_n_for_power, fixed_power

#: Null laws of one run's final metric around its mean (unit variance): ``normal``; ``t3`` (t with
#: 3 degrees of freedom, heavy tails); ``skewed`` (a centred gamma, skewness 2 unless told).
LAWS = ("normal", "t3", "skewed")
#: Power the fixed design of the comparison is given (``fixed_same_power``).
TARGET_POWER = 0.8
#: Paths of the power simulation (fixed generator): power to ±0.0013 at 80 %.
POWER_PATHS = 100_000
POWER_SEED = 20261


def _draw(rng: np.random.Generator, law: str, shape: tuple[int, ...], skewness: float = 2.0) -> np.ndarray:
    if law == "normal":
        return rng.standard_normal(shape)
    if law == "t3":
        return rng.standard_t(3, shape) / math.sqrt(3.0)  # unit variance
    if law == "skewed":  # a centred, scaled gamma: skewness 2 / sqrt(k) (k = 1: the exponential)
        k = (2.0 / skewness) ** 2
        return (rng.gamma(k, 1.0, shape) - k) / math.sqrt(k)
    raise ValueError(f"unknown law {law!r}; valid: {', '.join(LAWS)}")


def family_differences(rng: np.random.Generator, experiments: int, m: int, n: int, law: str = "normal",
                       effect: np.ndarray | float = 0.0, shared: bool = True, skewness: float = 2.0) -> np.ndarray:
    """Paired differences [experiments, m, n] of m claims over n seeds, each of unit variance.

    Each difference is ``sqrt(1 − ρ) · own + sqrt(ρ) · control``: ``own`` drawn from ``law`` per
    claim and seed, ``control`` a standard normal per seed shared by the m claims (the matched
    ``none`` run's part; ``shared``: ρ = 0.5, the correlation of run_i − run_0 and run_j − run_0,
    else ρ = 0: independent claims). A ``skewed`` ``own`` (a centred gamma of ``skewness``, 2 by default:
    the exponential) makes skewed differences: ``skewness · (1 − ρ)^1.5`` (2 → 0.71 shared).
    ``effect`` [m] or scalar: each claim's planted mean, in sd.
    """
    rho = 0.5 if shared else 0.0
    x = math.sqrt(1.0 - rho) * _draw(rng, law, (experiments, m, n), skewness)
    if shared:
        x += math.sqrt(rho) * rng.standard_normal((experiments, 1, n))
    return x + np.broadcast_to(np.asarray(effect, float), (m,))[None, :, None]


@functools.lru_cache(maxsize=2)
def _paths(looks: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sd [K, paths] of ``POWER_PATHS`` standard normal paths at each look."""
    rng = np.random.default_rng(POWER_SEED)
    total = np.zeros(POWER_PATHS)
    squares = np.zeros(POWER_PATHS)
    means, sds, prev = [], [], 0
    for n in looks:
        block = rng.standard_normal((POWER_PATHS, n - prev))
        total += block.sum(axis=1)
        squares += np.square(block).sum(axis=1)
        mean = total / n
        means.append(mean)
        sds.append(np.sqrt(np.maximum(squares - n * mean * mean, 0.0) / (n - 1)))
        prev = n
    return np.asarray(means), np.asarray(sds)


@dataclass(frozen=True)
class Power:
    """One claim at a fixed level: P(decided as predicted), E[seeds], P(stopped at look 1)."""

    power: float
    expected_seeds: float
    first_look: float


def design_power(design: Design, effect: float, j: int | None = None) -> Power:
    """One claim's power at standardised effect ``effect`` > 0 with the level-α/j boundaries
    (default j = m: the level it starts at, before any α is recycled to it)."""
    j = design.family_size if j is None else j
    means, sds = _paths(design.looks)
    n = np.asarray(design.looks, float)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (effect + means) / (sds / np.sqrt(n))
    crossed = np.abs(t) >= np.asarray(design.bounds[j - 1])[:, None]
    any_ = crossed.any(axis=0)
    first = crossed.argmax(axis=0)
    sign = np.take_along_axis(t, first[None, :], 0)[0]
    seeds = np.where(any_, np.asarray(design.looks)[first], design.max_seeds)
    return Power(float((any_ & (sign > 0)).mean()), float(seeds.mean()), float((any_ & (first == 0)).mean()))


def effect_for_power(design: Design, power: float = TARGET_POWER, j: int | None = None) -> float:
    """δ*: the standardised effect at which ``design_power`` is ``power``."""
    return float(optimize.brentq(lambda e: design_power(design, e, j).power - power, 0.0, 50.0, xtol=1e-4))


@dataclass(frozen=True)
class FixedComparison:
    """The fixed-n two-sided t-test with the sequential design's power at δ*, at its starting level."""

    effect: float  # δ*, in sd of the paired difference
    level: float  # α/m
    power: float  # TARGET_POWER
    seeds: int  # n of the fixed design
    fixed_power: float  # its exact power at δ* (noncentral t), >= power

    def describe(self) -> str:
        return (f"δ* = {self.effect:.2f} sd: this design has {self.power:.0%} power for one claim at its "
                f"starting level {self.level:.4g}; a fixed two-sided t-test at {self.level:.4g} needs "
                f"{self.seeds} seeds for {self.power:.0%} at δ* (noncentral t: {self.fixed_power:.3f})")


def fixed_same_power(design: Design, power: float = TARGET_POWER) -> FixedComparison:
    """The fixed design a sequential experiment is compared with (module docstring)."""
    effect = effect_for_power(design, power)
    level = design.alpha / design.family_size
    n = fixed_n_for_power(effect, power, level)
    return FixedComparison(effect, level, power, n, fixed_power(effect, n, level))
