"""report.md: the markdown of one preset's report (provenance, sections, tables, figures, missing)."""



from __future__ import annotations

import pandas as pd

from analysis import scorecard as sc
from sweep.report import tables as tb
from sweep.report.prose import (
    sentence_alignment,
    sentence_bridge,
    sentence_categories,
    sentence_checkpoints,
    sentence_interventions,
    sentence_slopes,
)

FIGURE_CAPTIONS = {
    "fig1_alignment": "Figure 1 — layer-mean Q/K alignment per init (mean ± sd over seeds), one panel per depth",
    "fig2_pr": "Figure 2 — layer-mean PR_Q and PR_K per init and depth (mean ± sd over seeds)",
    "fig3_bridge": "Figure 3 — mechanism bridge over uncoupled seed-averaged cells, with OLS lines",
    "figA_checkpoints": "Figure A — layer-mean PR_Q − PR_K against training progress per checkpoint series",
}


def _provenance_md(s: dict) -> list[str]:
    pv = s["provenance"]
    lines = ["## Data provenance", ""]
    if not pv["sweeps"]:
        lines.append("The store holds no baseline or intervention runs.")
    for sweep, d in pv["sweeps"].items():
        fe = d["final_epoch"]
        fe_txt = str(fe["min"]) if fe["min"] == fe["max"] else f"{fe['min']}–{fe['max']}"
        lines.append(
            f"- **{sweep}**: {d['n_runs']} runs, preset(s) {', '.join(d['presets'])}; inits "
            f"{', '.join(d['inits'])}; depths {', '.join(map(str, d['depths']))}; "
            f"seeds {', '.join(map(str, d['seeds']))}; "
            f"conditions {', '.join(d['interventions'])}; final epoch used "
            f"{fe_txt} (each run's last logged epoch)."
        )
    if pv["checkpoint_series"]:
        lines.append(
            f"- **checkpoints**: {len(pv['checkpoint_series'])} series "
            f"({', '.join(pv['checkpoint_series'])}), {pv['checkpoint_revisions']} ok revisions."
        )
    for preset in pv["presets"]:
        for note in (s.get("preset_notes") or {}).get(preset, []):
            lines += ["", f"> Preset `{preset}`: {note}"]
    if pv["excluded_runs"]:
        lines.append(
            f"- excluded: {', '.join(f'{r} ({why})' for r, why in pv['excluded_runs'].items())}"
        )
    for n in s.get("notes", []):
        lines.append(f"- note: {n}")
    unknown = s.get("unknown_names") or {}
    if any(unknown.values()):
        lines.append(
            "- unknown names (no registry entry: load the module that defines them with "
            "`--plugin MODULE`; shown by their raw names, in grey): "
            + "; ".join(f"{kind} {', '.join(names)}" for kind, names in unknown.items() if names)
        )
    return lines + [""]


def _table_md(name: str, frames: dict[str, pd.DataFrame], prefix: str = "") -> list[str]:
    if name not in frames:
        return []
    return [
        tb.to_markdown(frames[name]),
        "",
        f"(`{prefix}tables/{name}.csv`, `.md`, `.tex`)",
        "",
    ]


def _figure_md(name: str, figs: dict, prefix: str = "") -> list[str]:
    if name not in figs:
        return []
    return [
        f"![{FIGURE_CAPTIONS[name]}]({prefix}figures/{name}.png)",
        "",
        f"*{FIGURE_CAPTIONS[name]}.*",
        "",
    ]


def scorecard_md(s: dict) -> list[str]:
    """The reproduction scorecard of one preset's stats (rows under ``s["scorecard"]``)."""
    rows = s.get("scorecard") or []
    preset = rows[0]["preset"] if rows else None
    title = "## Reproduction scorecard" + (f" — preset `{preset}`" if preset else "")
    paper = bool(s.get("provenance", {}).get("paper_scale"))
    lines = [title, ""]
    for note in (s.get("preset_notes") or {}).get(preset, []):  # e.g. "too short to show the effects"
        lines += [f"> **Preset `{preset}`:** {note}", ""]
    if preset and preset != "paper":
        lines += [f"Preset `{preset}` is not the paper's scale (WikiText-103, d_model 256, 45 epochs): "
                  "the verdicts test the *direction* of each claim here, not its size.", ""]
    return lines + sc.render_markdown(rows, paper_scale=paper) + [""]


