"""analysis/scorecard.py: verdicts and intervals of the reproduction scorecard.

Every expected value here is recomputed from the raw synthetic tables with
plain pandas/numpy (and, for intervals, ``scipy.stats.bootstrap`` on the
per-seed values), not through ``analysis``.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
from scipy import stats as sps

from analysis import scorecard as sc
from analysis.compute import compute_all
from sweep.synthetic import (
    Planted,
    expected_slope_counts,
    make_synthetic_store,
)
from sweep.synthetic.planted import _default_effects


def _rows(tb: dict, preset: str = "paper") -> dict[str, dict]:
    an = compute_all(tb)
    return {r.id: asdict(r) for r in sc.build_scorecard(an, preset, paper_scale=preset == "paper")}


def _hand_deltas(tb: dict, cond: str, metric: str) -> np.ndarray:
    """Per seed: final layer-mean of ``metric`` of ``cond`` minus that of ``none`` (raw rows)."""
    lay = tb["layers"][tb["layers"]["sweep"] == "interventions"]
    last = lay[lay["epoch"] == lay["epoch"].max()]
    means = last.groupby(["condition", "seed"])[metric].mean()
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
    assert row["n"] == 2 and "2 seeds" not in (row["reason"] or "")  # said once, above the table
    assert row["value"] == pytest.approx(per_seed.mean())
    assert row["ci_low"] == pytest.approx(per_seed.min()) and row["ci_high"] == pytest.approx(per_seed.max())
    assert row["verdict"] == ("reproduced" if per_seed.min() > 0 else "direction only")
    assert rows["alignment.final.qk_identical"]["within_paper_spread"] is None  # not a paper store


def test_paper_store_checks_the_paper_spread():
    rows = _rows(make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5))
    # planted coupled final 0.25 + 0.03·depth ≈ 0.43 (inside 0.453 ± 0.095); uncoupled 0.19 / 0.20
    for init in ("qk_identical", "independent_xavier", "disjoint_support_xavier"):
        assert rows[f"alignment.final.{init}"]["within_paper_spread"] is True, init


# --- what each row measured, said once and in the same units -------------------------


def test_local_checkpoint_series_leave_the_public_series_claims_not_measured():
    tb = make_synthetic_store(n_seeds=2, epochs=5, preset="demo", interventions=False)
    public = _rows(tb, preset="demo")
    assert public["checkpoints.positive"]["verdict"] != "not measured"  # Hub repos: measured
    tb["checkpoints"] = tb["checkpoints"].assign(repo=None)  # a manifest `path`, like the demo's tiny series
    local = _rows(tb, preset="demo")
    for cid in ("checkpoints.positive", "checkpoints.link"):
        assert local[cid]["verdict"] == "not measured" and local[cid]["value"] is None
        assert "local checkpoints, not the paper's public series" in local[cid]["reason"]
    from analysis.checkpoints import sentence

    c = compute_all(tb).results["checkpoints"]
    assert not any(s.public for s in c.series.values())
    assert sentence(c).startswith("Probed: ") and "local files" in sentence(c)


def test_every_row_names_its_quantity_and_the_paper_states_the_same_one():
    from analysis.claims import KINDS

    rows = _rows(make_synthetic_store(n_seeds=3, epochs=9, iv_epochs=5))
    for r in rows.values():
        assert r["kind"].split(":")[0].split()[0] in KINDS, (r["id"], r["kind"])
    iv = rows["interventions.forced_k_contraction.attn_entropy"]
    assert iv["kind"].startswith("change") and iv["paper"].startswith("Δ < 0, sign only")
    assert "2.0809" in iv["paper"] and "not the Δ" in iv["paper"]
    fin = rows["alignment.final.qk_identical"]
    assert fin["kind"].startswith("change") and fin["paper"].startswith("-0.5470")


def test_units_and_the_legend_above_the_table():
    assert [sc.units(1, "seeds"), sc.units(2, "seeds"), sc.units(1, "series"), sc.units(3, "series")] == [
        "1 seed", "2 seeds", "1 series", "3 series"]
    rows = list(_rows(make_synthetic_store(n_seeds=2, epochs=5, preset="demo", interventions=False),
                      preset="demo").values())
    md = sc.render_markdown(rows, paper_scale=False)
    table = next(i for i, line in enumerate(md) if line.startswith("| claim"))
    assert md.index(sc.LEGEND) < table and md.index(sc.TWO_SEEDS) < table
    assert "\n".join(md).count("two seeds' own values") == 1 and "serie " not in "\n".join(md)
    three = list(_rows(make_synthetic_store(n_seeds=3, epochs=5, preset="demo", interventions=False),
                       preset="demo").values())
    assert sc.TWO_SEEDS not in sc.render_markdown(three, paper_scale=False)
