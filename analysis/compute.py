"""``compute_all``: every SPEC §8 section on one preset's tables, as the JSON-ready ``stats``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from analysis import vocabulary as vocab
from analysis.alignment import alignment_section
from analysis.bridge import bridge_section
from analysis.categories import layer_categories_section
from analysis.checkpoints import checkpoints_section
from analysis.frames import RUN_ID_COLS, baseline, diverged_runs, incomplete_runs
from analysis.interventions import interventions_section
from analysis.primitives import to_jsonable
from analysis.provenance import provenance
from analysis.reference import PAPER_REFERENCE
from analysis.slopes import slopes_section


@dataclass
class Analysis:
    """Result of ``compute_all``: the JSON-ready stats plus the frames figures and tables use."""

    stats: dict
    frames: dict[str, pd.DataFrame]
    layers: pd.DataFrame
    epochs: pd.DataFrame
    checkpoints: pd.DataFrame


#: The SPEC §8 sections every stats dict has (None, and listed under ``missing``, when not computable).
SECTIONS: tuple[str, ...] = ("alignment", "slopes", "layer_categories", "bridge", "interventions", "checkpoints")


def _dedupe(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    if df.empty or not set(keys) <= set(df.columns):
        return df
    return df.drop_duplicates(list(keys), keep="last")


def compute_all(tables: dict[str, pd.DataFrame], preset: str | None = None) -> Analysis:
    """Every §8 section on whatever the tables hold; never raises on a partial store.

    ``preset`` keeps only the runs of that preset (checkpoints are kept whole).
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

    stats: dict = {"provenance": provenance(layers, epochs, checkpoints)}
    stats["provenance"]["excluded_runs"] = {r: "diverged" for r in bad} | short
    if len(stats["provenance"]["presets"]) > 1:
        notes.append(
            "the store mixes presets "
            + ", ".join(stats["provenance"]["presets"])
            + "; pass a preset to keep one"
        )
    missing: dict[str, str] = {}
    frames: dict[str, pd.DataFrame] = {}
    sections = [
        alignment_section(layers),
        slopes_section(layers),
        layer_categories_section(layers),
        bridge_section(layers),
        interventions_section(layers, epochs),
        checkpoints_section(checkpoints),
    ]
    for sec in sections:
        stats.update(sec.stats)
        missing.update(sec.missing)
        frames.update(sec.frames)
    base = baseline(layers)
    if not base.empty:
        absent = [i for i in vocab.inits() if i not in set(base["init"])]
        if absent:
            missing["baseline.inits"] = (
                f"init(s) absent from the baseline: {', '.join(absent)}; groups pool only the inits present"
            )
    for key in SECTIONS:
        stats.setdefault(key, None)
    stats["missing"] = missing
    stats["notes"] = notes
    stats["reference"] = PAPER_REFERENCE
    return Analysis(to_jsonable(stats), frames, layers, epochs, checkpoints)
