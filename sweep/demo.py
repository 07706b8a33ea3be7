"""``make demo``: the whole study at laptop scale, end to end.

1. ``sweep.baseline --preset demo``   (3 depths × 3 inits × 2 seeds on stdlib-docs)
2. ``sweep.interventions --preset demo --seeds 2``   (6 conditions × 2 seeds)
3. ``sweep.tiny_series`` + ``sweep.extension``   (a tiny local character-level GPT-2
   series, built offline into ``runs/tiny-series``, probed for Appendix A)
4. ``sweep.report --preset demo``   (scorecard, statistics, tables, figures, report.md)

The demo preset trains every run past the initial collapse of both
participation ratios into the specialisation phase the paper is about (see
LOG.md for the schedule). ``--quick`` runs the same four steps with the
``quick`` presets: a pipeline check of a few minutes whose runs are far too
short to show the effects (its report says so).

Steps 1–3 share one local Ray instance; outputs land under ``runs/``.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from model.plugins import add_plugin_flag, preload
from sweep.cli import (
    DEFAULT_STORE,
    UsageError,
    add_pack_flags,
    at_least,
    pack_request,
    parser,
    run_cli,
)
from sweep.extension import ExtensionSettings, probe_checkpoints
from sweep.extension.checkpoint_series import load_manifest
from sweep.extension.revision_probe import ProbeSettings
from sweep.extension.tiny_series import build_series
from sweep.options import TrialOptions
from sweep.packing import check_pack
from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS
from sweep.progress import format_duration
from sweep.ray_env import init_ray
from sweep.report import output_target, write_report
from sweep.runner import SweepSettings, run_sweep

PROG = "python -m sweep.demo"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    preload(argv, PROG)
    p = parser(PROG, __doc__)
    add_plugin_flag(p)
    p.add_argument("--store", default=DEFAULT_STORE, help="Parquet store root: a path or s3://bucket/prefix")
    p.add_argument("--storage", default="runs/ray", help="Tune storage: a path or s3://bucket/prefix")
    p.add_argument("--out", help="report folder: a path or a URI like --store's "
                   "(default: runs/report, with --quick runs/report-quick)")
    p.add_argument("--quick", action="store_true",
                   help="the quick presets: a pipeline check in a few minutes, too short to show the effects")
    p.add_argument("--tiny-series", default="runs/tiny-series", help="where the tiny checkpoint series is built")
    p.add_argument("--address", help="join a running Ray cluster (e.g. auto); default: start a local one")
    p.add_argument("--num-cpus", type=int, help="CPUs for the local Ray instance, >= 1 (default: all)")
    add_pack_flags(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run the four steps; a bad value ends it with one line and exit status 2, before Ray starts."""
    run_cli(PROG, argv, _parse, _main)


def _main(args: argparse.Namespace) -> None:
    import ray

    at_least("--num-cpus", args.num_cpus, 1)
    if args.address and args.num_cpus is not None:
        raise UsageError(f"--num-cpus {args.num_cpus} sizes a local Ray; with --address {args.address} "
                         "the cluster's own CPUs are used (drop one of them)")
    pack = pack_request("--pack", args.pack)
    tiny = Path(args.tiny_series)
    if tiny.exists() and not tiny.is_dir():
        raise UsageError(f"--tiny-series {args.tiny_series}: a file is in the way (need a folder)")
    preset = "quick" if args.quick else "demo"
    out = args.out or ("runs/report-quick" if args.quick else "runs/report")
    output_target(out)  # a URI it cannot write is refused now, not after the sweeps
    # a checkpoint every 5 epochs: a crash loses at most 5 short epochs, and 20 checkpoints
    # a run would cost more than a minute of the demo's two cores; every step (and its Ray
    # workers) imports the plugins
    trial = TrialOptions(args.store, args.storage, checkpoint_every=5, plugins=tuple(args.plugin))
    grid = INTERVENTION_PRESETS[preset]
    interventions = replace(grid, seeds=grid.seeds[:2])
    extension = ExtensionSettings(ProbeSettings(args.store, n_seqs=8, seq_len=64, cpus=1.0,
                                                plugins=tuple(args.plugin)), actors=2)

    for grid in (BASELINE_PRESETS[preset], interventions):
        check_pack("--pack", pack, grid.cells())  # before Ray starts
    t0 = time.perf_counter()
    started = init_ray(args.address, args.num_cpus)  # a Ray already running is used and left running
    try:
        print(f"== 1/4 baseline sweep ({preset} preset) · {_elapsed(t0)} ==", flush=True)
        run_sweep(BASELINE_PRESETS[preset],
                  SweepSettings(f"baseline-{preset}", trial, pack=pack, dry_run=args.dry_run))
        print(f"\n== 2/4 interventions ({preset} preset, 2 seeds) · {_elapsed(t0)} ==", flush=True)
        run_sweep(interventions, SweepSettings(f"interventions-{preset}", trial, pack=pack, dry_run=args.dry_run))
        if args.dry_run:
            print("\n== 3/4 checkpoint extension and 4/4 report: not run (dry run) ==")
            return
        print(f"\n== 3/4 checkpoint extension (tiny local series) · {_elapsed(t0)} ==", flush=True)
        manifest = tiny / "manifest.json"
        if not manifest.is_file():
            build_series(args.tiny_series)
        # uses the Ray started above and leaves it running
        probe_checkpoints(load_manifest(manifest, require_paths=True), extension)
    finally:
        if started:
            ray.shutdown()
    print(f"\n== 4/4 report (preset {preset} only) · {_elapsed(t0)} ==", flush=True)
    write_report(args.store, out, preset=preset)
    print(f"\n{'quick demo' if args.quick else 'demo'} finished in {format_duration(time.perf_counter() - t0)}")


def _elapsed(t0: float) -> str:
    return f"elapsed {format_duration(time.perf_counter() - t0)}"


if __name__ == "__main__":
    main()
