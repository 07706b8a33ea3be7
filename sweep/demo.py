"""``make demo``: the whole study at laptop scale, end to end.

1. ``sweep.baseline --preset demo``   (3 depths × 3 inits × the preset's seeds on stdlib-docs)
2. ``sweep.interventions --preset demo``   (6 conditions × the preset's seeds)
   ``--seeds auto``: both sweeps in rounds of seeds until each claim is decided, the baseline's and
   the interventions' claims one family with one family-wise error (docs/seeds.md)
3. ``sweep.tiny_series`` + ``sweep.extension``   (a tiny local character-level GPT-2
   series, built offline into ``runs/tiny-series``, probed for Appendix A)
4. ``sweep.report --preset demo``   (scorecard, statistics, tables, figures, report.md)

The demo preset trains every run past the initial collapse of both
participation ratios into the specialisation phase the paper is about (see
LOG.md for the schedule). ``--paper-depths`` runs the ``paper-depths`` presets
instead: the paper's depths 4/6/8 (interventions: 8 layers, 5 seeds) at the
demo width, long enough for Table 4's counts. ``--quick`` runs the same four
steps with the ``quick`` presets: a pipeline check of a couple of minutes whose
runs are far too short to show the effects (its report says so).

Before training, every tier times a few optimiser steps per depth on this
machine (``sweep.estimate``, a few seconds) and prints how long it expects to
take on the cores it will use (a demo run again counts only the runs the store
does not hold yet: the work left); at the end it prints that estimate next to the
measured time, and each sweep prints the share of the machine it turned into
training. Steps 1–3 share one local Ray instance; outputs land under ``runs/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from analysis.sequential_limits import FIRST_LOOK
from model.plugins import Plugins, add_plugin_flag, preload
from sweep.auto_flags import add_auto_flags, auto_from_args
from sweep.cli import (
    DEFAULT_STORE,
    UsageError,
    add_pack_flags,
    local_ray_sizes,
    pack_request,
    parser,
    run_cli,
)
from sweep.gpu_flags import add_gpu_flags, gpu_options
from sweep.trackers import add_tracker_flags, check_trackers, trackers_from_args

PROG = "python -m sweep.demo"
#: Tiny series, extension probe and report after the sweeps (measured: 35 s + 9 s, LOG.md).
REST_S = 45.0
#: Steps timed per depth before training (plus one warm-up step and one probe).
TIMED_STEPS = 3
#: What ``--seeds auto`` tells a demo whose stored design differs (the demo has no --name).
NEW_DESIGN = ("a new design needs a new experiment: another --store, or the sweeps one by one with --name "
              "(python -m sweep.baseline / sweep.interventions --seeds auto)")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    preload(argv, PROG)
    p = parser(PROG, __doc__)
    add_plugin_flag(p)
    add_pack_flags(p)
    add_tracker_flags(p)
    p.add_argument("--store", default=DEFAULT_STORE, help="Parquet store root: a path or s3://bucket/prefix")
    p.add_argument("--storage", default="runs/ray", help="Tune storage: a path or s3://bucket/prefix")
    p.add_argument("--out", help="report folder: a path or a URI like --store's "
                   "(default: runs/report, runs/report-quick, runs/report-paper-depths)")
    p.add_argument("--quick", action="store_true",
                   help="the quick presets: a pipeline check in a few minutes, too short to show the effects")
    p.add_argument("--paper-depths", action="store_true",
                   help="the paper's depths 4/6/8 and 8-layer interventions (all 5 seeds) at the demo width, "
                   "long enough for Table 4's counts (default report: runs/report-paper-depths)")
    p.add_argument("--tiny-series", default="runs/tiny-series", help="where the tiny checkpoint series is built")
    p.add_argument("--address", help="join a running Ray cluster (e.g. auto); default: start a local one")
    add_gpu_flags(p)
    p.add_argument("--num-cpus", type=int, help="CPUs for the local Ray instance, >= 1 (default: all)")
    p.add_argument("--progress-tables", action="store_true",
                   help="print Tune's full trial status table at every report (default: one progress line)")
    p.add_argument("--seeds", choices=["auto"], help="steps 1 and 2 add seeds in rounds until each baseline and "
                   "intervention claim is decided, one family-wise error over both (docs/seeds.md; default: the "
                   "tier's fixed seeds)")
    add_auto_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the four steps; a bad value ends it with one line and exit status 2, before Ray starts.
    Returns the exit status: 1 when a sweep ended with a run in error (the other steps still run)."""
    return run_cli(PROG, argv, _parse, _main)


