"""SPEC §8 layer categories: early / mid / late layers' final geometry."""

from __future__ import annotations

import pandas as pd

from analysis.frames import baseline, final_rows, layer_category
from analysis.primitives import Section, num

CATEGORY_METRICS: tuple[str, ...] = ("attn_entropy", "attn_top1", "qk_erank", "pr_q")
CATEGORIES: tuple[str, ...] = ("early", "mid", "late")


def layer_categories_section(layers: pd.DataFrame) -> Section:
    """Mean final attn_entropy, attn_top1, qk_erank, pr_q per layer category (baseline runs).

    The mean is over all final (run, layer) rows of the category; ``by_depth``
    repeats it per depth, with the k used.
    """
    fin = final_rows(baseline(layers))
    if fin.empty:
        return Section({}, {"layer_categories": "no baseline runs in the store"})
    fin = fin.assign(category=layer_category(fin["layer"], fin["depth"]))
    g = fin.groupby("category")[list(CATEGORY_METRICS)]
    means, counts = g.mean(), g.size()
    overall = {}
    for c in CATEGORIES:
        if c in means.index:
            overall[c] = {m: num(means.loc[c, m]) for m in CATEGORY_METRICS}
            overall[c]["n"] = int(counts.loc[c])
    gd = fin.groupby(["depth", "category"])[list(CATEGORY_METRICS)]
    dmeans, dcounts = gd.mean(), gd.size()
    by_depth: dict = {}
    for d in sorted(fin["depth"].unique()):
        entry: dict = {"k": int(round(int(d) / 3))}
        for c in CATEGORIES:
            if (d, c) in dmeans.index:
                entry[c] = {m: num(dmeans.loc[(d, c), m]) for m in CATEGORY_METRICS}
                entry[c]["n"] = int(dcounts.loc[(d, c)])
        by_depth[str(int(d))] = entry
    missing = {}
    absent = [c for c in CATEGORIES if c not in overall]
    if absent:
        missing["layer_categories." + "/".join(absent)] = (
            "no layers fall in this category at the depths present"
        )
    return Section(
        {"layer_categories": overall, "layer_categories_by_depth": by_depth},
        missing,
        {"final_layers": fin},
    )
