"""Every per-layer metric of the vocabulary (``metrics.columns.LAYER_COLUMNS``): final means per init.

The SPEC §8 sections read the metrics they test by name; this one reads the vocabulary
at call time, so a new per-layer metric reaches stats.json and a table with no edit here.
Float columns: per init the layer-mean at each run's final epoch (``Summary`` over runs),
and per (init, depth, layer) the mean over runs; per-head columns: per init the mean of
each head over the final (run, layer) rows. A column the store lacks (older files read
as null) has no values.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.frames import (
    RUN_ID_COLS,
    baseline,
    epoch_range,
    final_rows,
    ordered_inits,
    run_layer_means,
)
from analysis.primitives import Summary, num
from analysis.section import Computed, Inputs, Result, Section
from metrics import columns


@dataclass
class LayerMetricsResult(Result):
    key = "layer_metrics"
    final_epoch: dict[str, int | None]  # {min, max} over runs
    by_init: dict[str, dict[str, Summary]]  # init -> metric -> over runs of the final layer-mean
    by_layer: dict[str, dict[str, dict[str, dict[str, float | None]]]]  # init -> depth -> layer -> n_runs, metrics
    by_head: dict[str, dict[str, list[float | None]]]  # init -> per-head metric -> mean per head


def _floats(frame: pd.DataFrame) -> list[str]:
    return [m.name for m in columns.LAYER_COLUMNS if m.kind == columns.FLOAT and m.name in frame]


def _head_means(values: pd.Series) -> list[float | None] | None:
    """Mean of each head over rows of [n_head] lists (null rows skipped); None if n_head differs."""
    rows = [np.asarray(v, float) for v in values if v is not None and len(v) > 0]
    if not rows or len({len(r) for r in rows}) != 1:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN head
        return [num(x) for x in np.nanmean(np.array(rows), axis=0)]


def compute_layer_metrics(layers: pd.DataFrame) -> Computed[LayerMetricsResult]:
    base = baseline(layers)
    if base.empty:
        return Computed(None, {"layer_metrics": "no baseline runs in the store"})
    keys = [c for c in RUN_ID_COLS if c in base]
    fin = final_rows(base.sort_values([*keys, "epoch", "layer"]))  # sorted: means independent of read order
    floats = _floats(fin)
    per_run = run_layer_means(fin, floats)
    by_init = {i: {m: Summary.of(per_run.loc[per_run["init"] == i, m]) for m in floats}
               for i in ordered_inits(fin["init"])}
    by_layer: dict = {}  # groupby sorts depth and layer as numbers; inits are reordered below
    for (init, depth, layer), g in fin.groupby(["init", "depth", "layer"], sort=True, observed=True):
        cell = {"n_runs": int(g["run_id"].nunique()), **{m: num(g[m].mean()) for m in floats}}
        by_layer.setdefault(str(init), {}).setdefault(str(int(depth)), {})[str(int(layer))] = cell
    by_head: dict = {}
    for init in by_init:
        for m in columns.LAYER_COLUMNS:
            if m.kind == columns.PER_HEAD and m.name in fin:
                means = _head_means(fin.loc[fin["init"] == init, m.name])
                if means is not None:
                    by_head.setdefault(init, {})[m.name] = means
    by_layer = {i: by_layer[i] for i in by_init if i in by_layer}
    return Computed(LayerMetricsResult(epoch_range(fin), by_init, by_layer, by_head))


def layer_metrics_table(r: LayerMetricsResult) -> pd.DataFrame:
    """One row per (init, depth, layer), inits in registry order: runs and the final mean over runs
    of every float metric."""
    return pd.DataFrame([{"init": init, "depth": int(depth), "layer": int(layer), **cell}
                         for init, depths in r.by_layer.items() for depth, layers in depths.items()
                         for layer, cell in layers.items()])


class LayerMetrics(Section[LayerMetricsResult]):
    """Every vocabulary per-layer metric at the final epoch of the baseline runs."""

    name = "layer_metrics"
    heading = "Per-layer metrics — final means per initialisation, depth and layer"
    reads = ("baseline",)
    table_names = ("layer_metrics",)

    def compute(self, data: Inputs) -> Computed[LayerMetricsResult]:
        return compute_layer_metrics(data.layers)

    def tables(self, result: LayerMetricsResult) -> dict[str, pd.DataFrame | None]:
        return {"layer_metrics": layer_metrics_table(result)}

    def prose(self, result: LayerMetricsResult) -> list[str]:
        ep = result.final_epoch
        eps = f"epoch {ep['min']}" if ep["min"] == ep["max"] else f"epochs {ep['min']}–{ep['max']}"
        return [f"Every per-layer column of the store at each baseline run's final epoch ({eps}), the mean "
                "over runs of each (init, depth, layer); per-head columns are in stats.json "
                "(`layer_metrics.by_head`)."]


SECTION = LayerMetrics()
