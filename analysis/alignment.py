"""SPEC §8 alignment (Table 3): initial/final Q/K alignment per init, Welch test, gap by depth."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from analysis import vocabulary as vocab
from analysis.frames import baseline, epoch_range, final_rows, ordered_inits, run_layer_means
from analysis.primitives import Section, describe, hedges_g, num, welch


def alignment_section(layers: pd.DataFrame) -> Section:
    """Table 3: initial/final layer-mean alignment per init, Welch test, Hedges' g, gap by depth."""
    base = baseline(layers)
    missing: dict[str, str] = {}
    if base.empty or base["qk_alignment"].notna().sum() == 0:
        return Section({}, {"alignment": "no baseline runs with qk_alignment in the store"})
    init_rows = run_layer_means(base, ["qk_alignment"], when="initial")
    fin_rows = run_layer_means(base, ["qk_alignment"], when="final")
    out: dict = {"initial": {}, "final": {}}
    for name, frame in (("initial", init_rows), ("final", fin_rows)):
        for init in ordered_inits(frame["init"]):
            out[name][init] = describe(frame.loc[frame["init"] == init, "qk_alignment"])
    out["initial_epoch"] = epoch_range(init_rows)
    out["final_epoch"] = epoch_range(fin_rows)

    cpl, uncpl = vocab.coupled_inits(), vocab.uncoupled_inits()
    coupled = fin_rows.loc[fin_rows["init"].isin(cpl), "qk_alignment"].to_numpy(float)
    unc = fin_rows.loc[fin_rows["init"].isin(uncpl), "qk_alignment"].to_numpy(float)
    t, p = welch(coupled, unc)
    out["welch_t"], out["welch_p"] = t, p
    out["hedges_g"] = hedges_g(coupled, unc)
    out["n_coupled"], out["n_uncoupled"] = (
        int(np.isfinite(coupled).sum()),
        int(np.isfinite(unc).sum()),
    )
    if t is None:
        missing["alignment.welch"] = (
            f"Welch test needs >= 2 final runs of {', '.join(cpl)} and >= 2 of the uncoupled inits "
            f"(have {out['n_coupled']} and {out['n_uncoupled']})"
        )

    gaps: dict[str, float | None] = {}
    by_depth_mean = fin_rows.groupby(["depth", "init"], observed=True)["qk_alignment"].mean()
    for depth in sorted(fin_rows["depth"].unique()):
        m = by_depth_mean.loc[depth]
        unc_means = [m[i] for i in uncpl if i in m.index and np.isfinite(m[i])]
        cpl_means = [m[i] for i in cpl if i in m.index]
        if cpl_means and unc_means:
            gaps[str(int(depth))] = num(max(cpl_means) - max(unc_means))
    out["gap_by_depth"] = gaps
    out["final_by_depth"] = {
        str(int(d)): {i: num(v) for i, v in by_depth_mean.loc[d].items()}
        for d in sorted(fin_rows["depth"].unique())
    }
    if not gaps:
        missing["alignment.gap_by_depth"] = f"no depth has both {', '.join(cpl)} and an uncoupled init"
    out["final_by_head"] = final_alignment_by_head(base)
    if not out["final_by_head"]:
        missing["alignment.per_head"] = "no qk_alignment_head values in the store (older schema)"
    return Section(
        {"alignment": out}, missing, {"alignment_initial": init_rows, "alignment_final": fin_rows}
    )


def final_alignment_by_head(base: pd.DataFrame) -> dict[str, list[float | None]]:
    """Per init: final alignment of each head h, the mean over the final (run, layer) rows.

    Reads the list column ``qk_alignment_head`` ([n_head] per row); rows without it
    are skipped, and an init whose rows disagree on n_head is left out.
    """
    if "qk_alignment_head" not in base:
        return {}
    fin = final_rows(base)
    fin = fin[fin["qk_alignment_head"].map(lambda v: v is not None and len(v) > 0)]
    out: dict[str, list[float | None]] = {}
    for init in ordered_inits(fin["init"]):
        vals = fin.loc[fin["init"] == init, "qk_alignment_head"]
        if vals.map(len).nunique() != 1:
            continue
        arr = np.array([np.asarray(v, float) for v in vals])  # (rows, n_head)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN head
            out[init] = [num(x) for x in np.nanmean(arr, axis=0)]
    return out
