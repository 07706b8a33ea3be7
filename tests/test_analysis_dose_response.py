"""analysis/dose_response.py (SPEC §5, §8): on a synthetic store with planted responses — one
monotone in the predicted direction, one flat, one monotone the wrong way — the Spearman ρ, each
seed's slope of Δ on strength, their t interval and p, and the scorecard's verdicts are recomputed
here by hand (pandas, scipy.stats.spearmanr, numpy.polyfit, Student's t from scipy.special) and
compared; Table 5 keeps only the default-strength runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import special
from scipy import stats as sps

from analysis.dose_response import compute_dose_response, spearman
from analysis.frames import at_default_strengths, run_strengths
from analysis.inference import REPRODUCED, REVERSED, UNDECIDED
from analysis.interventions import compute_interventions
from sweep.store.schema import run_id, strengths_json

SEEDS = (7, 37, 42, 105, 210)
STRENGTHS = (0.0, 0.02, 0.05, 0.1, 0.2)  # 0.05 is forced_k_contraction's default
COND = "forced_k_contraction"
FINAL = 3
#: planted Δ(strength) per metric; noise is added to every strength but 0 (λ = 0 is the none run)
PLANTED = {"attn_entropy": lambda s: -2.0 * s,  # predicted ↓: monotone the predicted way
           "logit_std": lambda s: 0.0 * s,      # predicted ↑: flat, noise only
           "qk_erank": lambda s: 3.0 * s}       # predicted ↓: monotone the other way
NOISE = {"attn_entropy": 0.005, "logit_std": 0.05, "qk_erank": 0.005}


def _rows(seed: int, cond: str, strength: float | None, values: dict[str, float], rng) -> list[dict]:
    swept = strength is not None and strength != 0.05
    ident = {"sweep": "interventions", "preset": "demo", "init": "independent_xavier", "depth": 2,
             "seed": seed, "condition": cond,
             "run_id": run_id("interventions", "demo", "independent_xavier", 2, seed, cond,
                              {"lam": strength} if swept else None),
             "strengths": strengths_json({"lam": strength} if strength is not None else {})}
    rows = []
    for epoch in (0, FINAL):
        for layer, offset in ((0, -0.1), (1, 0.1)):  # layer-mean = the planted value
            m = {k: (v + offset if epoch == FINAL else 9.0 + rng.normal()) for k, v in values.items()}
            rows.append({**ident, "epoch": epoch, "layer": layer, "pr_k": 5.0, **m})
    return rows


@pytest.fixture(scope="module")
def planted() -> pd.DataFrame:
    rng = np.random.default_rng(2026)
    rows = []
    for seed in SEEDS:
        base = {"attn_entropy": 2.0 + rng.normal(0, 0.1), "logit_std": 5.0 + rng.normal(0, 0.1),
                "qk_erank": 6.0 + rng.normal(0, 0.1)}
        rows += _rows(seed, "none", None, base, rng)
        for s in STRENGTHS:
            vals = {k: base[k] + PLANTED[k](s) + (rng.normal(0, NOISE[k]) if s else 0.0) for k in base}
            rows += _rows(seed, COND, s, vals, rng)
    return pd.DataFrame(rows)


def by_hand(layers: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Δ per (seed, strength), computed without the module: final layer-mean minus the none run's."""
    final = layers[layers["epoch"] == layers.groupby("run_id")["epoch"].transform("max")]
    per_run = final.groupby(["run_id", "condition", "seed", "strengths"])[metric].mean().reset_index()
    none = per_run[per_run["condition"] == "none"].set_index("seed")[metric]
    cond = per_run[per_run["condition"] == COND].copy()
    cond["strength"] = [json.loads(s)["lam"] for s in cond["strengths"]]
    cond["delta"] = cond[metric] - cond["seed"].map(none)
    return cond[["seed", "strength", "delta"]]


