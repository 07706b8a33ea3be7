"""``--seeds auto``: rounds, pairing, lost seeds, the stored design, records and bad input, without Ray.

``run_sweep`` is replaced by a fake that writes each run's final-epoch layer rows with a planted
paired effect (or, for the runs told to fail, no final epoch), so the round logic runs in
milliseconds; the Ray path is tests/test_sweep_sequential_ray.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import ray

from analysis import vocabulary as vocab
from sweep import interventions, runner, summary
from sweep.presets import INTERVENTION_PRESETS
from sweep.store import Store

DEMO = INTERVENTION_PRESETS["demo"]
METRICS = ("attn_entropy", "logit_std", "qk_erank", "pr_k")


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("Ray started")

    monkeypatch.setattr(ray, "init", refuse)


@pytest.mark.parametrize("argv, words", [
    (["--seeds", "auto", "--seed-list", "1,2,3"], "--seeds auto picks its own seeds"),
    (["--seeds", "auto", "--max-seeds", "2"], "--max-seeds must be a whole number from 3 (the first round's "
                                              "seeds) to 50, got 2"),
    (["--seeds", "auto", "--max-seeds", "51"], "--max-seeds must be a whole number from 3"),
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


def test_baseline_checks_its_auto_flags_before_ray(tmp_path, capsys, no_ray):
    from sweep import baseline

    for argv, words in ((["--seeds", "auto", "--max-seeds", "2"], "--max-seeds must be a whole number from 3"),
                        (["--seeds", "auto", "--seed-list", "1,2,3"], "--seeds auto picks its own seeds"),
                        (["--seeds", "2", "--alpha", "0.1"], "--alpha 0.1 is read only with --seeds auto")):
        with pytest.raises(SystemExit) as exit_:
            baseline.main(["--preset", "smoke", *argv, "--store", str(tmp_path / "s")])
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith("python -m sweep.baseline: error: ") and words in line, line
    assert not (tmp_path / "s").exists()


def test_dry_run_prints_the_design_the_seeds_and_the_fixed_design_of_the_same_power(capsys, no_ray, tmp_path):
    interventions.main(["--preset", "demo", "--seeds", "auto", "--dry-run", "--store", str(tmp_path / "s")])
    out = capsys.readouterr().out
    assert "sequential design: 10 claims, family-wise error ≤ 0.05" in out
    assert "look 1 of 4: n =  3 seeds, |t| ≥ 21.90 (p ≤ 0.0021) at α/10 = 0.005" in out
    # the demo's schedule seeds (7, 37) are not in the sequence
    assert "seeds in order: 11, 12, 13, 14, 15, 16, 1000, 1001, 1002, 1003 (the preset's but those" in out
    assert "replaced by the next (1004, 1005, 1006, 1007, 1008); a claim that loses more than 5 stops" in out
    # 4 deciding conditions + none per seed, qk_align_reg (no prediction) at the first 3 seeds only
    assert "worst case round 1: seeds 11, 12, 13: 18 runs" in out
    assert "worst case without losses: 53 runs = 1060 run-epochs" in out
    assert ("the fixed design of the same power: δ* = 1.79 sd: this design has 80% power for one claim at its "
            "starting level 0.005; a fixed two-sided t-test at 0.005 needs 9 seeds") in out
    assert ": 48 runs = 960 run-epochs" in out
    assert "qk_align_reg: nothing to decide" in out
    assert not (tmp_path / "s").exists()


def test_dry_run_with_strengths_plans_every_strength_cell(capsys, no_ray, tmp_path):
    interventions.main(["--preset", "demo", "--seeds", "auto", "--max-seeds", "5", "--conditions",
                        "none,forced_k_contraction", "--strengths", "forced_k_contraction.lam=0,0.05,0.2",
                        "--dry-run", "--store", str(tmp_path / "s")])
    out = capsys.readouterr().out
    # two deciding strength cells (3 claims each) and the dose–response in lam (3 claims, its seed's
    # slope over all three cells): every cell, the cell of zeros too, + none at each of 3 + 2 seeds
    assert "sequential design: 9 claims" in out
    assert "worst case without losses: 20 runs" in out
    assert "nothing to decide" not in out


#: planted standardised paired effects (in units of the seed spread), per condition: each
#: predicted metric moves by sign × effect; freeze_q's is nil (stays undecided)
EFFECTS = {"forced_k_contraction": 40.0, "k_spectrum_clamp": 40.0, "freeze_k": 3.0, "freeze_q": 0.0}


def _dose(cell) -> float:
    """The planted effect's multiplier of a run: its lam relative to the default (forced_k_contraction),
    1 for every other condition's run."""
    if cell.condition != "forced_k_contraction":
        return 1.0
    return dict(cell.strengths).get("lam", 0.05) / 0.05


