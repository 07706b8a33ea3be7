"""Throughput on one GPU (issue 27), run by ``bench/gpu.sh``: each way to train the study's runs, against
unpacked eager measured in the same call, and the paper grid's projected wall time on one GPU for each.

    python -m bench.gpu_packing --variant NAME --out DIR [--seconds S]   one variant → DIR/packing/NAME.json
    python -m bench.gpu_packing --summary --out DIR                     the table → DIR/packing/summary.json
    python -m bench.gpu_packing --list                                  the variants, one a line
    python -m bench.gpu_packing --cpu-smoke --out DIR                   every variant, tiny, on the CPU

Variants (paper size: d_model 256, 4 heads, d_mlp 1024, context 128, batch 64, synthetic corpus of
1758 symbols; depth 6, the mean of the baseline's 4/6/8; bf16 autocast):

- ``unpacked`` (the reference) / ``unpacked_graphs``: one ``Trainer``, eager / its step replayed
  from a CUDA graph (``model.graphs``, the default on CUDA);
- ``packK`` / ``packK_graphs`` (K = 12, 36): one ``model.pack.PackedTrainer`` of K members (three
  inits, seeds mixed), eager / graphed; ``pack36_graphs_compile`` adds ``torch.compile`` (fused
  elementwise kernels; compiling is in the warm-up epoch, reported as ``warmup_s``);
- ``procs4``: four processes, one graphed ``Trainer`` each, training at once on the GPU.

A variant times whole epochs of ``train_epoch`` after one warm-up epoch (which records the graph or
compiles), so the probe and validation are not in it. For the unpacked variants one more epoch runs
under the profiler: ``gpu_busy`` = the GPU's kernel time over the epoch's wall time. Projection: the
paper grid is 36 baseline runs × 45 epochs at depths 4/6/8 and 30 intervention runs × 15 epochs at
depth 8, 4,394 steps an epoch (one pass over 36M training characters at 64 × 128); a step's time is
taken as proportional to depth, so the baseline costs as if all at depth 6 and the interventions 8/6
of it.
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

ROOT = Path(__file__).resolve().parents[1]
DEPTH = 6
VARIANTS: dict[str, dict[str, Any]] = {
    "unpacked": {"kind": "trainer", "k": 1, "graphs": False, "compile": False},
    "unpacked_graphs": {"kind": "trainer", "k": 1, "graphs": True, "compile": False},
    "pack12": {"kind": "pack", "k": 12, "graphs": False, "compile": False},
    "pack12_graphs": {"kind": "pack", "k": 12, "graphs": True, "compile": False},
    "pack36": {"kind": "pack", "k": 36, "graphs": False, "compile": False},
    "pack36_graphs": {"kind": "pack", "k": 36, "graphs": True, "compile": False},
    "procs4": {"kind": "procs", "k": 4, "graphs": True, "compile": False},
    "pack36_graphs_compile": {"kind": "pack", "k": 36, "graphs": True, "compile": True},
}
#: issue 27's targets for the paper grid on one H200
TARGET_HOURS = 2.0
TARGET_UNPACKED_GRAPHS = 3.0  # unpacked with graphs over unpacked eager
INITS = ("independent_xavier", "qk_identical", "disjoint_support_xavier")


def paper_grid_steps() -> tuple[int, int, int]:
    """(steps an epoch, baseline run-steps, intervention run-steps) of the paper grid."""
    from model.corpus import TRAIN_FRACTION, WIKITEXT_CHARS

    per_epoch = int(WIKITEXT_CHARS * TRAIN_FRACTION) // (64 * 128)
    return per_epoch, 36 * 45 * per_epoch, 30 * 15 * per_epoch


def projected_hours(run_steps_per_s: float) -> float:
    """The paper grid's wall time on one GPU at ``run_steps_per_s`` (measured at depth 6)."""
    _, baseline, interventions = paper_grid_steps()
    return (baseline + interventions * 8 / DEPTH) / run_steps_per_s / 3600


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _setup(tiny: bool):
    from bench.common import bench_corpus
    from bench.train_step import SIZES, model_config

    size = SIZES["tiny" if tiny else "paper"]
    corpus = bench_corpus(size.corpus)
    return size, corpus, model_config(size, 2 if tiny else DEPTH, corpus.vocab_size)


def _train_cfg(size, seed: int, steps: int, device: str, compile: bool):
    from model.train import TrainConfig

    return TrainConfig(lr=size.lr, batch_size=size.batch, epochs=1, steps_per_epoch=steps, eval_batches=1,
                       probe_seqs=4, amp="auto", device=device, seed=seed, compile=compile)


