"""SPEC §8 slopes: OLS slopes of pr_q, pr_k and their difference over training."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis import vocabulary as vocab
from analysis.frames import RUN_ID_COLS, baseline, group_slopes, seed_averaged_traces
from analysis.primitives import Section, count_desc

SLOPE_METRICS: tuple[str, ...] = ("pr_q", "pr_k", "pr_q_minus_pr_k")


def trace_slopes(layers: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Slopes (and means) of the seed-averaged traces of baseline rows, one row per (init, depth, layer)."""
    traces = seed_averaged_traces(baseline(layers), metrics)
    out = group_slopes(traces, ["init", "depth", "layer"], metrics)
    if not traces.empty:
        out["n_seeds"] = (
            traces.groupby(["init", "depth", "layer"], sort=True)["n_seeds"].max().to_numpy()
        )
    return out


def run_slopes(layers: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Slopes (and means) of every per-run layer trajectory, one row per (run, layer)."""
    keys = [c for c in RUN_ID_COLS if c in layers.columns] + ["layer"]
    return group_slopes(layers, keys, metrics)


def _slope_groups(slopes: pd.DataFrame, metrics: Sequence[str]) -> tuple[dict, dict[str, str]]:
    out: dict = {}
    missing: dict[str, str] = {}
    groups = vocab.slope_groups()
    for group, members in groups.items():
        sub = slopes[slopes["init"].isin(members)] if not slopes.empty else slopes
        out[group] = {
            m: count_desc(sub[f"{m}_slope"].to_numpy(float) if not sub.empty else np.array([]))
            for m in metrics
        }
        if all(out[group][m]["n"] == 0 for m in metrics):
            missing[group] = f"no trajectories of {', '.join(members)} with >= 2 logged epochs"
    return out, missing


def slopes_section(layers: pd.DataFrame) -> Section:
    """Table 4: slopes of pr_q, pr_k, pr_q − pr_k over seed-averaged traces, per group.

    ``slopes`` is over seed-averaged traces (the paper's unit); ``slopes_per_run``
    repeats the counts over every per-run layer trajectory.
    """
    base = baseline(layers)
    if base.empty:
        return Section({}, {"slopes": "no baseline runs in the store"})
    ts = trace_slopes(base, SLOPE_METRICS)
    rs = run_slopes(base, SLOPE_METRICS)
    groups, miss = _slope_groups(ts, SLOPE_METRICS)
    groups_run, _ = _slope_groups(rs, SLOPE_METRICS)
    missing = {f"slopes.{g}": r for g, r in miss.items()}
    if len(miss) == len(groups):
        missing = {"slopes": "no baseline trajectory has >= 2 logged epochs"}
    return Section(
        {"slopes": groups, "slopes_per_run": groups_run},
        missing,
        {"trace_slopes": ts, "run_slopes": rs},
    )