def _fake_run_sweep(trained: list, fail=lambda cell: None, name: str = "auto", record_dir: Path | None = None):
    """``run_sweep`` writing each run's final rows; ``fail(cell)``: None, "error" (no final epoch) or
    "diverged". Asserts that the record (with the design) exists before any round trains."""
    rng = np.random.default_rng(5)

    def run_sweep(preset, settings):
        assert settings.extend and settings.name == name
        if record_dir is not None:
            record = json.loads((record_dir / f"{name}.json").read_text())
            assert record["design"]["max_seeds"] >= 3 and record["rounds"], "the record is written before a round"
        store = Store(settings.trial.store)
        trained.append(sorted({(c.condition, c.seed) for c in preset.cells()}))
        for c in preset.cells():
            how = fail(c)
            if how is not None:
                store.write_epoch({**c.identity(), "epoch": 1, "tokens_seen": 10,
                                   "status": "diverged" if how == "diverged" else "running"})
                continue
            effect = EFFECTS.get(c.condition, 0.0)
            noise = np.random.default_rng(c.seed).normal(0, 1, 4)  # shared by the seed: the pairing matters
            pred = vocab.predicted(c.condition)
            row = {**c.identity(), "epoch": preset.train.epochs, "layer": 0}
            for i, m in enumerate(METRICS):
                own = rng.normal(0, 0.3) if c.condition != "none" else 0.0
                row[m] = 1.0 + noise[i] + own + pred.get(m, 0) * effect * 0.3 * _dose(c)
            store.write_layers([row])
        return None

    return run_sweep


def _argv(tmp_path, *extra, name="auto"):
    return ["--preset", "demo", "--seeds", "auto", "--store", str(tmp_path / "store"), "--storage",
            str(tmp_path / "ray"), "--name", name, *extra]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Install the fake ``run_sweep``; returns the list of each round's (condition, seed)s."""
    trained: list = []

    def install(fail=lambda cell: None, name="auto"):
        monkeypatch.setattr(runner, "run_sweep", _fake_run_sweep(trained, fail, name, tmp_path / "store" / "sequential"))
        return trained

    monkeypatch.setattr("sweep.ray_env.init_ray", lambda *a, **k: False)
    return install


def _record(tmp_path, name="auto") -> dict:
    return json.loads((tmp_path / "store" / "sequential" / f"{name}.json").read_text())


def test_rounds_add_seeds_only_to_open_units_and_a_rerun_trains_nothing(tmp_path, capsys, fake):
    trained = fake()
    argv = _argv(tmp_path, "--max-seeds", "8")
    frame = interventions.main(argv)
    out = capsys.readouterr().out
    assert [len({s for _, s in r}) for r in trained] == [3, 2, 3]  # looks 3, 5, 8
    first = {c for c, _ in trained[0]}
    assert first == set(DEMO.conditions)  # qk_align_reg too, in the first round only
    later = {c for r in trained[1:] for c, _ in r}
    assert "qk_align_reg" not in later and "none" in later
    assert {"forced_k_contraction", "k_spectrum_clamp"}.isdisjoint(later)  # decided at look 1
    assert {s for r in trained for _, s in r}.isdisjoint(DEMO.schedule_seeds)
    by = {(r.condition, r.metric): r for r in frame.itertuples()}
    assert by[("forced_k_contraction", "qk_erank")].text == "as predicted, decided at 3 seeds (look 1 of 3)"
    assert by[("freeze_q", "attn_entropy")].text == "undecided at 8 seeds (look 3 of 3)"
    assert by[("freeze_q", "attn_entropy")].seeds == [11, 12, 13, 14, 15, 16, 1000, 1001]
    assert "round 2 (look 2 of 3, 5 seeds): seeds 14, 15 for freeze_k, freeze_q and none: 6 runs (6 to train)" in out
    assert "k_spectrum_clamp (independent_xavier, 2 layers): 3 decided" in out
    assert "an open claim is now tested at α/" in out
    assert "run-epochs used: " in out and "for the fixed design of the same power" in out
    record = _record(tmp_path)
    assert record["looks"] == [3, 5, 8] and record["seeds"][5:8] == [16, 1000, 1001]
    assert record["design"]["family_size"] == len(record["claims"]) == len(frame) == 10  # 3 + 3 + 3 + 1
    assert record["finished"] and record["written_at"].endswith("+00:00")
    assert not frame.attrs["errored"]

    trained.clear()  # a rerun picks the same seeds, finds every round in the store, decides the same
    written = record["written_at"]
    again = interventions.main(argv)
    assert trained == []
    assert again.equals(frame)
    assert "round 1 (look 1 of 3, 3 seeds): all 18 runs already in the store" in capsys.readouterr().out
    assert _record(tmp_path)["written_at"] == written  # nothing new: the record is not rewritten


