"""Each ``bench/gpu.sh`` section's time budget, derived from what it runs.

    python -m bench.gpu_plan [--out DIR] [--no-count] [--tests FILES]    the plan table → DIR/plan.json

A budget is the need × ``MARGIN`` + ``SLACK_S``; a need is what the section's processes run — their
start-up, the training steps and probes each one takes — times a per-step estimate of the GPU:

- the GPU tests (section ``tests``, run first) are **counted**: the cases ``pytest -m gpu`` collects
  from gpu.sh's test files, each at ``GUESS["gpu_test_s"]`` (a ``compile`` case at
  ``GUESS["compile_test_s"]``), so their time is in the call's budget like any section's;
- ops per training step are **measured** here, on the CPU at a tiny width with the paper depth and
  the pack sizes (a ``TorchDispatchMode`` counts the ATen ops of a step; width does not change the
  count, so it is the paper step's); ``--no-count`` uses ``OPS_FALLBACK`` instead;
- FLOPs per step are computed from the paper shape (6 × parameters × tokens, plus attention);
- the rest are **guesses** (``GUESS``, printed with the table) until a GPU run replaces them: a step
  takes max(FLOPs / throughput, ops × time per op), eager or replayed from a CUDA graph; a clamp
  step adds M·L decompositions.

gpu.sh reads ``DIR/plan.json`` (no torch import), clips each budget to what is left of the call,
and the report sets each section's actual seconds beside its budget. A call that names no section
runs those that fit in ``BUDGET_S``, in ``SECTIONS`` order (``call_sections``), and names the rest
for a second call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: guesses for one H100/H200, to be replaced by the first GPU run's figures
GUESS = {
    "startup_s": 12.0,     # process start, imports (about 4 s on the CPU here), CUDA context, cuBLAS
    "build_s": 1.5,        # a trainer built and moved to the GPU (pack of 36: the stacking)
    "eager_op_us": 10.0,   # one ATen op launched eagerly (Python, dispatcher, launch)
    "graph_op_us": 1.5,    # one kernel of a replayed CUDA graph
    "tflops": 250.0,       # bf16 autocast training, about a quarter of an H100's dense peak
    "decomp_ms": 5.0,      # one float64 256×256 eigh or SVD on the GPU (cuSOLVER: one call each)
    "cpu_decomp_ms": 14.0,  # the same on the CPU, mean of eigh / svd / refine (measured here: 7 / 12 / 24)
    "probe_s": 0.5,        # one depth-8 probe (forward + batched float64 decompositions; target ≤ 5 steps)
    "old_probe_s": 5.0,     # the per-layer probe it replaced (bench.probe_cost compares with it)
    "compile_s": 90.0,     # torch.compile of a pack of 36 (dynamo + inductor, cold cache)
    "ray_start_s": 15.0,   # a sweep's ray.init and Tune's set-up
    "gpu_test_s": 2.0,     # one GPU test case: three tiny trainers of 12 steps, one recording, in one process
    "compile_test_s": 60.0,  # a GPU test case that compiles (torch.compile, cold cache)
}
MARGIN, SLACK_S = 1.3, 8.0
#: ops per training step at depth 6 (none; M = 1 eager ~ unpacked) when not counted (--no-count)
OPS_FALLBACK = {1: 1700, 12: 1750, 36: 1800}
DEPTH, D, D_MLP, CONTEXT, BATCH, VOCAB = 6, 256, 1024, 128, 64, 1758
#: the GPU tests gpu.sh runs first (its GPU_TESTS)
GPU_TESTS = ("tests/test_model_graphs_cuda.py",)
#: GPU test cases when they cannot be counted (pytest missing, a collection error)
TESTS_FALLBACK = {"cases": 40, "compile": 1}
#: gpu.sh's sections, in the order a call runs them (tests first: proven before timed)
SECTIONS = ("tests", "clamp", "throughput", "probe", "equivalence", "sweep")
#: the default total of one call (gpu.sh's BUDGET_S): under 8 minutes of a 10-minute device call
BUDGET_S = 470
THROUGHPUT_ALONE_S = 255  # `bash bench/gpu.sh throughput` alone, for a re-run (its 222 s and the call's overhead)


def flops_per_step(m: int, depth: int = DEPTH) -> float:
    """Training FLOPs of one step of M members: 6·N·tokens for the matrices (head included) plus
    attention's q·kᵀ and p·v (forward 4·B·T²·d per layer, backward twice that)."""
    n = depth * (4 * D * D + 2 * D * D_MLP) + VOCAB * D
    tokens = BATCH * CONTEXT
    return m * (6 * n * tokens + 3 * depth * 4 * BATCH * CONTEXT * CONTEXT * D)


