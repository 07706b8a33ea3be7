"""Run the CPU benchmarks in sequence and write one JSON of their figures.

    python -m bench.run_all [--quick] [--only train_step,probe_cost,...] [--out runs/bench]

Runs from any directory (``bench`` is installed with the project); ``--out`` is relative to it.
``make bench`` runs this (about 13 minutes on a shared 2-core VM, and about 1 more for ``cli_latency``;
``--quick`` about 2, and 1 more).
Each benchmark prints its own figures and ends with a ``RATIO`` line; this
driver prints a summary table at the end and writes
``<out>/cpu_results.json`` (``<out>/cpu_results_quick.json`` with --quick).
A benchmark that fails is reported and the others still run; the exit
status is then 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path
from typing import Any

BENCHMARKS = ("train_step", "probe_cost", "reducer_scaling", "verdicts", "sweep_overhead", "packing",
              "sequential_error", "cli_latency")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer rounds (≈ 2 min)")
    p.add_argument("--only", help=f"comma-separated subset of {', '.join(BENCHMARKS)}")
    p.add_argument("--out", default="runs/bench", help="directory for cpu_results.json")
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = set(names) - set(BENCHMARKS)
    if unknown:
        p.error(f"unknown benchmark(s) {sorted(unknown)}; valid: {', '.join(BENCHMARKS)}")
    from bench.common import machine, write_json  # after the flags: torch (--help answers at once)

    extra = ["--quick"] if args.quick else []
    results: dict[str, Any] = {"machine_at_start": machine(), "quick": args.quick,
                               "command": " ".join(["python -m bench.run_all", *(argv or sys.argv[1:])])}
    failed = []
    t_all = time.perf_counter()
    for name in names:
        print(f"\n=== {name} {' '.join(extra)}", flush=True)
        t0 = time.perf_counter()
        try:
            out = importlib.import_module(f"bench.{name}").main(extra)
            out["bench_wall_s"] = time.perf_counter() - t0
            results[name] = out
        except Exception as exc:  # noqa: BLE001 - report and run the rest
            traceback.print_exc()
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            failed.append(name)
    results["total_wall_s"] = time.perf_counter() - t_all
    results["machine_at_end"] = machine()
    path = write_json(results, Path(args.out) / ("cpu_results_quick.json" if args.quick else "cpu_results.json"))
    print(f"\n=== summary ({results['total_wall_s']:.0f} s, results in {path})")
    for name in names:
        r = results[name]
        if "error" in r:
            print(f"  {name:16s} FAILED: {r['error']}")
        else:
            print(f"  {name:16s} ratio {r['ratio']:8.3f}  target {r['target']:28s} "
                  f"{'met' if r['met'] else 'NOT met'}  ({r['bench_wall_s']:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