def _main(args: argparse.Namespace) -> int:
    # what trains, probes and reports: imported once the flags are parsed (--help answers sooner)
    import ray

    from sweep.estimate import (
        BUSY,
        busy,
        describe_costs,
        expected_line,
        idle,
        measure,
        minutes,
        sweep_seconds,
    )
    from sweep.extension import ExtensionSettings, probe_checkpoints
    from sweep.extension.checkpoint_series import load_manifest
    from sweep.extension.revision_probe import ProbeSettings
    from sweep.extension.tiny_series import build_series
    from sweep.options import TrialOptions
    from sweep.packing import check_pack
    from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS
    from sweep.progress import format_duration  # imports Ray Tune (its reporter)
    from sweep.ray_env import absolute_uri, init_ray
    from sweep.report import output_target, write_report
    from sweep.runner import prepare_corpus, run_sweep
    from sweep.sequential import joint_experiments, run_auto
    from sweep.sequential_record import read_record
    from sweep.sequential_state import seed_sequence
    from sweep.settings import SweepSettings
    from sweep.store import Store
    from sweep.summary import exit_status

    local_ray_sizes(args.address, args.num_cpus)
    trackers = trackers_from_args(args)
    check_trackers("--tracker", trackers)  # known, and installed: before anything is timed or created
    tiny = Path(args.tiny_series)
    if tiny.exists() and not tiny.is_dir():
        raise UsageError(f"--tiny-series {args.tiny_series}: a file is in the way (need a folder)")
    if args.quick and args.paper_depths:
        raise UsageError("--quick and --paper-depths are two different tiers: give one of them")
    preset = "quick" if args.quick else "paper-depths" if args.paper_depths else "demo"
    pack = pack_request("--pack", args.pack)
    auto = auto_from_args(args)  # --seeds auto: checked now (--max-seeds, --alpha)
    out = args.out or ("runs/report" if preset == "demo" else f"runs/report-{preset}")
    output_target(out)  # a URI it cannot write is refused now, not after the sweeps
    # a checkpoint every 5 epochs: a crash loses at most 5 short epochs, and 20 checkpoints
    # a run would cost more than a minute of the demo's two cores; every step (and its Ray
    # workers) imports the plugins
    trial = TrialOptions(args.store, args.storage, checkpoint_every=5, **gpu_options(args))
    plugins = Plugins.from_args(args)  # one value for every trial and probe actor
    baseline = BASELINE_PRESETS[preset]
    grid = INTERVENTION_PRESETS[preset]
    # every tier runs its preset's seeds: enough for the scorecard's test to decide a direction
    # (SPEC §8), and none of them chose the schedule (SPEC §10)
    interventions, first_baseline = grid, baseline
    names = (f"baseline-{preset}-auto", f"interventions-{preset}-auto")
    if auto is not None:  # timed and estimated for the first round; later rounds only as needed
        interventions = replace(grid, seeds=seed_sequence(grid.seeds, FIRST_LOOK, grid.schedule_seeds))
        first_baseline = replace(baseline, seeds=seed_sequence(baseline.seeds, FIRST_LOOK, baseline.schedule_seeds))
    extension = ExtensionSettings(ProbeSettings(args.store, n_seqs=8, seq_len=64, cpus=1.0,
                                                plugins=plugins), actors=2)

    for grid_ in (baseline, interventions):
        check_pack("--pack", pack, grid_.cells())  # before Ray starts
    done = _epochs_done(args.store, (first_baseline, interventions), trial.checkpoint_every)
    t0 = time.perf_counter()
    # timed before Ray starts, so that its processes do not compete with the timing
    costs = measure([baseline, interventions], prepare_corpus(baseline), steps=TIMED_STEPS)
    started = init_ray(args.address, args.num_cpus)  # a Ray already running is used and left running
    try:
        cores = int(ray.cluster_resources().get("CPU", 1))
        expected = {"baseline": sweep_seconds(first_baseline, costs, cores, done=done),
                    "interventions": sweep_seconds(interventions, costs, cores, done=done), "rest": REST_S}
        print(f"{expected_line(expected, cores, (first_baseline, interventions), done, auto is not None)}; timed "
              f"here in {format_duration(time.perf_counter() - t0)}: {describe_costs(costs)}", flush=True)
        if busy(costs) > BUSY:
            quiet = sum((sweep_seconds(first_baseline, idle(costs), cores, done=done),
                         sweep_seconds(interventions, idle(costs), cores, done=done), REST_S))
            print(f"(the machine is busy: the timed steps took {busy(costs):.1f}× their own CPU time; "
                  f"with the cores to itself {'the work left' if done else 'the demo'} would take ≈ "
                  f"{minutes(quiet)})", flush=True)
        if preset == "quick":
            print("(--quick is a pipeline check: its runs end inside the initial collapse, far too short to "
                  "show the paper's effects; `make demo` shows them)", flush=True)
        measured: dict[str, float] = {}
        seeds_text = f"seeds auto, up to {auto.max_seeds}" if auto is not None else None

        def settings(name: str) -> SweepSettings:
            return SweepSettings(name, trial, pack=pack, dry_run=args.dry_run, plugins=plugins, trackers=trackers,
                                 tracker_dir=args.tracker_dir, name_given=False, progress_tables=args.progress_tables)

        print(f"\n== 1/4 baseline sweep ({preset} preset{', ' + seeds_text if auto else ''}) · {_elapsed(t0)} ==",
              flush=True)
        t = time.perf_counter()
        if auto is not None:  # one family with the interventions' claims (SPEC §8)
            first, _ = joint_experiments(baseline, grid, auto, names)
            errored = exit_status(run_auto(baseline, settings(names[0]), auto, exp=first, new_design=NEW_DESIGN))
        else:
            errored = exit_status(run_sweep(baseline, settings(f"baseline-{preset}")))
        measured["baseline"] = time.perf_counter() - t
        print(f"\n== 2/4 interventions ({preset} preset, {seeds_text or f'{len(interventions.seeds)} seeds'}) · "
              f"{_elapsed(t0)} ==", flush=True)
        t = time.perf_counter()
        if auto is not None:  # from the baseline's decisions and its claims' looks
            record = None if args.dry_run else read_record(Store(absolute_uri(args.store)), names[0])
            _, second = joint_experiments(baseline, grid, auto, names, first_record=record)
            errored |= exit_status(run_auto(grid, settings(names[1]), auto, exp=second, new_design=NEW_DESIGN))
        else:
            errored |= exit_status(run_sweep(interventions, settings(f"interventions-{preset}")))
        measured["interventions"] = time.perf_counter() - t
        if args.dry_run:
            print("\n== 3/4 checkpoint extension and 4/4 report: not run (dry run) ==")
            return 0
        print(f"\n== 3/4 checkpoint extension (tiny local series) · {_elapsed(t0)} ==", flush=True)
        t = time.perf_counter()
        manifest = tiny / "manifest.json"
        if not manifest.is_file():
            build_series(args.tiny_series)
        # uses the Ray started above and leaves it running
        probe_checkpoints(load_manifest(manifest, require_paths=True), extension)
    finally:
        if started:
            ray.shutdown()
    print(f"\n== 4/4 report (preset {preset} only) · {_elapsed(t0)} ==", flush=True)
    write_report(args.store, out, preset=preset, trackers=trackers, tracker_dir=args.tracker_dir)
    measured["rest"] = time.perf_counter() - t
    total = time.perf_counter() - t0
    print(f"\n{'quick demo' if preset == 'quick' else 'demo' if preset == 'demo' else 'paper-depths demo'} "
          f"finished in {format_duration(total)} on {cores} cores ({'work left' if done else 'expected'} ≈ "
          f"{minutes(sum(expected.values()))}{', first rounds' if auto else ''}):")
    for part in ("baseline", "interventions", "rest"):
        label = {"rest": "series, extension, report"}.get(part, f"{part} sweep")
        print(f"  {label:<26} expected {format_duration(expected[part]):>12}  measured "
              f"{format_duration(measured[part]):>12}")
    if errored:
        print("a sweep ended with a run in error (its lines above): the demo exits 1", flush=True)
    return errored


def _epochs_done(store: str, presets, checkpoint_every: int) -> dict[str, int]:
    """What a demo run again need not train (``sweep.estimate.epochs_done``; no store yet: nothing)."""
    from sweep.estimate import epochs_done
    from sweep.ray_env import absolute_uri
    from sweep.store import Store, StoreError

    try:
        s = Store(absolute_uri(store))
        if not s.exists():
            return {}
        frames = [s.read("epochs", sweep=sweep, columns=["run_id", "epoch"]) for sweep in ("baseline", "interventions")]
    except (StoreError, OSError):
        return {}
    import pandas as pd

    return epochs_done(pd.concat(frames, ignore_index=True), presets, checkpoint_every)


def _elapsed(t0: float) -> str:
    from sweep.progress import format_duration

    return f"elapsed {format_duration(time.perf_counter() - t0)}"


if __name__ == "__main__":
    sys.exit(main())
