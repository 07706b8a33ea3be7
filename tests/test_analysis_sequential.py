"""``--seeds auto``'s decision function, proved by simulation: vectorised, seconds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.sequential import (
    AGAINST,
    AS_PREDICTED,
    decide,
    fixed_n_for_power,
    fixed_power,
    look_schedule,
    make_design,
    naive_design,
    pocock_spending,
    run_design,
)

SIMS = 4000  # sequential experiments per simulation (>= 2,000: a rate of 0.05 to ±0.01)
ALPHA = 0.05
#: Realistic seed-to-seed spread of a paired Δ: forced K contraction's qk_erank at the demo
#: (LOG.md, the demo's schedule: −0.288 / −0.546 over seeds 7 and 37) has sd ≈ 0.18.
SPREAD = 0.18
#: The demo's effects, standardised (mean / sd of the paired Δ over seeds 7, 37: 2.3 to 3.6,
#: upward-biased with two seeds); the simulation plants a smaller one, 1.5 sd.
DEMO_EFFECT = 1.5


def mc_error(p: float, n: int) -> float:
    return math.sqrt(p * (1 - p) / n)


@pytest.fixture(scope="module")
def design():
    return make_design(10, ALPHA)


def test_look_schedule():
    assert look_schedule(10) == (3, 5, 7, 10)
    assert look_schedule(8) == (3, 5, 8)
    assert look_schedule(3) == (3,)
    assert look_schedule(4) == (3, 4)
    with pytest.raises(ValueError):
        look_schedule(2)


def test_spending_is_pocock_type_and_spends_alpha_by_the_last_look(design):
    assert pocock_spending(1.0, ALPHA) == pytest.approx(ALPHA)
    assert design.spent[-1] == pytest.approx(ALPHA)
    assert design.spent[0] == pytest.approx(ALPHA * math.log(1 + (math.e - 1) * 0.3))
    assert all(b > a for a, b in zip(design.spent, design.spent[1:], strict=False))


def test_null_false_decisions_at_most_alpha(design):
    """Planted null: no effect, realistic spread; normal and heavier-tailed (t, 5 df) Δs."""
    rng = np.random.default_rng(33)
    for noise in (rng.normal(0.0, SPREAD, (SIMS, 10)), SPREAD * rng.standard_t(5, (SIMS, 10))):
        look, _ = run_design(noise, design)
        share = float((look >= 0).mean())
        print(f"null: false decisions {share:.4f} of {SIMS} (α {ALPHA}, MC error {mc_error(ALPHA, SIMS):.4f})")
        assert share <= ALPHA + 2 * mc_error(ALPHA, SIMS)


def test_naive_stopping_exceeds_alpha_on_the_same_simulation(design):
    rng = np.random.default_rng(33)
    noise = rng.normal(0.0, SPREAD, (SIMS, 10))
    look, _ = run_design(noise, naive_design(design.looks))
    share = float((look >= 0).mean())
    print(f"naive 'stop when the 95 % CI excludes 0' at looks {design.looks}: false decisions {share:.4f}")
    assert share > ALPHA + 3 * mc_error(ALPHA, SIMS)


def test_planted_effect_stops_early_and_saves_against_the_fixed_design(design):
    rng = np.random.default_rng(34)
    x = rng.normal(DEMO_EFFECT * SPREAD, SPREAD, (SIMS, 10))
    look, sign = run_design(x, design)
    seeds = np.where(look >= 0, np.asarray(design.looks)[np.maximum(look, 0)], design.max_seeds)
    power = float(((look >= 0) & (sign > 0)).mean())
    expected = float(seeds.mean())
    fixed_n = fixed_n_for_power(DEMO_EFFECT, power, ALPHA)
    print(f"planted effect {DEMO_EFFECT} sd: power {power:.3f}, expected seeds {expected:.2f} "
          f"(stopped at look 1: {(look == 0).mean():.2f}); fixed design for the same power: n = {fixed_n}")
    assert expected < fixed_n
    assert fixed_power(DEMO_EFFECT, fixed_n, ALPHA) >= power > 0.8
    wrong = float(((look >= 0) & (sign < 0)).mean())
    assert wrong < 0.001  # deciding against a true effect is rare


def test_strong_effect_stops_at_the_first_look(design):
    x = np.array([0.50, 0.52, 0.49, 0.9, 0.9])
    d = decide(x, design, predicted=+1)
    assert (d.outcome, d.look, d.n) == (AS_PREDICTED, 1, 3)
    assert d.text() == "as predicted, decided at 3 seeds (look 1 of 4)"
    d = decide(-x, design, predicted=+1)
    assert d.outcome == AGAINST


def test_undecided_and_partial_looks(design):
    x = np.array([0.1, -0.1, 0.05, -0.02])  # only the first look is reached
    d = decide(x, design, predicted=-1)
    assert not d.decided and d.n == 3
    assert d.text(10) == "undecided at 10"
    assert not decide(np.zeros(10), design, -1).decided  # all-zero Δ: t undefined, never decided
    assert decide(np.full(3, 0.2), design, +1).outcome == AS_PREDICTED  # constant non-zero Δ


def test_design_rejects_bad_alpha():
    for bad in (0.0, 0.5, -0.1):
        with pytest.raises(ValueError):
            make_design(10, bad)
