"""What a sweep prints when it ends and the status it exits with: one row per run (a pack's members
each their own), the sweep's efficiency, where the trackers' runs are (``run_sweep`` calls these)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from sweep.trial.spec import cell_of, runs_of

if TYPE_CHECKING:  # pandas loads where a table is built: ``exit_status`` is imported by every command
    import pandas as pd


def strength_tag(strengths: dict[str, float]) -> str:
    """``-lam0.2`` for a cell away from its condition's default strengths (SPEC §5), else ``""``."""
    return "".join(f"-{k}{v:g}" for k, v in sorted((strengths or {}).items()))


def exit_status(summary: pd.DataFrame | None) -> int:
    """A sweep command's exit status: 1 when a run ended in error (a lost run), else 0. ``--seeds
    auto`` returns its claims, marked ``attrs["errored"]`` when a round lost a run."""
    if summary is not None and summary.attrs.get("errored"):
        return 1
    if summary is None or "status" not in summary:
        return 0
    return int(bool((summary["status"] == "error").any()))


def summarize(results) -> pd.DataFrame:
    """One row per run (a pack's members each get their own): its cell, status and last metrics."""
    import pandas as pd

    rows = []
    for r in results:
        m = r.metrics or {}
        runs = runs_of(r.config)
        strengths = cell_of(r.config).get("strengths")
        for i, run in enumerate(runs):
            own = (m.get("members") or {}).get(str(i), m) if len(runs) > 1 else m
            wall_s = own.get("wall_s")
            rows.append({"condition": run.condition + strength_tag(strengths), "init": run.init,
                         "depth": run.depth, "seed": run.seed,
                         "status": "error" if r.error else own.get("status", "?"),
                         "epoch": own.get("epoch"), "val_loss": own.get("val_loss"),
                         "qk_alignment": own.get("qk_alignment"), "attn_entropy": own.get("attn_entropy"),
                         # a pack's members share one trainer's time: each carries its share
                         "wall_s": None if wall_s is None else wall_s / len(runs)})
    return pd.DataFrame(rows).sort_values(["condition", "init", "depth", "seed"], ignore_index=True)


def sweep_efficiency(summary: pd.DataFrame, wall: float, cores: float) -> float | None:
    """The share of the machine the sweep turned into training: the trainers' own time (steps only;
    probes, validation, store writes, checkpoints and Ray excluded) / cores ÷ the sweep's wall time."""
    import pandas as pd

    train = pd.to_numeric(summary.get("wall_s"), errors="coerce").dropna() if "wall_s" in summary else None
    if train is None or train.empty or wall <= 0 or cores <= 0:
        return None
    return float(train.sum()) / cores / wall


def print_efficiency(name: str, summary: pd.DataFrame, wall: float, cores: float) -> None:
    ratio = sweep_efficiency(summary, wall, cores)
    if ratio is None:
        return
    import pandas as pd

    train = float(pd.to_numeric(summary["wall_s"], errors="coerce").sum())
    print(f"[{name}] efficiency {ratio:.2f}: the trainers' own training time {train:.0f} s / {cores:g} cores "
          f"over the sweep's {wall:.0f} s (the rest: per-epoch probes and validation, store writes, "
          "checkpoints, trial start, Ray, other programs)", flush=True)


def print_trackers(name: str, live, runs: int, export: str) -> None:
    """One line per tracker: where its runs are (the command that opens or syncs them), or that it
    failed, why, and the ``sweep.store export`` command that sends what it missed."""
    failed = live.failed()
    for tracker in live.trackers:
        if tracker.name in failed:
            print(f"{tracker.name + ':':<12} FAILED ({failed[tracker.name]}): the runs are in the store; "
                  f"send what it missed with: {export}")
        else:
            print(f"{tracker.name + ':':<12} {runs} runs, experiment {name}: {tracker.where()}")
    sys.stdout.flush()


def print_summary(name: str, summary: pd.DataFrame, wall: float, store: str, experiment: str,
                  trials: int | None = None) -> None:
    shown = summary.copy().drop(columns="wall_s", errors="ignore")
    if shown["condition"].nunique() == 1:
        shown = shown.drop(columns="condition")
    packed = f"{len(summary)} runs in {trials} trials" if trials not in (None, len(summary)) else None
    print(f"\n[{name}] {packed or f'{len(summary)} trials'} in {wall:.0f} s; status: "
          + ", ".join(f"{k} {v}" for k, v in summary["status"].value_counts().items()))
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"\nstore:       {store}")
    print(f"experiment:  {experiment}   (browse: python -m sweep.browse {experiment})")
    print(f"tensorboard: tensorboard --logdir {experiment}")
    sys.stdout.flush()
