"""The power side of ``--seeds auto``: simulated families, one claim's power, δ* and the fixed
design of the same power, each checked against an independent computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.sequential import fixed_power, make_design, run_family
from analysis.sequential_power import (
    design_power,
    effect_for_power,
    family_differences,
    fixed_same_power,
)


def test_family_differences_have_unit_variance_and_the_shared_control_correlation():
    rng = np.random.default_rng(1)
    x = family_differences(rng, 40_000, 3, 2, "normal")
    flat = x[:, :, 0]
    assert flat.std(axis=0) == pytest.approx(np.ones(3), abs=0.02)
    assert np.corrcoef(flat.T)[0, 1] == pytest.approx(0.5, abs=0.02)
    skew = family_differences(rng, 200_000, 1, 1, "skewed", shared=False).ravel()
    assert stats.skew(skew) == pytest.approx(2.0, abs=0.1)
    shared = family_differences(rng, 200_000, 1, 1, "skewed", shared=True).ravel()
    assert stats.skew(shared) == pytest.approx(2 * 0.5 ** 1.5, abs=0.05)
    assert family_differences(rng, 10, 2, 3, effect=[1.0, 0.0]).shape == (10, 2, 3)
    with pytest.raises(ValueError):
        family_differences(rng, 1, 1, 1, "cauchy")


def test_design_power_matches_the_procedure_on_one_claim():
    """``design_power`` (its own paths and code) against ``run_family`` on fresh single-claim experiments."""
    design = make_design(10, 0.05, 1)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40_000, 1, 10)) + 1.2
    out = run_family(x, design)
    simulated = float(((out.level > 0) & (out.sign > 0)).mean())
    seeds = float(np.where(out.level > 0, np.asarray(design.looks)[np.maximum(out.round, 0)], 10).mean())
    p = design_power(design, 1.2)
    assert p.power == pytest.approx(simulated, abs=4 * math.sqrt(0.25 / 40_000))
    assert p.expected_seeds == pytest.approx(seeds, abs=0.05)


def test_the_fixed_design_of_the_same_power():
    design = make_design(10, 0.05, 10)
    fixed = fixed_same_power(design)
    assert design_power(design, fixed.effect).power == pytest.approx(0.8, abs=0.002)
    assert fixed.level == pytest.approx(0.005)
    assert fixed_power(fixed.effect, fixed.seeds, 0.005) == fixed.fixed_power >= 0.8
    assert fixed_power(fixed.effect, fixed.seeds - 1, 0.005) < 0.8
    print(fixed.describe())
    # recycled α makes later claims easier: at α (j = 1) the same design needs a smaller effect
    assert effect_for_power(design, j=1) < fixed.effect
