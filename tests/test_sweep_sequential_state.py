"""``--seeds auto``'s plan and looks as pure functions of the store: the seed sequence, the walk
that replaces lost seeds, and a rerun that re-derives the same rounds (no Ray, no store)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from analysis import vocabulary as vocab
from analysis.sequential import FIRST_LOOK
from sweep.presets import INTERVENTION_PRESETS
from sweep.sequential import AutoSeeds, make_experiment
from sweep.sequential_state import State, evaluate, lost_limit, plan, seed_sequence, walk

DEMO = INTERVENTION_PRESETS["demo"]


def test_seed_sequence_extends_the_preset_and_skips_the_schedule_seeds():
    assert seed_sequence((7, 37, 42, 105, 210), 8) == (7, 37, 42, 105, 210, 1000, 1001, 1002)
    assert seed_sequence((1000, 5), 4) == (1000, 5, 1001, 1002)
    assert seed_sequence((7, 37), 2) == (7, 37)
    assert seed_sequence((7, 37, 42), 4, skip=(7, 1000)) == (37, 42, 1001, 1002)


@pytest.mark.parametrize("name", sorted(INTERVENTION_PRESETS))
def test_no_look_uses_a_seed_that_chose_the_schedule(name):
    preset = INTERVENTION_PRESETS[name]
    exp = make_experiment(preset, AutoSeeds(10, 0.05))
    assert not set(exp.seeds) & set(preset.schedule_seeds)
    own = tuple(s for s in preset.seeds if s not in preset.schedule_seeds)[:FIRST_LOOK]
    assert exp.seeds[:len(own)] == own  # the preset's own first, then 1000, 1001, …
    assert len(exp.seeds) == 10 + lost_limit(10) == len(set(exp.seeds))
    if name == "paper":  # the paper's own seeds: none of them chose a schedule here
        assert exp.seeds[:5] == (7, 37, 42, 105, 210)


def _values(effects: dict[str, float]):
    """Final metrics of a run: the seed's shared noise, the run's own, the planted effect."""
    def values(cell) -> dict[str, float]:
        noise = np.random.default_rng(cell.seed).normal(0, 1, 4)
        own = np.random.default_rng([cell.seed, len(cell.condition)]).normal(0, 0.3, 4)
        pred = vocab.predicted(cell.condition)
        return {m: 1.0 + noise[i] + (own[i] if cell.condition != "none" else 0.0)
                + pred.get(m, 0) * effects.get(cell.condition, 0.0) * 0.3
                for i, m in enumerate(("attn_entropy", "logit_std", "qk_erank", "pr_k"))}
    return values


def _drive(exp, values, fail, outcomes=None, lost=None):
    """The rounds of ``sweep.sequential`` without Ray: train what each plan lacks (``fail(cell)``:
    the run is lost); given ``outcomes`` and ``lost`` of an earlier drive, a rerun."""
    outcomes = dict(outcomes or {})
    lost = dict(lost or {})
    state, trained, round_ = State(exp), [], 0
    while True:
        round_ += 1
        walks, todo = plan(state, round_, set(outcomes), {k for k, r in lost.items() if r < round_})
        todo = [c for c in todo if c.run_id not in lost and c.run_id not in outcomes]
        if not walks and not (round_ == 1 and todo):
            break
        trained.append(sorted((c.condition, c.seed) for c in todo))
        for c in todo:
            if fail(c):
                lost[c.run_id] = round_
            else:
                outcomes[c.run_id] = values(c)
        evaluate(state, round_, walks, outcomes, {k for k, r in lost.items() if r <= round_})
    return state, trained, outcomes, lost


def test_lost_seeds_are_replaced_and_a_rerun_re_derives_the_same_rounds():
    exp = make_experiment(replace(DEMO, conditions=("none", "freeze_k", "freeze_q", "forced_k_contraction")),
                          AutoSeeds(10, 0.05))
    fail = lambda c: (c.condition, c.seed) in {("freeze_q", 12), ("none", 14), ("freeze_q", 1000)}  # noqa: E731
    values = _values({"freeze_k": 4.0, "freeze_q": 0.0, "forced_k_contraction": 40.0})
    state, trained, outcomes, lost = _drive(exp, values, fail)
    (q,) = [s for c, s in zip(exp.claims, state.claims, strict=True) if c.unit[0] == "freeze_q"]
    (q_unit,) = [u for u in exp.units if u[0] == "freeze_q"]
    assert q.level == 0 and q.look == 4 and len(q.seeds) == 10  # undecided after its 10 complete pairs
    assert q.seeds == tuple(s for s in exp.seeds if s not in (12, 14, 1000))[:10]
    assert state.units[q_unit].lost == (12, 14, 1000)
    assert any(("freeze_q", 1000) in r for r in trained[1:])  # 12's replacement, trained in round 2
    k = [s for c, s in zip(exp.claims, state.claims, strict=True) if c.unit[0] == "freeze_k"]
    assert all(s.level and 14 not in s.seeds for s in k)
    # the rerun: everything in the store, the lost runs recorded: nothing trained, the same states
    again, retrained, _, _ = _drive(exp, values, fail, outcomes, lost)
    assert not any(retrained)
    assert again.claims == state.claims and again.units == state.units


def test_a_unit_that_loses_every_run_stops_after_the_limit():
    exp = make_experiment(replace(DEMO, conditions=("none", "freeze_q")), AutoSeeds(10, 0.05))
    state, trained, _, lost = _drive(exp, _values({}), lambda c: c.condition == "freeze_q")
    assert len(lost) == 3 + 5 == lost_limit(10) + 3  # round 1: 3 lost; round 2 aims at 5 more: 8 > 5, stop
    assert len(trained) == 2 and state.exhausted(exp.claims[0].unit)
    assert state.claims[0].look == 0 and state.claims[0].seeds == ()


def test_walk_skips_lost_pairs_and_stops_past_the_limit():
    exp = make_experiment(replace(DEMO, conditions=("none", "freeze_q")), AutoSeeds(5, 0.05))
    unit = exp.claims[0].unit
    lost = {exp.cell(unit, 11).run_id, exp.control(unit, 13).run_id}
    w = walk(exp, unit, 5, set(), lost)
    assert w.counted == (12, 14, 15, 16, 1000) and w.lost == (11, 13) and not w.exhausted
    every = {exp.cell(unit, s).run_id for s in exp.seeds}
    w = walk(exp, unit, 5, set(), every)
    assert w.counted == () and len(w.lost) == lost_limit(5) + 1 and w.exhausted


def test_runs_with_nothing_to_decide_take_the_first_looks_seeds_even_past_the_presets():
    exp = make_experiment(INTERVENTION_PRESETS["quick"], AutoSeeds(5, 0.05))  # the preset has 2 seeds
    once = exp.once_cells()
    assert sorted((c.condition, c.seed) for c in once) == sorted(
        (c, s) for c in ("none", "qk_align_reg") for s in (11, 12, 1000))


def test_a_difference_without_spread_is_not_decided_at_three_seeds_and_its_p_is_never_0():
    """Δ = 0.1 in every seed (up to float rounding): the fixed path's sign-flip floor 2 · 2⁻ⁿ applies
    at each look (0.25 at 3 seeds), not |t| = ∞ and p = 0; it is decided at the first look where the
    floor is at or below the look's nominal level (10 seeds: 2 · 2⁻¹⁰ ≤ 0.016 at α = 0.05)."""
    exp = make_experiment(replace(DEMO, conditions=("none", "freeze_q")), AutoSeeds(10, 0.05))
    none = _values({})

    def values(cell):
        base = none(replace(cell, condition="none"))
        return {m: v + (0.1 if cell.condition == "freeze_q" else 0.0) for m, v in base.items()}

    state, trained, _, _ = _drive(exp, values, lambda c: False)
    (q,) = state.claims
    assert [s.p for s in q.stats] == pytest.approx([2 * 2.0 ** -n for n in (3, 5, 7, 10)])
    assert q.level == 1 and q.look == 4 and len(q.seeds) == 10 and q.outcome == "as predicted"
    assert q.p == pytest.approx(2 * 2.0 ** -10) and len(trained) == 4