def test_a_rerun_with_another_design_is_refused_in_one_line(tmp_path, capsys, fake):
    fake()
    interventions.main(_argv(tmp_path, "--max-seeds", "5"))
    capsys.readouterr()
    where = tmp_path / "store" / "sequential" / "auto.json"
    for extra, words in (
        (["--max-seeds", "8"], "--max-seeds 8: experiment auto was designed with --max-seeds 5 --alpha 0.05 "
                               f"({where}); a new design needs a new experiment: add --name NEW"),
        (["--max-seeds", "5", "--alpha", "0.1"], "--alpha 0.1: experiment auto was designed with --max-seeds 5 "
                                                 "--alpha 0.05"),
        (["--max-seeds", "5", "--conditions", "none,freeze_k"], "the claims of --conditions/--strengths/--inits/"
                                                                "--depths (3): experiment auto was designed with a "
                                                                "family of 10 claims"),
        (["--max-seeds", "5", "--epochs", "4"], "--epochs 4: experiment auto was designed with --epochs 20"),
    ):
        with pytest.raises(SystemExit) as exit_:
            interventions.main(_argv(tmp_path, *extra))
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert words in line and line.endswith("add --name NEW"), line
    with pytest.raises(SystemExit):  # the dry run checks it too
        interventions.main(_argv(tmp_path, "--max-seeds", "8", "--dry-run"))


def test_another_experiment_on_the_same_claims_and_seeds_is_refused(tmp_path, capsys, fake):
    """A rerun of undecided claims under another --name would reuse the same seed sequence under a
    second design (10 seeds, then 20: a false decision 0.067 of the time, not 0.05)."""
    trained = fake()
    interventions.main(_argv(tmp_path, "--max-seeds", "5", "--conditions", "none,freeze_q,freeze_k"))
    capsys.readouterr()
    trained.clear()
    fake(name="again")
    for extra in (["--max-seeds", "10"], ["--max-seeds", "10", "--conditions", "none,freeze_q", "--dry-run"]):
        with pytest.raises(SystemExit) as exit_:
            interventions.main(_argv(tmp_path, *extra, name="again"))
        assert exit_.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "experiment again would decide" in line and "interventions.freeze_" in line, line
        assert "that experiment auto (" in line and "continue it with --name auto" in line, line
    assert trained == [] and not (tmp_path / "store" / "sequential" / "again.json").exists()
    # claims no other experiment decides (another condition) share the seeds but not the claims: fine
    fake(name="other")
    interventions.main(_argv(tmp_path, "--max-seeds", "5", "--conditions", "none,forced_k_contraction",
                             name="other"))


def test_a_record_without_a_design_is_refused(tmp_path, capsys, fake):
    fake()
    (tmp_path / "store" / "sequential").mkdir(parents=True)
    (tmp_path / "store" / "sequential" / "auto.json").write_text(json.dumps({"experiment": "auto", "claims": []}))
    with pytest.raises(SystemExit) as exit_:
        interventions.main(_argv(tmp_path))
    assert exit_.value.code == 2
    assert "was written before the design was stored with the experiment" in capsys.readouterr().err