def count_ops(sizes: tuple[int, ...] = (1, 12, 36), depth: int = DEPTH) -> dict[int, float]:
    """ATen ops of one ``none`` training step, eager, for M members, counted at a tiny width."""
    import torch

    from bench.common import bench_corpus, build_trainer
    from bench.packing import OpCounter
    from bench.train_step import SIZES, model_config
    from model.recipe import TrainConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        size = SIZES["tiny"]
        corpus = bench_corpus(size.corpus, n_tokens=20_000)
        mcfg = model_config(size, depth, corpus.vocab_size)
        out = {}
        for m in sizes:
            counts = []
            for steps in (1, 3):
                members = [("independent_xavier", 37 + i, TrainConfig(lr=size.lr, batch_size=2, epochs=1,
                            steps_per_epoch=steps, eval_batches=1, probe_seqs=1, device="cpu", seed=37 + i))
                           for i in range(m)]
                trainer = build_trainer(mcfg, corpus, members)
                trainer.train_epoch()
                with OpCounter() as c:
                    trainer.train_epoch()
                counts.append(c.non_view)
            out[m] = (counts[1] - counts[0]) / 2
        return out
    finally:
        torch.set_num_threads(threads)


def count_gpu_tests(files: tuple[str, ...] = GPU_TESTS) -> dict[str, int] | None:
    """The cases ``pytest -m gpu`` collects from ``files`` (skipped without CUDA, but collected):
    {"cases": all, "compile": those whose id names compile}; None when collection fails."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider",
           "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), *files]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    if proc.returncode != 0 or not ids:
        return None
    return {"cases": len(ids), "compile": sum("compile" in line.split("::")[-1] for line in ids)}


def step_s(m: int, ops: dict[int, float], graphs: bool, clamp: bool = False, depth: int = DEPTH) -> float:
    """The estimated GPU time of one training step of M members."""
    launch = ops.get(m, max(ops.values())) * GUESS["graph_op_us" if graphs else "eager_op_us"] * 1e-6
    t = max(flops_per_step(m, depth) / (GUESS["tflops"] * 1e12), launch)
    return t + (m * depth * GUESS["decomp_ms"] * 1e-3 if clamp else 0.0)


def variant_s(m: int, ops: dict[int, float], graphs: bool, steps: int, seconds: float, clamp: bool = False,
              procs: int = 1) -> float:
    """One throughput variant in a running process: build, record (4 eager steps), a warm-up epoch, about
    ``seconds`` of timed epochs plus the one that overshoots."""
    epoch = steps * step_s(m, ops, graphs, clamp)
    record = 4 * step_s(m, ops, False, clamp) if graphs else 0.0
    return procs * GUESS["build_s"] + record + epoch + max(seconds, epoch) + epoch


def plan(ops: dict[int, float], seconds: float = 3.0, tests: dict[str, int] | None = None) -> dict[str, Any]:
    """Every item of every section: what it runs, its estimated need and its budget (seconds).
    ``tests``: ``count_gpu_tests``' count (None: ``TESTS_FALLBACK``, said so)."""
    from bench.gpu_packing import GROUPS, OPTIONAL, VARIANTS  # no torch import

    items: dict[str, dict[str, Any]] = {}

    def add(section: str, name: str, need: float, what: str, optional: bool = False) -> None:
        items[name] = {"section": section, "need_s": round(need, 1), "what": what, "optional": optional,
                       "budget_s": int(math.ceil(need * MARGIN + SLACK_S))}

    counted = tests or TESTS_FALLBACK
    add("tests", "gpu-tests", GUESS["startup_s"] + (counted["cases"] - counted["compile"]) * GUESS["gpu_test_s"]
        + counted["compile"] * GUESS["compile_test_s"],
        f"pytest -m gpu: {counted['cases']} cases{', counted' if tests else ' (not counted: a guess)'}, "
        f"{counted['compile']} compiling")

    for group, names in GROUPS.items():
        if group == "busy":
            need = GUESS["startup_s"] + 2 * variant_s(1, ops, True, 20, seconds) + 2 * 20 * step_s(1, ops, False)
            add("throughput", group, need, "GPU busy: unpacked eager and graphed, one profiled epoch each")
            continue
        need = GUESS["startup_s"]
        for name in names:
            v = VARIANTS[name]
            if v["kind"] == "procs":  # the workers start at once: one start-up, then four in parallel
                need += variant_s(1, ops, True, v["steps"], seconds, procs=v["members"]) + GUESS["startup_s"]
            else:
                need += variant_s(v["members"], ops, v["graphs"], v["steps"], seconds, v["condition"] != "none")
                need += GUESS["compile_s"] if v["compile"] else 0.0
        add("throughput", group, need, ", ".join(names), optional=group in OPTIONAL)
    # clamp: depth 8, M = 1 and 12, 5 steps a round, 1 + 3 rounds of every method on both devices
    clamp_calls = 4 * 3 * (1 + 12) * 8 * (GUESS["decomp_ms"] + GUESS["cpu_decomp_ms"]) * 1e-3
    add("clamp", "clamp", GUESS["startup_s"] + 2 * GUESS["build_s"] + clamp_calls
        + 4 * 5 * (step_s(1, ops, True, depth=8) + step_s(12, ops, True, depth=8)),
        "bench.clamp_cost: the clamp's methods × devices, unpacked and M = 12, depth 8")
    # probe: depth 8, 1 + 3 rounds of (20 steps, probe twice, its forward, val), then the old probe twice
    add("probe", "probe", GUESS["startup_s"] + 4 * (20 * step_s(1, ops, True, depth=8) + 2.5 * GUESS["probe_s"])
        + 2 * (20 * step_s(1, ops, True, depth=8) + GUESS["old_probe_s"]) + 3 * GUESS["probe_s"],
        "bench.probe_cost: probe + validation in steps at depth 8")
    # equivalence: M = 3 runs three ways (3 + 3 Trainers, one pack), 20 steps, 2 reports each
    for amp in ("off", "bf16"):
        need = GUESS["startup_s"] + 7 * (GUESS["build_s"] + 4 * step_s(3, ops, False)) + 9 * 2 * GUESS["probe_s"] \
            + 9 * 20 * step_s(1, ops, False, depth=4)
        add("equivalence", f"equivalence-{amp}", need, f"bench.pack_equivalence: M = 3, depth 4, amp {amp}")
    # sweep: twice (default flags, --pack 1): Ray, 3 depths × 2 seeds × 3 inits = 18 runs of 500 steps
    per_sweep = GUESS["ray_start_s"] + 18 * (GUESS["startup_s"] / 3 + 500 * step_s(1, ops, True) + 3 * GUESS["probe_s"])
    add("sweep", "sweep", 2 * per_sweep, "bench.gpu_sweep: the baseline sweep twice (upper bound: every run unpacked)",
        optional=True)
    sections: dict[str, int] = {}
    for item in items.values():
        if item.get("optional"):
            continue  # optional: runs only with time left in its section
        sections[item["section"]] = sections.get(item["section"], 0) + item["budget_s"]
    order: dict[str, list[str]] = {}
    for name, item in items.items():
        order.setdefault(item["section"], []).append(name)
    return {"guess": GUESS, "margin": MARGIN, "slack_s": SLACK_S, "ops_per_step": ops, "seconds_per_variant": seconds,
            "gpu_tests": tests,
            "step_s": {f"M={m} {'graphed' if g else 'eager'}": step_s(m, ops, g) for m in ops for g in (False, True)},
            "items": items, "order": order, "sections": sections, "total_s": sum(sections.values())}


