"""Benchmark 1: the project's training step against a plain PyTorch loop.

    python -m bench.train_step [--sizes demo,paper] [--depths 4,8] [--rounds 5] [--threads 1] [--quick|--tiny]

A = ``Trainer.train_epoch()`` called directly on Trainers whose
``steps_per_epoch`` is the number of steps per timed round: exactly the
loop a sweep trial runs (sampler draw, autocast context, intervention hooks
(``none``), backward, per-layer q/k gradient norms, clip, optimiser step,
divergence check), but no probe, no validation and no ``on_epoch`` callback
(those run once an epoch, outside the timed region; ``bench.probe_cost``
measures the probe).

B = ``ReferenceLoop``: the same model (``build_model``), the same batches
(``BatchSampler`` with the same seed), AdamW with the same parameter groups,
clip at 1.0, the loss accumulated on the device, nothing else.

Both run in one process with the same thread count, alternated round by
round (A B, B A, …; see ``bench.common``). Per size, two ratios of
``tokens/s(A) / tokens/s(B)`` = ``time(B) / time(A)``, each the median over
rounds of the per-round ratio (with the interquartile range of the per-round
ratios as a measure of the noise):

- ``ratio_wall``: wall-clock time;
- ``ratio_cpu``: this process's CPU time. With one torch thread (the
  default, as in a 1-CPU trial) CPU time is the time the step itself took;
  on a shared machine it is far less disturbed by other processes than the
  wall clock, which also counts the time the scheduler gave to others.

``ratio`` is ``ratio_cpu`` with one thread and ``ratio_wall`` otherwise (or on
a GPU). The ratio printed last is its geometric mean over the measured sizes
(the worst size is kept as ``ratio_worst``). Target ≥ 0.97 on the CPU.

Sizes: ``demo`` = d_model 64, 4 heads, d_mlp 256, context 64, batch 16 on
stdlib-docs (107 symbols); ``paper`` = d_model 256, 4 heads, d_mlp 1024,
context 128, batch 64 on a synthetic corpus of 1758 symbols (the paper's
vocabulary size, so the tied embedding/head costs what it does there).
"""

from __future__ import annotations

import argparse
import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

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
from model.corpus import BatchSampler, Corpus
from model.gpt import GPTConfig
from model.qk_init import build_model
from model.recipe import TrainConfig
from model.stack import Member
from model.trainer import Trainer


@dataclass(frozen=True)
class Size:
    name: str
    d_model: int
    n_head: int
    d_mlp: int
    context: int
    batch: int
    corpus: str
    lr: float


SIZES = {
    "demo": Size("demo", 64, 4, 256, 64, 16, "stdlib-docs", 1e-3),
    "paper": Size("paper", 256, 4, 1024, 128, 64, "synthetic:1758", 1e-4),
    "tiny": Size("tiny", 32, 4, 64, 16, 4, "synthetic:50", 1e-3),
}


def model_config(size: Size, depth: int, vocab_size: int) -> GPTConfig:
    return GPTConfig(vocab_size=vocab_size, n_layer=depth, n_head=size.n_head,
                     d_model=size.d_model, d_mlp=size.d_mlp, context=size.context)


class ReferenceLoop:
    """A minimal NanoGPT-style loop over the project's model and sampler (no bookkeeping).

    On CUDA it uses the same autocast dtype and fused AdamW as the Trainer
    would, so that the comparison stays like for like there too.
    """

    def __init__(self, model_cfg: GPTConfig, corpus: Corpus, qk_init: str, model_seed: int,
                 batch_seed: int, batch_size: int, lr: float, device: str = "cpu",
                 amp_dtype: torch.dtype | None = None, weight_decay: float = 0.1,
                 betas: tuple[float, float] = (0.9, 0.95), grad_clip: float = 1.0) -> None:
        self.device = torch.device(device)
        self.model = build_model(model_cfg, qk_init, model_seed).to(self.device)
        decay = [p for p in self.model.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.model.parameters() if p.dim() < 2]
        self.params = decay + no_decay
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=lr, betas=betas, fused=self.device.type == "cuda")
        self.sampler = BatchSampler(corpus.train, batch_size, model_cfg.context, batch_seed, self.device)
        self.grad_clip = grad_clip
        self.amp_dtype = amp_dtype
        self.scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)

    def step(self) -> Tensor:
        """One optimiser step; returns the (detached) loss."""
        x, y = self.sampler.next()
        ctx = torch.autocast(self.device.type, dtype=self.amp_dtype) if self.amp_dtype else nullcontext()
        with ctx:
            _, loss = self.model(x, y)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.opt)
        torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        return loss.detach()

    def run(self, steps: int) -> Tensor:
        """``steps`` steps; returns the mean loss (a device tensor)."""
        total = torch.zeros((), device=self.device)
        for _ in range(steps):
            total += self.step()
        return total / steps


