"""The reproduction scorecard, per-preset reports and listed (not silent) skips.

Every expected value here is recomputed from the raw synthetic tables with
plain pandas/numpy (and, for intervals, ``scipy.stats.bootstrap`` on the
per-seed values), not through ``analysis``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis import scorecard as sc
from analysis.compute import compute_all
from sweep import report
from sweep.synthetic import (
    Planted,
    expected_slope_counts,
    make_synthetic_store,
    write_store,
)
from sweep.synthetic.planted import _default_effects


def _rows(tb: dict, preset: str = "paper") -> dict[str, dict]:
    an = compute_all(tb)
    return {r["id"]: r for r in sc.build_scorecard(an, preset, paper_scale=preset == "paper")}


def _hand_deltas(tb: dict, cond: str, metric: str) -> np.ndarray:
    """Per seed: final layer-mean of ``metric`` of ``cond`` minus that of ``none`` (raw rows)."""
    lay = tb["layers"][tb["layers"]["sweep"] == "interventions"]
    last = lay[lay["epoch"] == lay["epoch"].max()]
    means = last.groupby(["intervention", "seed"])[metric].mean()
    return (means.loc[cond] - means.loc["none"]).sort_index().to_numpy()


def _hand_verdict(v: np.ndarray, sign: int) -> tuple[float, str]:
    """Mean of per-seed values and the verdict from an independent percentile bootstrap."""
    mean = float(v.mean())
    if np.sign(mean) != sign:
        return mean, "not reproduced"
    if np.ptp(v) == 0:
        lo = hi = mean
    else:
        ci = sps.bootstrap((v,), np.mean, method="percentile", n_resamples=4000,
                           rng=np.random.default_rng(123)).confidence_interval
        lo, hi = ci.low, ci.high
    return mean, "reproduced" if sign * lo > 0 and sign * hi > 0 else "direction only"


@pytest.fixture(scope="module")
def opposite_store() -> dict:
    """The paper grid with freeze_k planted to *sharpen* attention (opposite to SPEC §5)."""
    effects = _default_effects()
    effects["freeze_k"] = {**effects["freeze_k"], "attn_entropy": -0.25}
    return make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5, planted=Planted(effects=effects))


def test_planted_reproduced_direction_only_and_opposite_verdicts(opposite_store):
    rows = _rows(opposite_store)
    cases = [
        ("k_spectrum_clamp", "logit_std", -1, "reproduced"),  # -0.8 in every seed
        ("forced_k_contraction", "logit_std", +1, "direction only"),  # seed 1 flipped: 4 of 5 seeds
        ("freeze_k", "attn_entropy", +1, "not reproduced"),  # planted opposite
    ]
    for cond, metric, sign, planted_verdict in cases:
        v = _hand_deltas(opposite_store, cond, metric)
        mean, verdict = _hand_verdict(v, sign)
        row = rows[f"interventions.{cond}.{metric}"]
        assert verdict == planted_verdict, (cond, metric, v)
        assert row["verdict"] == verdict, (cond, metric)
        assert row["value"] == pytest.approx(mean, rel=1e-9)
        assert row["n"] == len(v) == 5 and row["unit"] == "seeds"
        if np.ptp(v) > 0:  # the module's interval agrees with an independent bootstrap
            ci = sps.bootstrap((v,), np.mean, method="percentile", n_resamples=4000,
                               rng=np.random.default_rng(123)).confidence_interval
            assert row["ci_low"] == pytest.approx(ci.low, abs=0.3 * np.ptp(v))
            assert row["ci_high"] == pytest.approx(ci.high, abs=0.3 * np.ptp(v))


def test_slope_fraction_matches_hand_seed_averaged_traces(opposite_store):
    rows = _rows(opposite_store)
    base = opposite_store["layers"][opposite_store["layers"]["sweep"] == "baseline"]
    trace = base.groupby(["init", "depth", "layer", "epoch"])["pr_q_minus_pr_k"].mean().reset_index()
    slopes = trace.groupby(["init", "depth", "layer"]).apply(
        lambda g: np.polyfit(g["epoch"], g["pr_q_minus_pr_k"], 1)[0], include_groups=False)
    frac = float((slopes > 0).mean())
    exp = expected_slope_counts()["pooled"]["pr_q_minus_pr_k"]
    assert frac == pytest.approx(exp["positive"] / exp["n"])  # 53/54: one inverted cell planted
    row = rows["slopes.pr_q_minus_pr_k"]
    assert row["value"] == pytest.approx(frac)
    assert row["verdict"] == "reproduced" and row["ci_low"] > 0.5


def test_missing_sections_are_not_measured_with_a_reason():
    tb = make_synthetic_store(n_seeds=2, epochs=5, interventions=False, checkpoints=False)
    rows = _rows(tb, preset="demo")
    iv = [r for r in rows.values() if r["section"] == "interventions"]
    ck = [r for r in rows.values() if r["section"] == "checkpoints"]
    assert iv and ck
    for r in iv + ck:
        assert r["verdict"] == "not measured" and r["value"] is None and r["reason"], r["id"]
    assert "paper scale only" in rows["interventions.val_loss"]["reason"]
    assert rows["alignment.contrast"]["verdict"] != "not measured"


def test_two_seeds_interval_is_the_range_of_the_seeds():
    """With 2 seeds the percentile interval spans the two seeds' own statistics."""
    tb = make_synthetic_store(n_seeds=2, epochs=5, preset="demo", interventions=False, checkpoints=False)
    rows = _rows(tb, preset="demo")
    lay = tb["layers"]
    fin = lay[lay["epoch"] == lay["epoch"].max()]
    run = fin.groupby(["seed", "init", "depth"])["qk_alignment"].mean().groupby(["seed", "init"]).mean()
    per_seed = run.xs("qk_identical", level="init") - (
        run.xs("independent_xavier", level="init") + run.xs("disjoint_support_xavier", level="init")) / 2
    row = rows["alignment.contrast"]
    assert row["n"] == 2 and "2 seeds" in row["reason"]
    assert row["value"] == pytest.approx(per_seed.mean())
    assert row["ci_low"] == pytest.approx(per_seed.min()) and row["ci_high"] == pytest.approx(per_seed.max())
    assert row["verdict"] == ("reproduced" if per_seed.min() > 0 else "direction only")
    assert rows["alignment.final.qk_identical"]["within_paper_spread"] is None  # not a paper store


