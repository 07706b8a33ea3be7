"""The baseline sweep run twice on one machine, with default flags and with ``--pack 1``:
wall time, when each run took its first step, rows equal in number, and how far the values differ.

    python -m bench.gpu_sweep --out DIR [--tiny] [--timeout S]

The sweep (on a GPU: ``--pack auto`` packs each depth's six runs into one trial):
``python -m sweep.baseline --preset paper --corpus stdlib-docs --depths 4 6 8 --seeds 2 --epochs 2
--steps-per-epoch 250`` (``--tiny``: the ``quick`` preset, one depth, one seed, 2 steps; a check of
this script on the CPU, measuring nothing). Each sweep writes its own store and Tune storage
under DIR/sweep/. A run's first step follows its epoch-0 rows at once (the trial writes them,
then trains), so "first step after the sweep started" is the modification time of its epoch-0
file in the ``epochs`` table minus the moment the command was started. Values: for every
(run, epoch), the relative difference of the run-level losses and of the layer-mean probe
columns between the two stores; the two differ by the pack's batched kernels and bf16 rounding
compounded over the steps, so compare them with ``bench.pack_equivalence``'s backend noise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ["--preset", "paper", "--corpus", "stdlib-docs", "--depths", "4", "6", "8", "--seeds", "2",
         "--epochs", "2", "--steps-per-epoch", "250"]
TINY = ["--preset", "quick", "--depths", "1", "--seeds", "1", "--inits", "independent_xavier", "qk_identical",
        "--epochs", "1", "--steps-per-epoch", "2", "--num-cpus", "2"]
VARIANTS = {"default": [], "pack1": ["--pack", "1"]}
RUN_VALUES = ("train_loss", "val_loss", "grad_norm")
LAYER_VALUES = ("pr_q", "pr_k", "qk_erank", "attn_entropy", "logit_std", "qk_alignment", "wk_erank")


def run_sweep(name: str, extra: list[str], out: Path, tiny: bool, timeout: float) -> dict[str, Any]:
    """One sweep as a user types it; its wall time and each run's first step after the start."""
    base = out / "sweep" / name
    store, storage = base / "store", base / "ray"
    cmd = [sys.executable, "-m", "sweep.baseline", *(TINY if tiny else SWEEP), *extra, "--store", str(store),
           "--storage", str(storage), "--name", f"gpu-sweep-{name}", "--trial-hook", "start_clock"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    print(f"[gpu_sweep] {name}: {' '.join(cmd[1:])}", flush=True)
    start = time.time()
    log = base / "log.txt"
    base.mkdir(parents=True, exist_ok=True)
    with log.open("w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
    wall = time.time() - start
    firsts = {p.parent.name: p.stat().st_mtime - start for p in (store / "epochs").glob("*/epoch-0000.parquet")}
    result = {"variant": name, "rc": rc, "wall_s": wall, "store": str(store), "log": str(log),
              "first_step_after_start_s": firsts,
              "last_first_step_s": max(firsts.values(), default=None),
              "trial_start": trial_starts(storage / f"gpu-sweep-{name}", start)}
    for phase, (median, largest) in result["trial_start"].items():
        print(f"[gpu_sweep] {name}: trials' start, {phase:34s} median {median:5.1f} s, largest {largest:5.1f} s")
    tail = log.read_text().strip().splitlines()[-3:]
    print(f"[gpu_sweep] {name}: rc {rc} in {wall:.0f} s; every run's first step within "
          f"{result['last_first_step_s'] or float('nan'):.1f} s of the start; log ends: {' | '.join(tail)}", flush=True)
    return result


#: the phases of a trial's start (``sweep.hooks.base.StartClock``, the ``start_clock`` trial hook), as (from mark, to mark)
PHASES = {"sweep start → worker process": (None, "process"), "worker process → trainable": ("process", "trainable"),
          "trainable → trainer built": ("trainable", "built"), "trainer built → epoch 0 reported": ("built", "epoch0"),
          "sweep start → epoch 0 reported": (None, "epoch0")}


def trial_starts(experiment: Path, start: float) -> dict[str, tuple[float, float]]:
    """Per phase of the trials' start, (median, largest) over trials, from each trial's epoch-0 result."""
    marks = []
    for path in experiment.glob("*/result.json"):
        for line in path.read_text().splitlines():
            result = json.loads(line)
            if result.get("epoch") == 0 and "start" in result:
                marks.append(result["start"])
                break
    out = {}
    for phase, (a, b) in PHASES.items():
        spans = sorted(m[b] - (start if a is None else m[a]) for m in marks if b in m and (a is None or a in m))
        if spans:
            out[phase] = (spans[len(spans) // 2], spans[-1])
    return out


def read(store: str, table: str) -> pd.DataFrame:
    from sweep.store import Store

    return Store(store).read(table)


def _rel(a: pd.Series, b: pd.Series) -> pd.Series:
    return (a - b).abs() / b.abs().clip(lower=1e-12)


def compare(store_a: str, store_b: str) -> dict[str, Any]:
    """Rows in each table, and per column the median and largest relative difference A vs B."""
    out: dict[str, Any] = {"rows": {}, "values": {}}
    keys = {"epochs": ["run_id", "epoch"], "layers": ["run_id", "epoch", "layer"]}
    frames = {}
    for table, key in keys.items():
        a, b = read(store_a, table), read(store_b, table)
        out["rows"][table] = [len(a), len(b)]
        frames[table] = a.merge(b, on=key, suffixes=("_a", "_b"))
    e = frames["epochs"]
    for col in RUN_VALUES:
        d = _rel(e[f"{col}_a"], e[f"{col}_b"]).dropna()
        out["values"][col] = {"median": float(d.median()) if len(d) else None, "max": float(d.max()) if len(d) else None}
    layers = frames["layers"].groupby(["run_id", "epoch"])[[f"{c}_{s}" for c in LAYER_VALUES for s in "ab"]].mean()
    for col in LAYER_VALUES:
        d = _rel(layers[f"{col}_a"], layers[f"{col}_b"]).dropna()
        out["values"][f"layer-mean {col}"] = {"median": float(d.median()), "max": float(d.max())}
    out["rows_equal"] = all(a == b for a, b in out["rows"].values())
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    p.add_argument("--tiny", action="store_true", help="a check of the script on the CPU (quick preset)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds each sweep may take")
    args = p.parse_args(argv)
    out = Path(args.out)
    result: dict[str, Any] = {"sweep": " ".join(TINY if args.tiny else SWEEP), "tiny": args.tiny}
    path = out / "sweep.json"
    for name, extra in VARIANTS.items():
        try:
            result[name] = run_sweep(name, extra, out, args.tiny, args.timeout)
        except subprocess.TimeoutExpired:
            result[name] = {"variant": name, "status": f"timed out after {args.timeout:.0f} s"}
            print(f"[gpu_sweep] {name}: timed out after {args.timeout:.0f} s", flush=True)
        path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    a, b = result["default"], result["pack1"]
    if a.get("rc") == 0 and b.get("rc") == 0:
        result["speedup_default_over_pack1"] = b["wall_s"] / a["wall_s"]
        result["compare"] = compare(a["store"], b["store"])
        c = result["compare"]
        print(f"[gpu_sweep] default {a['wall_s']:.0f} s vs --pack 1 {b['wall_s']:.0f} s: "
              f"×{result['speedup_default_over_pack1']:.2f}; rows {c['rows']} (equal: {c['rows_equal']})")
        for col, d in c["values"].items():
            print(f"  {col:24s} relative difference median {d['median']:.2e}, largest {d['max']:.2e}")
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


if __name__ == "__main__":
    main()
