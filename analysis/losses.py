"""Runs lost per arm (SPEC §8): which runs of a claim's arms a statistic could not use, and why.

A run is *lost* when it is in the store but diverged or stopped before its preset's final epoch
(both are left out of every statistic), or — for the baseline, whose unit is a seed across every
(init, depth) — when a seed the baseline holds lacks an (init, depth) cell another seed has. An
intervention run that never wrote a row is invisible here (a ``--seeds auto`` record lists such
losses). When the loss of a run depends on its outcome (a condition run lost when its metric is
high), dropping it biases the claim: the scorecard shows the losses of each arm beside the verdict
and a worst case (``analysis.checks.worst_case``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

#: The columns of the lost-runs frame.
LOST_COLUMNS = ("sweep", "run_id", "init", "depth", "seed", "condition", "reason")


@dataclass(frozen=True)
class Arm:
    """One arm of a claim: a label and the run identity it selects (column -> allowed values)."""

    label: str
    where: dict[str, tuple] = field(default_factory=dict)

    def select(self, runs: pd.DataFrame) -> pd.DataFrame:
        keep = pd.Series(True, index=runs.index)
        for col, values in self.where.items():
            keep &= runs[col].isin(values)
        return runs[keep]


def lost_runs(ids: pd.DataFrame, excluded: dict[str, str]) -> pd.DataFrame:
    """The lost runs of one preset: ``ids`` one row per run of the store (identity columns, before
    any run is dropped), ``excluded`` run_id -> why it was left out of every statistic."""
    if ids.empty:
        return pd.DataFrame(columns=list(LOST_COLUMNS))
    ids = ids.drop_duplicates("run_id")
    out = ids[ids["run_id"].isin(excluded)].assign(reason=lambda d: d["run_id"].map(excluded))
    base = ids[ids["sweep"] == "baseline"]
    if not base.empty:
        cells = base[["init", "depth"]].drop_duplicates()
        seeds = base[["seed"]].drop_duplicates()
        grid = cells.merge(seeds, how="cross")
        have = base[["init", "depth", "seed"]].drop_duplicates()
        absent = grid.merge(have, how="left", indicator=True).query("_merge == 'left_only'").drop(columns="_merge")
        if not absent.empty:
            absent = absent.assign(sweep="baseline", condition="none", reason="absent from the store",
                                   run_id=[f"(baseline {i}, {int(d)} layers, seed {int(s)})"
                                           for i, d, s in zip(absent["init"], absent["depth"], absent["seed"],
                                                              strict=True)])
            out = pd.concat([out, absent], ignore_index=True)
    return out[list(LOST_COLUMNS)].reset_index(drop=True)


def arm_losses(lost: pd.DataFrame | None, arms: tuple[Arm, ...]) -> tuple[dict[str, int], set]:
    """Lost runs per arm (label -> count, every arm listed) and the seeds that lost any."""
    if lost is None or lost.empty or not arms:
        return {a.label: 0 for a in arms}, set()
    counts, seeds = {}, set()
    for a in arms:
        hit = a.select(lost)
        counts[a.label] = int(len(hit))
        seeds |= {int(s) for s in hit["seed"]}
    return counts, seeds