def test_paper_store_checks_the_paper_spread():
    rows = _rows(make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5))
    # planted coupled final 0.25 + 0.03·depth ≈ 0.43 (inside 0.453 ± 0.095); uncoupled 0.19 / 0.20
    for init in ("qk_identical", "independent_xavier", "disjoint_support_xavier"):
        assert rows[f"alignment.final.{init}"]["within_paper_spread"] is True, init


# ----------------------------------------------------------------------------
# presets are never pooled
# ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_presets(tmp_path_factory):
    a = make_synthetic_store(n_seeds=2, epochs=4, iv_epochs=3, iv_seeds=(7, 37), preset="demo",
                             checkpoints=False, rng_seed=1)
    b = make_synthetic_store(n_seeds=3, epochs=6, depths=(4, 8), iv_epochs=3, preset="paper",
                             checkpoints=False, rng_seed=2)
    tb = {k: pd.concat([a[k], b[k]], ignore_index=True) for k in a}
    root = tmp_path_factory.mktemp("store")
    write_store(tb, root)
    return root, tb


def test_default_report_keeps_presets_apart(two_presets, tmp_path, capsys):
    root, tb = two_presets
    out = tmp_path / "out"
    assert report.main(["--store", str(root), "--out", str(out), "--no-figures"]) == 0
    printed = capsys.readouterr().out
    s = json.loads((out / "stats.json").read_text())
    assert s["presets"] == ["demo", "paper"]
    runs = {p: tb["layers"].loc[tb["layers"]["preset"] == p] for p in s["presets"]}
    for p, lay in runs.items():
        one = s["by_preset"][p]
        base = lay[lay["sweep"] == "baseline"]
        per_init = base.groupby("init")["run_id"].nunique()
        for init, d in one["alignment"]["final"].items():
            assert d["n"] == per_init[init], (p, init)  # n counts this preset's runs only
        assert one["provenance"]["presets"] == [p]
        assert one["slopes"]["pooled"]["pr_k"]["n"] == base.groupby(["init", "depth", "layer"]).ngroups
        iv = lay[(lay["sweep"] == "interventions") & (lay["intervention"] == "freeze_k")]
        assert one["interventions"]["freeze_k"]["n_seeds"] == iv["run_id"].nunique()
        card = [r for r in s["scorecard"] if r["preset"] == p]
        assert card and {r["n"] for r in card if r["section"] == "alignment" and r["n"]} == {
            base["seed"].nunique()}
        assert (out / "presets" / p / "stats.json").exists()
        assert f"reproduction scorecard, preset {p}" in printed
    md = (out / "report.md").read_text()
    assert md.index("## Reproduction scorecard — preset `demo`") < md.index("## Preset `demo`")
    assert "## Preset `paper`" in md and "presets/paper/tables/" in md
    assert "demo preset: lr 1e-3" in md  # the registry's note of the demo preset


