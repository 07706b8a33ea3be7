"""``build_report``: stats, tables, figures, scorecard and report.md of each preset, written to a folder."""



from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from analysis import scorecard as sc
from analysis.compute import Analysis, compute_all, sections
from analysis.primitives import to_jsonable
from analysis.section import Figure, Window, left_out
from sweep.report import tables as tb
from sweep.report.inputs import unknown_names
from sweep.report.markdown import render_markdown, scorecard_md, skipped_md
from sweep.report.sequential import decisions as seeds_auto_decisions
from sweep.report.sequential import section_md
from sweep.store import safe_name


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
        if known.schedule_seeds:
            notes.append(schedule_note(sweep, known.schedule_seeds, ran["seeds"] if ran else []))
        if known.schedule_choice and ran:
            notes.append(f"its {sweep} schedule: {known.schedule_choice}")
        if ran and preset in ran["presets"] and ran["final_epoch"]["max"] is not None:
            if ran["final_epoch"]["max"] != known.train.epochs:
                notes.append(
                    f"its {sweep} runs end at epoch {ran['final_epoch']['max']}, while the preset "
                    f"defines {known.train.epochs} epochs (overridden with --epochs, or the sweep is unfinished)"
                )
    return notes


def preset_window(preset: str | None) -> Window | None:
    """The post-collapse window a registered baseline preset fixed before the data (SPEC §8), or None."""
    try:
        from sweep.presets import BASELINE_PRESETS
    except Exception:  # noqa: BLE001 - the report must not fail on the registry
        return None
    known = BASELINE_PRESETS.get(preset) if preset is not None else None
    if known is None or known.collapse_end is None:
        return None
    seeds = ", ".join(map(str, known.schedule_seeds))
    return Window(known.collapse_end, f"fixed before the data with the {preset} preset, on the runs of its "
                                      f"schedule seeds {seeds}")


def schedule_note(sweep: str, chose: tuple[int, ...], reported: list[int]) -> str:
    """Which seeds chose the preset's schedule, and whether the store reports any of them."""
    text = (f"its {sweep} schedule was chosen on seeds {', '.join(map(str, chose))} (LOG.md); "
            f"this store reports seeds {', '.join(map(str, reported)) or '—'}")
    both = sorted(set(chose) & set(reported))
    if both:
        return text + (f": seed{'s' if len(both) > 1 else ''} {', '.join(map(str, both))} chose the schedule, "
                       "so verdicts that use them are not confirmatory")
    return text + ", none of which chose it (the verdicts are confirmatory)"


def drawer(fig: Figure) -> Callable[[Analysis, Path], list[Path]]:
    """The drawing function a ``Figure`` names (``"module:function"``)."""
    module, _, func = fig.draw.partition(":")
    return getattr(importlib.import_module(module), func)


def draw_figures(an: Analysis, out: Path) -> dict[str, list[Path]]:
    """Every registered section's figures that have data: name -> [png, pdf]; a reason under
    ``an.missing`` for each of the others."""
    written = {}
    for sec in sections():
        if left_out(sec, an):
            continue
        for fig in sec.figures:
            paths = drawer(fig)(an, out)
            if paths:
                written[fig.name] = paths
            else:
                an.missing[f"figures.{fig.name}"] = an.missing.get(sec.name, f"no data for section {sec.name!r}")
    return written