#: seconds of a call outside its sections: the prerequisites, the plan (counting ops and GPU tests), the CUDA
#: check, the report (about 20 s on the 2-core CPU machine)
OVERHEAD_S = 30


def call_budget(p: dict[str, Any], sections: list[str]) -> int:
    """A call's default budget for ``sections``: their budgets (optional items left out) plus
    ``OVERHEAD_S``, at most ``BUDGET_S``; an optional item runs only with its need left over. A section
    of optional items only (the sweep) counts them: asked for, it must be able to run."""
    total = OVERHEAD_S
    for s in sections:
        total += section_s(p, s)
    return min(BUDGET_S, total)


def section_s(p: dict[str, Any], section: str) -> int:
    """A section's budget in a call: its non-optional items', or all its items' if it has no other."""
    items = [p["items"][name] for name in p["order"].get(section, [])]
    return p["sections"].get(section) or sum(it["budget_s"] for it in items)


def call_sections(p: dict[str, Any], budget: int = BUDGET_S) -> tuple[list[str], list[str]]:
    """(the sections a call that names none runs, those left for a second call): ``SECTIONS`` in
    order, each taken while the call's budgets stay within ``budget`` (gpu.sh's ``BUDGET_S``); an
    optional-only section (the sweep) is taken at no cost (it runs only with its need left)."""
    total, now, later = OVERHEAD_S, [], []
    for s in SECTIONS:
        cost = p["sections"].get(s, 0)
        if total + cost <= budget:
            now.append(s)
            total += cost
        else:
            later.append(s)
    return now, later


