"""analysis/layer_metrics.py: every vocabulary per-layer metric's final means, by hand on a small frame."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.layer_metrics import SECTION, layer_metrics_table
from analysis.section import Inputs
from metrics.columns import LAYER_METRICS
from sweep.store.schema import run_id


def frame() -> pd.DataFrame:
    """Two inits × two seeds, depth 2, epochs 0 and 3; at the final epoch every float metric is
    ``10·seed + layer`` (+ 100 for qk_identical), the per-head alignment [seed, 2·seed]."""
    rows = []
    for init in ("qk_identical", "independent_xavier"):
        for seed in (1, 2):
            rid = run_id("baseline", "tiny", init, 2, seed, "none")
            for epoch in (0, 3):
                for layer in (0, 1):
                    v = 10.0 * seed + layer + (100 if init == "qk_identical" else 0) + (epoch == 0) * 1000
                    rows.append({"sweep": "baseline", "run_id": rid, "preset": "tiny", "init": init, "depth": 2,
                                 "seed": seed, "intervention": "none", "epoch": epoch, "layer": layer,
                                 **dict.fromkeys(LAYER_METRICS, v), "qk_alignment_head": [seed, 2.0 * seed]})
    rows.append({**rows[0], "sweep": "interventions", "run_id": "other", "epoch": 3})  # not baseline
    return pd.DataFrame(rows)


def test_final_means_per_init_layer_and_head() -> None:
    r = SECTION.compute(Inputs(frame(), pd.DataFrame(), pd.DataFrame())).result
    assert r.final_epoch == {"min": 3, "max": 3}
    assert list(r.by_init) == ["independent_xavier", "qk_identical"]  # the registry's order
    s = r.by_init["qk_identical"]["attn_entropy"]  # layer-means 110.5 and 120.5
    assert (s.mean, s.n) == (115.5, 2) and s.sd == pytest.approx(math.sqrt(50))
    assert set(r.by_init["qk_identical"]) == set(LAYER_METRICS)
    assert r.by_layer["independent_xavier"]["2"]["1"] == {"n_runs": 2, **dict.fromkeys(LAYER_METRICS, 16.0)}
    assert r.by_head == {i: {"qk_alignment_head": [1.5, 3.0]} for i in ("independent_xavier", "qk_identical")}
    table = layer_metrics_table(r)
    assert table[["init", "depth", "layer"]].values.tolist() == [
        ["independent_xavier", 2, 0], ["independent_xavier", 2, 1], ["qk_identical", 2, 0], ["qk_identical", 2, 1]]
    assert table["pr_q"].tolist() == [15.0, 16.0, 115.0, 116.0]


def test_a_column_missing_or_null_in_older_stores() -> None:
    df = frame().drop(columns=["wk_norm", "qk_alignment_head"])
    df["wq_norm"] = np.nan
    r = SECTION.compute(Inputs(df, pd.DataFrame(), pd.DataFrame())).result
    assert "wk_norm" not in r.by_init["qk_identical"] and r.by_head == {}
    assert r.by_init["qk_identical"]["wq_norm"].n == 0 and r.by_init["qk_identical"]["wq_norm"].mean is None
    assert r.by_layer["qk_identical"]["2"]["0"]["wq_norm"] is None


def test_no_baseline_runs_gives_a_reason() -> None:
    done = SECTION.compute(Inputs(frame().iloc[:0], pd.DataFrame(), pd.DataFrame()))
    assert done.result is None and done.missing == {"layer_metrics": "no baseline runs in the store"}
