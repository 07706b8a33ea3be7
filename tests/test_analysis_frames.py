"""analysis/frames.py: which rows count, group slopes and layer categories, on hand-built frames."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.compute import compute_all
from analysis.frames import at_default_strengths, group_slopes, layer_category, run_strengths
from sweep.synthetic import (
    make_synthetic_store,
)


def test_group_slopes_degenerate_groups_are_nan():
    df = pd.DataFrame(
        {
            "g": ["a", "a", "b", "c", "c", "c"],
            "epoch": [0, 1, 3, 2, 2, 2],
            "y": [1.0, 3.0, 5.0, 1.0, 2.0, 3.0],
        }
    )
    out = group_slopes(df, ["g"], ["y"]).set_index("g")
    assert out.loc["a", "y_slope"] == pytest.approx(2.0)
    assert math.isnan(out.loc["b", "y_slope"])  # one point
    assert math.isnan(out.loc["c", "y_slope"])  # constant x
    assert out.loc["c", "y_mean"] == pytest.approx(2.0)
    assert group_slopes(df.iloc[:0], ["g"], ["y"]).empty


# ----------------------------------------------------------------------------
# layer categories
# ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "depth,expected",
    [
        (4, ["early", "mid", "mid", "late"]),
        (6, ["early", "early", "mid", "mid", "late", "late"]),
        (8, ["early"] * 3 + ["mid"] * 2 + ["late"] * 3),
        (3, ["early", "mid", "late"]),
        (2, ["early", "late"]),
    ],
)
def test_layer_category_assignment(depth, expected):
    assert layer_category(np.arange(depth), np.full(depth, depth)).tolist() == expected


# ----------------------------------------------------------------------------
# whole-store behaviour
# ----------------------------------------------------------------------------


def test_diverged_runs_are_excluded(small):
    tb = {k: v.copy() for k, v in small.items()}
    rid = tb["epochs"].loc[tb["epochs"]["sweep"] == "baseline", "run_id"].iloc[0]
    tb["epochs"].loc[(tb["epochs"]["run_id"] == rid) & (tb["epochs"]["epoch"] == 9), "status"] = (
        "diverged"
    )
    s = compute_all(tb).stats
    assert rid in s["provenance"]["excluded_runs"]
    assert s["provenance"]["sweeps"]["baseline"]["n_runs"] == 27 - 1
    assert sum(v["n"] for v in s["alignment"]["final"].values()) == 26



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


def test_strengths_null_means_the_defaults_and_table5_keeps_the_default_cells():
    df = pd.DataFrame({
        "run_id": ["i.p.x.L2.s1.none", "i.p.x.L2.s1.forced_k_contraction", "i.p.x.L2.s1.forced_k_contraction.lam0",
                   "i.p.x.L2.s1.forced_k_contraction", "i.p.x.L2.s1.plugin_cond", "i.p.x.L2.s1.plugin_cond.mu2"],
        "condition": ["none", "forced_k_contraction", "forced_k_contraction", "forced_k_contraction",
                         "plugin_cond", "plugin_cond"],
        "strengths": ["{}", '{"lam": 0.05}', '{"lam": 0.0}', None, '{"mu": 1.0}', '{"mu": 2.0}'],
    })
    assert run_strengths(df).tolist() == [{}, {"lam": 0.05}, {"lam": 0.0}, {"lam": 0.05}, {"mu": 1.0}, {"mu": 2.0}]
    # registered: compared with the registry's defaults; unknown (a plugin not loaded): by run id
    assert at_default_strengths(df).index.tolist() == [0, 1, 3, 4]
    old = df.iloc[[0, 1]].assign(strengths=None)  # a store written before the column
    assert at_default_strengths(old).equals(old)