def _report_one(
    tables: dict[str, pd.DataFrame],
    out: Path,
    figures: bool,
    preset: str | None,
    skipped: list[dict],
    sequential: list[dict] | None = None,
) -> tuple[dict, Analysis, dict[str, pd.DataFrame], dict]:
    """Stats, tables, figures and scorecard of one preset (``None``: the store as it is)."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    label = preset if preset is not None else (store_presets(tables) or [None])[0]
    an = compute_all(tables, preset=preset, window=preset_window(label))
    frames = tb.build_tables(an)
    if not an.provenance["paper_scale"]:
        # keep the comparison table honest: our numbers are not at paper scale
        frames[tb.REFERENCE_TABLE] = frames[tb.REFERENCE_TABLE].drop(columns="ours")
    for name, df in frames.items():
        tb.write_table(df, out / "tables", name)
    for sec in sections():
        if left_out(sec, an):
            continue
        for name in sec.table_names:
            if name not in frames:
                # a section may give a table's own reason (one table of a section with data)
                an.missing.setdefault(f"tables.{name}", an.missing.get(sec.name, f"no data for section {sec.name!r}"))
    mine = [f for f in skipped if f["preset"] in (None, label)]
    touched = {sec for f in mine for sec in f["sections"]}
    decided = seeds_auto_decisions(sequential or [], label)  # their verdicts come from --seeds auto
    card = sc.SCORECARD.compute(an, label, paper_scale=label == "paper", touched=touched, sequential=decided)
    timing = {"stats_and_tables": time.perf_counter() - t0}
    figs: dict = {}
    if figures:
        t1 = time.perf_counter()
        figs = draw_figures(an, out / "figures")
        timing["figures"] = time.perf_counter() - t1
    s = an.stats  # the typed results as JSON, from here on
    s["unknown_names"] = unknown_names(tables)
    s["skipped_files"] = mine
    s["preset_notes"] = {label: preset_notes(label, s["provenance"])} if label else {}
    s.update(card.to_json())
    s["timing_s"] = timing
    if figures:
        from sweep.report.figures import fig_scorecard

        drawn = fig_scorecard(s["scorecard"], out / "figures")
        if drawn:
            figs["scorecard"] = drawn
    s["outputs"] = {
        "tables": sorted(frames),
        "figures": sorted(figs),
        "report": "report.md",
    }
    return s, an, frames, figs


def _write(out: Path, s: dict, markdown: str) -> None:
    (out / "report.md").write_text(markdown)
    (out / "stats.json").write_text(json.dumps(to_jsonable(s), indent=2, allow_nan=False) + "\n")


def build_report(
    tables: dict[str, pd.DataFrame],
    out: Path,
    figures: bool = True,
    preset: str | None = None,
    skipped_files: list[dict] | None = None,
    sequential: list[dict] | None = None,
) -> dict:
    """Compute every statistic and write ``out``/stats.json, tables/, figures/ and report.md.

    Presets are reported separately (see the module docstring); ``preset`` keeps one
    and raises ``PresetNotInStore`` when the store lacks it. ``skipped_files``: the
    records ``load_tables`` collected; ``sequential``: the ``--seeds auto`` decision records
    (``sweep.report.sequential.load_records``). Returns the stats dict (the content of stats.json).
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
        s, an, frames, figs = _report_one(tables, out, figures, preset, skipped, sequential)
        s["presets"] = [preset] if preset is not None else present
        s["skipped_files"] = skipped
        seq_lines = section_md(sequential or [], preset if preset is not None else (present or [None])[0])
        _write(out, s, render_markdown(s, an, frames, figs) + "".join(f"\n{ln}" for ln in seq_lines))
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
        s_p, an, frames, figs = _report_one(tables, sub, figures, name, skipped, sequential)
        seq_lines = section_md(sequential or [], name)
        _write(sub, s_p, render_markdown(s_p, an, frames, figs) + "".join(f"\n{ln}" for ln in seq_lines))
        by_preset[name] = s_p
        head += scorecard_md(s_p, prefix=f"presets/{safe_name(name)}/")
        body = render_markdown(s_p, an, frames, figs, prefix=f"presets/{safe_name(name)}/", scorecard=False)
        body_lines = [ln for ln in body.splitlines()[1:] if not ln.startswith("## Skipped store files")]
        parts += [f"## Preset `{name}`", ""] + [("#" + ln if ln.startswith("#") else ln) for ln in body_lines]
        parts += [("#" + ln if ln.startswith("#") else ln) for ln in seq_lines]
    s = {
        "presets": present,
        "by_preset": by_preset,
        "scorecard": [row for p in present for row in by_preset[p]["scorecard"]],
        "scorecard_method": sc.METHOD_TEXT,
        "skipped_files": skipped,
        "missing": {},
        "notes": [f"the store holds presets {', '.join(present)}: each is reported separately"],
        "outputs": {"report": "report.md", "presets": {p: f"presets/{safe_name(p)}/" for p in present}},
    }
    _write(out, s, "\n".join(head + skipped_md(skipped) + parts) + "\n")
    return s
