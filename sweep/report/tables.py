"""The report's tables: DataFrames built from the stats dict, written as CSV, Markdown and LaTeX.

Every builder returns ``None`` when its section has no data, so only tables
with data are written. CSV keeps full precision; Markdown and LaTeX show
four significant digits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from analysis import vocabulary as vocab
from analysis.interventions import INTERVENTION_METRICS
from analysis.reference import PAPER_REFERENCE

TABLE_NAMES = (
    "table3_alignment",
    "table3_contrast",
    "table4_slopes",
    "table5_interventions",
    "table5_deltas",
    "layer_categories",
    "bridge",
    "appendixA_checkpoints",
    "reference_comparison",
)
#: Which stats section each table comes from (for the ``missing`` list).
TABLE_SECTION = {
    "table3_alignment": "alignment",
    "table3_contrast": "alignment",
    "table4_slopes": "slopes",
    "table5_interventions": "interventions",
    "table5_deltas": "interventions",
    "layer_categories": "layer_categories",
    "bridge": "bridge",
    "appendixA_checkpoints": "checkpoints",
    "reference_comparison": "reference",
}


def table3_alignment(stats: dict) -> pd.DataFrame | None:
    """Initial and final layer-mean alignment per init, the final mean per depth and per head.

    ``final_head{h}``: final alignment of head h (SPEC §4 per head), mean over final (run, layer) rows.
    """
    a = stats.get("alignment")
    if not a:
        return None
    by_depth = a.get("final_by_depth", {})
    by_head = a.get("final_by_head") or {}
    rows = []
    for init, fin in a["final"].items():
        ini = a["initial"].get(init, {})
        row = {
            "init": init,
            "label": vocab.init_label(init),
            "n_runs": fin["n"],
            "initial_mean": ini.get("mean"),
            "initial_sd": ini.get("sd"),
            "final_mean": fin["mean"],
            "final_sd": fin["sd"],
        }
        for d, means in by_depth.items():
            row[f"final_mean_L{d}"] = means.get(init)
        for h, v in enumerate(by_head.get(init, [])):
            row[f"final_head{h}"] = v
        rows.append(row)
    return pd.DataFrame(rows)


def table3_contrast(stats: dict) -> pd.DataFrame | None:
    """Welch test, Hedges' g and the per-depth gap of the coupled vs the uncoupled inits."""
    a = stats.get("alignment")
    if not a:
        return None
    rows = [
        ("welch_t", a.get("welch_t")),
        ("welch_p", a.get("welch_p")),
        ("hedges_g", a.get("hedges_g")),
        ("n_coupled", a.get("n_coupled")),
        ("n_uncoupled", a.get("n_uncoupled")),
    ]
    rows += [(f"gap_L{d}", g) for d, g in a.get("gap_by_depth", {}).items()]
    return pd.DataFrame(rows, columns=["statistic", "value"])


def table4_slopes(stats: dict) -> pd.DataFrame | None:
    """Slopes over seed-averaged traces: mean, sd, n, positive, negative per group and metric."""
    s = stats.get("slopes")
    if not s:
        return None
    rows = []
    for group, metrics in s.items():
        for metric, d in metrics.items():
            rows.append({"group": group, "metric": metric, **d})
    df = pd.DataFrame(rows)
    return df if (df["n"] > 0).any() else None


def _intervention_blocks(stats: dict) -> dict[str, dict] | None:
    if not stats.get("interventions"):
        return None
    by_init = stats.get("interventions_by_init")
    return by_init if by_init else {stats.get("interventions_init"): stats["interventions"]}


def _condition_rows(stats: dict, row: Callable[[str, dict], dict | None]) -> pd.DataFrame | None:
    """One row per (init, condition) of the interventions section; the init column only when
    the store holds more than one init's interventions."""
    blocks = _intervention_blocks(stats)
    if not blocks:
        return None
    rows = [{"init": init, "condition": cond, "label": vocab.condition_label(cond), **r}
            for init, conds in blocks.items() for cond, e in conds.items()
            if (r := row(cond, e)) is not None]
    if not rows:
        return None
    df = pd.DataFrame(rows)
    return df if len(blocks) > 1 else df.drop(columns="init")


