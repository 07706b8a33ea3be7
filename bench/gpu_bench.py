"""GPU benchmarks (run by ``bench/gpu.sh``; one part per process, each under ``timeout``).

    python -m bench.gpu_bench --part NAME --out DIR [--budget S]   one part → DIR/parts/NAME.json
    python -m bench.gpu_bench --merge --out DIR                    parts → DIR/gpu_results.json
    python -m bench.gpu_bench --dry-run --out DIR                  says whether CUDA is there; measures nothing
    python -m bench.gpu_bench --cpu-smoke --out DIR                every part at a tiny size on the CPU

Parts (paper size: d_model 256, 4 heads, d_mlp 1024, context 128, batch 64,
synthetic corpus of 1758 symbols; no downloads):

- ``train_step``: ``Trainer.train_epoch`` vs the plain reference loop (bf16 autocast, eager);
- ``eager_vs_compile``: tokens/s of the Trainer eager vs ``compile=True`` (bf16; the first,
  compiling call is timed separately);
- ``fp32_vs_bf16``: tokens/s with ``amp="off"`` (fp32 weights, TF32 matmuls: the Trainer turns
  TF32 on for CUDA) vs ``amp="bf16"``, eager;
- ``concurrent_trials``: aggregate tokens/s of k = 1, 2, 4, 8 trials sharing one GPU through Ray
  (``ray.init(num_gpus=1)``, tasks with ``num_gpus=1/k``); each builds a Trainer, warms up, waits
  at a barrier, then trains in chunks for a fixed wall time; aggregate = Σ per-trial tokens/s;
- ``probe_cost``: ``probe_layers`` on the 16 × 128 probe batch in units of a training step.

Every part writes its JSON after each measurement, so a part stopped by its
``timeout`` keeps what it finished; SIGTERM is turned into a clean exit so
that a Ray cluster started by the part is shut down.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("train_step", "eager_vs_compile", "fp32_vs_bf16", "concurrent_trials", "probe_cost")
#: seconds per part given by gpu.sh (kept here too for --dry-run's plan)
BUDGETS = {"train_step": 45, "eager_vs_compile": 120, "fp32_vs_bf16": 45, "concurrent_trials": 160,
           "probe_cost": 45}


class Ctx:
    """What a part needs: device, sizes, steps, and the time it has left."""

    def __init__(self, device: str, tiny: bool, budget: float) -> None:
        self.device, self.tiny = device, tiny
        self.t0, self.budget = time.monotonic(), budget
        self.size = "tiny" if tiny else "paper"
        self.depths = (2,) if tiny else (4, 8)
        self.steps = 2 if tiny else 20  # steps per timed round
        self.rounds = 2 if tiny else 3
        self.ks = (1, 2) if tiny else (1, 2, 4, 8)
        self.duration = 1.0 if tiny else 15.0  # timed wall seconds per concurrent trial

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)


class PartWriter:
    """A part's JSON, rewritten after every measurement."""

    def __init__(self, out: Path, name: str) -> None:
        self.path = out / "parts" / f"{name}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {"part": name, "complete": False, "results": {}, "skipped": []}
        self.write()

    def add(self, key: str, value: Any) -> None:
        self.data["results"][key] = value
        self.write()

    def skip(self, what: str) -> None:
        self.data["skipped"].append(what)
        self.write()

    def done(self) -> None:
        self.data["complete"] = True
        self.write()

    def write(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        os.replace(tmp, self.path)


def _memory(device: str) -> dict[str, float]:
    import torch

    if torch.device(device).type != "cuda":
        return {}
    return {"max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 2**30}


# -- parts -------------------------------------------------------------------------------


def part_train_step(ctx: Ctx, w: PartWriter) -> None:
    from bench.common import bench_corpus
    from bench.train_step import SIZES, measure

    size = SIZES[ctx.size]
    corpus = bench_corpus(size.corpus)
    for depth in ctx.depths:
        if ctx.left() < 15:
            w.skip(f"L{depth}: out of time")
            continue
        r = measure(size, depth, ctx.steps, ctx.rounds, ctx.device, corpus, amp="auto")
        w.add(f"L{depth}", {**r, **_memory(ctx.device)})


def _pair(ctx: Ctx, depth: int, variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Trainers differing only by ``variants[name]`` (make_trainer kwargs), timed alternately."""
    from bench.common import alternate, bench_corpus, med, time_once
    from bench.train_step import SIZES, make_trainer, model_config

    size = SIZES[ctx.size]
    corpus = bench_corpus(size.corpus)
    mcfg = model_config(size, depth, corpus.vocab_size)
    trainers = {name: make_trainer(mcfg, corpus, "independent_xavier", 37, 37, size.batch, size.lr,
                                   ctx.steps, ctx.device, **kw) for name, kw in variants.items()}
    first = {name: time_once(t.train_epoch, ctx.device) for name, t in trainers.items()}
    times = alternate({name: t.train_epoch for name, t in trainers.items()}, rounds=ctx.rounds,
                      warmup=0, device=ctx.device)
    tokens = ctx.steps * size.batch * size.context
    out: dict[str, Any] = {"depth": depth, "steps_per_round": ctx.steps, "rounds": ctx.rounds,
                           "tokens_per_round": tokens, "first_call_s": first, "times_s": times}
    for name, t in trainers.items():
        out[f"{name}_amp"] = str(t.amp_dtype)
        out[f"{name}_tokens_per_s"] = tokens / med(times[name])
    return out


def part_eager_vs_compile(ctx: Ctx, w: PartWriter) -> None:
    for depth in ctx.depths:
        if ctx.left() < 40:
            w.skip(f"L{depth}: out of time (compiling needs ~30 s)")
            continue
        r = _pair(ctx, depth, {"eager": {"amp": "auto"}, "compile": {"amp": "auto", "compile": True}})
        r["speedup_compile_over_eager"] = r["compile_tokens_per_s"] / r["eager_tokens_per_s"]
        w.add(f"L{depth}", {**r, **_memory(ctx.device)})


def part_fp32_vs_bf16(ctx: Ctx, w: PartWriter) -> None:
    for depth in ctx.depths:
        if ctx.left() < 15:
            w.skip(f"L{depth}: out of time")
            continue
        r = _pair(ctx, depth, {"fp32": {"amp": "off"}, "bf16": {"amp": "bf16"}})
        r["speedup_bf16_over_fp32"] = r["bf16_tokens_per_s"] / r["fp32_tokens_per_s"]
        w.add(f"L{depth}", {**r, **_memory(ctx.device)})


def _trial_task(size_name: str, depth: int, chunk: int, duration: float, barrier, threads: int) -> dict:
    """One concurrent trial (a Ray task): build, warm up, wait for the others, train ``duration`` s."""
    import ray
    import torch

    from bench.common import bench_corpus, sync
    from bench.train_step import SIZES, make_trainer, model_config

    torch.set_num_threads(threads)
    device = "cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"
    size = SIZES[size_name]
    corpus = bench_corpus(size.corpus)
    trainer = make_trainer(model_config(size, depth, corpus.vocab_size), corpus, "independent_xavier",
                           37, 37, size.batch, size.lr, chunk, device, amp="auto")
    trainer.train_epoch()  # warm-up (allocator, kernels)
    sync(device)
    ray.get(barrier.wait.remote())
    t0 = time.perf_counter()
    steps = 0
    while time.perf_counter() - t0 < duration:
        trainer.train_epoch()  # ends with .item(): synchronised
        steps += chunk
    elapsed = time.perf_counter() - t0
    tokens = steps * size.batch * size.context
    mem = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    return {"device": device, "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "steps": steps,
            "elapsed_s": elapsed, "tokens_per_s": tokens / elapsed, "max_memory_allocated_gb": mem}


def part_concurrent_trials(ctx: Ctx, w: PartWriter) -> None:
    import asyncio

    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # our own throw-away local cluster only
    # workers import bench/model from this checkout even without an install
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    cpus = max(max(ctx.ks) + 1, os.cpu_count() or 1)
    started = not ray.is_initialized()  # tests share one cluster (with a logical GPU) across benchmarks
    if started:
        ray.init(num_cpus=cpus, num_gpus=1, include_dashboard=False, log_to_driver=True)
    else:
        cpus = int(ray.cluster_resources().get("CPU", 1))

    @ray.remote(num_cpus=0)
    class Barrier:
        def __init__(self, n: int) -> None:
            self.n, self.count, self.event = n, 0, asyncio.Event()

        async def wait(self) -> None:
            self.count += 1
            if self.count >= self.n:
                self.event.set()
            await self.event.wait()

    try:
        depth = ctx.depths[0]
        threads = max(1, min(4, cpus // max(ctx.ks)))
        w.data["threads_per_trial"] = threads
        base = None
        for k in ctx.ks:
            if ctx.left() < ctx.duration + 25:
                w.skip(f"k={k}: out of time")
                continue
            barrier = Barrier.remote(k)
            task = ray.remote(_trial_task).options(num_gpus=1 / k, num_cpus=1 if k <= cpus else 0)
            t0 = time.perf_counter()
            refs = [task.remote(ctx.size, depth, 5 if not ctx.tiny else 1, ctx.duration, barrier, threads)
                    for _ in range(k)]
            trials = ray.get(refs, timeout=max(10.0, ctx.left() - 5))
            ray.kill(barrier)
            agg = sum(t["tokens_per_s"] for t in trials)
            base = base or agg
            w.add(f"k{k}", {"k": k, "depth": depth, "gpu_fraction": 1 / k, "trials": trials,
                            "aggregate_tokens_per_s": agg, "scaling_vs_k1": agg / base,
                            "wall_incl_startup_s": time.perf_counter() - t0})
            print(f"  k={k}: aggregate {agg:,.0f} tokens/s (×{agg / base:.2f} of k=1)", flush=True)
    finally:
        if started:
            ray.shutdown()


def part_probe_cost(ctx: Ctx, w: PartWriter) -> None:
    from bench.common import bench_corpus
    from bench.probe_cost import measure
    from bench.train_step import SIZES

    corpus = bench_corpus(SIZES[ctx.size].corpus)
    for depth in ctx.depths:
        if ctx.left() < 15:
            w.skip(f"L{depth}: out of time")
            continue
        r = measure(ctx.size, depth, ctx.rounds + 2, ctx.device, 2 if ctx.tiny else 8, corpus,
                    steps=ctx.steps)
        w.add(f"L{depth}", {**r, **_memory(ctx.device)})


PART_FNS = {"train_step": part_train_step, "eager_vs_compile": part_eager_vs_compile,
            "fp32_vs_bf16": part_fp32_vs_bf16, "concurrent_trials": part_concurrent_trials,
            "probe_cost": part_probe_cost}


def run_part(name: str, out: Path, device: str, tiny: bool, budget: float) -> int:
    import torch

    w = PartWriter(out, name)
    w.data.update({"device": device, "tiny": tiny, "budget_s": budget, "started": time.time()})
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    ctx = Ctx(device, tiny, budget)
    print(f"[gpu_bench] part {name} on {device} (budget {budget:.0f} s)", flush=True)
    try:
        PART_FNS[name](ctx, w)
        w.done()
        return 0
    except BaseException as exc:  # noqa: BLE001 - recorded, then the exit status says it
        w.data["error"] = f"{type(exc).__name__}: {exc}"
        w.data["traceback"] = traceback.format_exc()[-4000:]
        w.write()
        print(w.data["traceback"], file=sys.stderr)
        return 1
    finally:
        w.data["wall_s"] = time.monotonic() - ctx.t0
        w.write()


# -- whole script -----------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import platform

    info: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                            "hostname": platform.node()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["cuda"] = torch.cuda.is_available()
        if info["cuda"]:
            p = torch.cuda.get_device_properties(0)
            info.update(gpu=p.name, gpu_memory_gb=p.total_memory / 2**30, gpu_count=torch.cuda.device_count(),
                        cuda_version=torch.version.cuda, bf16=torch.cuda.is_bf16_supported())
    except Exception as exc:  # noqa: BLE001
        info["torch"] = None
        info["cuda"] = False
        info["torch_error"] = f"{type(exc).__name__}: {exc}"
    try:
        import ray

        info["ray"] = ray.__version__
    except Exception as exc:  # noqa: BLE001
        info["ray"] = None
        info["ray_error"] = f"{type(exc).__name__}: {exc}"
    return info


def summary(parts: dict[str, Any]) -> dict[str, Any]:
    """The headline figures, from whatever parts finished."""
    s: dict[str, Any] = {}

    def res(name):
        return parts.get(name, {}).get("results", {})

    for key, r in res("train_step").items():
        s[f"trainer_vs_reference_{key}"] = r.get("ratio")
        s[f"trainer_tokens_per_s_{key}"] = r.get("trainer_tokens_per_s")
    for key, r in res("eager_vs_compile").items():
        s[f"eager_tokens_per_s_{key}"] = r.get("eager_tokens_per_s")
        s[f"compile_tokens_per_s_{key}"] = r.get("compile_tokens_per_s")
        s[f"compile_speedup_{key}"] = r.get("speedup_compile_over_eager")
    for key, r in res("fp32_vs_bf16").items():
        s[f"fp32_tokens_per_s_{key}"] = r.get("fp32_tokens_per_s")
        s[f"bf16_tokens_per_s_{key}"] = r.get("bf16_tokens_per_s")
        s[f"bf16_speedup_{key}"] = r.get("speedup_bf16_over_fp32")
    for key, r in res("concurrent_trials").items():
        s[f"aggregate_tokens_per_s_{key}"] = r.get("aggregate_tokens_per_s")
    for key, r in res("probe_cost").items():
        s[f"probe_in_steps_{key}"] = r.get("probe_in_steps")
    return s


def merge(out: Path, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    parts: dict[str, Any] = {}
    for name in PARTS:
        path = out / "parts" / f"{name}.json"
        rc_path = out / "parts" / f"{name}.rc"
        rc = rc_path.read_text().strip() if rc_path.exists() else None
        if not path.exists():
            parts[name] = {"status": "not run" if rc is None else f"no output (rc {rc})"}
            continue
        data = json.loads(path.read_text())
        status = "ok" if data.get("complete") else "incomplete"
        if rc in ("124", "137"):
            status = f"timed out (rc {rc}); kept what finished"
        elif "error" in data:
            status = "error"
        parts[name] = {**data, "rc": rc, "status": status}
    result = {"cuda": True, "measured": True, "environment": environment(), "parts": parts,
              "summary": summary(parts), **(extra or {})}
    path = out / "gpu_results.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"[gpu_bench] wrote {path}")
    for k, v in result["summary"].items():
        print(f"  {k:40s} {v:,.3f}" if isinstance(v, float) else f"  {k:40s} {v}")
    return result


def no_cuda(out: Path, why: str) -> dict[str, Any]:
    result = {"cuda": False, "measured": False, "reason": why, "environment": environment(),
              "note": "GPU numbers not measured: run bash bench/gpu.sh on a machine with a CUDA GPU"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"[gpu_bench] no CUDA found ({why}): nothing measured; wrote {out / 'gpu_results.json'}")
    return result


def cuda_available() -> tuple[bool, str]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return False, f"torch not importable: {exc}"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} sees no CUDA device"
    return True, torch.cuda.get_device_name(0)


def _terminate(signum, frame):  # noqa: ARG001 - signal handler signature
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_bench", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--part", choices=PARTS)
    g.add_argument("--merge", action="store_true")
    g.add_argument("--dry-run", action="store_true")
    g.add_argument("--check-cuda", action="store_true", help="exit 0 if CUDA is there, else write the "
                   "no-CUDA results file and exit 1")
    g.add_argument("--cpu-smoke", action="store_true")
    p.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    p.add_argument("--budget", type=float, default=None, help="seconds this part may take")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    ok, what = cuda_available()
    if args.dry_run:
        if not ok:
            return no_cuda(out, what)
        print(f"[gpu_bench] CUDA found: {what}. Dry run: nothing measured. Parts and budgets (s): "
              + ", ".join(f"{k} {v}" for k, v in BUDGETS.items()))
        return {"cuda": True, "measured": False, "plan": BUDGETS}
    if args.check_cuda:
        if not ok:
            no_cuda(out, what)
            raise SystemExit(1)
        print(f"[gpu_bench] CUDA: {what}")
        return {"cuda": True}
    if args.part:
        if not ok:
            no_cuda(out, what)
            raise SystemExit(1)
        budget = args.budget if args.budget is not None else BUDGETS[args.part]
        rc = run_part(args.part, out, "cuda", tiny=False, budget=budget)
        if rc:
            raise SystemExit(rc)
        return {}
    if args.merge:
        return merge(out)
    # --cpu-smoke: every part, tiny, on the CPU, in this process (no timeouts)
    for name in PARTS:
        (out / "parts" / f"{name}.rc").parent.mkdir(parents=True, exist_ok=True)
        rc = run_part(name, out, "cpu", tiny=True, budget=120)
        (out / "parts" / f"{name}.rc").write_text(f"{rc}\n")
    return merge(out, {"cuda": False, "measured": False,
                       "note": "--cpu-smoke: tiny sizes on the CPU; exercises the script, measures nothing"})


if __name__ == "__main__":
    main()
