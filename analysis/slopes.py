"""SPEC §8 slopes: OLS slopes of pr_q, pr_k and their difference over training."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import claims
from analysis import vocabulary as vocab
from analysis.frames import (
    RUN_ID_COLS,
    baseline,
    post_collapse_start,
    seed_averaged_traces,
    window_slopes,
)
from analysis.primitives import SlopeCount, to_jsonable
from analysis.section import Analysis, Computed, Figure, Inputs, Result, Section

SLOPE_METRICS: tuple[str, ...] = ("pr_q", "pr_k", "pr_q_minus_pr_k")


def trace_slopes(layers: pd.DataFrame, metrics: Sequence[str], start: int | None = None) -> pd.DataFrame:
    """Slopes (and means) of the seed-averaged traces of baseline rows, one row per (init, depth, layer);
    over epochs >= ``start`` too (``<m>_slope_post``: the post-collapse window, SPEC §8)."""
    traces = seed_averaged_traces(baseline(layers), metrics)
    out = window_slopes(traces, ["init", "depth", "layer"], metrics, start)
    if not traces.empty:
        out["n_seeds"] = (
            traces.groupby(["init", "depth", "layer"], sort=True)["n_seeds"].max().to_numpy()
        )
    return out


def run_slopes(layers: pd.DataFrame, metrics: Sequence[str], start: int | None = None) -> pd.DataFrame:
    """Slopes (and means) of every per-run layer trajectory, one row per (run, layer); over epochs
    >= ``start`` too (the post-collapse window)."""
    keys = [c for c in RUN_ID_COLS if c in layers.columns] + ["layer"]
    return window_slopes(layers, keys, metrics, start)


#: group ("uncoupled", "coupled", "pooled") -> metric -> counts of its slopes
SlopeGroups = dict[str, dict[str, SlopeCount]]


@dataclass
class SlopesResult(Result):
    """Table 4: slope counts per init group, over seed-averaged traces and over every run; the same
    over the post-collapse window (epochs >= ``collapse_end``) as a sensitivity."""

    traces: SlopeGroups  # stats.json "slopes": the paper's unit
    per_run: SlopeGroups  # stats.json "slopes_per_run"
    collapse_end: int | None = None  # the first epoch of the post-collapse window (SPEC §8)
    traces_post: SlopeGroups | None = None  # seed-averaged traces over that window
    collapse_source: str = ""  # where e_c comes from
    collapse_fixed: bool = False  # fixed before the data (else chosen on these runs: descriptive)

    def to_json(self) -> dict[str, object]:
        return {"slopes": to_jsonable(self.traces), "slopes_per_run": to_jsonable(self.per_run),
                "slopes_post_collapse": to_jsonable({"collapse_end": self.collapse_end, "traces": self.traces_post,
                                                     "source": self.collapse_source,
                                                     "fixed_before_the_data": self.collapse_fixed})}


def _slope_groups(slopes: pd.DataFrame, metrics: Sequence[str], suffix: str = "") -> tuple[SlopeGroups, dict[str, str]]:
    out: SlopeGroups = {}
    missing: dict[str, str] = {}
    groups = vocab.slope_groups()
    for group, members in groups.items():
        sub = slopes[slopes["init"].isin(members)] if not slopes.empty else slopes
        out[group] = {
            m: SlopeCount.of(sub[f"{m}_slope{suffix}"].to_numpy(float) if not sub.empty else np.array([]))
            for m in metrics
        }
        if all(out[group][m].n == 0 for m in metrics):
            missing[group] = f"no trajectories of {', '.join(members)} with >= 2 logged epochs"
    return out, missing


def compute_slopes(layers: pd.DataFrame, window=None) -> Computed[SlopesResult]:
    """Table 4: slopes of pr_q, pr_k, pr_q − pr_k over seed-averaged traces, per group.

    ``slopes`` is over seed-averaged traces (the paper's unit); ``slopes_per_run``
    repeats the counts over every per-run layer trajectory.
    """
    base = baseline(layers)
    if base.empty:
        return Computed(None, {"slopes": "no baseline runs in the store"})
    start, source, fixed = post_collapse_start(base, window)
    ts = trace_slopes(base, SLOPE_METRICS, start)
    rs = run_slopes(base, SLOPE_METRICS, start)
    groups, miss = _slope_groups(ts, SLOPE_METRICS)
    groups_run, _ = _slope_groups(rs, SLOPE_METRICS)
    post = _slope_groups(ts, SLOPE_METRICS, "_post")[0] if start is not None else None
    missing = {f"slopes.{g}": r for g, r in miss.items()}
    if len(miss) == len(groups):
        missing = {"slopes": "no baseline trajectory has >= 2 logged epochs"}
    if start is None:
        missing["slopes.post_collapse"] = "fewer than 4 logged epochs after epoch 0: no post-collapse window"
    return Computed(SlopesResult(groups, groups_run, start, post, source, fixed), missing,
                    {"trace_slopes": ts, "run_slopes": rs})


def table4_slopes(s: SlopesResult) -> pd.DataFrame | None:
    """Slopes over seed-averaged traces: mean, sd, n, positive, negative per group and metric (every
    logged epoch, the paper's definition), and the same counts over the post-collapse window."""
    rows = []
    for group, metrics in s.traces.items():
        for metric, d in metrics.items():
            post = (s.traces_post or {}).get(group, {}).get(metric)
            rows.append({"group": group, "metric": metric, **to_jsonable(d),
                         "post_collapse_mean": post.mean if post else None,
                         "post_collapse_positive": post.positive if post else None,
                         "post_collapse_negative": post.negative if post else None})
    df = pd.DataFrame(rows)
    return df if (df["n"] > 0).any() else None


def sentence(s: SlopesResult) -> str:
    """How many seed-averaged traces rise or fall, pooled and per group."""
    sl = s.traces
    bits = []
    for metric, verb, key in (
        ("pr_q_minus_pr_k", "pr_q − pr_k rises", "positive"),
        ("pr_k", "pr_k falls", "negative"),
        ("pr_q", "pr_q rises", "positive"),
    ):
        pooled = sl["pooled"][metric]
        groups = ", ".join(
            f"{g} {getattr(sl[g][metric], key)}/{sl[g][metric].n}"
            for g in ("uncoupled", "coupled")
            if sl[g][metric].n
        )
        post = (s.traces_post or {}).get("pooled", {}).get(metric)
        tail = f"; after the collapse {getattr(post, key)}/{post.n}" if post is not None and post.n else ""
        bits.append(f"{verb} in {getattr(pooled, key)} of {pooled.n} seed-averaged traces ({groups}{tail})")
    window = (f" Post-collapse window (SPEC §8): epochs ≥ {s.collapse_end}, the trough of PR_K after "
              f"the initial collapse, {s.collapse_source}; its counts are a sensitivity check of the paper's "
              "fit over every epoch." if s.collapse_end is not None else "")
    return "; ".join(bits) + "." + window


class Slopes(Section[SlopesResult]):
    """SPEC §8 Table 4 and Figure 2."""

    name = "slopes"
    heading = "Table 4 — slopes over seed-averaged traces"
    reads = ("baseline",)
    table_names = ("table4_slopes",)
    figures = (Figure("fig2_pr", "Figure 2 — layer-mean PR_Q and PR_K per init and depth (mean ± sd over "
                      "seeds)", "sweep.report.figures:fig2_pr"),)

    def compute(self, data: Inputs) -> Computed[SlopesResult]:
        return compute_slopes(data.layers, data.window)

    def tables(self, result: SlopesResult) -> dict[str, pd.DataFrame | None]:
        return {"table4_slopes": table4_slopes(result)}

    def prose(self, result: SlopesResult) -> list[str]:
        return [sentence(result)]

    def claims(self, an: Analysis, paper_scale: bool) -> list[claims.Claim]:
        return claims.slope_claims(an)


SECTION = Slopes()