def build(kind: str, k: int, graphs: bool, compile: bool, steps: int, device: str, tiny: bool):
    """A ``Trainer`` or a ``PackedTrainer`` of ``k`` members; (trainer, tokens an epoch)."""
    size, corpus, mcfg = _setup(tiny)
    if kind == "trainer":
        from model.train import Trainer

        trainer = Trainer(mcfg, _train_cfg(size, 37, steps, device, compile), corpus, INITS[0], 37, graphs=graphs)
    else:
        from model.pack import Member, PackedTrainer

        members = [Member(INITS[i % 3], 37 + i // 3, _train_cfg(size, 37 + i // 3, steps, device, compile))
                   for i in range(k)]
        trainer = PackedTrainer(mcfg, members, corpus, graphs=graphs)
    return trainer, k * steps * size.batch * size.context


def gpu_busy(trainer, device: str, epoch_s: float) -> float | None:
    """The GPU's kernel time in one profiled epoch over ``epoch_s`` (an unprofiled epoch's wall time)."""
    if device != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        trainer.train_epoch()
        _sync(device)
    kernel_us = sum(e.self_device_time_total for e in prof.key_averages())
    return kernel_us / 1e6 / epoch_s if kernel_us else None


def time_epochs(trainer, device: str, seconds: float) -> dict[str, Any]:
    """One warm-up epoch (compiling included), then epochs for about ``seconds``: median epoch time."""
    t0 = time.perf_counter()
    trainer.train_epoch()
    _sync(device)
    warm = time.perf_counter() - t0
    times: list[float] = []
    while not times or (sum(times) < seconds and len(times) < 20):
        t0 = time.perf_counter()
        trainer.train_epoch()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return {"warmup_s": warm, "epoch_times_s": times, "epoch_s": sorted(times)[len(times) // 2]}


def measure(name: str, device: str, tiny: bool, seconds: float) -> dict[str, Any]:
    """One variant's figures: tokens/s of all runs together, run-steps/s, projected paper-grid hours."""
    v = VARIANTS[name]
    steps = 2 if tiny else 20
    if v["kind"] == "procs":
        out = concurrent(v["k"], device, tiny, seconds)
    else:
        trainer, tokens = build(v["kind"], v["k"], v["graphs"], v["compile"], steps, device, tiny)
        out = time_epochs(trainer, device, seconds)
        out["tokens_per_s"] = tokens / out["epoch_s"]
        out["run_steps_per_s"] = v["k"] * steps / out["epoch_s"]
        out["graph_status"] = trainer.graph_status
        if v["kind"] == "trainer":
            out["gpu_busy"] = gpu_busy(trainer, device, out["epoch_s"])
    out.update(variant=name, **v, depth=2 if tiny else DEPTH, device=device)
    out["projected_paper_grid_h"] = projected_hours(out["run_steps_per_s"])
    if device == "cuda":
        import torch

        out["max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def concurrent(n: int, device: str, tiny: bool, seconds: float) -> dict[str, Any]:
    """``n`` processes, one unpacked Trainer each, released together (a file barrier), timed apart."""
    import tempfile

    with tempfile.TemporaryDirectory() as barrier:
        cmd = [sys.executable, "-m", "bench.gpu_packing", "--worker", "--barrier", barrier, "--n", str(n),
               "--device", device, "--seconds", str(seconds)] + (["--tiny"] if tiny else [])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        procs = [subprocess.Popen([*cmd, "--index", str(i)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
                 for i in range(n)]
        outs = [p.communicate(timeout=seconds + 240)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a worker failed: return codes {[p.returncode for p in procs]}")
    workers = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    return {"workers": workers, "tokens_per_s": sum(w["tokens_per_s"] for w in workers),
            "run_steps_per_s": sum(w["run_steps_per_s"] for w in workers),
            "mps_pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY")}


def worker(args: argparse.Namespace) -> None:
    """One process of ``concurrent``: build and warm up, wait for the others, train ``seconds``."""
    steps = 2 if args.tiny else 10
    trainer, tokens = build("trainer", 1, True, False, steps, args.device, args.tiny)
    trainer.train_epoch()
    _sync(args.device)
    barrier = Path(args.barrier)
    (barrier / f"ready-{args.index}").touch()
    while len(list(barrier.glob("ready-*"))) < args.n:
        time.sleep(0.01)
    t0, epochs = time.perf_counter(), 0
    while time.perf_counter() - t0 < args.seconds:
        trainer.train_epoch()  # ends with .item(): synchronised
        epochs += 1
    elapsed = time.perf_counter() - t0
    print(json.dumps({"index": args.index, "epochs": epochs, "elapsed_s": elapsed,
                      "tokens_per_s": epochs * tokens / elapsed, "run_steps_per_s": epochs * steps / elapsed}))


def summary(out: Path) -> dict[str, Any]:
    """Every measured variant, its speed-up over ``unpacked`` (eager) and its projection, printed."""
    rows = {}
    for name in VARIANTS:
        path = out / "packing" / f"{name}.json"
        if path.exists():
            rows[name] = json.loads(path.read_text())
    base = rows.get("unpacked", {}).get("run_steps_per_s")
    per_epoch, baseline, interventions = paper_grid_steps()
    print(f"[gpu_packing] paper grid: {baseline + interventions:,} run-steps ({per_epoch:,} an epoch); "
          f"projected on one GPU, measured at depth {DEPTH}; target ≤ {TARGET_HOURS:g} h")
    print(f"  {'variant':22s} {'run-steps/s':>12s} {'x unpacked':>10s} {'paper grid':>11s} {'GPU busy':>9s}  graphs")
    for name, r in rows.items():
        if "run_steps_per_s" not in r:
            print(f"  {name:22s} {'—':>12s} {'':>10s} {'':>11s} {'':>9s}  {r.get('status', 'not measured')}")
            continue
        ratio = r["run_steps_per_s"] / base if base else float("nan")
        r["speedup_vs_unpacked"] = ratio
        busy = f"{r['gpu_busy']:.0%}" if r.get("gpu_busy") is not None else ""
        print(f"  {name:22s} {r['run_steps_per_s']:12,.1f} {ratio:10.2f} {r['projected_paper_grid_h']:9.1f} h "
              f"{busy:>9s}  {r.get('graph_status', '')}")
    result = {"paper_grid_run_steps": baseline + interventions, "steps_per_epoch": per_epoch, "variants": rows,
              "targets": targets(rows)}
    for line in result["targets"]:
        print(f"  target: {line}")
    (out / "packing").mkdir(parents=True, exist_ok=True)
    (out / "packing" / "summary.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def targets(rows: dict[str, Any]) -> list[str]:
    """Issue 27's throughput targets, met or not, from what was measured."""
    lines = []
    best = max((r for r in rows.values() if "run_steps_per_s" in r), key=lambda r: r["run_steps_per_s"], default=None)
    if best:
        hours = best["projected_paper_grid_h"]
        lines.append(f"paper grid ≤ {TARGET_HOURS:g} h: {best['variant']} {hours:.1f} h "
                     f"({'met' if hours <= TARGET_HOURS else 'not met'})")
    eager, graphs = rows.get("unpacked", {}), rows.get("unpacked_graphs", {})
    if "run_steps_per_s" in eager and "run_steps_per_s" in graphs:
        ratio = graphs["run_steps_per_s"] / eager["run_steps_per_s"]
        lines.append(f"unpacked with graphs ≥ {TARGET_UNPACKED_GRAPHS:g}× eager: {ratio:.2f}× "
                     f"({'met' if ratio >= TARGET_UNPACKED_GRAPHS else 'not met'}); GPU busy {graphs.get('gpu_busy')}")
    return lines


def run_variant(name: str, out: Path, device: str, tiny: bool, seconds: float) -> int:
    """Measure, write the JSON (an error too), print one line; 0 or 1."""
    path = out / "packing" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        r = measure(name, device, tiny, seconds)
    except Exception as exc:  # noqa: BLE001 - recorded; gpu.sh goes on with the next variant
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        path.write_text(json.dumps({"variant": name, "status": f"error: {type(exc).__name__}: {first}"}) + "\n")
        print(f"[gpu_packing] {name}: error after {time.perf_counter() - t0:.0f} s: {type(exc).__name__}: {first}")
        return 1
    r["wall_s"] = time.perf_counter() - t0
    path.write_text(json.dumps(r, indent=2, default=str) + "\n")
    print(f"[gpu_packing] {name}: {r['tokens_per_s']:,.0f} tokens/s, {r['run_steps_per_s']:,.1f} run-steps/s, "
          f"paper grid ≈ {r['projected_paper_grid_h']:.1f} h on one GPU ({r['wall_s']:.0f} s)", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_packing", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--variant", choices=list(VARIANTS))
    g.add_argument("--summary", action="store_true")
    g.add_argument("--list", action="store_true")
    g.add_argument("--cpu-smoke", action="store_true")
    g.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    p.add_argument("--seconds", type=float, default=10.0, help="timed seconds per variant (after warm-up)")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--barrier", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.list:
        print("\n".join(VARIANTS))
        return 0
    if args.worker:
        worker(args)
        return 0
    if args.summary:
        summary(out)
        return 0
    if args.cpu_smoke:  # every variant, tiny, on the CPU: the code paths, not the figures
        rc = max(run_variant(n, out, "cpu", True, 0.01) for n in VARIANTS
                 if not VARIANTS[n]["compile"] and VARIANTS[n]["k"] <= 12)
        summary(out)
        return rc
    return run_variant(args.variant, out, args.device, args.tiny, args.seconds)


if __name__ == "__main__":
    raise SystemExit(main())
