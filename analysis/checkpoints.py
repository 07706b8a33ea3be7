"""SPEC §8 checkpoints (the paper's Appendix A): per-revision means and slopes per series."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.frames import group_slopes
from analysis.primitives import Section, num, pearson


def checkpoint_revision_means(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """Layer-means per (series, revision) of ok rows with ``progress`` in [0, 1].

    Progress is training tokens min–max scaled to [0, 1] within the series
    (SPEC §8): (tokens − min) / (max − min) over the series' ok revisions. A
    series without tokens on every revision uses steps the same way, and one
    with neither min–max scales the stored ``progress``. A series whose values
    are all equal (one revision) gets progress 1.
    """
    cols = ["series", "revision", "progress", "n_layers", "pr_q", "pr_k", "pr_q_minus_pr_k"]
    if checkpoints.empty:
        return pd.DataFrame(columns=cols)
    ck = checkpoints[(checkpoints["status"] == "ok") & checkpoints["layer"].notna()].copy()
    if ck.empty:
        return pd.DataFrame(columns=cols)
    diff = ck["pr_q"].astype(float) - ck["pr_k"].astype(float)
    ck["pr_q_minus_pr_k"] = ck["pr_q_minus_pr_k"].astype(float).fillna(diff)
    g = ck.groupby(["series", "revision"], sort=True)
    out = g[["pr_q", "pr_k", "pr_q_minus_pr_k"]].mean()
    out["n_layers"] = g.size()
    for c in ("progress", "tokens", "step"):
        out[c] = g[c].max().astype(float)
    out = out.reset_index()
    scaled = pd.Series(np.nan, index=out.index)
    for c in ("tokens", "step", "progress"):
        g = out.groupby("series")[c]
        lo, hi, complete = g.transform("min"), g.transform("max"), g.transform(lambda v: v.notna().all())
        use = scaled.isna() & complete.astype(bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            mm = ((out[c] - lo) / (hi - lo)).where(hi > lo, 1.0)
        scaled = scaled.where(~use, mm)
    out["progress"] = scaled
    return out.sort_values(["series", "progress"]).reset_index(drop=True)


def checkpoints_section(checkpoints: pd.DataFrame) -> Section:
    """Appendix A: per series slope of layer-mean pr_q − pr_k on progress and the link check.

    ``checkpoints -> {series: {name: {n_revisions, slope_pr_q_minus_pr_k, link_recurs,
    r_pr_k__qk_erank, r_qk_erank__attn_entropy}}, positive_series, n_fitted_series,
    link_recurs_series}``; slopes need >= 3 ok revisions (else null), and the two
    counts are over fitted series only. link_recurs: Pearson r > 0 for both
    (pr_k, qk_erank) and (qk_erank, attn_entropy) across layers x revisions.
    """
    revs = checkpoint_revision_means(checkpoints)
    if revs.empty:
        return Section({}, {"checkpoints": "no ok checkpoint rows in the store"})
    sl = group_slopes(revs, ["series"], ["pr_q_minus_pr_k"], x="progress").set_index("series")
    ck = checkpoints[(checkpoints["status"] == "ok") & checkpoints["layer"].notna()]
    series: dict = {}
    for name, sub in ck.groupby("series", sort=True):
        n_rev = int(sub["revision"].nunique())
        slope = num(sl.loc[name, "pr_q_minus_pr_k_slope"]) if n_rev >= 3 else None
        r1 = pearson(sub["pr_k"], sub["qk_erank"])
        r2 = pearson(sub["qk_erank"], sub["attn_entropy"])
        link = None
        if r1["r"] is not None and r2["r"] is not None:
            link = bool(r1["r"] > 0 and r2["r"] > 0)
        series[str(name)] = {
            "n_revisions": n_rev,
            "slope_pr_q_minus_pr_k": slope,
            "link_recurs": link,
            "r_pr_k__qk_erank": r1["r"],
            "r_qk_erank__attn_entropy": r2["r"],
            "n_rows": int(len(sub)),
        }
    fitted = [s for s in series.values() if s["slope_pr_q_minus_pr_k"] is not None]
    out = {
        "series": series,
        "positive_series": sum(s["slope_pr_q_minus_pr_k"] > 0 for s in fitted),
        "n_fitted_series": len(fitted),
        "link_recurs_series": sum(bool(s["link_recurs"]) for s in fitted),
    }
    failed = checkpoints[checkpoints["status"] == "failed"]
    if not failed.empty:
        out["failed_revisions"] = int(failed[["series", "revision"]].drop_duplicates().shape[0])
    dup = checkpoints[checkpoints["status"].astype(str).str.startswith("duplicate_of:")]
    if not dup.empty:  # same weights as another revision (sweep.integrity): not in the fits
        dup = dup.drop_duplicates(["series", "revision"])
        out["duplicate_revisions"] = {f"{r.series}@{r.revision}": r.status.split(":", 1)[1]
                                      for r in dup.itertuples()}
    missing = {}
    if not fitted:
        missing["checkpoints.slopes"] = "no checkpoint series has >= 3 ok revisions"
    return Section({"checkpoints": out}, missing, {"checkpoint_revisions": revs})
