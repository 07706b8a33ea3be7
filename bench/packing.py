"""Benchmark 5: packed trials (one ``model/trainer.py`` Trainer of M members) against the same runs unpacked, side by side.

    python -m bench.packing [--depth 2] [--members 1,3,6] [--count-members 3,12,36] [--rounds 5] [--quick|--tiny]

(a) Throughput. M one-run Trainers (the unpacked runs: M inits/seeds) against one Trainer of
the same M members, at the demo shape (d_model 64, 4 heads, d_mlp 256, context 64, batch 16
on stdlib-docs), M = 1, 3, 6. A round is ``train_epoch()`` of ``--steps`` steps on each of
the M Trainers against one ``train_epoch()`` of the pack (no probe, no validation), alternated
as in ``bench.common.alternate``; the ratio is tokens/s(pack) / tokens/s(unpacked) = time of
the M Trainers / time of the pack, the median of the per-round ratios (CPU time with one
thread, else wall time). On the CPU packing is expected to buy little: ``--pack auto`` picks 1
there; the ratio is printed, not targeted.

(b) Ops dispatched per member-step (a ``TorchDispatchMode`` counts every ATen op: the proxy
for the launch-bound GPU step, whose time scales with the kernels it launches): an unpacked
step against a packed one for M = 1, 3, 12, 36, divided by M. A step's count is the
difference of ``train_epoch()`` at 3 and at 1 steps, halved (the per-epoch set-up cancels);
it covers the batch draw, forward, backward, grad norms, clipping, AdamW and the
intervention hooks. Counted twice: with the CPU's own attention kernel and with the math
attention on both sides. The packed model runs each layer for all members in one kernel
and attention with the members folded into SDPA's batch (no ``vmap``), so a pack step
dispatches about one unpacked step's ops plus M batch draws. ``non_view`` leaves out view
ops (no kernel on a GPU).

The ratio printed last is the target one: packed/unpacked ops per member-step at M = 12 with
the CPU's attention kernel, target ≤ 0.12 (0.18 with the vmap pack it replaced).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from bench.common import (
    alternate,
    bench_corpus,
    fmt_s,
    machine,
    med,
    paired_ratio,
    paired_spread,
    print_ratio,
    set_threads,
)
from bench.train_step import SIZES, Size, model_config
from model.corpus import Corpus
from model.gpt import GPTConfig
from model.qk_init import QK_INITS
from model.recipe import TrainConfig
from model.stack import Member
from model.trainer import Trainer

TARGET_M, TARGET_RATIO = 12, 0.12  # a launch-bound GPU step scales with it


class OpCounter(TorchDispatchMode):
    """Counts the ATen ops dispatched inside it: ``total`` and ``non_view`` (ops that are not views)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.non_view = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.total += 1
        self.non_view += not func.is_view
        return func(*args, **(kwargs or {}))


def members(m: int, size: Size, steps: int) -> list[Member]:
    """M members: the init regimes in turn, weight and batch seeds 37 + i."""
    inits = sorted(QK_INITS)
    cfg = lambda seed: TrainConfig(lr=size.lr, batch_size=size.batch, epochs=1, steps_per_epoch=steps,  # noqa: E731
                                   eval_batches=1, probe_seqs=16, device="cpu", seed=seed)
    return [Member(inits[i % len(inits)], 37 + i, cfg(37 + i)) for i in range(m)]


def unpacked(mcfg: GPTConfig, corpus: Corpus, ms: list[Member]) -> list[Trainer]:
    return [Trainer(mcfg, [m], corpus) for m in ms]


def throughput(size: Size, mcfg: GPTConfig, corpus: Corpus, m: int, steps: int, rounds: int) -> dict[str, Any]:
    """One pack of M against M unpacked Trainers, alternated round by round."""
    ms = members(m, size, steps)
    trainers, pack = unpacked(mcfg, corpus, ms), Trainer(mcfg, ms, corpus)
    sink: list[Any] = []
    cpu: dict[str, list[float]] = {}
    times = alternate({"unpacked": lambda: sink.extend(t.train_epoch() for t in trainers),
                       "pack": lambda: sink.append(pack.train_epoch())}, rounds=rounds, warmup=1, cpu_times=cpu)
    use_cpu = torch.get_num_threads() == 1
    basis = cpu if use_cpu else times
    tokens = m * steps * size.batch * size.context
    ratio = paired_ratio(basis["unpacked"], basis["pack"])
    out = {"members": m, "steps_per_round": steps, "rounds": rounds, "tokens_per_round": tokens,
           "unpacked_s": times["unpacked"], "pack_s": times["pack"],
           "unpacked_cpu_s": cpu["unpacked"], "pack_cpu_s": cpu["pack"],
           "unpacked_tokens_per_s": tokens / med(basis["unpacked"]), "pack_tokens_per_s": tokens / med(basis["pack"]),
           "ratio": ratio, "ratio_iqr": paired_spread(basis["unpacked"], basis["pack"]),
           "ratio_basis": "cpu" if use_cpu else "wall"}
    print(f"  M={m:2d}: {m} Trainers {fmt_s(med(basis['unpacked']) / steps)}/step "
          f"({out['unpacked_tokens_per_s']:,.0f} tok/s)  pack {fmt_s(med(basis['pack']) / steps)}/step "
          f"({out['pack_tokens_per_s']:,.0f} tok/s)  ratio {ratio:.3f} (IQR {out['ratio_iqr'][0]:.3f}–"
          f"{out['ratio_iqr'][1]:.3f}, {out['ratio_basis']} time)", flush=True)
    return out


