"""analysis/slopes.py: OLS slopes per run and per seed-averaged trace, against scipy's linregress and the planted counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis.primitives import SlopeCount
from analysis.slopes import SLOPE_METRICS, SlopesResult, run_slopes, table4_slopes, trace_slopes
from sweep.synthetic import (
    expected_slope_counts,
)

# ----------------------------------------------------------------------------
# slopes
# ----------------------------------------------------------------------------


def test_group_slopes_equal_linregress_per_trajectory(small):
    layers = small["layers"].copy()
    # knock out a few values: the fit must skip them for that metric only
    layers.loc[layers.index[[5, 77, 300]], "pr_k"] = np.nan
    base = layers[layers["sweep"] == "baseline"]
    got = run_slopes(base, ["pr_q", "pr_k"]).set_index(["run_id", "layer"])
    assert len(got) == base.groupby(["run_id", "layer"]).ngroups
    checked = 0
    for (rid, layer), g in base.groupby(["run_id", "layer"]):
        for m in ("pr_q", "pr_k"):
            ok = g[m].notna()
            ref = sps.linregress(g.loc[ok, "epoch"].astype(float), g.loc[ok, m])
            assert got.loc[(rid, layer), f"{m}_slope"] == pytest.approx(
                ref.slope, rel=1e-9, abs=1e-12
            )
            assert got.loc[(rid, layer), f"{m}_mean"] == pytest.approx(
                g.loc[ok, m].mean(), rel=1e-12
            )
            checked += 1
    assert checked == 2 * 3 * 3 * (4 + 6 + 8)


def test_seed_averaged_trace_slopes_equal_linregress(small):
    base = small["layers"][small["layers"]["sweep"] == "baseline"]
    got = trace_slopes(base, ["pr_q_minus_pr_k"]).set_index(["init", "depth", "layer"])
    assert len(got) == 3 * (4 + 6 + 8)
    for (init, depth, layer), g in base.groupby(["init", "depth", "layer"]):
        # independent seed average: a numpy array per seed, stacked
        per_seed = [
            s.sort_values("epoch")["pr_q_minus_pr_k"].to_numpy() for _, s in g.groupby("seed")
        ]
        mean_trace = np.mean(np.vstack(per_seed), axis=0)
        ref = sps.linregress(np.arange(mean_trace.size), mean_trace)
        assert got.loc[(init, depth, layer), "pr_q_minus_pr_k_slope"] == pytest.approx(
            ref.slope, rel=1e-9
        )
        assert got.loc[(init, depth, layer), "n_seeds"] == 3


def test_slope_counts_equal_planted(paper_analysis):
    exp = expected_slope_counts()
    # the planted helper itself: 54 traces, 3 coupled pr_k reversals, 1 inverted uncoupled cell
    assert exp["pooled"]["pr_k"] == {"positive": 3, "negative": 51, "n": 54}
    assert exp["pooled"]["pr_q_minus_pr_k"] == {"positive": 53, "negative": 1, "n": 54}
    assert exp["uncoupled"]["pr_q"] == {"positive": 35, "negative": 1, "n": 36}
    got = paper_analysis.stats["slopes"]
    for group in ("uncoupled", "coupled", "pooled"):
        for m in SLOPE_METRICS:
            for key in ("positive", "negative", "n"):
                assert got[group][m][key] == exp[group][m][key], (group, m, key)
    assert (paper_analysis.frames["trace_slopes"]["n_seeds"] == 4).all()
    # per-run counts cover 4x as many trajectories
    assert paper_analysis.stats["slopes_per_run"]["pooled"]["pr_k"]["n"] == 216


def test_slope_summary_mean_sd(paper_analysis):
    ts = paper_analysis.frames["trace_slopes"]
    v = ts.loc[ts["init"] == "qk_identical", "pr_k_slope"].to_numpy()
    d = paper_analysis.stats["slopes"]["coupled"]["pr_k"]
    assert d["mean"] == pytest.approx(np.mean(v))
    assert d["sd"] == pytest.approx(np.std(v, ddof=1))


def test_table4_slopes_has_one_row_per_group_and_metric() -> None:
    res = SlopesResult({
        "uncoupled": {"pr_k_slope": SlopeCount(-0.5, 0.1, 4, 0, 4)},
        "coupled": {"pr_k_slope": SlopeCount(0.25, 0.05, 2, 2, 0), "pr_q_slope": SlopeCount(0.0, 0.0, 2, 0, 0)}},
        per_run={})
    df = table4_slopes(res).drop(columns=["post_collapse_mean", "post_collapse_positive", "post_collapse_negative"])
    expected = pd.DataFrame([
        {"group": "uncoupled", "metric": "pr_k_slope", "mean": -0.5, "sd": 0.1, "n": 4, "positive": 0, "negative": 4},
        {"group": "coupled", "metric": "pr_k_slope", "mean": 0.25, "sd": 0.05, "n": 2, "positive": 2, "negative": 0},
        {"group": "coupled", "metric": "pr_q_slope", "mean": 0.0, "sd": 0.0, "n": 2, "positive": 0, "negative": 0}])
    pd.testing.assert_frame_equal(df, expected)
    none_fitted = SlopesResult({"pooled": {"pr_k_slope": SlopeCount(None, None, 0, 0, 0)}}, per_run={})
    assert table4_slopes(none_fitted) is None