def skipped_md(skipped: list[dict]) -> list[str]:
    if not skipped:
        return []
    lines = ["## Skipped store files", "",
             f"{len(skipped)} store file(s) could not be read; their rows are absent from every statistic:", ""]
    for f in skipped:
        who = f"{f['sweep']}/{f['preset']}" if f["sweep"] else (f["table"] or "unknown")
        lines.append(f"- `{f['path']}` ({who}; sections {', '.join(f['sections'])}): {f['error']}")
    return lines + [""]


def render_markdown(
    s: dict, frames: dict[str, pd.DataFrame], figs: dict, prefix: str = "", scorecard: bool = True
) -> str:
    """report.md of one preset; ``prefix`` is prepended to table/figure paths."""
    lines = ["# qkgeom report: query expansion and key specialisation", ""]
    if scorecard:
        lines += scorecard_md(s)
    lines += skipped_md(s.get("skipped_files") or [])
    lines += _provenance_md(s)
    miss = s["missing"]

    def absent(section):
        return [f"*No data: {miss.get(section, 'not computed')}.*", ""]

    lines += ["## Table 3 — final Q/K alignment per initialisation", ""]
    if s.get("alignment"):
        lines += [sentence_alignment(s), ""] + _table_md("table3_alignment", frames, prefix)
        lines += _table_md("table3_contrast", frames, prefix) + _figure_md("fig1_alignment", figs, prefix)
    else:
        lines += absent("alignment")

    lines += ["## Table 4 — slopes over seed-averaged traces", ""]
    if s.get("slopes") and "table4_slopes" in frames:
        lines += [sentence_slopes(s), ""] + _table_md("table4_slopes", frames, prefix)
        lines += _figure_md("fig2_pr", figs, prefix)
    else:
        lines += absent("slopes")

    lines += ["## Layer categories (final epoch)", ""]
    if s.get("layer_categories"):
        lines += [sentence_categories(s), ""] + _table_md("layer_categories", frames, prefix)
    else:
        lines += absent("layer_categories")

    lines += ["## Mechanism bridge (Figure 3)", ""]
    if s.get("bridge"):
        lines += (
            [sentence_bridge(s), ""]
            + _table_md("bridge", frames, prefix)
            + _figure_md("fig3_bridge", figs, prefix)
        )
    else:
        lines += absent("bridge")

    lines += ["## Table 5 — interventions", ""]
    if s.get("interventions"):
        lines += [sentence_interventions(s), ""]
        lines += _table_md("table5_interventions", frames, prefix) + _table_md("table5_deltas", frames, prefix)
    else:
        lines += absent("interventions")

    lines += ["## Appendix A — public checkpoint series", ""]
    if s.get("checkpoints"):
        lines += [sentence_checkpoints(s), ""] + _table_md("appendixA_checkpoints", frames)
        lines += _figure_md("figA_checkpoints", figs, prefix)
    else:
        lines += absent("checkpoints")

    lines += ["## Paper reference values (SPEC §9)", ""]
    ref = frames.get("reference_comparison")
    if s["provenance"]["paper_scale"] and ref is not None:
        lines += [
            "The store holds the paper-scale grid (preset `paper`), so the paper's values are shown beside ours.",
            "",
        ] + _table_md("reference_comparison", frames, prefix)
    elif ref is not None:
        lines += [
            "The paper's values apply to paper scale (preset `paper`, WikiText-103, 45 epochs); this store "
            "does not hold that grid, so they are listed for orientation only:",
            "",
        ]
        lines += [
            f"- {q}: {tb.fmt(p)}" for q, p in zip(ref["quantity"], ref["paper"], strict=True)
        ]
        lines.append("")

    lines += ["## Missing", ""]
    if miss:
        lines += [f"- `{k}`: {v}" for k, v in miss.items()]
    else:
        lines.append("Nothing: every section had data.")
    lines.append("")
    return "\n".join(lines)