def slopes_by_hand(d: pd.DataFrame) -> tuple[np.ndarray, float, float, float]:
    """Each seed's OLS slope of Δ on strength; their mean's 95 % t interval and two-sided p."""
    s = np.array([np.polyfit(g["strength"], g["delta"], 1)[0] for _, g in d.groupby("seed")])
    n, mean, sd = s.size, s.mean(), s.std(ddof=1)
    half = special.stdtrit(n - 1, 0.975) * sd / math.sqrt(n)
    return s, mean - half, mean + half, 2 * special.stdtr(n - 1, -abs(mean / (sd / math.sqrt(n))))


def test_planted_responses_recomputed_by_hand(planted) -> None:
    done = compute_dose_response(planted)
    assert set(done.frames) == {"dose_response_deltas"} and len(done.frames["dose_response_deltas"]) == 25
    (c,) = done.result.conditions
    assert (c.condition, c.field, c.default, c.init, c.strengths) == (COND, "lam", 0.05, "independent_xavier",
                                                                       STRENGTHS)
    assert c.n_runs == len(SEEDS) * len(STRENGTHS)
    got = {m.metric: m for m in c.metrics}
    assert list(got) == ["attn_entropy", "logit_std", "qk_erank"]  # the condition's predicted metrics
    for metric, m in got.items():
        d = by_hand(planted, metric)
        rho = sps.spearmanr(d["strength"], d["delta"]).statistic
        assert m.rho == pytest.approx(rho, abs=1e-12) and m.n_pairs == len(d) and m.n_seeds == len(SEEDS)
        s, lo, hi, p = slopes_by_hand(d)
        assert m.seed_slopes == pytest.approx(tuple(s), rel=1e-9) and m.slope == pytest.approx(s.mean(), rel=1e-9)
        assert (m.ci_low, m.ci_high, m.p_seeds) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9),
                                                    pytest.approx(p, rel=1e-9))
        assert m.predicted == {"attn_entropy": -1, "logit_std": +1, "qk_erank": -1}[metric]
        for pt in m.points:  # seed mean and band per strength
            v = d.loc[d["strength"] == pt.strength, "delta"]
            assert (pt.mean, pt.low, pt.high, pt.n) == pytest.approx((v.mean(), v.min(), v.max(), len(v)))
            assert pt.sd == pytest.approx(v.std(ddof=1))
    assert got["attn_entropy"].rho < -0.9 and got["attn_entropy"].ci_high < 0
    assert got["logit_std"].ci_low < 0 < got["logit_std"].ci_high  # flat: the interval holds 0
    assert got["qk_erank"].ci_low > 0  # monotone the other way
    zero = got["attn_entropy"].points[0]
    assert (zero.strength, zero.mean, zero.low, zero.high) == (0.0, 0.0, 0.0, 0.0)  # λ = 0: Δ = 0 exactly


def test_stats_json_entry(planted) -> None:
    entry = compute_dose_response(planted).result.to_json()["dose_response"][COND]
    assert entry["claim"] == "project's claim, not the paper's"
    assert entry["strengths"] == list(STRENGTHS) and entry["field"] == "lam"
    m = entry["metrics"]["attn_entropy"]
    assert m["expected"] == "< 0" and len(m["seed_slopes"]) == len(SEEDS) and len(m["points"]) == len(STRENGTHS)
    assert "verdict" not in m  # the verdict is the scorecard's (Holm over its family)
    json.dumps(entry, allow_nan=False)


def test_table5_keeps_the_default_strength_runs_only(planted) -> None:
    epochs = pd.DataFrame(columns=["sweep", "run_id", "preset", "init", "depth", "seed", "condition",
                                   "epoch", "val_loss", "status", "strengths"])
    fkc = compute_interventions(planted, epochs).result.conditions[COND]
    assert fkc.n_seeds == len(SEEDS) and fkc.n_pairs == len(SEEDS)
    kept = at_default_strengths(planted)
    assert set(kept.loc[kept["condition"] == COND, "strengths"]) == {'{"lam": 0.05}'}


def test_store_without_the_column_is_at_the_defaults(planted) -> None:
    old = planted[planted["run_id"].str.endswith((".none", f".{COND}"))].drop(columns="strengths")
    assert run_strengths(old.assign(strengths=None)).map(len).tolist() == [
        0 if c == "none" else 1 for c in old["condition"]]
    assert len(at_default_strengths(old)) == len(old)
    done = compute_dose_response(old)
    assert done.result is None and done.missing == {}  # nothing swept: nothing to say


