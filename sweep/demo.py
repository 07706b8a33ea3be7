"""``make demo``: the whole study at laptop scale, end to end.

1. ``sweep.baseline --preset demo``   (3 depths × 3 inits × 2 seeds on stdlib-docs)
2. ``sweep.interventions --preset demo --seeds 2``   (6 conditions × 2 seeds, 8 layers)
3. ``sweep.tiny_series`` + ``sweep.extension``   (a tiny local character-level GPT-2
   series, built offline into ``runs/tiny-series``, probed for Appendix A)
4. ``sweep.report``   (statistics, tables, figures, report.md)

Steps 1–3 share one local Ray instance; outputs land under ``runs/``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from model.plugins import add_plugin_flag, preload
from sweep import baseline, extension, interventions, report, tiny_series
from sweep.runner import init_ray


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m sweep.demo", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="runs/store")
    p.add_argument("--storage", default="runs/ray")
    p.add_argument("--out", default="runs/report")
    p.add_argument("--tiny-series", default="runs/tiny-series", help="where the tiny checkpoint series is built")
    p.add_argument("--num-cpus", type=int, help="CPUs for the local Ray instance (default: all)")
    add_plugin_flag(p)
    preload(argv, "python -m sweep.demo")
    args = p.parse_args(argv)
    plugins = [f"--plugin={m}" for m in args.plugin]  # each step imports them (and its Ray workers)
    import ray

    t0 = time.perf_counter()
    init_ray(None, args.num_cpus)
    try:
        common = ["--preset", "demo", "--store", args.store, "--storage", args.storage, *plugins]
        print("== 1/4 baseline sweep (demo preset) ==", flush=True)
        baseline.main(common)
        print("\n== 2/4 interventions (demo preset, 2 seeds) ==", flush=True)
        interventions.main([*common, "--seeds", "2"])
        print("\n== 3/4 checkpoint extension (tiny local series) ==", flush=True)
        manifest = Path(args.tiny_series) / "manifest.json"
        if not manifest.is_file():
            tiny_series.main(["--out", args.tiny_series])
        # extension.main uses the Ray started above and leaves it running
        extension.main(["--manifest", str(manifest), "--store", args.store, "--actors", "2",
                        "--n-seqs", "8", "--seq-len", "64", *plugins])
    finally:
        ray.shutdown()
    print("\n== 4/4 report ==", flush=True)
    report.main(["--store", args.store, "--out", args.out, *plugins])
    print(f"\ndemo finished in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
