"""``build_report``: stats, tables, figures, scorecard and report.md of each preset, written to a folder."""



from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd

from analysis import scorecard as sc
from analysis.compute import compute_all
from analysis.primitives import to_jsonable
from sweep.report import tables as tb
from sweep.report.inputs import unknown_names
from sweep.report.markdown import render_markdown, scorecard_md, skipped_md
from sweep.store import safe_name

FIGURE_SECTION = {
    "fig1_alignment": "alignment",
    "fig2_pr": "slopes",
    "fig3_bridge": "bridge",
    "figA_checkpoints": "checkpoints",
}


class PresetNotInStore(ValueError):
    """``--preset`` names a preset the store does not hold."""


def store_presets(tables: dict[str, pd.DataFrame]) -> list[str]:
    """The presets of the runs in ``layers`` and ``epochs``, sorted."""
    found: set[str] = set()
    for name in ("layers", "epochs"):
        df = tables.get(name)
        if df is not None and not df.empty and "preset" in df:
            found |= set(df["preset"].dropna().astype(str).unique())
    return sorted(found)


def preset_notes(preset: str, provenance: dict) -> list[str]:
    """The ``note`` of a preset known to ``sweep.presets``, and a line when its runs end early.

    Empty for a preset the registry does not know (or when it cannot be imported).
    """
    try:
        from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS
    except Exception:  # noqa: BLE001 - the report must not fail on the registry
        return []
    notes: list[str] = []
    for sweep, registry in (("baseline", BASELINE_PRESETS), ("interventions", INTERVENTION_PRESETS)):
        known = registry.get(preset)
        if known is None:
            continue
        if known.note and known.note not in notes:
            notes.append(known.note)
        ran = provenance.get("sweeps", {}).get(sweep)
        if ran and preset in ran["presets"] and ran["final_epoch"]["max"] is not None:
            if ran["final_epoch"]["max"] != known.train.epochs:
                notes.append(
                    f"its {sweep} runs end at epoch {ran['final_epoch']['max']}, while the preset "
                    f"defines {known.train.epochs} epochs (overridden with --epochs, or the sweep is unfinished)"
                )
    return notes


def _report_one(
    tables: dict[str, pd.DataFrame],
    out: Path,
    figures: bool,
    preset: str | None,
    skipped: list[dict],
) -> tuple[dict, dict[str, pd.DataFrame], dict]:
    """Stats, tables, figures and scorecard of one preset (``None``: the store as it is)."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    an = compute_all(tables, preset=preset)
    s = an.stats
    label = preset if preset is not None else (s["provenance"]["presets"] or [None])[0]
    s["unknown_names"] = unknown_names(tables)
    frames = tb.build_tables(s)
    if not s["provenance"]["paper_scale"]:
        # keep the comparison table honest: our numbers are not at paper scale
        frames["reference_comparison"] = frames["reference_comparison"].drop(columns="ours")
    for name, df in frames.items():
        tb.write_table(df, out / "tables", name)
    for name in tb.TABLE_NAMES:
        if name not in frames:
            sec = tb.TABLE_SECTION[name]
            s["missing"][f"tables.{name}"] = s["missing"].get(sec, f"no data for section {sec!r}")
    mine = [f for f in skipped if f["preset"] in (None, label)]
    touched = {sec for f in mine for sec in f["sections"]}
    s["skipped_files"] = mine
    s["preset_notes"] = {label: preset_notes(label, s["provenance"])} if label else {}
    s["scorecard"] = sc.build_scorecard(an, label, paper_scale=label == "paper", touched=touched)
    s["scorecard_method"] = sc.METHOD_NOTE
    s["timing_s"] = {"stats_and_tables": time.perf_counter() - t0}
    figs: dict = {}
    if figures:
        from sweep.report import figures as fg

        t1 = time.perf_counter()
        figs = fg.draw_all(an, out / "figures")
        s["timing_s"]["figures"] = time.perf_counter() - t1
        for name in fg.FIGURE_NAMES:
            if name not in figs:
                sec = FIGURE_SECTION[name]
                s["missing"][f"figures.{name}"] = s["missing"].get(
                    sec, f"no data for section {sec!r}"
                )
    s["outputs"] = {
        "tables": sorted(frames),
        "figures": sorted(figs),
        "report": "report.md",
    }
    return s, frames, figs


def _write(out: Path, s: dict, markdown: str) -> None:
    (out / "report.md").write_text(markdown)
    (out / "stats.json").write_text(json.dumps(to_jsonable(s), indent=2, allow_nan=False) + "\n")


def build_report(
    tables: dict[str, pd.DataFrame],
    out: Path,
    figures: bool = True,
    preset: str | None = None,
    skipped_files: list[dict] | None = None,
) -> dict:
    """Compute every statistic and write ``out``/stats.json, tables/, figures/ and report.md.

    Presets are reported separately (see the module docstring); ``preset`` keeps one
    and raises ``PresetNotInStore`` when the store lacks it. ``skipped_files``: the
    records ``load_tables`` collected. Returns the stats dict (the content of stats.json).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    skipped = list(skipped_files or [])
    present = store_presets(tables)
    if preset is not None and preset not in present:
        raise PresetNotInStore(
            f"preset {preset!r} is not in the store; presets present: {', '.join(present) or 'none'}"
        )
    if preset is not None or len(present) <= 1:
        s, frames, figs = _report_one(tables, out, figures, preset, skipped)
        s["presets"] = [preset] if preset is not None else present
        s["skipped_files"] = skipped
        _write(out, s, render_markdown(s, frames, figs))
        return s

    # several presets: one report each, never pooled, and an index that holds them all
    by_preset: dict[str, dict] = {}
    head = [
        "# qkgeom report: query expansion and key specialisation",
        "",
        f"This store holds {len(present)} presets ({', '.join(f'`{p}`' for p in present)}). Each is "
        "reported on its own below and under `presets/<name>/`; no statistic pools runs of "
        "different presets.",
        "",
    ]
    parts: list[str] = []
    for name in present:
        sub = out / "presets" / safe_name(name)
        s_p, frames, figs = _report_one(tables, sub, figures, name, skipped)
        _write(sub, s_p, render_markdown(s_p, frames, figs))
        by_preset[name] = s_p
        head += scorecard_md(s_p)
        body = render_markdown(s_p, frames, figs, prefix=f"presets/{safe_name(name)}/", scorecard=False)
        body_lines = [ln for ln in body.splitlines()[1:] if not ln.startswith("## Skipped store files")]
        parts += [f"## Preset `{name}`", ""] + [("#" + ln if ln.startswith("#") else ln) for ln in body_lines]
    s = {
        "presets": present,
        "by_preset": by_preset,
        "scorecard": [row for p in present for row in by_preset[p]["scorecard"]],
        "scorecard_method": sc.METHOD_NOTE,
        "skipped_files": skipped,
        "missing": {},
        "notes": [f"the store holds presets {', '.join(present)}: each is reported separately"],
        "outputs": {"report": "report.md", "presets": {p: f"presets/{safe_name(p)}/" for p in present}},
    }
    _write(out, s, "\n".join(head + skipped_md(skipped) + parts) + "\n")
    return s
