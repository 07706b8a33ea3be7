"""Benchmark 3: how much of the machine a Ray Tune sweep turns into training.

    python -m bench.sweep_overhead [--depths 4] [--inits independent_xavier,qk_identical]
        [--seeds 2] [--epochs 6] [--steps-per-epoch 130] [--cpus-per-trial 1] [--num-cpus N]
        [--quick|--tiny]

B (in-process): every trial of the grid run back to back in this process,
``Trainer(...).run()`` with no callback, torch threads = cpus per trial,
each timed from Trainer construction to the end of its last epoch (so it
includes the per-epoch probe and validation, but no store writes).

A (Ray): the same grid through ``sweep.driver.runner.run_sweep`` (the demo
preset with the same overrides) into a temporary store and Tune storage,
timed around the whole call: Ray start, corpus hand-off, Tune, store writes,
checkpoints, Ray shutdown.

    concurrency = min(trials, CPUs / cpus_per_trial)
    efficiency  = (mean in-process trial time × trials / concurrency) / Ray wall time

Target ≥ 0.8 for trials of ≥ 30 s. On a machine where other processes
compete for the cores, the Ray side (which keeps every core busy) loses more
to them than the one-core in-process side; the load average before and after
is printed, and ``train_inflation`` (the trials' own training time under Ray,
from the store's ``wall_s``, over the same in-process) separates that
contention from Ray's fixed costs.

Control (``--control``, on by default except with --quick/--tiny): the same
trials in ``concurrency`` plain worker processes (``ProcessPoolExecutor``,
spawn, same threads), timed from pool start to the last result. It suffers
the same core contention as Ray but none of Ray's costs, so
``efficiency_vs_plain = plain wall / Ray wall`` is Ray's own share.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from bench.common import machine, print_ratio

if TYPE_CHECKING:
    from sweep.presets import Preset


def grid_argv(args: argparse.Namespace) -> list[str]:
    """The grid as ``sweep.baseline`` flags (how it is printed and recorded)."""
    return ["--preset", args.preset, "--depths", args.depths, "--inits", args.inits,
            "--seeds", str(args.seeds), "--epochs", str(args.epochs),
            "--steps-per-epoch", str(args.steps_per_epoch)]


def grid_preset(argv: list[str]) -> Preset:
    """The baseline preset those flags select, checked as ``sweep.baseline`` checks them."""
    from sweep.baseline import parse
    from sweep.presets import BASELINE_PRESETS, preset_from_args

    return preset_from_args(parse(argv), BASELINE_PRESETS)


def in_process(preset: Preset, cpus_per_trial: int) -> dict[str, Any]:
    """Run the preset's trials back to back here; per-trial wall and training seconds."""
    from model.stack import Member
    from model.trainer import Trainer
    from sweep.driver.runner import prepare_corpus

    corpus = prepare_corpus(preset)
    previous = torch.get_num_threads()
    torch.set_num_threads(cpus_per_trial)
    trials = []
    try:
        for cell in preset.cells():
            t0 = time.perf_counter()
            trainer = Trainer(preset.model_config(cell.depth, corpus.vocab_size),
                              [Member(cell.init, cell.seed, preset.train_config(cell.seed, "cpu"))], corpus)
            [status] = trainer.run()
            trials.append({"run_id": cell.run_id, "init": cell.init, "depth": cell.depth, "seed": cell.seed,
                           "status": status, "wall_s": time.perf_counter() - t0, "train_s": trainer.wall_s[0]})
            print(f"  in-process {cell.init} L{cell.depth} s{cell.seed}: {trials[-1]['wall_s']:.1f} s "
                  f"(training {trainer.wall_s[0]:.1f} s)", flush=True)
    finally:
        torch.set_num_threads(previous)
    return {"trials": trials, "preset": preset.name}


