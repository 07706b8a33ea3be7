"""SPEC §8 alignment (Table 3): initial/final Q/K alignment per init, Welch test, gap by depth."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import claims
from analysis import vocabulary as vocab
from analysis.frames import baseline, epoch_range, final_rows, ordered_inits, run_layer_means
from analysis.primitives import Summary, fmt, fmt_p, hedges_g, num, welch
from analysis.section import Analysis, Computed, Figure, Inputs, Result, Section


@dataclass
class AlignmentResult(Result):
    """Table 3: layer-mean alignment per init at the first and last epoch, and the contrasts."""

    key = "alignment"
    initial: dict[str, Summary]  # init -> over runs
    final: dict[str, Summary]
    initial_epoch: dict[str, int | None]  # {min, max} over runs
    final_epoch: dict[str, int | None]
    welch_t: float | None  # coupled vs uncoupled inits, final
    welch_p: float | None
    hedges_g: float | None
    n_coupled: int
    n_uncoupled: int
    gap_by_depth: dict[str, float | None]  # depth -> coupled − the larger uncoupled mean
    final_by_depth: dict[str, dict[str, float | None]]  # depth -> init -> mean
    final_by_head: dict[str, list[float | None]]  # init -> mean per head


def compute_alignment(layers: pd.DataFrame) -> Computed[AlignmentResult]:
    """Table 3: initial/final layer-mean alignment per init, Welch test, Hedges' g, gap by depth."""
    base = baseline(layers)
    missing: dict[str, str] = {}
    if base.empty or base["qk_alignment"].notna().sum() == 0:
        return Computed(None, {"alignment": "no baseline runs with qk_alignment in the store"})
    init_rows = run_layer_means(base, ["qk_alignment"], when="initial")
    fin_rows = run_layer_means(base, ["qk_alignment"], when="final")
    out: dict = {"initial": {}, "final": {}}
    for name, frame in (("initial", init_rows), ("final", fin_rows)):
        for init in ordered_inits(frame["init"]):
            out[name][init] = Summary.of(frame.loc[frame["init"] == init, "qk_alignment"])
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
    return Computed(
        AlignmentResult(**out), missing, {"alignment_initial": init_rows, "alignment_final": fin_rows}
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


def table3_alignment(a: AlignmentResult) -> pd.DataFrame:
    """Initial and final layer-mean alignment per init, the final mean per depth and per head.

    ``final_head{h}``: final alignment of head h (SPEC §4 per head), mean over final (run, layer) rows.
    """
    rows = []
    for init, fin in a.final.items():
        ini = a.initial.get(init)
        row = {
            "init": init,
            "label": vocab.init_label(init),
            "n_runs": fin.n,
            "initial_mean": ini.mean if ini else None,
            "initial_sd": ini.sd if ini else None,
            "final_mean": fin.mean,
            "final_sd": fin.sd,
        }
        for d, means in a.final_by_depth.items():
            row[f"final_mean_L{d}"] = means.get(init)
        for h, v in enumerate(a.final_by_head.get(init, [])):
            row[f"final_head{h}"] = v
        rows.append(row)
    return pd.DataFrame(rows)


def table3_contrast(a: AlignmentResult) -> pd.DataFrame:
    """Welch test, Hedges' g and the per-depth gap of the coupled vs the uncoupled inits."""
    rows = [
        ("welch_t", a.welch_t),
        ("welch_p", a.welch_p),
        ("hedges_g", a.hedges_g),
        ("n_coupled", a.n_coupled),
        ("n_uncoupled", a.n_uncoupled),
    ]
    rows += [(f"gap_L{d}", g) for d, g in a.gap_by_depth.items()]
    return pd.DataFrame(rows, columns=["statistic", "value"])


def sentence(a: AlignmentResult) -> str:
    """Final alignment per init, the Welch test when defined, and the gap per depth."""
    ep = a.final_epoch
    eps = f"epoch {ep['min']}" if ep["min"] == ep["max"] else f"epochs {ep['min']}–{ep['max']}"
    parts = [f"{vocab.init_label(i)} {fmt(d.mean)} ± {fmt(d.sd)} (n = {d.n})" for i, d in a.final.items()]
    text = f"Final layer-mean alignment ({eps}): " + "; ".join(parts) + "."
    if a.welch_t is not None:
        text += (
            f" Welch t = {a.welch_t:.2f}, p = {fmt_p(a.welch_p)}, Hedges' g = {fmt(a.hedges_g, '.2f')}"
            f" ({' + '.join(map(vocab.init_label, vocab.coupled_inits()))} n = {a.n_coupled}"
            f" vs uncoupled n = {a.n_uncoupled}; runs as units, the paper's statistic: descriptive — runs of"
            " one seed share it, so the scorecard tests over seeds)."
        )
    if a.gap_by_depth:
        text += (
            " Gap to the larger uncoupled mean: "
            + ", ".join(f"{fmt(g)} at {d} layer{'' if d == '1' else 's'}" for d, g in a.gap_by_depth.items())
            + "."
        )
    return text


class Alignment(Section[AlignmentResult]):
    """SPEC §8 Table 3 and Figure 1."""

    name = "alignment"
    heading = "Table 3 — final Q/K alignment per initialisation"
    reads = ("baseline",)
    table_names = ("table3_alignment", "table3_contrast")
    figures = (Figure("fig1_alignment", "Figure 1 — layer-mean Q/K alignment per init (mean ± sd over "
                      "seeds), one panel per depth", "sweep.report.figures:fig1_alignment"),)

    def compute(self, data: Inputs) -> Computed[AlignmentResult]:
        return compute_alignment(data.layers)

    def tables(self, result: AlignmentResult) -> dict[str, pd.DataFrame | None]:
        return {"table3_alignment": table3_alignment(result), "table3_contrast": table3_contrast(result)}

    def prose(self, result: AlignmentResult) -> list[str]:
        return [sentence(result)]

    def claims(self, an: Analysis, paper_scale: bool) -> list[claims.Claim]:
        return claims.alignment_claims(an)


SECTION = Alignment()
