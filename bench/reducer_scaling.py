"""Benchmark 4: the reducer's time and memory against the size of the store.

    python -m bench.reducer_scaling [--scales 1,10,100] [--rounds 3] [--quick|--tiny]

Stores: ``sweep.synthetic.make_synthetic_store(scale=s)``. At scale 1 it is
the paper grid (36 baseline runs = 216 run-layer trajectories × 46 epochs,
plus 30 intervention runs × 8 layers × 16 epochs, plus 4 checkpoint series:
13,776 layer rows); ``scale`` multiplies the seeds of both sweeps, so the
rows grow linearly.

Timing: ``sweep.report.build_report(tables, tmp, figures=False)`` (every
statistic, the tables in csv/md/tex, stats.json and report.md; no
figures), wall clock, with the sizes alternated in one process
(1×, 10×, 100×, 1×, …) and the median kept per size.

Memory, per size, in a separate untimed pass:
- ``peak_rss_delta_mb``: the peak resident set size during ``build_report``
  minus the resident size just before it. The kernel's peak (VmHWM) is reset
  by writing 5 to /proc/self/clear_refs before the call (Linux ≥ 4.0); where
  that is not possible, ``ru_maxrss`` growth is reported instead (it then
  counts only growth above the process's earlier peak, so it understates).
- ``tracemalloc_peak_mb``: the peak of Python and NumPy allocations traced
  by ``tracemalloc`` during the call (Arrow buffers are not traced).

The ratio printed last is (t(largest) / t(1×)) / (largest / 1): ≤ 1 means
no worse than linear growth. Targets: ≤ 5 s at 1× and ratio ≤ 1; and
``analysis.compute.compute_all`` alone ≤ 5 s at 1× (``compute_all_s``; these two
5-second bounds were unit-test assertions before they moved here).
"""

from __future__ import annotations

import argparse
import gc
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.common import machine, med, print_ratio


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_delta_mb(fn) -> tuple[float, str]:
    """Peak RSS growth while ``fn()`` runs, in MB, and the method used."""
    gc.collect()
    if _reset_peak_rss() and _status_kb("VmRSS") is not None:
        before = _status_kb("VmRSS")
        fn()
        return (_status_kb("VmHWM") - before) / 1024, "VmHWM after clear_refs"
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, "ru_maxrss growth"


def tracemalloc_peak_mb(fn) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.reducer_scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--scales", default="1,10,100", help="comma-separated multiples of the paper grid")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per size (alternated)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory pass")
    p.add_argument("--quick", action="store_true", help="scales 1,10,30, two rounds")
    p.add_argument("--tiny", action="store_true", help="smoke test: scales 1,2, one round")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from analysis.compute import compute_all
    from sweep.report import build_report
    from sweep.synthetic import make_synthetic_store

    args = parse(argv)
    if args.quick:
        args.scales, args.rounds = "1,10,30", 2
    if args.tiny:
        args.scales, args.rounds = "1,2", 1
    scales = sorted({int(s) for s in args.scales.split(",")})
    print(f"bench.reducer_scaling: build_report(figures=False) on synthetic stores at {scales} × the "
          f"paper grid, {args.rounds} alternated round(s)", flush=True)
    stores, rows, gen_s = {}, {}, {}
    for s in scales:
        t0 = time.perf_counter()
        stores[s] = make_synthetic_store(scale=s)
        gen_s[s] = time.perf_counter() - t0
        rows[s] = {t: len(df) for t, df in stores[s].items()}
    with tempfile.TemporaryDirectory(prefix="qkgeom-reducer-") as d:
        def run(s: int) -> dict:
            return build_report(stores[s], Path(d) / f"x{s}", figures=False)

        times: dict[int, list[float]] = {s: [] for s in scales}
        missing: dict[int, list[str]] = {}
        for _ in range(args.rounds):
            for s in scales:
                t0 = time.perf_counter()
                stats = run(s)
                times[s].append(time.perf_counter() - t0)
                missing[s] = sorted(stats.get("missing", {}))
        t0 = time.perf_counter()
        compute_all(stores[scales[0]])
        compute_s = time.perf_counter() - t0
        memory: dict[int, dict[str, Any]] = {}
        if not args.no_memory:
            for s in scales:
                rss, method = peak_rss_delta_mb(lambda s=s: run(s))
                memory[s] = {"peak_rss_delta_mb": rss, "rss_method": method,
                             "tracemalloc_peak_mb": tracemalloc_peak_mb(lambda s=s: run(s))}
    results = []
    base = med(times[scales[0]])
    for s in scales:
        t = med(times[s])
        r = {"scale": s, "rows": rows[s], "layer_rows": rows[s]["layers"],
             "table_mb": sum(df.memory_usage(deep=True).sum() for df in stores[s].values()) / 2**20,
             "generate_s": gen_s[s], "report_s": times[s], "report_median_s": t,
             "s_per_million_layer_rows": t / rows[s]["layers"] * 1e6,
             "missing_sections": missing[s], **memory.get(s, {})}
        results.append(r)
        mem = (f"  peak RSS +{max(0.0, r['peak_rss_delta_mb']):.0f} MB, tracemalloc peak {r['tracemalloc_peak_mb']:.0f} MB"
               if s in memory else "")
        print(f"  {s:4d}×: {rows[s]['layers']:>9,} layer rows ({r['table_mb']:.0f} MB in memory)  "
              f"report {t:.2f} s (×{t / base:.1f} of 1×){mem}", flush=True)
    largest = scales[-1]
    growth = (med(times[largest]) / base) / (largest / scales[0]) if largest != scales[0] else float("nan")
    out = {"benchmark": "reducer_scaling", "results": results, "ratio": growth,
           "time_at_smallest_s": base, "compute_all_s": compute_s, "smallest_scale": scales[0], "largest_scale": largest,
           "target": "<= 5 s at 1x (build_report, and compute_all alone) and growth ratio <= 1",
           "met": base <= 5 and compute_s <= 5 and growth <= 1, "machine": machine()}
    print_ratio(f"reducer_scaling (t({largest}×)/t({scales[0]}×))/{largest // scales[0]}", growth,
                "<= 1, and <= 5 s at 1×")
    return out


if __name__ == "__main__":
    main()
