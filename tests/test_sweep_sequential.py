"""``--seeds auto``: rounds, pairing, seeds, records and bad input, without Ray.

``run_sweep`` is replaced by a fake that writes each run's final-epoch layer rows with a planted
paired effect, so the round logic runs in milliseconds; the Ray path is tests/test_sweep_sequential_ray.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import ray

from analysis import vocabulary as vocab
from sweep import interventions, runner
from sweep import sequential as seq
from sweep.presets import INTERVENTION_PRESETS
from sweep.store import Store

DEMO = INTERVENTION_PRESETS["demo"]


def test_seed_sequence_extends_the_preset_with_a_fixed_sequence():
    assert seq.seed_sequence((7, 37, 42, 105, 210), 8) == (7, 37, 42, 105, 210, 1000, 1001, 1002)
    assert seq.seed_sequence((1000, 5), 4) == (1000, 5, 1001, 1002)
    assert seq.seed_sequence((7, 37), 2) == (7, 37)


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("Ray started")

    monkeypatch.setattr(ray, "init", refuse)


@pytest.mark.parametrize("argv, words", [
    (["--seeds", "auto", "--seed-list", "1,2,3"], "--seeds auto picks its own seeds"),
    (["--seeds", "auto", "--max-seeds", "2"], "--max-seeds must be a whole number >= 3"),
    (["--seeds", "auto", "--alpha", "0.5"], "--alpha must be in (0, 0.5), got 0.5"),
    (["--seeds", "auto", "--alpha", "0"], "--alpha must be in (0, 0.5), got 0.0"),
    (["--seeds", "3", "--max-seeds", "7"], "--max-seeds 7 is read only with --seeds auto"),
    (["--seeds", "many"], "expected a whole number or auto"),
])
def test_bad_input_is_one_line_and_exit_2_before_ray(argv, words, tmp_path, capsys, no_ray):
    with pytest.raises(SystemExit) as exit_:
        interventions.main(["--preset", "smoke", *argv, "--store", str(tmp_path / "s"),
                            "--storage", str(tmp_path / "r")])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("python -m sweep.interventions: error: ") and words in line, line
    assert not (tmp_path / "s").exists() and not (tmp_path / "r").exists()


def test_baseline_refuses_seeds_auto(tmp_path, capsys, no_ray):
    from sweep import baseline

    with pytest.raises(SystemExit) as exit_:
        baseline.main(["--preset", "smoke", "--seeds", "auto", "--store", str(tmp_path / "s")])
    assert exit_.value.code == 2
    assert "this sweep has none" in capsys.readouterr().err


def test_dry_run_prints_the_schedule_and_the_worst_case_plan(capsys, no_ray):
    interventions.main(["--preset", "demo", "--seeds", "auto", "--dry-run"])
    out = capsys.readouterr().out
    assert "look 1 of 4: n =  3 seeds" in out and "look 4 of 4: n = 10 seeds" in out
    assert "seeds in order: 7, 37, 42, 105, 210, 1000, 1001, 1002, 1003, 1004" in out
    # 5 deciding conditions + none per seed, qk_align_reg (no prediction) at the first 3 seeds only
    assert "worst case: 53 runs = 1060 run-epochs; a fixed design at 10 seeds: 60 runs = 1200 run-epochs" in out
    assert "qk_align_reg: no predicted direction, nothing to decide" in out


#: planted standardised paired effects (in units of the seed spread), per condition: each
#: predicted metric moves by sign × effect; freeze_q's is nil (stays undecided)
EFFECTS = {"forced_k_contraction": 20.0, "k_spectrum_clamp": 20.0, "freeze_k": 2.5, "freeze_q": 0.0}


def _fake_run_sweep(trained: list):
    rng = np.random.default_rng(5)

    def run_sweep(preset, settings):
        assert settings.extend and settings.name == "auto"
        store = Store(settings.trial.store)
        trained.append(sorted({(c.condition, c.seed) for c in preset.cells()}))
        for c in preset.cells():
            effect = EFFECTS.get(c.condition, 0.0)
            noise = np.random.default_rng(c.seed).normal(0, 1, 4)  # shared by the seed: the pairing matters
            pred = vocab.predicted(c.condition)
            row = {**c.identity(), "epoch": preset.train.epochs, "layer": 0}
            row.pop("strengths", None)
            for i, m in enumerate(("attn_entropy", "logit_std", "qk_erank", "pr_k")):
                own = rng.normal(0, 0.3) if c.condition != "none" else 0.0
                row[m] = 1.0 + noise[i] + own + pred.get(m, 0) * effect * 0.3
            store.write_layers([row])
        return None

    return run_sweep


def test_rounds_add_seeds_only_to_undecided_conditions(tmp_path, monkeypatch, capsys):
    trained: list = []
    monkeypatch.setattr(runner, "run_sweep", _fake_run_sweep(trained))
    monkeypatch.setattr("sweep.ray_env.init_ray", lambda *a, **k: False)
    argv = ["--preset", "demo", "--seeds", "auto", "--max-seeds", "8", "--store", str(tmp_path / "store"),
            "--storage", str(tmp_path / "ray"), "--name", "auto"]
    frame = interventions.main(argv)
    out = capsys.readouterr().out
    assert [len({s for _, s in r}) for r in trained] == [3, 2, 3]  # looks 3, 5, 8
    first = {c for c, _ in trained[0]}
    assert first == set(DEMO.conditions)  # qk_align_reg too, in the first round only
    later = {c for r in trained[1:] for c, _ in r}
    assert "qk_align_reg" not in later and "none" in later
    assert {"forced_k_contraction", "k_spectrum_clamp"}.isdisjoint(later)  # decided at look 1
    assert "freeze_q" in {c for c, _ in trained[-1]}
    by = {(r.condition, r.metric): r for r in frame.itertuples()}
    assert by[("forced_k_contraction", "qk_erank")].text == "as predicted, decided at 3 seeds (look 1 of 3)"
    assert by[("freeze_q", "attn_entropy")].text == "undecided at 8"
    assert "run-epochs used: " in out and "fixed design at 8 seeds (48 runs)" in out
    assert "k_spectrum_clamp (independent_xavier, 2 layers): 3 decided" in out
    record = json.loads(Path(tmp_path / "store" / "sequential" / "auto.json").read_text())
    assert record["looks"] == [3, 5, 8] and record["seeds"][5:] == [1000, 1001, 1002]
    assert len(record["claims"]) == len(frame) == 10  # 3 + 3 + 3 + 1 predicted metrics

    trained.clear()  # a rerun picks the same seeds, finds every round in the store, decides the same
    again = interventions.main(argv)
    assert trained == []
    assert again.equals(frame)
    assert "round 1 of 3: all 18 runs already in the store" in capsys.readouterr().out


def test_a_missing_pair_ends_the_prefix():
    design = seq.make_design(5)
    seeds = (7, 37, 42)
    cells = [c for c in DEMO.cells() if c.condition in ("none", "freeze_q") and c.seed in seeds]
    outcomes = {c.run_id: {m: (1.0 if c.condition == "freeze_q" else 0.0) + 0.01 * c.seed
                           for m in ("attn_entropy", "logit_std", "qk_erank", "pr_k")} for c in cells}
    full = seq.claim_decisions(DEMO, seeds, design, outcomes)
    unit = next(u for u in full if u[0] == "freeze_q")
    assert full[unit]["attn_entropy"].decided
    lost = next(c.run_id for c in cells if c.condition == "none" and c.seed == 37)
    del outcomes[lost]
    partial = seq.claim_decisions(DEMO, seeds, design, outcomes)
    assert not partial[unit]["attn_entropy"].decided and partial[unit]["attn_entropy"].n == 0


def test_resume_without_an_experiment_is_refused(tmp_path, capsys, no_ray):
    with pytest.raises(SystemExit) as exit_:
        interventions.main(["--preset", "smoke", "--seeds", "auto", "--resume", "--store", str(tmp_path / "s"),
                            "--storage", str(tmp_path / "r")])
    assert exit_.value.code == 2
    assert "--resume: no restorable experiment at" in capsys.readouterr().err


def test_dry_run_with_strengths_plans_every_strength_cell(capsys, no_ray):
    interventions.main(["--preset", "demo", "--seeds", "auto", "--max-seeds", "5", "--conditions",
                        "none,forced_k_contraction", "--strengths", "forced_k_contraction.lam=0,0.05,0.2",
                        "--dry-run"])
    out = capsys.readouterr().out
    # three strength cells + none per seed: 4 runs a seed, 3 + 2 seeds
    assert "worst case: 20 runs" in out and "a fixed design at 5 seeds: 20 runs" in out


def test_strength_cells_have_their_own_claims_but_zero_strength_has_none():
    from dataclasses import replace

    preset = replace(DEMO, conditions=("none", "forced_k_contraction"),
                     strengths=(("forced_k_contraction", "lam", (0.0, 0.05, 0.2)),))
    units = seq.claim_decisions(preset, (7, 37, 42), seq.make_design(5), {})
    assert sorted(u[1] for u in units) == [(), (("lam", 0.2),)]  # the default cell is ()
    assert all(set(claims) == {"attn_entropy", "logit_std", "qk_erank"} for claims in units.values())


def test_demo_checks_its_auto_flags_before_anything(capsys, no_ray):
    from sweep import demo

    for argv, words in ((["--seeds", "auto", "--max-seeds", "2"], "--max-seeds must be a whole number >= 3"),
                        (["--alpha", "0.1"], "--alpha 0.1 is read only with --seeds auto")):
        with pytest.raises(SystemExit) as exit_:
            demo.main(argv)
        assert exit_.value.code == 2
        assert words in capsys.readouterr().err
