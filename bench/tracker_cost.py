"""The live tracker path's cost per epoch and run, against the epoch's own training time.

    python -m sweep.baseline --preset demo --depths 2,3 --inits qk_identical --seed-list 37 --epochs 6 \\
        --pack 1 --store /tmp/qkm/store --storage /tmp/qkm/ray --name meas
    python -m bench.tracker_cost --store /tmp/qkm/store [--trackers mlflow,wandb]

Replays what ``sweep.trackers.live.Follower`` does on the driver when a trial reports epoch e
(read that epoch's rows from the store, send them), epoch by epoch for each run of the store, into
fresh tracker folders (W&B offline), and prints per tracker and run: the first epoch (it opens
the tracker run), the median of the later ones, and that median over the median epoch's own
training time (the ``epochs`` table's ``wall_s`` increments: the trainer's steps, without probe
and validation). Once-per-sweep costs (starting the tracker) are printed apart.
Not part of ``bench.run_all``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from sweep.store import Store, store_id
from sweep.trackers import check_trackers, make_trackers
from sweep.trackers.live import Follower
from sweep.trackers.sender import Sender
from sweep.trial.spec import RunIdentity


def measure(store: Store, names: list[str]) -> None:
    runs = store.scan("runs").table.to_pylist()
    epochs = store.read("epochs")
    t = time.perf_counter()
    sender = Sender(make_trackers(names, Path(tempfile.mkdtemp())), say=print)
    sender.start()
    started = time.perf_counter() - t
    follower = Follower(store, sender, store_id(store))
    for row in runs:
        identity = RunIdentity(**{k: row[k] for k in ("sweep", "run_id", "preset", "init", "depth", "seed",
                                                      "condition", "strengths")})
        config = {"spec": {"version": 2, "runs": [identity.row()]}}
        own = epochs[epochs["run_id"] == row["run_id"]].sort_values("epoch")
        costs = []
        for epoch in own["epoch"]:
            t = time.perf_counter()
            follower.result(config, int(epoch))
            costs.append(time.perf_counter() - t)
        later = sorted(costs[2:] or costs[1:])  # epoch 0 opens the run; 1 is the first with gradients
        per_epoch = later[len(later) // 2]
        train = float(own["wall_s"].diff().dropna().median())
        print(f"{','.join(names):<13} depth {row['depth']}: first epoch {costs[0] * 1e3:7.1f} ms, then median "
              f"{per_epoch * 1e3:6.1f} ms (max {later[-1] * 1e3:.1f}); the epoch's own training {train:.2f} s: "
              f"{per_epoch / train * 100:.2f} %")
    t = time.perf_counter()
    sender.stop()
    print(f"{','.join(names):<13} start {started:.2f} s, stop {time.perf_counter() - t:.2f} s (once per sweep)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.tracker_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", required=True, help="a store a sweep wrote (with its runs table)")
    p.add_argument("--trackers", default="mlflow,wandb", help="comma list; each alone, then all together")
    args = p.parse_args(argv)
    names = [n for n in args.trackers.split(",") if n]
    check_trackers("--trackers", names)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.pop("MLFLOW_TRACKING_URI", None)  # a local SQLite store, as a sweep's default
    store = Store(args.store)
    for group in [[n] for n in names] + ([names] if len(names) > 1 else []):
        measure(store, group)


if __name__ == "__main__":
    main()