def table5_interventions(stats: dict) -> pd.DataFrame | None:
    """Per condition: mean and sd over seeds of the final metrics, and the confidence score."""
    def row(cond: str, e: dict) -> dict:
        r: dict = {"n_seeds": e["n_seeds"]}
        for m in INTERVENTION_METRICS:
            r[f"{m}_mean"], r[f"{m}_sd"] = e[m]["mean"], e[m]["sd"]
        return {**r, "confidence": e["confidence"]}

    return _condition_rows(stats, row)


def table5_deltas(stats: dict) -> pd.DataFrame | None:
    """Per condition: paired difference from the control (mean over seeds) and direction fractions."""
    def row(cond: str, e: dict) -> dict | None:
        if cond == vocab.CONTROL:
            return None
        r: dict = {"n_pairs": e["n_pairs"]}
        r.update({f"delta_{m}": e[m]["delta"] for m in INTERVENTION_METRICS})
        pred = e.get("predicted") or {}
        r["predicted"] = ", ".join(f"{m} {s}" for m, s in pred.items()) or None
        by = e.get("confidence_by_metric") or {}
        r.update({f"holds_{m}": by.get(m) for m in ("attn_entropy", "logit_std", "qk_erank")})
        return {**r, "confidence": e["confidence"]}

    return _condition_rows(stats, row)


def layer_categories(stats: dict) -> pd.DataFrame | None:
    """Mean final metrics per layer category, over all depths and per depth."""
    lc = stats.get("layer_categories")
    if not lc:
        return None
    rows = []
    for cat, d in lc.items():
        rows.append({"depth": "all", "k": None, "category": cat, **d})
    for depth, entry in (stats.get("layer_categories_by_depth") or {}).items():
        for cat in ("early", "mid", "late"):
            if cat in entry:
                rows.append({"depth": depth, "k": entry["k"], "category": cat, **entry[cat]})
    df = pd.DataFrame(rows)
    return df[["depth", "k", "category", "n", "attn_entropy", "attn_top1", "qk_erank", "pr_q"]]


def bridge(stats: dict) -> pd.DataFrame | None:
    """Pearson r, p, n of the three bridge pairs at both levels."""
    b = stats.get("bridge")
    if not b:
        return None
    rows = []
    for level, pairs in b.items():
        for pair, d in pairs.items():
            rows.append({"level": level, "pair": pair, "r": d["r"], "p": d["p"], "n": d["n"]})
    return pd.DataFrame(rows)


def appendixA_checkpoints(stats: dict) -> pd.DataFrame | None:
    """Per checkpoint series: revisions, slope of pr_q − pr_k on progress, link check."""
    c = stats.get("checkpoints")
    if not c or not c.get("series"):
        return None
    rows = [{"series": name, **d} for name, d in c["series"].items()]
    df = pd.DataFrame(rows)
    cols = [
        "series",
        "n_revisions",
        "slope_pr_q_minus_pr_k",
        "r_pr_k__qk_erank",
        "r_qk_erank__attn_entropy",
        "link_recurs",
    ]
    return df[cols]


def _get(d, *path):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def _ratio(a, b) -> str | None:
    return None if a is None or b is None else f"{a}/{b}"