def test_decisions_of_the_second_experiment_hand_their_alpha_to_the_firsts_undecided_claims():
    """One family over two experiments (SPEC §8): a claim the first left undecided, whose path crossed
    the α/1 boundaries but not α/2's, is decided once the second decides its 3 claims (r = 3 of 5);
    another, still undecided, keeps an interval at the level it ended at."""
    from scipy import stats as sps

    from analysis.sequential import LookStat
    from sweep.sequential import make_experiment as make
    from sweep.sequential_record import claim_rows
    from sweep.sequential_state import Joint, JointClaim

    iv = replace(DEMO, conditions=("none", "forced_k_contraction"))
    probe = make(iv, AutoSeeds(10, 0.05), Joint("bl", (JointClaim({}),), False))
    c1, c2, c3 = probe.design.table[0, 3], probe.design.table[1, 3], probe.design.table[2, 3]
    t = (c2 + c3) / 2  # crosses at α/2, not at α/3: undecided while r < 3 of m = 5
    stats = tuple(LookStat(n, 0.1, 0.1, 0.5, 0.6) for n in (3, 5, 7)) + (
        LookStat(10, t * 0.1 / np.sqrt(10), 0.1, t, float(2 * sps.t.sf(t, 9))),)
    row = {"id": "alignment.contrast", "kind": "baseline", "metric": "alignment.contrast", "predicted": "+",
           "against": False, "fisher": False, "seeds": list(range(10)), "experiment": "bl", "outcome": "undecided"}
    flat = tuple(LookStat(n, 0.01, 0.1, 0.01 * np.sqrt(n) / 0.1, 0.9) for n in (3, 5, 7, 10))
    other = {**row, "id": "slopes.pr_k", "metric": "slopes.pr_k", "predicted": "-", "p": 0.9}
    exp = make(iv, AutoSeeds(10, 0.05), Joint("bl", (JointClaim(row, stats), JointClaim(other, flat)), False))
    assert exp.family_size == 5
    state, trained, _, _ = _drive(exp, _values({"forced_k_contraction": 40.0}), lambda c: False)
    assert all(s.level for s in state.claims) and len(trained) == 1  # decided at the first look
    b, flat_state = state.joint
    assert b.level == 2 and b.decided_in == "here" and b.outcome == "as predicted" and b.look == 4
    rows = {r["id"]: r for r in claim_rows(exp, state, True, "iv")}
    joint_row = rows["alignment.contrast"]
    assert joint_row["decided_in"] == "iv" and joint_row["experiment"] == "bl" and joint_row["n"] == 10
    assert "by the α experiment iv's decisions handed on" in joint_row["text"]
    assert joint_row["ci_adj_low"] > 0 and joint_row["boundary"] == pytest.approx(probe.design.table[1, 3])
    # still undecided: its interval at the level it ended at (α/1, the last open claim) holds 0
    assert flat_state.level == 0 and rows["slopes.pr_k"]["boundary"] == pytest.approx(c1)
    assert rows["slopes.pr_k"]["ci_adj_low"] < 0 < rows["slopes.pr_k"]["ci_adj_high"]
