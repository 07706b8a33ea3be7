"""Throughput on one GPU, run by ``bench/gpu.sh``: each way to train the study's runs,
against unpacked eager measured in the same call, and the paper grid's projected wall time on one GPU.

    python -m bench.gpu_packing --group NAME --out DIR [--seconds S]     a group's variants, one process
    python -m bench.gpu_packing --variant NAME... --out DIR [--seconds S] these variants → DIR/packing/NAME.json
    python -m bench.gpu_packing --summary --out DIR                       the table → DIR/packing/summary.json
    python -m bench.gpu_packing --list                                    the groups and their variants
    python -m bench.gpu_packing --cpu-smoke --out DIR                     every variant, tiny, on the CPU

Each variant's peak memory on CUDA (``torch.cuda.max_memory_allocated`` over what was allocated
before it) is printed beside ``model.memory``'s estimate for its shape (the plan's memory model).

Variants (paper size: d_model 256, 4 heads, d_mlp 1024, context 128, batch 64, synthetic corpus of
1758 symbols; depth 6, the mean of the baseline's 4/6/8; bf16 autocast):

- ``unpacked`` (the reference) / ``unpacked_graphs``: one run, eager / its step replayed from a CUDA
  graph (``model.graphs``, the default on CUDA);
- ``packM`` / ``packM_graphs`` (M = 12, 36): one pack of M members (three inits, seeds mixed), eager /
  graphed; ``pack36_graphs_compile`` adds ``torch.compile`` (compiling is in the warm-up epoch,
  reported as ``warmup_s``); gpu.sh runs it only when its section has time left;
- ``unpacked_clamp`` / ``pack12_clamp``: ``k_spectrum_clamp`` (graphed; its decomposition runs after
  each replay), each as × the graphed ``none`` step of the same shape (``vs``);
- ``procs4``: four processes, one graphed run each, training at once on the GPU.

A variant times whole epochs of ``train_epoch`` after one warm-up epoch (which records the graph or
compiles), so the probe and validation are not in it. Variants of one group share a process (one
start-up); each writes its JSON as soon as it is measured, and an error is recorded, not raised.

GPU busy (group ``busy``, its own process, so that nothing there can cost a throughput figure): the
GPU's kernel time over the wall time of one epoch, for unpacked eager and graphed. The profiler is
initialised before any graph is recorded (``torch.profiler._utils._init_for_cuda_graphs``: profiling
a graph recorded before the profiler's first use is unsupported, pytorch#75504).

Projection: the paper grid is 36 baseline runs × 45 epochs at depths 4/6/8 and 30 intervention runs
× 15 epochs at depth 8, 4,394 steps an epoch (one pass over 36M training characters at 64 × 128); a
step's time is taken as proportional to depth, so the baseline costs as if all at depth 6 and the
interventions 8/6 of it.
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

def _v(kind: str, members: int, graphs: bool, condition: str = "none", steps: int = 20, compile: bool = False,
       vs: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "members": members, "graphs": graphs, "compile": compile, "condition": condition, "steps": steps,
            "vs": vs}


VARIANTS: dict[str, dict[str, Any]] = {
    "unpacked": _v("trainer", 1, False),
    "unpacked_graphs": _v("trainer", 1, True),
    "unpacked_clamp": _v("trainer", 1, True, "k_spectrum_clamp", steps=10, vs="unpacked_graphs"),
    "pack12": _v("pack", 12, False),
    "pack12_graphs": _v("pack", 12, True),
    "pack12_clamp": _v("pack", 12, True, "k_spectrum_clamp", steps=5, vs="pack12_graphs"),
    "pack36": _v("pack", 36, False),
    "pack36_graphs": _v("pack", 36, True),
    "procs4": _v("procs", 4, True, steps=10),
    "pack36_graphs_compile": _v("pack", 36, True, compile=True),
}
#: one process each, in gpu.sh's order; a variant's none baseline comes before its clamp
GROUPS: dict[str, list[str]] = {
    "unpacked": ["unpacked", "unpacked_graphs", "unpacked_clamp"],
    "pack12": ["pack12", "pack12_graphs", "pack12_clamp"],
    "pack36": ["pack36", "pack36_graphs"],
    "procs4": ["procs4"],
    "busy": [],
    "compile": ["pack36_graphs_compile"],
}
#: groups gpu.sh runs only when the section has time left for them
OPTIONAL = ("compile",)
#: the targets for the paper grid on one H200: the whole study in an afternoon
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
    from model.recipe import TrainConfig

    return TrainConfig(lr=size.lr, batch_size=size.batch, epochs=1, steps_per_epoch=steps, eval_batches=1,
                       probe_seqs=4, amp="auto", device=device, seed=seed, compile=compile)


def build(m: int, graphs: bool, compile: bool, steps: int, device: str, tiny: bool, condition: str = "none"):
    """A trainer of ``m`` members (the three inits in turn, seeds mixed); (trainer, tokens an epoch)."""
    from bench.common import build_trainer

    size, corpus, mcfg = _setup(tiny)
    members = [(INITS[i % 3], 37 + i // 3, _train_cfg(size, 37 + i // 3, steps, device, compile)) for i in range(m)]
    return build_trainer(mcfg, corpus, members, condition, graphs), m * steps * size.batch * size.context


def busy(device: str, tiny: bool, seconds: float) -> dict[str, Any]:
    """The GPU's kernel time over an epoch's wall time, unpacked eager and graphed (module docstring).
    On the CPU (a check of the code path) the same with the CPU's op time."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._utils import _init_for_cuda_graphs

    _init_for_cuda_graphs()  # before any graph is recorded (pytorch#75504)
    cuda = device == "cuda"
    out: dict[str, Any] = {"method": "torch.profiler kernel time / unprofiled epoch wall time; profiler initialised "
                           "before the graph was recorded", "device": device}
    steps = 2 if tiny else 20
    for name, graphs in (("unpacked", False), ("unpacked_graphs", True)):
        try:
            trainer, _ = build(1, graphs, False, steps, device, tiny)
            timed = time_epochs(trainer, device, seconds)
            with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
                trainer.train_epoch()
                _sync(device)
            events = prof.key_averages()
            busy_us = sum(e.self_device_time_total if cuda else e.self_cpu_time_total for e in events)
            out[name] = {"epoch_s": timed["epoch_s"], "busy_s": busy_us / 1e6, "gpu_busy": busy_us / 1e6 / timed["epoch_s"],
                         "graph_status": trainer.graph_status, "kernels": len(events)}
            print(f"[gpu_packing] busy {name}: {out[name]['gpu_busy']:.0%} of {timed['epoch_s'] * 1e3:.1f} ms an epoch "
                  f"({'kernel' if cuda else 'CPU op'} time)", flush=True)
        except Exception as exc:  # noqa: BLE001 - recorded; the throughput figures are in other files
            out[name] = {"status": f"error: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"}
            print(f"[gpu_packing] busy {name}: {out[name]['status']}", flush=True)
        if cuda:
            torch.cuda.empty_cache()
    return out


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