def show(p: dict[str, Any]) -> None:
    print(f"[gpu_plan] ops per step (depth {DEPTH}, counted on the CPU): "
          + ", ".join(f"M={m} {v:,.0f}" for m, v in p["ops_per_step"].items())
          + "; estimated GPU step: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in p["step_s"].items()))
    print("[gpu_plan] guesses: " + ", ".join(f"{k} {v:g}" for k, v in p["guess"].items())
          + f"; budget = need × {p['margin']:g} + {p['slack_s']:g} s")
    print(f"  {'item':24s} {'section':12s} {'need':>7s} {'budget':>7s}  runs")
    for name, it in p["items"].items():
        opt = " (only with that much time left)" if it["optional"] else ""
        print(f"  {name:24s} {it['section']:12s} {it['need_s']:6.0f}s {it['budget_s']:6d}s  {it['what']}{opt}")
    print("[gpu_plan] sections, without the optional items: " + ", ".join(f"{s} {b} s" for s, b in p["sections"].items())
          + f"; all {p['total_s']} s (a whole call: {BUDGET_S} s; throughput alone: {THROUGHPUT_ALONE_S} s)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_plan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    ap.add_argument("--no-count", action="store_true", help="use OPS_FALLBACK instead of counting ops (CPU_CHECK=1)")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per throughput variant")
    ap.add_argument("--tests", default=" ".join(GPU_TESTS), help="the GPU test files (gpu.sh's GPU_TESTS)")
    ap.add_argument("--budget-of", default="", help=argparse.SUPPRESS)
    ap.add_argument("--call-budget", type=int, default=None, help=argparse.SUPPRESS)  # gpu.sh's BUDGET_S, if set
    args = ap.parse_args(argv)
    ops = dict(OPS_FALLBACK) if args.no_count else count_ops()
    tests = count_gpu_tests(tuple(args.tests.split()))
    p = plan(ops, args.seconds, tests)
    show(p)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(p, indent=2) + "\n")
    if args.budget_of == "auto":  # gpu.sh without sections: those that fit, and the rest for later
        now, later = call_sections(p, args.call_budget or BUDGET_S)
        print(f"BUDGET {args.call_budget or call_budget(p, now)}")
        print(f"SECTIONS {' '.join(now)}")
        if later:
            print(f"LATER {' '.join(later)}")
    elif args.budget_of:  # gpu.sh: the default budget of a call running these sections
        print(f"BUDGET {call_budget(p, args.budget_of.split())}")
    return p


if __name__ == "__main__":
    main()