def reference_rows(stats: dict) -> list[tuple[str, object, object]]:
    """(quantity, paper value, our value) for every SPEC §9 / Appendix A reference value."""
    R = PAPER_REFERENCE
    rows: list[tuple[str, object, object]] = []
    for init, v in R["alignment"]["initial"].items():
        rows.append(
            (f"initial alignment, {init}", v, _get(stats, "alignment", "initial", init, "mean"))
        )
    for init, v in R["alignment"]["final"].items():
        rows.append(
            (
                f"final alignment mean, {init}",
                v["mean"],
                _get(stats, "alignment", "final", init, "mean"),
            )
        )
        rows.append(
            (f"final alignment sd, {init}", v["sd"], _get(stats, "alignment", "final", init, "sd"))
        )
    rows.append(
        (
            f"Welch p ({'/'.join(vocab.coupled_inits())} vs uncoupled)",
            R["alignment"]["welch_p"],
            _get(stats, "alignment", "welch_p"),
        )
    )
    rows.append(("Hedges' g", R["alignment"]["hedges_g"], _get(stats, "alignment", "hedges_g")))
    for d, v in R["alignment"]["gap_by_depth"].items():
        rows.append((f"alignment gap, {d} layers", v, _get(stats, "alignment", "gap_by_depth", d)))
    for cat, metrics in R["layer_categories"].items():
        for m, v in metrics.items():
            rows.append((f"{cat} layers {m}", v, _get(stats, "layer_categories", cat, m)))
    for m, sign, word in (("pr_k", "negative", "pr_k"), ("pr_q_minus_pr_k", "positive", "pr_q − pr_k")):
        paper, ours = R["slopes"]["pooled"][m], _get(stats, "slopes", "pooled", m) or {}
        rows.append((f"{word} slope {sign} (seed-averaged traces)", _ratio(paper[sign], paper["n"]),
                     _ratio(ours.get(sign), ours.get("n"))))
    for level, pairs in R["bridge"].items():
        for pair, v in pairs.items():
            rows.append(
                (
                    f"bridge r {pair} ({level}, n={v['n']})",
                    v["r"],
                    _get(stats, "bridge", level, pair, "r"),
                )
            )
    for cond, metrics in R["interventions"].items():
        if cond == "val_loss_range":
            continue
        for m, v in metrics.items():
            ours = _get(stats, "interventions", cond, m)
            ours = ours if m == "confidence" else _get(stats, "interventions", cond, m, "mean")
            rows.append((f"{cond} {m}", v, ours))
    lo, hi = R["interventions"]["val_loss_range"]
    vals = [
        _get(e, "val_loss", "mean")
        for c, e in (stats.get("interventions") or {}).items()
        if c != vocab.CONTROL
    ]
    vals = [v for v in vals if v is not None]
    ours = f"{min(vals):.4f}–{max(vals):.4f}" if vals else None
    rows.append(("intervention val_loss range", f"{lo:.4f}–{hi:.4f}", ours))
    c = stats.get("checkpoints") or {}
    rc = R["checkpoints"]
    rows.append(
        (
            "checkpoint series with positive pr_q − pr_k slope",
            _ratio(rc["positive_series"], rc["n_fitted_series"]),
            _ratio(c.get("positive_series"), c.get("n_fitted_series")),
        )
    )
    rows.append(
        (
            "checkpoint series where the link recurs",
            _ratio(rc["link_recurs_series"], rc["n_fitted_series"]),
            _ratio(c.get("link_recurs_series"), c.get("n_fitted_series")),
        )
    )
    return rows


def reference_comparison(stats: dict) -> pd.DataFrame:
    """The paper's reference values beside ours (``ours`` is None where we have no value)."""
    return pd.DataFrame(reference_rows(stats), columns=["quantity", "paper", "ours"])


BUILDERS = {
    "table3_alignment": table3_alignment,
    "table3_contrast": table3_contrast,
    "table4_slopes": table4_slopes,
    "table5_interventions": table5_interventions,
    "table5_deltas": table5_deltas,
    "layer_categories": layer_categories,
    "bridge": bridge,
    "appendixA_checkpoints": appendixA_checkpoints,
    "reference_comparison": reference_comparison,
}


def build_tables(stats: dict) -> dict[str, pd.DataFrame]:
    """Every table that has data, by name."""
    out = {}
    for name, fn in BUILDERS.items():
        df = fn(stats)
        if df is not None and not df.empty:
            out[name] = df
    return out


# ----------------------------------------------------------------------------
# export
# ----------------------------------------------------------------------------


def fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "--"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def to_markdown(df: pd.DataFrame) -> str:
    """A GitHub pipe table with four significant digits and ``–`` for missing values."""
    shown = df.astype(object).map(fmt)
    return shown.to_markdown(index=False, disable_numparse=True)


def to_latex(df: pd.DataFrame, caption: str | None = None) -> str:
    """A booktabs tabular (``\\toprule``/``\\midrule``/``\\bottomrule``), LaTeX-escaped."""
    styler = (
        df.astype(object)
        .style.hide(axis="index")
        .format(formatter=fmt, escape="latex")
        .format_index(escape="latex", axis=1)
    )
    return styler.to_latex(hrules=True, caption=caption, column_format="l" * len(df.columns))


def write_table(df: pd.DataFrame, directory: Path, name: str) -> list[Path]:
    """Write ``name``.csv, .md and .tex under ``directory``; return the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{name}.{ext}" for ext in ("csv", "md", "tex")]
    df.to_csv(paths[0], index=False)
    paths[1].write_text(to_markdown(df) + "\n")
    paths[2].write_text(to_latex(df))
    return paths
