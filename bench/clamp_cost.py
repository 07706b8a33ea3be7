"""What ``k_spectrum_clamp`` costs per step, as × a ``none`` step of the same shape.

    python -m bench.clamp_cost [--depths 4] [--members 1,12] [--rounds 3] [--threads 1] [--device cpu|cuda]
                               [--methods eigh,svd,refine] [--steps 1] [--tiny] [--json FILE] [--costs FILE]

At paper width (d_model 256, 4 heads, d_mlp 1024, context 128, batch 64, vocabulary 1758) a ``none``
trainer of M members (M = 1: one run; M = 12: a pack) is built, and in one process, alternated
(``bench.common.alternate``): its training step (``train_epoch`` of ``--steps`` steps, divided; on
CUDA graphed, the default) and ``interventions.spectrum.clamp_spectrum`` of its M·L W_K, each
method (``eigh``, ``svd``, ``refine``) on each decomposition device (the model's; on CUDA also the
CPU: one copy there and back). A clamped step costs the ``none`` step plus the clamp, so each row
is the clamp's median time over the step's, and ``step_with_clamp`` = 1 + that. ``max_abs_vs_svd``:
each method's largest difference from the SVD clamp on the same weights; ``fastest``: the
fastest within ``TOLERANCE`` of it; ``auto``: what ``interventions.spectrum.choose`` (the clamp's
default, a one-off timing on a few matrices) picks at this shape, here.

``--costs FILE``: the plan's cost factor (``sweep/costs.json``'s format): the clamped step as × the
none step, with the fastest decomposition, of the largest pack measured (the deepest of its
depths); ``measured`` is true on a GPU. gpu.sh writes ``$OUT/costs.json``; copy a GPU's file over
``sweep/costs.json`` and the plans price the clamp by it.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import torch

from bench.common import (
    alternate,
    bench_corpus,
    build_trainer,
    fmt_s,
    k_weights,
    machine,
    med,
    set_threads,
)
from bench.train_step import SIZES, model_config
from interventions.spectrum import METHODS, choose, clamp_spectrum
from model.recipe import TrainConfig

INITS = ("independent_xavier", "qk_identical", "disjoint_support_xavier")
#: a method farther than this from the SVD clamp cannot be the fastest (rounding, not a different clamp)
TOLERANCE = 1e-6


def measure(size_name: str, depth: int, m: int, rounds: int, device: str, methods: list[str], steps: int,
            corpus=None) -> dict[str, Any]:
    size = SIZES[size_name]
    corpus = corpus or bench_corpus(size.corpus)
    mcfg = model_config(size, depth, corpus.vocab_size)
    cfg = lambda seed: TrainConfig(lr=size.lr, batch_size=size.batch, epochs=1, steps_per_epoch=steps,  # noqa: E731
                                   eval_batches=1, probe_seqs=4, amp="auto", device=device, seed=seed)
    trainer = build_trainer(mcfg, corpus, [(INITS[i % 3], 37 + i, cfg(37 + i)) for i in range(m)])
    w = k_weights(trainer).detach()  # (L, D, D) or (M, L, D, D)
    sigma0 = torch.linalg.svdvals(w.double())
    places = [None, "cpu"] if torch.device(device).type == "cuda" else [None]
    fns: dict[str, Any] = {"step": trainer.train_epoch}
    for method in methods:
        for place in places:
            fns[f"{method}@{place or device}"] = (lambda m=method, p=place: clamp_spectrum(w, sigma0, m, p))
    times = alternate(fns, rounds=rounds, warmup=1, device=device)
    want = clamp_spectrum(w, sigma0, "svd")
    t_step = med(times.pop("step")) / steps
    rows = []
    for name, ts in times.items():
        method, place = name.split("@")
        err = (clamp_spectrum(w, sigma0, method, None if place == device else place) - want).abs().max().item()
        rows.append({"clamp": name, "method": method, "decomp_device": place, "clamp_s": med(ts),
                     "x_none_step": med(ts) / t_step, "step_with_clamp": 1 + med(ts) / t_step,
                     "max_abs_vs_svd": err})
    best = min((r for r in rows if r["max_abs_vs_svd"] <= TOLERANCE), key=lambda r: r["clamp_s"], default=rows[0])
    auto_method, auto_place = choose(w, sigma0)
    auto = f"{auto_method}@{auto_place or device}"
    print(f"  {size_name} L{depth}, M = {m} ({m * depth} matrices of {mcfg.d_model}²), {device}, graphs "
          f"{trainer.graph_status}: none step {fmt_s(t_step)}; the clamp's own choice (auto): {auto}", flush=True)
    for r in rows:
        print(f"    clamp {r['clamp']:<14} {fmt_s(r['clamp_s']):>9} = {r['x_none_step']:6.3f} × the none step "
              f"(clamped step {r['step_with_clamp']:.3f} ×); max |Δ| vs svd {r['max_abs_vs_svd']:.1e}", flush=True)
    return {"size": size_name, "depth": depth, "members": m, "device": device, "rounds": rounds, "steps_per_round": steps,
            "graph_status": trainer.graph_status, "none_step_s": t_step, "rows": rows, "fastest": best["clamp"],
            "fastest_step_with_clamp": best["step_with_clamp"], "auto": auto}


def costs(out: dict[str, Any]) -> dict[str, Any]:
    """The plan's cost factor (``sweep/costs.json``'s format) from the largest pack measured."""
    r = max(out["results"], key=lambda r: (r["members"], r["depth"]))
    where = out["machine"].get("cuda") if r["device"].startswith("cuda") else "the CPU"
    return {"about": "What a training step of each condition costs, as × a none step of the same shape, for "
                     "--pack auto's plan (sweep/placement/schedule.py). Written by python -m bench.clamp_cost --costs FILE.",
            "k_spectrum_clamp": {
                "factor": round(r["fastest_step_with_clamp"], 3), "measured": r["device"].startswith("cuda"),
                "source": f"bench.clamp_cost on {where}, {datetime.date.today().isoformat()}: a pack of {r['members']} "
                          f"at depth {r['depth']}, {r['size']} width, the clamped step ({r['fastest']}) over the "
                          f"{'graphed ' if r['graph_status'] == 'on' else ''}none step ({r['none_step_s'] * 1e3:.1f} ms)"}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.clamp_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--depths", default="4")
    p.add_argument("--members", default="1,12", help="members per trainer, comma-separated (1: one run)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--steps", type=int, default=1, help="training steps per timed round")
    p.add_argument("--tiny", action="store_true", help="smoke-test size: seconds")
    p.add_argument("--json", default=None, help="also write the figures to this file (bench/gpu.sh)")
    p.add_argument("--costs", default=None, help="also write the plan's cost factor to this file (sweep/costs.json's "
                   "format)")
    args = p.parse_args(argv)
    methods = args.methods.split(",")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        p.error(f"--methods: unknown {', '.join(bad)}; valid: {', '.join(METHODS)}")
    threads = set_threads(args.threads)
    size = "tiny" if args.tiny else "paper"
    print(f"bench.clamp_cost: k_spectrum_clamp per step vs a none step, {size} width, {threads} thread(s), "
          f"device {args.device}", flush=True)
    corpus = bench_corpus(SIZES[size].corpus)
    out: dict[str, Any] = {"benchmark": "clamp_cost", "results": [], "machine": machine()}
    for d in args.depths.split(","):
        for m in args.members.split(","):
            out["results"].append(measure(size, int(d), int(m), args.rounds, args.device, methods, args.steps, corpus))
            if args.json:  # after every shape: a run cut off by gpu.sh's timeout keeps what it measured
                Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
            if args.costs:
                Path(args.costs).write_text(json.dumps(costs(out), indent=2, ensure_ascii=False) + "\n")
    if args.costs:
        factor = costs(out)["k_spectrum_clamp"]["factor"]
        print(f"bench.clamp_cost: the plan's cost factor: k_spectrum_clamp ×{factor:g} a none step → {args.costs}")
    return out


if __name__ == "__main__":
    main()