def modelled_bytes(trainer) -> int:
    """``model.memory``'s estimate for this trainer's shape, members and precision (its CUDA context
    aside: ``max_memory_allocated`` does not see it)."""
    from model.memory import Shape, estimate

    m, cfg = trainer.model_cfg, trainer.cfg
    shape = Shape(d_model=m.d_model, n_layer=m.n_layer, n_head=m.n_head, d_mlp=m.d_mlp, vocab_size=m.vocab_size,
                  context=m.context, batch_size=cfg.batch_size, half=trainer.amp_dtype is not None)
    est = estimate(shape, trainer.packed, len(trainer.corpus.train), cfg.eval_batches)
    return est.total(len(trainer.members)) - est.context


def measure(name: str, device: str, tiny: bool, seconds: float) -> dict[str, Any]:
    """One variant's figures: tokens/s of all runs together, run-steps/s, projected paper-grid hours;
    on CUDA its peak memory (from what was allocated before it) beside ``model.memory``'s estimate."""
    v = VARIANTS[name]
    steps = 2 if tiny else v["steps"]
    base = 0
    if device == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    if v["kind"] == "procs":
        out = concurrent(v["members"], device, tiny, seconds)
    else:
        trainer, tokens = build(v["members"], v["graphs"], v["compile"], steps, device, tiny, v["condition"])
        out = time_epochs(trainer, device, seconds)
        out["modelled_memory_gb"] = modelled_bytes(trainer) / 2**30
        out["tokens_per_s"] = tokens / out["epoch_s"]
        out["run_steps_per_s"] = v["members"] * steps / out["epoch_s"]
        out["step_s"] = out["epoch_s"] / steps
        out["graph_status"] = trainer.graph_status
        if v["condition"] == "k_spectrum_clamp":
            import torch

            from bench.common import k_weights
            from interventions.spectrum import choose

            w = k_weights(trainer).detach()  # what the clamp chose for these weights (timed once, kept)
            how = choose(w, torch.linalg.svdvals(w.double()))
            out["clamp"] = {"method": how[0], "decomp_device": how[1] or device}
    out.update(variant=name, **v, depth=2 if tiny else DEPTH, device=device)
    out["projected_paper_grid_h"] = projected_hours(out["run_steps_per_s"])
    if device == "cuda":
        out["max_memory_allocated_gb"] = (torch.cuda.max_memory_allocated() - base) / 2**30
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.empty_cache()
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
    trainer, tokens = build(1, True, False, steps, args.device, args.tiny)
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
    """Every measured variant, its speed-up over ``unpacked`` (eager), a clamp's step as × its none
    step, its projection, and GPU busy; printed."""
    rows = {}
    for name in VARIANTS:
        path = out / "packing" / f"{name}.json"
        if path.exists():
            rows[name] = json.loads(path.read_text())
    busy_file = out / "packing" / "busy.json"
    busy_rows = json.loads(busy_file.read_text()) if busy_file.exists() else {}
    base = rows.get("unpacked", {}).get("run_steps_per_s")
    per_epoch, baseline, interventions = paper_grid_steps()
    print(f"[gpu_packing] paper grid: {baseline + interventions:,} run-steps ({per_epoch:,} an epoch); "
          f"projected on one GPU, measured at depth {DEPTH}; target ≤ {TARGET_HOURS:g} h")
    print(f"  {'variant':22s} {'run-steps/s':>12s} {'x unpacked':>10s} {'paper grid':>11s} {'GPU busy':>9s} "
          f"{'memory GiB: peak / model':>25s}  graphs")
    for name, r in rows.items():
        if "run_steps_per_s" not in r:
            print(f"  {name:22s} {'—':>12s} {'':>10s} {'':>11s} {'':>9s} {'':>25s}  {r.get('status', 'not measured')}")
            continue
        ratio = r["run_steps_per_s"] / base if base else float("nan")
        r["speedup_vs_unpacked"] = ratio
        b = busy_rows.get(name, {}).get("gpu_busy")
        busy = f"{b:.0%}" if b is not None else ""
        peak, model = r.get("max_memory_allocated_gb"), r.get("modelled_memory_gb")
        mem = (f"{peak:.2f} / {model:.2f} (×{peak / model:.2f})" if peak is not None and model
               else f"— / {model:.2f}" if model else "")
        print(f"  {name:22s} {r['run_steps_per_s']:12,.1f} {ratio:10.2f} {r['projected_paper_grid_h']:9.1f} h "
              f"{busy:>9s} {mem:>25s}  {r.get('graph_status', '')}")
    for r in rows.values():
        ref = rows.get(r.get("vs") or "", {})
        if "run_steps_per_s" in r and "run_steps_per_s" in ref:
            r["x_none_step"] = ref["run_steps_per_s"] / r["run_steps_per_s"]
            shape = "unpacked" if r["members"] == 1 else f"in a pack of {r['members']}"
            how = r.get("clamp", {})
            print(f"  {r['condition']} {shape}: its step {r['x_none_step']:.2f} × the {r['vs']} (none) step "
                  f"(decomposition: {how.get('method')} on {how.get('decomp_device')})")
    if busy_rows and not any("gpu_busy" in busy_rows.get(n, {}) for n in ("unpacked", "unpacked_graphs")):
        print(f"  GPU busy: not measured ({busy_rows})")
    result = {"paper_grid_run_steps": baseline + interventions, "steps_per_epoch": per_epoch, "variants": rows,
              "busy": busy_rows or None, "targets": targets(rows, busy_rows)}
    for line in result["targets"]:
        print(f"  target: {line}")
    (out / "packing").mkdir(parents=True, exist_ok=True)
    (out / "packing" / "summary.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def targets(rows: dict[str, Any], busy_rows: dict[str, Any] | None = None) -> list[str]:
    """The throughput targets, met or not, from what was measured."""
    lines = []
    best = max((r for r in rows.values() if "run_steps_per_s" in r), key=lambda r: r["run_steps_per_s"], default=None)
    if best:
        hours = best["projected_paper_grid_h"]
        lines.append(f"paper grid ≤ {TARGET_HOURS:g} h: {best['variant']} {hours:.1f} h "
                     f"({'met' if hours <= TARGET_HOURS else 'not met'})")
    eager, graphs = rows.get("unpacked", {}), rows.get("unpacked_graphs", {})
    if "run_steps_per_s" in eager and "run_steps_per_s" in graphs:
        ratio = graphs["run_steps_per_s"] / eager["run_steps_per_s"]
        b = (busy_rows or {}).get("unpacked_graphs", {}).get("gpu_busy")
        busy = "not measured" if b is None else f"{b:.0%}"
        lines.append(f"unpacked with graphs ≥ {TARGET_UNPACKED_GRAPHS:g}× eager: {ratio:.2f}× "
                     f"({'met' if ratio >= TARGET_UNPACKED_GRAPHS else 'not met'}); GPU busy graphed {busy}")
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


def run_group(group: str, out: Path, device: str, tiny: bool, seconds: float) -> int:
    """A group's variants in this one process (``busy``: the GPU-busy figures → packing/busy.json)."""
    if group == "busy":
        path = out / "packing" / "busy.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            result = busy(device, tiny, seconds)
        except Exception as exc:  # noqa: BLE001 - recorded; gpu_busy is then "not measured"
            result = {"status": f"error: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"}
            print(f"[gpu_packing] busy: {result['status']}", flush=True)
        path.write_text(json.dumps(result, indent=2, default=str) + "\n")
        return 0 if "status" not in result else 1
    return max(run_variant(name, out, device, tiny, seconds) for name in GROUPS[group])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_packing", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--group", choices=list(GROUPS))
    g.add_argument("--variant", nargs="+", choices=list(VARIANTS))
    g.add_argument("--summary", action="store_true")
    g.add_argument("--list", action="store_true")
    g.add_argument("--cpu-smoke", action="store_true")
    g.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per variant (after warm-up)")
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    p.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--barrier", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.list:
        print("\n".join(f"{g}: {' '.join(names) or 'GPU busy'}" for g, names in GROUPS.items()))
        return 0
    if args.worker:
        worker(args)
        return 0
    if args.summary:
        summary(out)
        return 0
    if args.cpu_smoke:  # every group, tiny, on the CPU: the code paths, not the figures
        rc = max(run_group(group, out, "cpu", True, 0.01) for group in GROUPS if group not in OPTIONAL)
        summary(out)
        return rc
    if args.group:
        return run_group(args.group, out, args.device, args.tiny, args.seconds)
    return max(run_variant(name, out, args.device, args.tiny, args.seconds) for name in args.variant)


if __name__ == "__main__":
    raise SystemExit(main())
