"""The section registry and ``compute_all``: every registered section on one preset's tables."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from analysis import vocabulary as vocab
from analysis.alignment import SECTION as ALIGNMENT
from analysis.bridge import SECTION as BRIDGE
from analysis.categories import SECTION as CATEGORIES
from analysis.checkpoints import SECTION as CHECKPOINTS
from analysis.dose_response import SECTION as DOSE_RESPONSE
from analysis.frames import RUN_ID_COLS, baseline, diverged_runs, incomplete_runs
from analysis.interventions import SECTION as INTERVENTIONS
from analysis.layer_metrics import SECTION as LAYER_METRICS
from analysis.losses import lost_runs
from analysis.provenance import provenance
from analysis.section import Analysis, Inputs, Section, Window
from analysis.slopes import SECTION as SLOPES
from analysis.suites import SECTION as CHECKPOINT_SETS

__all__ = ["SECTIONS", "Analysis", "compute_all", "register_section", "sections"]

#: The SPEC §8 sections (and §5's dose–response), then every per-layer metric's final means, in report order.
#: In report order: the paper's §8 sections, the project's own (dose–response, per-layer metrics),
#: then the paper's Appendix A and its sets of seeds.
BUILTIN_SECTIONS: tuple[Section, ...] = (ALIGNMENT, SLOPES, CATEGORIES, BRIDGE, INTERVENTIONS, DOSE_RESPONSE,
                                         LAYER_METRICS, CHECKPOINTS, CHECKPOINT_SETS)
#: Their names (the stats.json keys every report has: None, with a reason under ``missing``, without data).
SECTIONS: tuple[str, ...] = tuple(s.name for s in BUILTIN_SECTIONS)

#: stats.json keys that are not a section's own name.
RESERVED_KEYS = frozenset({
    "provenance", "missing", "notes", "reference", "unknown_names", "skipped_files", "preset_notes",
    "scorecard", "scorecard_method", "timing_s", "outputs", "presets", "by_preset", "slopes_per_run",
    "slopes_post_collapse", "bridge_post_collapse",
    "layer_categories_by_depth", "layer_categories_within", "interventions_init", "interventions_by_init",
})

_added: list[tuple[Section, str | None]] = []


def register_section(section: Section, after: str | None = None) -> Section:
    """Add ``section`` to every report, after the section named ``after`` (default: last).

    A section registered again under its name replaces the earlier one. Returns ``section``.
    """
    if section.name in SECTIONS or section.name in RESERVED_KEYS:
        raise ValueError(f"section {section.name!r}: the name is built in (a stats.json key)")
    others = [s for s in sections() if s.name != section.name]
    taken = {"reference_comparison"} | {t for s in others for t in s.table_names} | {f.name for s in others for f in s.figures}
    clash = sorted(taken & ({*section.table_names} | {f.name for f in section.figures}))
    if clash:
        raise ValueError(f"section {section.name!r}: table or figure name(s) already used: {', '.join(clash)}")
    _added[:] = [(s, a) for s, a in _added if s.name != section.name] + [(section, after)]
    return section


def sections() -> tuple[Section, ...]:
    """Every section in report order: the built-in ones, then the registered ones where they asked."""
    order = list(BUILTIN_SECTIONS)
    for sec, after in _added:
        names = [s.name for s in order]
        if after is not None and after not in names:
            raise ValueError(f"section {sec.name!r}: no section {after!r} to follow ({', '.join(names)})")
        order.insert(names.index(after) + 1 if after is not None else len(order), sec)
    return tuple(order)


def _dedupe(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    if df.empty or not set(keys) <= set(df.columns):
        return df
    return df.drop_duplicates(list(keys), keep="last")


def compute_all(tables: dict[str, pd.DataFrame], preset: str | None = None,
                window: Window | None = None) -> Analysis:
    """Every registered section on whatever the tables hold; never raises on a partial store.

    ``preset`` keeps only the runs of that preset (checkpoints are kept whole); ``window``: the
    post-collapse window fixed before the data (the preset's, SPEC §8), else it is chosen on the
    runs reported and marked descriptive.
    """
    layers = tables.get("layers", pd.DataFrame())
    epochs = tables.get("epochs", pd.DataFrame())
    checkpoints = tables.get("checkpoints", pd.DataFrame())
    layers = _dedupe(layers, ("run_id", "epoch", "layer"))
    epochs = _dedupe(epochs, ("run_id", "epoch"))
    checkpoints = _dedupe(checkpoints, ("series", "revision", "layer"))
    if layers.empty:
        layers = pd.DataFrame(columns=[*RUN_ID_COLS, "epoch", "layer"])
    if epochs.empty:
        epochs = pd.DataFrame(columns=[*RUN_ID_COLS, "epoch", "val_loss", "status"])
    if checkpoints.empty:
        checkpoints = pd.DataFrame(columns=["series", "revision", "layer", "status"])
    notes: list[str] = []
    if preset is not None:
        layers = layers[layers["preset"] == preset]
        epochs = epochs[epochs["preset"] == preset]
        notes.append(f"restricted to preset {preset!r}")
    ids = pd.concat([df[list(RUN_ID_COLS)] for df in (layers, epochs) if not df.empty],
                    ignore_index=True) if not (layers.empty and epochs.empty) else pd.DataFrame(columns=list(RUN_ID_COLS))
    bad = diverged_runs(epochs)
    if bad:
        layers = layers[~layers["run_id"].isin(bad)]
        epochs = epochs[~epochs["run_id"].isin(bad)]
        notes.append(f"{len(bad)} diverged run(s) excluded")
    short = incomplete_runs(layers, epochs)
    if short:
        layers = layers[~layers["run_id"].isin(short)]
        epochs = epochs[~epochs["run_id"].isin(short)]
        notes.append(
            f"{len(short)} run(s) whose last epoch differs from their preset's left out of every "
            "statistic (listed under provenance.excluded_runs)"
        )
    if not epochs.empty:
        running = epochs.sort_values("epoch").groupby("run_id")["status"].last()
        n_running = int((running == "running").sum())
        if n_running:
            notes.append(
                f"{n_running} run(s) still running: their last logged epoch is used as final"
            )

    prov = provenance(layers, epochs, checkpoints)
    prov["excluded_runs"] = {r: "diverged" for r in bad} | short
    if len(prov["presets"]) > 1:
        notes.append("the store mixes presets " + ", ".join(prov["presets"]) + "; pass a preset to keep one")
    missing: dict[str, str] = {}
    frames: dict[str, pd.DataFrame] = {}
    results = {}
    frames["lost_runs"] = lost_runs(ids, prov["excluded_runs"])
    data = Inputs(layers, epochs, checkpoints, window)
    for sec in sections():
        done = sec.compute(data)
        results[sec.name] = done.result
        missing.update(done.missing)
        frames.update(done.frames)
    base = baseline(layers)
    if not base.empty:
        absent = [i for i in vocab.inits() if i not in set(base["init"])]
        if absent:
            missing["baseline.inits"] = (
                f"init(s) absent from the baseline: {', '.join(absent)}; groups pool only the inits present"
            )
    return Analysis(results, prov, missing, notes, frames, layers, epochs, checkpoints)
