"""``make demo``: the whole study at laptop scale, end to end.

1. ``sweep.baseline --preset demo``   (3 depths × 3 inits × 2 seeds on stdlib-docs)
2. ``sweep.interventions --preset demo --seeds 2``   (6 conditions × 2 seeds, 8 layers)
3. ``sweep.report``   (statistics, tables, figures, report.md)

All three share one local Ray instance; outputs land under ``runs/``.
"""

from __future__ import annotations

import argparse
import time

from sweep import baseline, interventions, report
from sweep.runner import init_ray


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m sweep.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="runs/store")
    p.add_argument("--storage", default="runs/ray")
    p.add_argument("--out", default="runs/report")
    p.add_argument("--num-cpus", type=int, help="CPUs for the local Ray instance (default: all)")
    args = p.parse_args(argv)
    import ray

    t0 = time.perf_counter()
    init_ray(None, args.num_cpus)
    try:
        common = ["--preset", "demo", "--store", args.store, "--storage", args.storage]
        print("== 1/3 baseline sweep (demo preset) ==", flush=True)
        baseline.main(common)
        print("\n== 2/3 interventions (demo preset, 2 seeds) ==", flush=True)
        interventions.main([*common, "--seeds", "2"])
    finally:
        ray.shutdown()
    print("\n== 3/3 report ==", flush=True)
    report.main(["--store", args.store, "--out", args.out])
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
