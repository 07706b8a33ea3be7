"""Benchmark 2: the cost of one full layer probe, in training steps.

    python -m bench.probe_cost [--depths 4,8] [--rounds 3] [--threads 1] [--quick|--tiny]

At the paper size (d_model 256, 4 heads, d_mlp 1024, context 128, vocabulary
1758) a Trainer is built and, in one process, alternated: one training step
(``Trainer.train_epoch()`` with ``steps_per_epoch=1``, batch 64 × 128;
on a GPU a round of several steps, divided) and
one ``probe_layers(model, probe_x)`` on the Trainer's own probe batch
(16 × 128 validation windows). The figure is median(probe) / median(step)
(the rounds are interleaved as in ``bench.common.alternate``).
Target ≤ 10 steps. ``val_loss()`` (the other once-an-epoch cost: 8
validation batches of 64 × 128) is timed the same way and reported too.

The ratio printed last is the worst (largest) probe cost over the depths,
in steps.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.common import alternate, bench_corpus, fmt_s, machine, med, print_ratio, set_threads
from bench.train_step import SIZES, make_trainer, model_config
from metrics.probe import probe_layers


def measure(size_name: str, depth: int, rounds: int, device: str = "cpu", eval_batches: int = 8,
            corpus=None, steps: int = 1) -> dict[str, Any]:
    """Probe and val_loss against one training step (a round of ``steps`` steps, divided)."""
    size = SIZES[size_name]
    corpus = corpus or bench_corpus(size.corpus)
    mcfg = model_config(size, depth, corpus.vocab_size)
    trainer = make_trainer(mcfg, corpus, "independent_xavier", 37, 37, size.batch, size.lr, steps, device,
                           amp="auto")
    # the Trainer's own fixed validation set, at the paper's eval_batches
    from model.corpus import VAL_SEED, fixed_windows

    trainer.val_x, trainer.val_y = (t.to(trainer.device) for t in fixed_windows(
        corpus.val, eval_batches * size.batch, size.context, VAL_SEED))
    sink: list[Any] = []
    times = alternate({"step": lambda: sink.append(trainer.train_epoch()),
                       "probe": lambda: sink.append(probe_layers(trainer.model, trainer.probe_x)),
                       "val_loss": lambda: sink.append(trainer.val_loss())},
                      rounds=rounds, warmup=1, device=device)
    rows = sink[1]
    t_step, t_probe, t_val = med(times["step"]) / steps, med(times["probe"]), med(times["val_loss"])
    out = {
        "size": size_name, "depth": depth, "device": device, "rounds": rounds, "steps_per_round": steps,
        "amp": str(trainer.amp_dtype),
        "probe_batch": list(trainer.probe_x.shape), "train_batch": [size.batch, size.context],
        "step_s": times["step"], "probe_s": times["probe"], "val_loss_s": times["val_loss"],
        "probe_in_steps": t_probe / t_step, "val_loss_in_steps": t_val / t_step,
        "probe_rows": len(rows), "columns": sorted(rows[0]),
    }
    print(f"  {size_name} L{depth}: step {fmt_s(t_step)}  probe {fmt_s(t_probe)} "
          f"= {out['probe_in_steps']:.2f} steps  val_loss ({eval_batches} batches) {fmt_s(t_val)} "
          f"= {out['val_loss_in_steps']:.2f} steps", flush=True)
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.probe_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--depths", default="4,8")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--quick", action="store_true", help="depth 4, two rounds")
    p.add_argument("--tiny", action="store_true", help="smoke-test size: seconds")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    threads = set_threads(args.threads)
    depths = [int(d) for d in args.depths.split(",")]
    size, eval_batches = "paper", 8
    if args.quick:
        depths, args.rounds = [4], 2
    if args.tiny:
        size, depths, args.rounds, eval_batches = "tiny", [2], 2, 2
    print(f"bench.probe_cost: probe_layers vs one training step, {size} size, {threads} thread(s), "
          f"device {args.device}", flush=True)
    corpus = bench_corpus(SIZES[size].corpus)
    results = [measure(size, d, args.rounds, args.device, eval_batches, corpus) for d in depths]
    worst = max(r["probe_in_steps"] for r in results)
    out = {"benchmark": "probe_cost", "results": results, "ratio": worst, "target": "<= 10 steps",
           "met": worst <= 10, "machine": machine()}
    print_ratio("probe_cost probe/step (steps, worst depth)", worst, "<= 10")
    return out


if __name__ == "__main__":
    main()