def test_absent_preset_is_a_clear_error(two_presets, tmp_path, capsys):
    root, _ = two_presets
    with pytest.raises(SystemExit) as exit_:  # sweep.cli.CliExit: one line, exit status 2
        report.main(["--store", str(root), "--out", str(tmp_path / "o"), "--no-figures",
                     "--preset", "nosuch"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2
    assert len(err) == 1 and "nosuch" in err[0] and "demo, paper" in err[0]
    assert not (tmp_path / "o" / "stats.json").exists()


def test_one_preset_is_reported_alone(two_presets, tmp_path):
    root, tb = two_presets
    out = tmp_path / "o"
    assert report.main(["--store", str(root), "--out", str(out), "--no-figures", "--preset", "demo"]) == 0
    s = json.loads((out / "stats.json").read_text())
    assert s["presets"] == ["demo"] and {r["preset"] for r in s["scorecard"]} == {"demo"}
    assert s["provenance"]["sweeps"]["baseline"]["n_runs"] == 18  # 3 inits x 3 depths x 2 seeds


# ----------------------------------------------------------------------------
# nothing skipped silently
# ----------------------------------------------------------------------------


def test_truncated_file_is_listed_and_marks_its_sections(tmp_path, capsys):
    tb = make_synthetic_store(n_seeds=2, epochs=4, iv_epochs=3, checkpoints=False)
    root = tmp_path / "store"
    write_store(tb, root)
    victim = sorted((root / "layers").glob("baseline.*/epoch-0000.parquet"))[0]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="unreadable"):
        assert report.main(["--store", str(root), "--out", str(out), "--no-figures"]) == 0
    s = json.loads((out / "stats.json").read_text())
    assert [Path(f["path"]).resolve() for f in s["skipped_files"]] == [victim.resolve()]
    f = s["skipped_files"][0]
    assert f["table"] == "layers" and f["sweep"] == "baseline" and f["preset"] == "paper"
    md = (out / "report.md").read_text()
    assert "## Skipped store files" in md and str(victim.name) in md and victim.parent.name in md
    marked = {r["section"] for r in s["scorecard"] if r["skipped_files"]}
    assert marked == {"alignment", "slopes", "layer_categories", "bridge"}
    assert "unreadable store file(s) skipped" in capsys.readouterr().out


def test_runs_ending_early_are_listed_not_used_as_final():
    tb = make_synthetic_store(n_seeds=2, epochs=5, interventions=False, checkpoints=False)
    rid = tb["layers"]["run_id"].iloc[0]
    for t in ("layers", "epochs"):
        df = tb[t]
        tb[t] = df[~((df["run_id"] == rid) & (df["epoch"] == 5))]
    s = compute_all(tb).stats
    assert "last epoch 4" in s["provenance"]["excluded_runs"][rid]
    assert sum(d["n"] for d in s["alignment"]["final"].values()) == 18 - 1
    assert s["provenance"]["sweeps"]["baseline"]["final_epoch"] == {"min": 5, "max": 5}