def test_a_lost_seed_is_replaced_by_the_next_seed_in_the_next_round(tmp_path, capsys, fake):
    trained = fake(fail=lambda c: "error" if (c.condition, c.seed) == ("freeze_q", 12) else None)
    frame = interventions.main(_argv(tmp_path, "--max-seeds", "5"))
    out = capsys.readouterr().out
    # round 2 brings freeze_q to 5 pairs: 14, 15 and 16 (the next seed) for the lost 12
    assert {s for c, s in trained[1] if c == "freeze_q"} == {14, 15, 16}
    assert {s for c, s in trained[1] if c == "freeze_k"} == {14, 15}
    assert ("none", 16) in trained[1]
    (q,) = frame[frame["condition"] == "freeze_q"].itertuples()
    assert q.seeds == [11, 13, 14, 15, 16] and q.lost == [12] and q.n == 5
    assert q.text == "undecided at 5 seeds (look 2 of 2; 1 seed lost: 12)"
    k = frame[frame["condition"] == "freeze_k"].iloc[0]
    assert k["lost"] == [] and 12 in k["seeds"]
    record = _record(tmp_path)
    (lost_id,) = record["lost"]
    assert record["lost"][lost_id] == {"reason": "error", "round": 1}
    assert "1 runs lost (1 error)" in out and "the command exits 1" in out
    assert frame.attrs["errored"]  # a run ended in error: exit 1
    trained.clear()
    again = interventions.main(_argv(tmp_path, "--max-seeds", "5"))  # the lost run is not retrained
    assert trained == [] and again.equals(frame)


def test_a_lost_none_run_costs_every_unit_its_seed(tmp_path, fake):
    fake(fail=lambda c: "diverged" if (c.condition, c.seed) == ("none", 11) else None)
    frame = interventions.main(_argv(tmp_path, "--max-seeds", "4"))
    assert all(r.lost == [11] and 11 not in r.seeds for r in frame.itertuples())
    assert _record(tmp_path)["lost"] and not frame.attrs["errored"]  # a divergence is not an error


def test_a_condition_that_fails_every_run_stops_and_exits_1(tmp_path, capsys, fake):
    trained = fake(fail=lambda c: "error" if c.condition == "freeze_q" else None)
    frame = interventions.main(_argv(tmp_path))
    out = capsys.readouterr().out
    tried = sorted({s for r in trained for c, s in r if c == "freeze_q"})
    assert len(tried) == 8  # 3, then 5 more: 8 lost > 5, no more replacements
    (q,) = frame[frame["condition"] == "freeze_q"].itertuples()
    assert q.n == 0 and q.outcome == "undecided"
    assert q.text.startswith("undecided at 0 seeds (no look of 4 reached; 8 seeds lost: 11, 12, 13, 14, 15, 16, "
                             "1000, 1001, no more replacements")
    assert "freeze_q (independent_xavier, 2 layers): lost 8 seeds" in out and "more than 5" in out
    assert frame.attrs["errored"] and summary.exit_status(frame) == 1


def test_strength_cells_have_their_own_claims_but_zero_strength_has_none():
    from dataclasses import replace

    from sweep.sequential_state import family

    preset = replace(DEMO, conditions=("none", "forced_k_contraction"),
                     strengths=(("forced_k_contraction", "lam", (0.0, 0.05, 0.2)),))
    claims = family(preset)
    paired = [c for c in claims if c.kind == "paired"]
    assert sorted({c.unit[1] for c in paired}) == [(), (("lam", 0.2),)]  # the default cell is ()
    assert {c.metric for c in paired} == {"attn_entropy", "logit_std", "qk_erank"} and len(paired) == 6
    # the scorecard's rows: the default cell's paired claims and the dose–response of the sweep
    assert sorted(c.id for c in claims if c.id) == sorted(
        [f"interventions.forced_k_contraction.{m}" for m in ("attn_entropy", "logit_std", "qk_erank")]
        + [f"dose_response.forced_k_contraction.{m}" for m in ("attn_entropy", "logit_std", "qk_erank")])


