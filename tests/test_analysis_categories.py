"""analysis/categories.py: early / mid / late layer means, recomputed by hand."""

from __future__ import annotations

import pytest

from analysis.categories import CATEGORY_METRICS


def test_layer_category_means_by_hand(paper_grid, paper_analysis):
    base = paper_grid["layers"][paper_grid["layers"]["sweep"] == "baseline"]
    fin = base[base["epoch"] == 45]
    k = {4: 1, 6: 2, 8: 3}
    cat = []
    for layer, depth in zip(fin["layer"], fin["depth"], strict=True):
        cat.append("early" if layer < k[depth] else "late" if layer >= depth - k[depth] else "mid")
    fin = fin.assign(cat=cat)
    lc = paper_analysis.stats["layer_categories"]
    for c in ("early", "mid", "late"):
        sub = fin[fin["cat"] == c]
        assert lc[c]["n"] == len(sub)
        for m in CATEGORY_METRICS:
            assert lc[c][m] == pytest.approx(sub[m].mean())
    assert lc["mid"]["n"] == 12 * (2 + 2 + 2)  # 3 inits x 4 seeds, 2 mid layers at every depth
    by = paper_analysis.stats["layer_categories_by_depth"]
    assert [by[d]["k"] for d in ("4", "6", "8")] == [1, 2, 3]
    # planted: mid layers are the attention bottleneck
    assert lc["mid"]["attn_entropy"] < min(lc["early"]["attn_entropy"], lc["late"]["attn_entropy"])
