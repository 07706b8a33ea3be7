"""analysis/alignment.py: Table 3's Welch test, Hedges' g and gap, against scipy on hand layer means."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from analysis import vocabulary as vocab

# ----------------------------------------------------------------------------
# alignment (Table 3)
# ----------------------------------------------------------------------------


def _hand_layer_means(layers: pd.DataFrame, when: str) -> dict[str, tuple[str, int, float]]:
    out = {}
    for rid in layers["run_id"].unique():
        g = layers[layers["run_id"] == rid]
        e = g["epoch"].max() if when == "final" else g["epoch"].min()
        rows = g[g["epoch"] == e]
        out[rid] = (
            rows["init"].iloc[0],
            int(rows["depth"].iloc[0]),
            float(np.mean(rows["qk_alignment"].to_numpy())),
        )
    return out


def test_alignment_welch_hedges_gap(paper_grid, paper_analysis):
    base = paper_grid["layers"][paper_grid["layers"]["sweep"] == "baseline"]
    lm = _hand_layer_means(base, "final")
    coupled = [v for i, d, v in lm.values() if i == "qk_identical"]
    unc = [v for i, d, v in lm.values() if i != "qk_identical"]
    a = paper_analysis.stats["alignment"]
    ref = sps.ttest_ind(coupled, unc, equal_var=False)
    assert a["welch_t"] == pytest.approx(ref.statistic, rel=1e-10)
    assert a["welch_p"] == pytest.approx(ref.pvalue, rel=1e-8)
    n1, n2 = len(coupled), len(unc)
    sp = math.sqrt(
        ((n1 - 1) * np.var(coupled, ddof=1) + (n2 - 1) * np.var(unc, ddof=1)) / (n1 + n2 - 2)
    )
    g = (np.mean(coupled) - np.mean(unc)) / sp * (1 - 3 / (4 * (n1 + n2) - 9))
    assert a["hedges_g"] == pytest.approx(g, rel=1e-10)
    assert a["final"]["qk_identical"]["mean"] == pytest.approx(np.mean(coupled))
    assert a["final"]["qk_identical"]["sd"] == pytest.approx(np.std(coupled, ddof=1))
    assert a["final"]["qk_identical"]["n"] == 12
    assert a["initial"]["qk_identical"]["mean"] == pytest.approx(1.0)
    assert a["initial"]["disjoint_support_xavier"]["mean"] == pytest.approx(0.0)
    assert a["final_epoch"] == {"min": 45, "max": 45}
    for depth in (4, 6, 8):
        means = {
            init: np.mean([v for i, d, v in lm.values() if i == init and d == depth])
            for init in vocab.inits()
        }
        gap = means["qk_identical"] - max(
            means["independent_xavier"], means["disjoint_support_xavier"]
        )
        assert a["gap_by_depth"][str(depth)] == pytest.approx(gap)
    # planted: the gap grows with depth and p is tiny
    gaps = [a["gap_by_depth"][d] for d in ("4", "6", "8")]
    assert gaps[0] < gaps[2]
    assert a["welch_p"] < 1e-6