def ops_per_step(make: Callable[[int], Any]) -> tuple[float, float]:
    """(all ops, non-view ops) of one training step: train_epoch at 3 steps minus at 1, halved."""
    counts = []
    for steps in (1, 3):
        trainer = make(steps)
        trainer.train_epoch()  # warm: lazy optimiser state, first-call paths
        with OpCounter() as c:
            trainer.train_epoch()
        counts.append((c.total, c.non_view))
    return (counts[1][0] - counts[0][0]) / 2, (counts[1][1] - counts[0][1]) / 2


def dispatch_counts(size: Size, mcfg: GPTConfig, corpus: Corpus, sizes: list[int], attention: str) -> dict[str, Any]:
    """Ops per member-step, unpacked and packed, with the CPU's attention kernel or the math one."""
    ctx = sdpa_kernel(SDPBackend.MATH) if attention == "math" else nullcontext()
    with ctx:
        one = ops_per_step(lambda steps: unpacked(mcfg, corpus, members(1, size, steps))[0])
        rows = []
        for m in sizes:
            total, non_view = ops_per_step(lambda steps, m=m: Trainer(mcfg, members(m, size, steps), corpus))
            rows.append({"members": m, "ops_per_step": total, "non_view_per_step": non_view,
                         "ops_per_member_step": total / m, "non_view_per_member_step": non_view / m,
                         "ratio": total / m / one[0], "non_view_ratio": non_view / m / one[1]})
    print(f"  ops per member-step, {attention} attention: unpacked {one[0]:.0f} ({one[1]:.0f} non-view)")
    for r in rows:
        print(f"    packed M={r['members']:2d}: {r['ops_per_member_step']:7.1f} ({r['non_view_per_member_step']:6.1f} "
              f"non-view) per member-step = {r['ratio']:.3f}× unpacked ({r['non_view_ratio']:.3f}× non-view); "
              f"1/M = {1 / r['members']:.3f}", flush=True)
    return {"attention": attention, "unpacked_ops_per_step": one[0], "unpacked_non_view_per_step": one[1],
            "packed": rows}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.packing", description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=2, help="layers (the demo's intervention depth)")
    p.add_argument("--members", default="1,3,6", help="pack sizes for the throughput comparison")
    p.add_argument("--count-members", default="1,3,12,36", help="pack sizes for the dispatch counts")
    p.add_argument("--steps", type=int, default=4, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--quick", action="store_true", help="M = 1, 3 timed; counts at M = 3, 12; fewer rounds")
    p.add_argument("--tiny", action="store_true", help="smoke-test size: seconds")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    threads = set_threads(args.threads)
    size = SIZES["demo"]
    if args.quick:
        args.members, args.count_members, args.rounds, args.steps = "1,3", "3,12", 4, 2
    if args.tiny:
        size, args.depth, args.members, args.count_members, args.rounds, args.steps = SIZES["tiny"], 1, "2", "2", 2, 1
    sizes, count_sizes = [int(m) for m in args.members.split(",")], [int(m) for m in args.count_members.split(",")]
    corpus = bench_corpus(size.corpus)
    mcfg = model_config(size, args.depth, corpus.vocab_size)
    print(f"bench.packing: one pack of M vs M Trainers, {size.name} shape, depth {args.depth}, "
          f"{threads} thread(s)", flush=True)
    results = [throughput(size, mcfg, corpus, m, args.steps, args.rounds) for m in sizes]
    counts = [dispatch_counts(size, mcfg, corpus, count_sizes, attention) for attention in ("cpu", "math")]
    at = next((r for r in counts[0]["packed"] if r["members"] == TARGET_M), counts[0]["packed"][-1])
    ratio = at["ratio"]
    target = f"<= {TARGET_RATIO} at M = {TARGET_M}" if at["members"] == TARGET_M else f"(M = {TARGET_M} not counted)"
    out = {"benchmark": "packing", "size": size.name, "depth": args.depth, "results": results,
           "dispatch": counts, "ratio": ratio, "target": target, "met": at["members"] == TARGET_M and ratio <= TARGET_RATIO,
           "throughput_ratio_geomean": math.exp(sum(math.log(r["ratio"]) for r in results) / len(results)),
           "machine": machine()}
    print("  tokens/s pack / unpacked: " + ", ".join(f"M={r['members']} {r['ratio']:.3f}" for r in results))
    print_ratio(f"packing ops per member-step packed/unpacked at M = {at['members']} (CPU attention)", ratio, target)
    return out


if __name__ == "__main__":
    main()
