"""Benchmark 1: the project's training step against a plain PyTorch loop.

    python -m bench.train_step [--sizes demo,paper] [--depths 4,8] [--rounds 5] [--threads 1] [--quick|--tiny]

A = ``Trainer._train_epoch()`` called directly on a Trainer whose
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
round (A B, B A, …; see ``bench.common``). Per size the ratio is the median
over rounds of ``time(B) / time(A)`` = ``tokens/s(A) / tokens/s(B)`` (the
ratio of median times is printed too). The ratio printed last is the worst
(lowest) over the measured sizes. Target ≥ 0.97 on the CPU.

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
from model.train import TrainConfig, Trainer


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
    return Trainer(model_cfg, cfg, corpus, qk_init, model_seed)


def measure(size: Size, depth: int, steps: int, rounds: int, device: str = "cpu",
            corpus: Corpus | None = None, amp: str = "auto") -> dict[str, Any]:
    """Trainer vs reference at one size and depth; returns the figures of that pair.

    ``amp`` is the Trainer's setting (auto: bf16/fp16 on CUDA, off on the CPU);
    the reference loop uses whatever dtype the Trainer resolved it to.
    """
    corpus = corpus or bench_corpus(size.corpus)
    mcfg = model_config(size, depth, corpus.vocab_size)
    trainer = make_trainer(mcfg, corpus, "independent_xavier", 37, 37, size.batch, size.lr, steps, device,
                           amp=amp)
    ref = ReferenceLoop(mcfg, corpus, "independent_xavier", 37, 37, size.batch, size.lr, device,
                        trainer.amp_dtype)
    sink: list[Any] = []
    times = alternate({"trainer": lambda: sink.append(trainer._train_epoch()),
                       "reference": lambda: sink.append(ref.run(steps).item())},
                      rounds=rounds, warmup=1, device=device)
    if any(r is None for r in sink):
        raise RuntimeError("the trainer's loss turned non-finite during the benchmark")
    tokens = steps * size.batch * size.context
    t_a, t_b = med(times["trainer"]), med(times["reference"])
    out = {
        "size": size.name, "depth": depth, "params": trainer.model.num_params(), "device": device,
        "amp": str(trainer.amp_dtype),
        "steps_per_round": steps, "rounds": rounds, "tokens_per_round": tokens,
        "trainer_s": times["trainer"], "reference_s": times["reference"],
        "trainer_step_ms": 1e3 * t_a / steps, "reference_step_ms": 1e3 * t_b / steps,
        "trainer_tokens_per_s": tokens / t_a, "reference_tokens_per_s": tokens / t_b,
        "ratio": paired_ratio(times["reference"], times["trainer"]), "ratio_of_medians": t_b / t_a,
        "ratio_iqr": paired_spread(times["reference"], times["trainer"]),
        "ratio_min": min(times["reference"]) / min(times["trainer"]),
    }
    print(f"  {size.name:5s} L{depth}: trainer {fmt_s(t_a / steps)}/step ({out['trainer_tokens_per_s']:,.0f} tok/s)"
          f"  reference {fmt_s(t_b / steps)}/step ({out['reference_tokens_per_s']:,.0f} tok/s)"
          f"  ratio {out['ratio']:.3f} (per-round IQR {out['ratio_iqr'][0]:.3f}–{out['ratio_iqr'][1]:.3f}; "
          f"of medians {out['ratio_of_medians']:.3f}, of minima {out['ratio_min']:.3f})", flush=True)
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.train_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="demo,paper", help="comma-separated: demo, paper, tiny")
    p.add_argument("--depths", default="4,8")
    p.add_argument("--demo-steps", type=int, default=10, help="steps per timed round at the demo size")
    p.add_argument("--paper-steps", type=int, default=1, help="steps per timed round at the paper size")
    p.add_argument("--rounds", type=int, default=10, help="timed rounds per side (demo)")
    p.add_argument("--paper-rounds", type=int, default=8, help="timed rounds per side (paper)")
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
        depths, args.demo_steps, args.rounds, args.paper_steps, args.paper_rounds = [4], 5, 8, 1, 3
    if args.tiny:
        sizes, depths, args.rounds = ["tiny"], [2], 2
    print(f"bench.train_step: Trainer._train_epoch vs a plain loop, {threads} thread(s), "
          f"device {args.device}", flush=True)
    results = []
    for name in sizes:
        size = SIZES[name]
        corpus = bench_corpus(size.corpus)
        steps = {"paper": args.paper_steps, "tiny": 2}.get(name, args.demo_steps)
        rounds = args.paper_rounds if name == "paper" else args.rounds
        for depth in depths:
            results.append(measure(size, depth, steps, rounds, args.device, corpus))
    worst = min(r["ratio"] for r in results)
    geo = math.exp(sum(math.log(r["ratio"]) for r in results) / len(results))
    out = {"benchmark": "train_step", "results": results, "ratio": worst, "ratio_geomean": geo,
           "target": ">= 0.97", "met": worst >= 0.97, "machine": machine()}
    print(f"  geometric mean ratio {geo:.3f}")
    print_ratio("train_step tokens/s trainer/reference (worst size)", worst, ">= 0.97")
    return out


if __name__ == "__main__":
    main()