def test_resume_without_an_experiment_is_refused(tmp_path, capsys, no_ray):
    with pytest.raises(SystemExit) as exit_:
        interventions.main(["--preset", "smoke", "--seeds", "auto", "--resume", "--store", str(tmp_path / "s"),
                            "--storage", str(tmp_path / "r")])
    assert exit_.value.code == 2
    assert "--resume: no restorable experiment at" in capsys.readouterr().err


def test_demo_checks_its_auto_flags_before_anything(capsys, no_ray):
    from sweep import demo

    for argv, words in ((["--seeds", "auto", "--max-seeds", "2"], "--max-seeds must be a whole number from 3"),
                        (["--alpha", "0.1"], "--alpha 0.1 is read only with --seeds auto")):
        with pytest.raises(SystemExit) as exit_:
            demo.main(argv)
        assert exit_.value.code == 2
        assert words in capsys.readouterr().err


def test_a_strength_sweep_decides_its_dose_response_in_the_family_and_the_record_has_what_an_interval_needs(
        tmp_path, capsys, fake):
    """The dose–response rows of an auto strength sweep are decided by the sequential design (each
    seed's OLS slope of Δ on strength, the scorecard's statistic), not by a fixed-n test; every claim
    stores its look's estimate, sd, n and boundary, and mean ± boundary · sd / √n excludes 0 exactly
    when it was decided."""
    from analysis.compute import compute_all
    from analysis.sequential import look_stat
    from sweep.report.sequential import decisions, interval, load_records

    trained = fake()
    frame = interventions.main(_argv(tmp_path, "--max-seeds", "5", "--conditions", "none,forced_k_contraction,freeze_q",
                                     "--strengths", "forced_k_contraction.lam=0,0.05,0.2"))
    capsys.readouterr()
    dose = frame[frame["kind"] == "dose"]
    assert sorted(dose["id"]) == [f"dose_response.forced_k_contraction.{m}" for m in ("attn_entropy", "logit_std",
                                                                                       "qk_erank")]
    assert (dose["outcome"] == "as predicted").all() and (dose["n"] == 3).all()
    # the cell of zeros is one of the dose–response's points: trained at every seed the unit used
    assert {s for c, s in trained[0] if c == "forced_k_contraction"} == {11, 12, 13}
    store = Store(str(tmp_path / "store"))
    an = compute_all({"layers": store.read("layers"), "epochs": store.read("epochs")}, preset="demo")
    (cond,) = an.results["dose_response"].conditions
    for m in cond.metrics:  # the per-seed statistic is the reducer's: the same slopes
        row = dose[dose["metric"] == m.metric].iloc[0]
        assert row["mean"] == pytest.approx(np.mean(m.seed_slopes), rel=1e-9)
        assert row["path"][0]["t"] == pytest.approx(look_stat(np.array(m.seed_slopes)).t, rel=1e-9)
    got = decisions(load_records(str(tmp_path / "store")), "demo")
    assert set(dose["id"]) | {"interventions.freeze_q.attn_entropy"} <= set(got)
    for cid, c in got.items():
        lo, hi = interval(c)
        assert 0 < c["p"] <= 1 and c["boundary"] > 0 and c["n"] == len(c["seeds"]) >= 3, cid
        half = c["boundary"] * c["sd"] / np.sqrt(c["n"])
        assert (lo, hi) == (pytest.approx(c["mean"] - half), pytest.approx(c["mean"] + half)), cid
        assert (lo > 0 or hi < 0) == (c["outcome"] != "undecided"), cid
        assert c["level"] == pytest.approx(0.05 / (c["level_j"] or 1)) and c["level"] == c["alpha_level"], cid
    assert got["interventions.freeze_q.attn_entropy"]["outcome"] == "undecided"
    from analysis.scorecard import build_scorecard

    # the scorecard takes them by claim id, with their intervals
    rows = {r.id: r for r in build_scorecard(an, "demo", False, sequential=got)}
    for cid in dose["id"]:
        r = rows[cid]
        assert r.test == "--seeds auto" and r.verdict == "direction reproduced" and r.p_adj is None, cid
        assert (r.ci_adj_low, r.ci_adj_high) == (got[cid]["ci_adj_low"], got[cid]["ci_adj_high"]), cid
