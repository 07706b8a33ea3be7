"""``python -m sweep.baseline --seeds auto``: the baseline claims decided in rounds, a seed one unit
over every (init, depth), the per-seed statistics the scorecard's; and one family with the
interventions (``sweep.demo --seeds auto``). Without Ray: ``run_sweep`` is a fake that writes each
round's runs from a synthetic store with planted effects (``sweep.synthetic.effects``)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from sweep import baseline, runner
from sweep.presets import BASELINE_PRESETS
from sweep.store import Store
from sweep.synthetic.effects import make_effect_store
from sweep.synthetic.tables import write_store

DEMO = BASELINE_PRESETS["demo"]
EPOCHS = 4
#: every baseline claim of the demo's grid at an effect far beyond its noise (its own units; the
#: independent init's rise small beside the gaps' growth, which is tested against the larger init at
#: the deepest depth and the smaller at the shallowest)
STRONG = {"alignment.contrast": 0.3, "alignment.final.independent_xavier": 0.05, "alignment.gap.L1": 0.3,
          "alignment.gap.L2": 0.3, "alignment.gap.L3": 0.3, "alignment.gap.growth": 0.3, "slopes.pr_q_minus_pr_k": 1.0,
          "slopes.pr_k": -1.0, "categories.late_mid.qk_erank": 3.0, "categories.late_mid.pr_q": 3.0,
          "categories.early_mid.attn_entropy": 1.0, "categories.early_mid.qk_erank": 3.0,
          "bridge.key_spec__qk_compression": 0.95, "bridge.qk_compression__entropy_sharpening": 0.95,
          "bridge.qk_compression__top1_sharpening": 0.95}


def _fake(trained: list, effects: dict[str, float], fail=lambda cell: False):
    """``run_sweep`` writing each run of the round from a synthetic store of its seed (seed-specific
    noise, the planted ``effects``); ``fail(cell)``: the run writes nothing (lost: an error)."""
    def run_sweep(preset, settings):
        assert settings.extend
        cells = preset.cells()
        trained.append(sorted({c.seed for c in cells}))
        ids = {c.run_id for c in cells if not fail(c)}
        for seed in sorted({c.seed for c in cells}):
            tables = make_effect_store(effects, seeds=(seed,), depths=DEMO.depths, epochs=preset.train.epochs,
                                       iv_seeds=(seed,), iv_epochs=1, preset=preset.name, rng_seed=seed)
            write_store({k: v[v["run_id"].isin(ids)] for k, v in tables.items() if k != "checkpoints"},
                        settings.trial.store)
        return None

    return run_sweep


@pytest.fixture
def fake(monkeypatch):
    trained: list = []

    def install(effects, fail=lambda cell: False):
        monkeypatch.setattr(runner, "run_sweep", _fake(trained, effects, fail))
        return trained

    monkeypatch.setattr("sweep.ray_env.init_ray", lambda *a, **k: False)
    monkeypatch.setattr("sweep.sequential._newest_state", lambda settings: set())  # no Tune folder: no Tune import
    return install


def _argv(tmp_path, *extra, name="bl"):
    return ["--preset", "demo", "--seeds", "auto", "--epochs", str(EPOCHS), "--store", str(tmp_path / "store"),
            "--storage", str(tmp_path / "ray"), "--name", name, *extra]


def test_the_family_is_the_scorecards_counted_baseline_claims():
    from sweep.sequential_baseline import baseline_family

    claims = baseline_family(DEMO)
    assert sorted(c.id for c in claims) == sorted(STRONG)  # no sanity check, magnitude row or series
    two = {"alignment.gap.L1", "alignment.gap.L2", "alignment.gap.L3", "alignment.gap.growth"}
    assert {c.id for c in claims if c.against} == two  # as the scorecard tests them: y and y_against
    assert all(c.fisher for c in claims if c.id.startswith("bridge."))
    paper = {c.id for c in baseline_family(BASELINE_PRESETS["paper"])}
    assert {"alignment.gap.L4", "alignment.gap.L6", "alignment.gap.L8"} <= paper and "alignment.gap.L1" not in paper


def test_dry_run_shows_the_looks_and_trains_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("ray.init", lambda *a, **k: (_ for _ in ()).throw(AssertionError("Ray started")))
    baseline.main(_argv(tmp_path, "--dry-run"))
    out = capsys.readouterr().out
    assert "[bl] sequential design: 15 claims, family-wise error ≤ 0.05" in out
    assert "look 1 of 4: n =  3 seeds" in out and "look 4 of 4: n = 10 seeds" in out
    assert "worst case round 1: seeds 11, 12, 13: 27 runs" in out  # a seed: every (init, depth)
    assert "dry run: nothing trained, nothing written" in out and not (tmp_path / "store").exists()


def test_strong_claims_stop_the_sweep_before_the_maximum(tmp_path, capsys, fake):
    trained = fake(STRONG)
    frame = baseline.main(_argv(tmp_path))
    out = capsys.readouterr().out
    assert (frame["outcome"] == "as predicted").all() and len(frame) == 15
    assert len(trained) < 4 and max(frame["n"]) < 10, trained  # decided before the last look
    assert "round 1 (look 1 of 4, 3 seeds): seeds 11, 12, 13 for baseline demo: 27 runs (27 to train)" in out
    record = json.loads((tmp_path / "store" / "sequential" / "bl.json").read_text())
    assert record["sweep"] == "baseline" and record["finished"] and record["family_size"] == 15
    gap = next(c for c in record["claims"] if c["id"] == "alignment.gap.L2")
    assert gap["test"] == "against" and gap["sided"] == 1 and gap["ci_adj_low"] > 0 and gap["path_against"]


def test_a_null_claim_runs_to_the_maximum_and_the_statistics_are_the_scorecards(tmp_path, capsys, fake):
    from analysis.compute import compute_all
    from analysis.scorecard import all_claims
    from analysis.sequential import look_stat

    trained = fake({"alignment.contrast": 0.3, "slopes.pr_k": -1.0})
    frame = baseline.main(_argv(tmp_path, "--max-seeds", "5"))
    by = {r.id: r for r in frame.itertuples()}
    assert by["alignment.contrast"].outcome == "as predicted" and by["alignment.contrast"].n == 3
    assert by["categories.late_mid.pr_q"].outcome == "undecided" and by["categories.late_mid.pr_q"].n == 5
    assert trained == [[11, 12, 13], [14, 15]]
    store = Store(str(tmp_path / "store"))
    an = compute_all({"layers": store.read("layers"), "epochs": store.read("epochs")}, preset="demo")
    scorecard = {c.id: c for c in all_claims(an, False)}
    for cid in ("categories.late_mid.pr_q", "slopes.pr_q_minus_pr_k"):  # the scorecard's own y, 5 seeds
        assert by[cid].path[-1]["t"] == pytest.approx(look_stat(scorecard[cid].y).t, rel=1e-9)
    z = np.arctanh(scorecard["bridge.key_spec__qk_compression"].y)  # correlations on Fisher's z
    assert by["bridge.key_spec__qk_compression"].path[-1]["mean"] == pytest.approx(z.mean(), rel=1e-9)


def test_a_seed_is_one_unit_over_every_init_and_depth(tmp_path, capsys, fake):
    trained = fake(STRONG, fail=lambda c: (c.seed, c.init, c.depth) == (12, "qk_identical", 3))
    frame = baseline.main(_argv(tmp_path, "--max-seeds", "3"))
    assert trained == [[11, 12, 13], [14]]  # 12 lost for every claim: the next seed, every run of it
    assert all(r.seeds == [11, 13, 14] and r.lost == [12] for r in frame.itertuples())
    assert frame.attrs["errored"]  # a run lost to an error: exit 1


def test_one_family_over_both_sweeps(tmp_path, capsys, fake, monkeypatch):
    """``sweep.demo --seeds auto``'s two experiments: the baseline first, its m_b claims and the
    interventions' m_i open without data (levels α/(m_b + m_i)); the interventions start from the
    baseline's decisions (r of them: α/(m − r)); the report takes each claim from the newest record."""
    from test_sweep_sequential import _fake_run_sweep

    from sweep.auto_flags import AutoSeeds
    from sweep.options import TrialOptions
    from sweep.presets import INTERVENTION_PRESETS
    from sweep.report.sequential import decisions, load_records
    from sweep.sequential import joint_experiments, run_auto
    from sweep.sequential_record import read_record
    from sweep.settings import SweepSettings

    trained: list = []
    base_fake = _fake(trained, STRONG)
    iv_fake = _fake_run_sweep(trained, name="iv")
    monkeypatch.setattr(runner, "run_sweep", lambda p, s: (base_fake if p.sweep == "baseline" else iv_fake)(p, s))
    auto = AutoSeeds(5, 0.05)
    b_preset = replace(DEMO, train=replace(DEMO.train, epochs=EPOCHS))
    iv = replace(INTERVENTION_PRESETS["demo"], conditions=("none", "freeze_k", "freeze_q"))
    trial = TrialOptions(str(tmp_path / "store"), str(tmp_path / "ray"))
    names = ("bl", "iv")
    first, second = joint_experiments(b_preset, iv, auto, names)
    assert first.family_size == second.family_size == 15 + 4
    with pytest.raises(SystemExit):  # the interventions need the baseline's finished record
        from sweep.cli import run_cli

        run_cli("x", [], lambda argv: None, lambda args: run_auto(iv, SweepSettings("iv", trial), auto, exp=second))
    assert "which has not finished in this store: run it first" in capsys.readouterr().err
    frame = run_auto(b_preset, SweepSettings("bl", trial), auto, exp=first)
    out = capsys.readouterr().out
    assert "sequential design: 15 claims and the 4 of experiment iv (after this one): one family of 19" in out
    assert "look 1 of 2: n =  3 seeds, |t| ≥ " in out and "at α/19 = " in out
    assert (frame["outcome"] == "as predicted").all()
    record = read_record(Store(str(tmp_path / "store")), "bl")
    _, second = joint_experiments(b_preset, iv, auto, names, first_record=record)
    frame = run_auto(iv, SweepSettings("iv", trial), auto, exp=second)
    out = capsys.readouterr().out
    assert "15 claims of experiment bl (before this one): one family of 19" not in out
    assert "sequential design: 4 claims and the 15 of experiment bl (before this one): one family of 19" in out
    assert "experiment bl decided 15 of its 15 claims: this experiment's claims start at α/4 (= 0.0125)" in out
    assert "16 of 19 claims decided; an open claim is now tested at α/3" in out
    rec_iv = read_record(Store(str(tmp_path / "store")), "iv")
    assert rec_iv["design"]["joint"]["experiment"] == "bl" and len(rec_iv["claims"]) == 19
    got = decisions(load_records(str(tmp_path / "store")), "demo")
    assert got["alignment.contrast"]["experiment"] == "bl" and got["interventions.freeze_k.qk_erank"]["experiment"] == "iv"
    assert got["alignment.contrast"]["family_size"] == 19
    with pytest.raises(SystemExit) as exit_:  # the baseline alone, under another name: its claims are decided
        baseline.main(_argv(tmp_path, "--max-seeds", "5", name="alone"))
    assert exit_.value.code == 2
    assert "continue it with python -m sweep.demo --seeds auto (its sweeps are one family with experiment iv)" in \
        capsys.readouterr().err