def test_spearman_undefined_cases() -> None:
    assert spearman(np.array([0.0, 1.0]), np.array([1.0, 2.0])) == (None, None, 2)
    assert spearman(np.array([0.0, 1.0, 2.0]), np.array([1.0, 1.0, 1.0]))[0] is None
    rho, _, n = spearman(np.array([0.0, 1.0, 2.0, np.nan]), np.array([3.0, 2.0, 1.0, 0.0]))
    assert (rho, n) == (-1.0, 3)


def test_section_reaches_the_report(planted, tmp_path) -> None:
    """Registered as a built-in section: stats.json, report.md (heading, sentences, both tables,
    the figure), tables/, figures/ and one scorecard row per predicted metric, labelled as ours."""
    from sweep import report

    runs = planted.drop_duplicates(["run_id", "epoch"])
    epochs = runs[[c for c in runs.columns if c not in ("layer", *PLANTED, "pr_k")]].assign(
        train_loss=1.0, val_loss=1.5, grad_norm=0.5, wall_s=1.0, tokens_per_s=1e5, tokens_seen=0,
        status=np.where(runs["epoch"] == FINAL, "completed", "running"), schema_version=1)
    report.build_report({"layers": planted, "epochs": epochs}, tmp_path)
    s = json.loads((tmp_path / "stats.json").read_text())
    rows = {r["id"]: r for r in s["scorecard"] if r["section"] == "dose_response"}
    assert set(rows) == {f"dose_response.{COND}.{m}" for m in PLANTED}
    row = rows[f"dose_response.{COND}.attn_entropy"]
    m = s["dose_response"][COND]["metrics"]["attn_entropy"]
    assert (row["value"], row["ci_low"], row["ci_high"], row["n"]) == pytest.approx((m["slope"], m["ci_low"], m["ci_high"], 5))
    assert row["verdict"] == REPRODUCED and "not the paper's" in row["claim"] and row["expected"] == "< 0"
    assert rows[f"dose_response.{COND}.logit_std"]["verdict"] == UNDECIDED  # flat: not called monotone
    assert rows[f"dose_response.{COND}.qk_erank"]["verdict"] == REVERSED  # false, and the verdict says so
    md = (tmp_path / "report.md").read_text()
    assert "## Dose–response (the project's claim, not the paper's)" in md
    assert "](figures/fig_dose_response.png)" in md and (tmp_path / "figures" / "fig_dose_response.png").exists()
    for name in ("dose_response", "dose_response_points"):
        assert (tmp_path / "tables" / f"{name}.csv").exists()
    pts = pd.read_csv(tmp_path / "tables" / "dose_response_points.csv")
    assert len(pts) == len(PLANTED) * len(STRENGTHS) and pts["default"].sum() == len(PLANTED)
    assert s["interventions"][COND]["n_seeds"] == len(SEEDS)  # Table 5: the default strength only


def test_section_without_a_sweep_is_left_out(tmp_path) -> None:
    """Optional: a store without a strength sweep gets no heading, no "No data", no missing entry."""
    from sweep import report
    from sweep.synthetic import make_synthetic_store

    report.build_report(make_synthetic_store(baseline=False, checkpoints=False, iv_epochs=3), tmp_path,
                        figures=False)
    s = json.loads((tmp_path / "stats.json").read_text())
    assert s["dose_response"] is None and not any(k.startswith("dose_response") for k in s["missing"])
    assert not any(r["section"] == "dose_response" for r in s["scorecard"])
    assert "Dose–response" not in (tmp_path / "report.md").read_text()


def test_a_sweep_that_cannot_be_analysed_says_why(planted) -> None:
    """Swept, but no matched none run: the section is shown, with the reason."""
    done = compute_dose_response(planted[planted["condition"] != "none"])
    assert done.result is None and "no forced_k_contraction run has a matched none run" in done.missing["dose_response"]
