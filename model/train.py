"""``python -m model.train``: train one run from flags, no Ray, and print a line per epoch.

The loop itself is ``model.trainer.Trainer``; this module is only its command line.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from model.flags import add_precision_flags
from model.plugins import add_plugin_flag, preload
from model.qk_init import DEFAULT_INIT, QK_INITS

if TYPE_CHECKING:  # what trains is imported after the flags are parsed: --help answers without torch
    from model.corpus import Corpus
    from model.report import EpochReport


def _parse(argv: list[str] | None) -> argparse.Namespace:
    preload(argv, "python -m model.train")  # --plugin modules: their regimes are valid --init choices
    p = argparse.ArgumentParser(
        prog="python -m model.train", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train one run, no Ray. Defaults are the demo shape (sweep preset `demo`: "
        "d_model 64, context 64, lr 1e-3, 30 steps per epoch); the paper's is d_model 256, "
        "context 128, lr 1e-4 on wikitext103.")
    add_plugin_flag(p)
    p.add_argument("--corpus", default="stdlib-docs", help="wikitext103, stdlib-docs or a UTF-8 text file")
    p.add_argument("--data-dir", default=None, help="folder holding wiki.train.raw (wikitext103 only)")
    p.add_argument("--init", default=DEFAULT_INIT, choices=sorted(QK_INITS), help="Q/K initialisation")
    p.add_argument("--condition", default="none",
                   help="intervention (SPEC §5) at its default strengths: none, freeze_k, freeze_q, "
                   "forced_k_contraction, k_spectrum_clamp, qk_align_reg or a --plugin's")
    p.add_argument("--depth", type=int, default=4, help="transformer blocks (>= 1)")
    p.add_argument("--seed", type=int, default=37, help="seed of the weights and the batch order (>= 0)")
    p.add_argument("--epochs", type=int, default=3, help="epochs after epoch 0 (>= 1)")
    p.add_argument("--steps-per-epoch", type=int, default=30, help="optimiser steps per epoch (>= 1)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step (>= 1)")
    p.add_argument("--d-model", type=int, default=64, help="residual width; a multiple of --n-head")
    p.add_argument("--n-head", type=int, default=4, help="attention heads per block (>= 1)")
    p.add_argument("--d-mlp", type=int, default=256, help="MLP hidden width (>= 1)")
    p.add_argument("--context", type=int, default=64, help="tokens per training window (>= 1)")
    p.add_argument("--lr", type=float, default=1e-3, help="constant AdamW learning rate (> 0)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda or cuda:N")
    add_precision_flags(p)  # --amp, --graphs/--no-graphs, --tf32/--no-tf32
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    return p.parse_args(argv)


def _check(args: argparse.Namespace) -> None:
    """Each flag on its own, named as typed (the configs check how they combine)."""
    for flag in ("depth", "epochs", "steps_per_epoch", "batch_size", "d_model", "n_head", "d_mlp", "context"):
        value = getattr(args, flag)
        if value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if not args.lr > 0:
        raise ValueError(f"--lr must be > 0, got {args.lr}")
    if args.data_dir is not None and args.corpus != "wikitext103":
        raise ValueError(f"--data-dir {args.data_dir} is read only by the wikitext103 corpus; "
                         f"--corpus {args.corpus} ignores it")
    from interventions import REGISTRY

    if args.condition not in REGISTRY:
        raise ValueError(f"--condition {args.condition!r}: valid: {', '.join(sorted(REGISTRY))}")
    if args.d_model % args.n_head:
        raise ValueError(f"--d-model {args.d_model} must be a multiple of --n-head {args.n_head}")
    if args.device != "auto":
        import torch

        try:
            torch.device(args.device)
        except RuntimeError:
            raise ValueError(f"--device {args.device!r}: use auto, cpu, cuda or cuda:N") from None


def main(argv: list[str] | None = None) -> None:
    """Train and print one line per epoch; a bad value is one line on stderr and exit status 2."""
    args = _parse(argv)
    try:
        _check(args)
        from model.corpus import load_corpus

        corpus = load_corpus(args.corpus, args.data_dir, context=args.context)
    except (ValueError, OSError) as exc:  # CorpusError is a ValueError
        if args.debug:
            raise
        print(f"python -m model.train: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    _train(args, corpus)


def _train(args: argparse.Namespace, corpus: Corpus) -> None:
    from interventions import make_intervention
    from model.gpt import GPTConfig
    from model.recipe import TrainConfig, resolve_device, set_tf32
    from model.stack import Member
    from model.trainer import Trainer

    model_cfg = GPTConfig(vocab_size=corpus.vocab_size, n_layer=args.depth, n_head=args.n_head,
                          d_model=args.d_model, d_mlp=args.d_mlp, context=args.context)
    cfg = TrainConfig(lr=args.lr, batch_size=args.batch_size, epochs=args.epochs,
                      steps_per_epoch=args.steps_per_epoch, seed=args.seed, device=args.device, amp=args.amp)
    set_tf32(args.tf32, resolve_device(args.device))  # where the run starts, never as a side effect
    trainer = Trainer(model_cfg, [Member(args.init, args.seed, cfg)], corpus,
                      lambda: make_intervention(args.condition), graphs=args.graphs)
    amp = "fp32" if trainer.amp_dtype is None else str(trainer.amp_dtype).removeprefix("torch.")
    print(f"{corpus.name}: {corpus.vocab_size} symbols, {len(corpus.train):,} train / {len(corpus.val):,} val "
          f"tokens; {args.init}, {args.condition}, {args.depth} layers, {trainer.model.num_params():,} parameters on {trainer.device} "
          f"({amp}, CUDA graphs {trainer.graph_status})")

    def show(_: int, r: EpochReport) -> None:
        run = r.run
        fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
        align = sum(row["qk_alignment"] for row in r.layers) / max(len(r.layers), 1)
        print(f"epoch {r.epoch:3d}  train {fmt(run['train_loss'], '.4f')}  val {fmt(run['val_loss'], '.4f')}  "
              f"align {align:.4f}  {fmt(run['tokens_per_s'], ',.0f')} tok/s  {run['status']}")

    trainer.run(show)


if __name__ == "__main__":
    main()
