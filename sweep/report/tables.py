"""The report's tables: each section's (``Section.tables``) and the paper's reference values beside
ours, written as CSV, Markdown and LaTeX.

A table that is None or empty is not written. CSV keeps full precision; Markdown
and LaTeX show four significant digits.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis import vocabulary as vocab
from analysis.compute import Analysis, sections
from analysis.reference import PAPER_REFERENCE

#: The table of the paper's reference values (not a section's: it reads several).
REFERENCE_TABLE = "reference_comparison"

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
        if not isinstance(metrics, dict):  # the loss range, the seed count
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
    """The paper's reference values beside ours (``ours`` is None where we have no value).

    Reads the stats.json view (``Analysis.stats``), which is keyed like ``PAPER_REFERENCE``.
    """
    return pd.DataFrame(reference_rows(stats), columns=["quantity", "paper", "ours"])


def build_tables(an: Analysis) -> dict[str, pd.DataFrame]:
    """Every table that has data, by name: each section's in report order, then the reference."""
    out = {}
    for sec in sections():
        result = an.results.get(sec.name)
        built = sec.tables(result) if result is not None else {}
        for name in sec.table_names:
            df = built.get(name)
            if df is not None and not df.empty:
                out[name] = df
    out[REFERENCE_TABLE] = reference_comparison(an.stats)
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