def _plain_trial(job: tuple[Preset, int, int]) -> dict[str, Any]:
    """One trial in a plain worker process (the control)."""
    preset, index, threads = job
    torch.set_num_threads(threads)
    from model.stack import Member
    from model.trainer import Trainer
    from sweep.driver.runner import prepare_corpus

    corpus = prepare_corpus(preset)
    cell = preset.cells()[index]
    t0 = time.perf_counter()
    trainer = Trainer(preset.model_config(cell.depth, corpus.vocab_size),
                      [Member(cell.init, cell.seed, preset.train_config(cell.seed, "cpu"))], corpus)
    [status] = trainer.run()
    return {"run_id": cell.run_id, "status": status, "wall_s": time.perf_counter() - t0,
            "train_s": trainer.wall_s[0]}


def plain_parallel(preset: Preset, n: int, cpus_per_trial: int, concurrency: int) -> dict[str, Any]:
    """The control: the trials in ``concurrency`` plain processes, no Ray."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=concurrency, mp_context=multiprocessing.get_context("spawn")) as ex:
        trials = list(ex.map(_plain_trial, [(preset, i, cpus_per_trial) for i in range(n)]))
    return {"wall_s": time.perf_counter() - t0, "trials": trials}


def through_ray(preset: Preset, cpus_per_trial: int, num_cpus: int, workdir: Path,
                verbose: bool) -> dict[str, Any]:
    """``sweep.driver.runner.run_sweep`` into ``workdir``; wall time of the whole call."""
    from sweep.driver.runner import run_sweep
    from sweep.driver.settings import SweepSettings
    from sweep.trial.options import TrialOptions

    log = workdir / "ray_sweep.log"
    trial = TrialOptions(str(workdir / "store"), str(workdir / "ray"), cpus_per_trial=cpus_per_trial,
                         gpus_per_trial=0)
    settings = SweepSettings("bench", trial, num_cpus=num_cpus, max_failures=0, pack=1)  # a trial per run
    t0 = time.perf_counter()
    with open(log, "w") as f:
        redirect = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(f)
        try:
            with redirect:
                summary = run_sweep(preset, settings)
        except BaseException:
            sys.stdout.write(log.read_text()[-4000:])
            raise
    wall = time.perf_counter() - t0
    import pandas as pd

    epochs = pd.read_parquet(workdir / "store" / "epochs")
    train_s = epochs.groupby("run_id")["wall_s"].max().to_dict()
    return {"wall_s": wall, "statuses": summary["status"].tolist(), "train_s": train_s,
            "tune_trials": tune_trial_times(workdir / "ray" / "bench"), "log": str(log)}


def tune_trial_times(experiment: Path) -> list[dict[str, Any]]:
    """Per trial, from Tune's result.json: time to the first report (trainable set-up, Trainer,
    epoch-0 probe and validation, store write, checkpoint) and the trial's total time in the
    trainable (Tune's ``time_total_s``)."""
    import json

    trials = []
    for path in sorted(experiment.glob("*/result.json")):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if lines:
            trials.append({"trial": path.parent.name, "first_report_s": lines[0]["time_this_iter_s"],
                           "time_total_s": lines[-1]["time_total_s"], "reports": len(lines)})
    return trials


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.sweep_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="demo")
    p.add_argument("--depths", default="4")
    p.add_argument("--inits", default="independent_xavier,qk_identical")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--steps-per-epoch", type=int, default=130)
    p.add_argument("--cpus-per-trial", type=int, default=1)
    p.add_argument("--num-cpus", type=int, default=0, help="CPUs given to Ray (0: all of this machine's)")
    p.add_argument("--workdir", help="where the temporary store and Tune storage go (default: a temp dir)")
    p.add_argument("--verbose", action="store_true", help="show Tune's output instead of logging it")
    p.add_argument("--control", action=argparse.BooleanOptionalAction, default=None,
                   help="also run the plain-process control (default: on, off with --quick/--tiny)")
    p.add_argument("--quick", action="store_true", help="shorter trials (≈ 5 s): overhead dominates")
    p.add_argument("--tiny", action="store_true", help="smoke test: the smoke preset, 1 trial")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.control is None:
        args.control = not (args.quick or args.tiny)
    if args.quick:
        args.steps_per_epoch, args.epochs = 20, 3
    if args.tiny:
        args.preset, args.depths, args.inits, args.seeds = "smoke", "1", "independent_xavier", 1
        args.epochs, args.steps_per_epoch = 1, 2
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # our own throw-away local cluster only
    cpus = args.num_cpus or os.cpu_count() or 1
    argv_grid = grid_argv(args)
    load_before = machine()["loadavg_1_5_15"]
    print(f"bench.sweep_overhead: {' '.join(argv_grid)}; {cpus} CPUs, {args.cpus_per_trial} per trial",
          flush=True)
    preset = grid_preset(argv_grid)
    local = in_process(preset, args.cpus_per_trial)
    n = len(local["trials"])
    concurrency = max(1, min(n, cpus // args.cpus_per_trial))
    with contextlib.ExitStack() as stack:
        if args.workdir:
            workdir = Path(args.workdir)
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="qkgeom-bench-")))
        ray = through_ray(preset, args.cpus_per_trial, cpus, workdir, args.verbose)
    control = plain_parallel(preset, n, args.cpus_per_trial, concurrency) if args.control else None
    mean_trial = sum(t["wall_s"] for t in local["trials"]) / n
    ideal = mean_trial * n / concurrency
    efficiency = ideal / ray["wall_s"]
    local_train = {t["run_id"]: t["train_s"] for t in local["trials"]}
    inflation = [ray["train_s"][k] / v for k, v in local_train.items() if k in ray["train_s"] and v > 0]
    train_inflation = sum(inflation) / len(inflation) if inflation else float("nan")
    out = {
        "benchmark": "sweep_overhead", "grid": argv_grid, "trials": n, "cpus": cpus,
        "cpus_per_trial": args.cpus_per_trial, "concurrency": concurrency,
        "in_process": local["trials"], "results": local["trials"], "mean_trial_s": mean_trial, "ideal_wall_s": ideal,
        "ray_wall_s": ray["wall_s"], "ray_statuses": ray["statuses"], "ray_train_s": ray["train_s"],
        "train_inflation": train_inflation, "efficiency": efficiency, "ratio": efficiency,
        "plain_parallel_wall_s": control["wall_s"] if control else None,
        "plain_parallel_trials": control["trials"] if control else None,
        "efficiency_plain_parallel": ideal / control["wall_s"] if control else None,
        "efficiency_vs_plain": control["wall_s"] / ray["wall_s"] if control else None,
        "target": ">= 0.8 for trials >= 30 s", "met": efficiency >= 0.8 and mean_trial >= 30,
        "load_before": load_before, "load_after": machine()["loadavg_1_5_15"], "machine": machine(),
    }
    print(f"  {n} trials, mean in-process trial {mean_trial:.1f} s, concurrency {concurrency}: "
          f"ideal {ideal:.1f} s, Ray wall {ray['wall_s']:.1f} s; statuses {ray['statuses']}")
    print(f"  training time inside Ray trials / in-process: {train_inflation:.2f} "
          f"(> 1: the concurrent trials compete for cores)")
    tt = ray["tune_trials"]
    if tt:
        out["ray_first_report_mean_s"] = sum(t["first_report_s"] for t in tt) / len(tt)
        out["ray_trial_total_mean_s"] = sum(t["time_total_s"] for t in tt) / len(tt)
        print(f"  inside Ray: mean trial time in the trainable {out['ray_trial_total_mean_s']:.1f} s, of which "
              f"{out['ray_first_report_mean_s']:.1f} s to the first (epoch-0) report; the rest of the Ray "
              f"wall is Ray start/stop, actor start-up and scheduling")
    if control:
        print(f"  control: the same trials in {concurrency} plain processes: {control['wall_s']:.1f} s "
              f"(efficiency {out['efficiency_plain_parallel']:.2f}); Ray wall / plain wall = "
              f"{ray['wall_s'] / control['wall_s']:.2f}, efficiency vs plain {out['efficiency_vs_plain']:.2f}")
    print(f"  load average before {load_before}, after {out['load_after']}")
    print_ratio(f"sweep_overhead scheduling efficiency (trial {mean_trial:.0f} s)", efficiency,
                ">= 0.8 for trials >= 30 s")
    return out


if __name__ == "__main__":
    main()
