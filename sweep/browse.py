"""``python -m sweep.browse [EXPERIMENT]``: Tune's view of a sweep from the command line.

Lists every trial (status, cell, epochs done, last metrics) from Tune's own
experiment state via ``tune.ExperimentAnalysis``; ``--trial`` shows one
trial's per-epoch history (a pack's: one row per member and epoch). A pack's
row lists its members' inits and seeds and its size (``pack``). EXPERIMENT is an experiment folder (local or
``s3://``); by default the most recently changed one under ``--storage``. A local path may be
relative to the working directory: it is made absolute before Tune reads it (Tune takes only
absolute paths and URIs).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sweep.cli import UsageError, existing_path, parser, run_cli
from sweep.placement.ray_env import absolute_uri

if TYPE_CHECKING:  # the run spec (torch, through the registries) and pandas load after the flags
    import pandas as pd

    from sweep.trial.spec import RunIdentity

#: a trial's cell (``sweep.trial.spec.TrialSpec.cell``) as Tune flattens it; experiments started before the run
#: spec (version 1) kept it under ``config/cell/`` and named the condition ``intervention``
CELL_COLUMNS = {f"config/spec/cell/{k}": v for k, v in
                (("condition", "condition"), ("init", "init"), ("depth", "depth"), ("seed", "seed"), ("pack", "pack"))}
V1_CELL_COLUMNS = {"config/cell/intervention": "condition", **{f"config/cell/{k}": v for k, v in
                                                               (("init", "init"), ("depth", "depth"),
                                                                ("seed", "seed"), ("pack", "pack"))}}
METRIC_COLUMNS = ["epoch", "status", "val_loss", "qk_alignment", "pr_q", "pr_k", "attn_entropy"]


def experiment_analysis(path: str):
    """``tune.ExperimentAnalysis`` of an experiment folder given as a URI or a local path,
    relative ones included (``runs/ray/baseline-demo`` from the repository root)."""
    from ray import tune

    return tune.ExperimentAnalysis(absolute_uri(path))


def latest_experiment(storage: str) -> str:
    """The most recently modified experiment folder under a local storage path (absolute)."""
    root = Path(storage)
    candidates = [p for p in root.glob("*") if p.is_dir() and any(p.glob("experiment_state-*.json"))]
    if not candidates:
        raise UsageError(f"--storage {storage}: no Tune experiment under {root.resolve()}; "
                         "run a sweep first or pass the experiment path")
    return absolute_uri(str(max(candidates, key=lambda p: p.stat().st_mtime)))


def trials_table(analysis) -> pd.DataFrame:
    """One row per trial: id, Tune status, cell, last metrics."""
    last = analysis.dataframe()
    status = {t.trial_id: t.status for t in analysis.trials}
    table = last.rename(columns={**V1_CELL_COLUMNS, **CELL_COLUMNS})
    table.insert(0, "tune_status", table["trial_id"].map(status))
    if "pack" in table.columns:  # unpacked trials of a sweep with packs: one run each
        table["pack"] = table["pack"].fillna(1).astype(int)
    cols = ["trial_id", "tune_status", *CELL_COLUMNS.values(), *METRIC_COLUMNS]
    table = table[[c for c in cols if c in table.columns]]
    return table.sort_values([c for c in ("condition", "init", "depth", "seed") if c in table.columns],
                             ignore_index=True)


def trial_history(analysis, trial: str) -> pd.DataFrame:
    """Per-epoch results of the trial whose id or name matches ``trial`` (a pack's: per member)."""
    for t in analysis.trials:
        if trial in (t.trial_id, str(t)):
            frame = analysis.trial_dataframes[t.trial_id]
            from sweep.trial.spec import runs_of

            runs = runs_of(t.config)
            if len(runs) > 1:
                return member_history(frame, runs)
            return frame[[c for c in ["training_iteration", *METRIC_COLUMNS, "train_loss", "tokens_per_s"]
                          if c in frame.columns]]
    names = ", ".join(f"{t.trial_id} ({t})" for t in analysis.trials)
    raise UsageError(f"--trial {trial!r}: no such trial; trials: {names}")


def member_history(frame: pd.DataFrame, members: Sequence[RunIdentity]) -> pd.DataFrame:
    """A pack's history, one row per (member, reported epoch): init, seed and the member's own metrics."""
    parts = []
    for i, m in enumerate(members):
        cols = {c: c.split("/", 2)[2] for c in frame.columns if c.startswith(f"members/{i}/")}
        part = frame[list(cols)].rename(columns=cols)
        part.insert(0, "seed", m.seed)
        part.insert(0, "init", m.init)
        parts.append(part)
    import pandas as pd

    table = pd.concat(parts, ignore_index=True)
    cols = ["init", "seed", *[c for c in [*METRIC_COLUMNS, "train_loss", "tokens_per_s"] if c in table.columns]]
    return table[cols].dropna(subset=["epoch"]).drop_duplicates(["init", "seed", "epoch"], keep="last")


PROG = "python -m sweep.browse"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = parser(PROG, __doc__)
    p.add_argument("experiment", nargs="?", help="experiment folder (default: latest under --storage)")
    p.add_argument("--storage", default="runs/ray", help="where sweeps keep Tune experiments")
    p.add_argument("--trial", help="trial id or name: show its per-epoch history")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Print the trials (or one trial's history); a bad path is one line and exit status 2."""
    run_cli(PROG, argv, _parse, _main)


def _main(args: argparse.Namespace) -> None:
    if args.experiment:
        existing_path("experiment", args.experiment, kind="dir")
        if "://" not in args.experiment and not any(Path(args.experiment).glob("experiment_state-*.json")):
            raise UsageError(f"experiment {args.experiment}: not a Tune experiment folder "
                             "(no experiment_state-*.json)")
    path = absolute_uri(args.experiment) if args.experiment else latest_experiment(args.storage)
    analysis = experiment_analysis(path)
    fmt = {"float_format": lambda v: f"{v:.4f}", "index": False}
    if args.trial:
        print(trial_history(analysis, args.trial).to_string(**fmt))
    else:
        table = trials_table(analysis)
        print(f"{path}: {len(table)} trials; " + ", ".join(
            f"{k} {v}" for k, v in table["tune_status"].value_counts().items()))
        print(table.to_string(**fmt))
    print(f"\ntensorboard --logdir {path}")


if __name__ == "__main__":
    main()
