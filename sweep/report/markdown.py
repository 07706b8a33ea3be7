"""report.md: the markdown of one preset's report (provenance, sections, tables, figures, missing)."""



from __future__ import annotations

import pandas as pd

from analysis import scorecard as sc
from analysis.compute import Analysis, sections
from analysis.section import Figure, Section, left_out
from sweep.report import tables as tb


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
            f"conditions {', '.join(d['conditions'])}; final epoch used "
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


def _figure_md(fig: Figure, figs: dict, prefix: str = "") -> list[str]:
    if fig.name not in figs:
        return []
    return [
        f"![{fig.caption}]({prefix}figures/{fig.name}.png)",
        "",
        f"*{fig.caption}.*",
        "",
    ]


def section_md(sec: Section, an: Analysis, frames: dict[str, pd.DataFrame], figs: dict,
               prefix: str = "") -> list[str]:
    """One section: heading, its sentences, tables and figures; or why it has no data.

    A section whose result exists but none of whose tables has rows counts as without data.
    """
    if left_out(sec, an):
        return []
    result = an.results.get(sec.name)
    lines = [f"## {sec.heading}", ""]
    if result is None or (sec.table_names and not any(t in frames for t in sec.table_names)):
        return lines + [f"*No data: {an.missing.get(sec.name, 'not computed')}.*", ""]
    for sentence in sec.prose(result):
        lines += [sentence, ""]
    for name in sec.table_names:
        lines += _table_md(name, frames, prefix)
    for fig in sec.figures:
        lines += _figure_md(fig, figs, prefix)
    return lines


def scorecard_md(s: dict, prefix: str = "") -> list[str]:
    """The reproduction scorecard of one preset's stats (rows under ``s["scorecard"]``), its figure
    first (``prefix``: the folder of the preset's report, from the page's)."""
    rows = s.get("scorecard") or []
    preset = rows[0]["preset"] if rows else None
    title = f"## {sc.SCORECARD.heading}" + (f" — preset `{preset}`" if preset else "")
    paper = bool(s.get("provenance", {}).get("paper_scale"))
    lines = [title, ""]
    for note in (s.get("preset_notes") or {}).get(preset, []):  # e.g. "too short to show the effects"
        lines += [f"> **Preset `{preset}`:** {note}", ""]
    if preset and preset != "paper":
        lines += [f"Preset `{preset}` is not the paper's scale (WikiText-103, d_model 256, 45 epochs): "
                  "the verdicts test the *direction* of each claim here, not its size.", ""]
    if "scorecard" in (s.get("outputs") or {}).get("figures", []):
        lines += [f"![The scorecard: each counted claim's standardized effect with the interval its verdict rests "
                  f"on]({prefix}figures/scorecard.png)", ""]
    return lines + sc.SCORECARD.markdown(rows, paper_scale=paper) + [""]


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
    s: dict, an: Analysis, frames: dict[str, pd.DataFrame], figs: dict, prefix: str = "", scorecard: bool = True
) -> str:
    """report.md of one preset (``s``: its stats.json, ``an``: its typed results); ``prefix`` is
    prepended to table/figure paths."""
    lines = ["# qkgeom report: query expansion and key specialisation", ""]
    if scorecard:
        lines += scorecard_md(s)
    lines += skipped_md(s.get("skipped_files") or [])
    lines += _provenance_md(s)
    for sec in sections():
        lines += section_md(sec, an, frames, figs, prefix)

    lines += ["## Paper reference values (SPEC §9)", ""]
    ref = frames.get(tb.REFERENCE_TABLE)
    if s["provenance"]["paper_scale"] and ref is not None:
        lines += [
            "The store holds the paper-scale grid (preset `paper`), so the paper's values are shown beside ours.",
            "",
        ] + _table_md(tb.REFERENCE_TABLE, frames, prefix)
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

    miss = s["missing"]
    lines += ["## Missing", ""]
    if miss:
        lines += [f"- `{k}`: {v}" for k, v in miss.items()]
    else:
        lines.append("Nothing: every section had data.")
    lines.append("")
    return "\n".join(lines)