def make_trainer(model_cfg: GPTConfig, corpus: Corpus, qk_init: str, model_seed: int, batch_seed: int,
                 batch_size: int, lr: float, steps: int, device: str = "cpu", amp: str = "off",
                 compile: bool = False) -> Trainer:
    cfg = TrainConfig(lr=lr, batch_size=batch_size, epochs=1, steps_per_epoch=steps, eval_batches=1,
                      probe_seqs=16, amp=amp, device=device, seed=batch_seed, compile=compile)
    return Trainer(model_cfg, [Member(qk_init, model_seed, cfg)], corpus)


def measure(size: Size, depth: int, steps: int, rounds: int, device: str = "cpu",
            corpus: Corpus | None = None, amp: str = "auto", instances: int = 2) -> dict[str, Any]:
    """Trainer vs reference at one size and depth; returns the figures of that comparison.

    ``instances`` Trainers and as many reference loops (identical copies) are
    timed in turn: two identical models in one process can differ by a few
    per cent in speed (where their tensors landed in memory), so one pair
    alone mixes that into the ratio. The per-round ratios of pair i
    (reference i / trainer i) are pooled over pairs and rounds.

    ``amp`` is the Trainer's setting (auto: bf16/fp16 on CUDA, off on the CPU);
    the reference loop uses whatever dtype the Trainer resolved it to.
    """
    corpus = corpus or bench_corpus(size.corpus)
    mcfg = model_config(size, depth, corpus.vocab_size)
    sink: list[Any] = []
    fns: dict[str, Any] = {}
    trainer = None
    for i in range(instances):
        trainer = make_trainer(mcfg, corpus, "independent_xavier", 37, 37, size.batch, size.lr, steps, device,
                               amp=amp)
        ref = ReferenceLoop(mcfg, corpus, "independent_xavier", 37, 37, size.batch, size.lr, device,
                            trainer.amp_dtype)
        fns[f"trainer{i}"] = lambda t=trainer: sink.append(t.train_epoch())
        fns[f"reference{i}"] = lambda r=ref: sink.append(r.run(steps).item())
    cpu: dict[str, list[float]] = {}
    times = alternate(fns, rounds=rounds, warmup=1, device=device, cpu_times=cpu)
    if any(r is None for r in sink):
        raise RuntimeError("the trainer's loss turned non-finite during the benchmark")

    def pooled(d: dict[str, list[float]], side: str) -> list[float]:
        return [t for i in range(instances) for t in d[f"{side}{i}"]]

    tokens = steps * size.batch * size.context
    wall_a, wall_b = pooled(times, "trainer"), pooled(times, "reference")
    cpu_a, cpu_b = pooled(cpu, "trainer"), pooled(cpu, "reference")
    t_a, t_b = med(wall_a), med(wall_b)
    per_instance = {name: 1e3 * med(v) / steps for name, v in times.items()}
    out = {
        "size": size.name, "depth": depth, "params": trainer.model.num_params(), "device": device,
        "amp": str(trainer.amp_dtype), "instances": instances,
        "steps_per_round": steps, "rounds": rounds, "tokens_per_round": tokens,
        "trainer_s": wall_a, "reference_s": wall_b, "step_ms_per_instance": per_instance,
        "trainer_step_ms": 1e3 * t_a / steps, "reference_step_ms": 1e3 * t_b / steps,
        "trainer_tokens_per_s": tokens / t_a, "reference_tokens_per_s": tokens / t_b,
        "trainer_cpu_s": cpu_a, "reference_cpu_s": cpu_b,
        "ratio_wall": paired_ratio(wall_b, wall_a), "ratio_wall_iqr": paired_spread(wall_b, wall_a),
        "ratio_wall_of_medians": t_b / t_a,
        "ratio_cpu": paired_ratio(cpu_b, cpu_a), "ratio_cpu_iqr": paired_spread(cpu_b, cpu_a),
        "cpu_over_wall": sum(cpu_a + cpu_b) / sum(wall_a + wall_b),
        "threads": torch.get_num_threads(),
    }
    use_cpu = torch.device(device).type == "cpu" and torch.get_num_threads() == 1
    out["ratio"] = out["ratio_cpu"] if use_cpu else out["ratio_wall"]
    out["ratio_basis"] = "cpu" if use_cpu else "wall"
    spread = ", ".join(f"{k} {v:.1f}" for k, v in per_instance.items())
    print(f"  {size.name:5s} L{depth}: trainer {fmt_s(t_a / steps)}/step ({out['trainer_tokens_per_s']:,.0f} tok/s)"
          f"  reference {fmt_s(t_b / steps)}/step ({out['reference_tokens_per_s']:,.0f} tok/s)\n"
          f"          ratio wall {out['ratio_wall']:.3f} (IQR {out['ratio_wall_iqr'][0]:.3f}–"
          f"{out['ratio_wall_iqr'][1]:.3f})  cpu {out['ratio_cpu']:.3f} (IQR {out['ratio_cpu_iqr'][0]:.3f}–"
          f"{out['ratio_cpu_iqr'][1]:.3f})  cpu/wall {out['cpu_over_wall']:.2f}\n"
          f"          ms/step per instance: {spread}", flush=True)
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.train_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="demo,paper", help="comma-separated: demo, paper, tiny")
    p.add_argument("--depths", default="4,8")
    p.add_argument("--demo-steps", type=int, default=4, help="steps per timed round at the demo size")
    p.add_argument("--paper-steps", type=int, default=1, help="steps per timed round at the paper size")
    p.add_argument("--rounds", type=int, default=12, help="timed rounds per instance (demo)")
    p.add_argument("--paper-rounds", type=int, default=4, help="timed rounds per instance (paper)")
    p.add_argument("--instances", type=int, default=2, help="identical Trainers (and reference loops) per size")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quick", action="store_true", help="fewer steps and rounds, depth 4 only")
    p.add_argument("--tiny", action="store_true", help="smoke-test size: seconds")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    threads = set_threads(args.threads)
    depths = [int(d) for d in args.depths.split(",")]
    sizes = args.sizes.split(",")
    if args.quick:
        depths, args.demo_steps, args.rounds, args.paper_steps, args.paper_rounds = [4], 4, 6, 1, 2
    if args.tiny:
        sizes, depths, args.rounds = ["tiny"], [2], 2
    print(f"bench.train_step: Trainer.train_epoch vs a plain loop, {threads} thread(s), "
          f"device {args.device}", flush=True)
    results = []
    for name in sizes:
        size = SIZES[name]
        corpus = bench_corpus(size.corpus)
        steps = {"paper": args.paper_steps, "tiny": 2}.get(name, args.demo_steps)
        rounds = args.paper_rounds if name == "paper" else args.rounds
        for depth in depths:
            results.append(measure(size, depth, steps, rounds, args.device, corpus, instances=args.instances))
    worst = min(r["ratio"] for r in results)
    geo = math.exp(sum(math.log(r["ratio"]) for r in results) / len(results))
    out = {"benchmark": "train_step", "results": results, "ratio": geo, "ratio_geomean": geo,
           "ratio_worst": worst, "target": ">= 0.97", "met": geo >= 0.97, "machine": machine()}
    basis = "/".join(sorted({r["ratio_basis"] for r in results}))
    out["ratio_basis"] = basis
    print(f"  worst size {worst:.3f} ({basis} time)")
    print_ratio(f"train_step tokens/s trainer/reference ({basis} time, geometric mean over sizes)", geo,
                ">= 0.97")
    return out


if __name__ == "__main__":
    main()
