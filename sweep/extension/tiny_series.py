"""Build a tiny *real* checkpoint series offline, for the extension's demo and tests.

``python -m sweep.tiny_series --out DIR [--steps 0,20,60,150] [--corpus stdlib-docs]``
trains a tiny character-level ``GPT2LMHeadModel`` on the corpus and saves it
(safetensors, with its tokenizer) at each listed step into ``DIR/step{N}``,
then writes ``DIR/manifest.json`` (series ``tiny-gpt2-chars``) for
``python -m sweep.extension --manifest DIR/manifest.json``.

The tokenizer maps each character to its id in ``corpus.vocab``, so its ids
are exactly those of ``load_corpus``/``Corpus.encode``. Seeded: the same
arguments give the same weights.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sweep.cli import UsageError, at_least, flatten, int_list, parser, run_cli
from sweep.extension.checkpoint_series import Manifest, RevisionEntry, SeriesEntry, write_manifest

if TYPE_CHECKING:  # torch and the corpus load where the series is built: --help answers at once
    from model.corpus import Corpus

SERIES_NAME = "tiny-gpt2-chars"
DEFAULT_STEPS = (0, 20, 60, 150)
BATCH, CONTEXT = 16, 64
SEED = 0


def char_tokenizer(corpus: Corpus):
    """A ``PreTrainedTokenizerFast`` with one token per character, id = position in ``corpus.vocab``."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    # BPE without merges and without a pre-tokenizer: every character is its own token.
    vocab = {c: i for i, c in enumerate(corpus.vocab)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def tiny_config(vocab_size: int, n_layer: int = 2):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=vocab_size, n_embd=64, n_layer=n_layer, n_head=4, n_positions=128,
                      bos_token_id=None, eos_token_id=None)


def build(out: str | Path, steps: list[int], corpus_spec: str = "stdlib-docs", n_layer: int = 2,
          lr: float = 1e-3, cache_dir: str | None = None, seed: int = SEED, threads: int = 1) -> Manifest:
    """Train and save the series into ``out``; write and return its manifest.

    ``threads``: torch threads while training (restored after). One is the
    default: the model is so small that more threads mostly add contention,
    and on a loaded machine two threads ran ~20x slower than one.
    """
    import torch

    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _build(Path(out), steps, corpus_spec, n_layer, lr, cache_dir, seed)
    finally:
        torch.set_num_threads(saved_threads)


def _build(out: Path, steps: list[int], corpus_spec: str, n_layer: int, lr: float,
           cache_dir: str | None, seed: int) -> Manifest:
    import torch
    from transformers import GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    from model.corpus import BatchSampler, load_corpus

    hf_logging.disable_progress_bar()  # a "Writing model shards" bar per revision is noise
    steps = sorted(set(steps))
    if not steps or steps[0] < 0:
        raise ValueError(f"need non-negative steps, got {steps}")
    out = out.resolve()
    corpus = load_corpus(corpus_spec, cache_dir=cache_dir)
    tokenizer = char_tokenizer(corpus)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(tiny_config(corpus.vocab_size, n_layer))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    sampler = BatchSampler(corpus.train, BATCH, CONTEXT, seed)
    revisions = []
    step = 0
    for target in steps:
        model.train()
        while step < target:
            x, y = sampler.next()
            logits = model(input_ids=x).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
        folder = out / f"step{target}"
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        revisions.append(RevisionEntry(f"step{target}", path=str(folder), tokens=target * BATCH * CONTEXT,
                                       step=target))
    manifest = Manifest([SeriesEntry(SERIES_NAME, revisions)])
    write_manifest(manifest, out / "manifest.json")
    return manifest


PROG = "python -m sweep.tiny_series"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = parser(PROG, __doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output folder (step{N}/ and manifest.json)")
    p.add_argument("--steps", type=int_list, nargs="+", default=[DEFAULT_STEPS], metavar="STEP",
                   help="optimiser steps to save, 0,20,60 or 0 20 60 (default "
                   f"{','.join(map(str, DEFAULT_STEPS))})")
    p.add_argument("--corpus", default="stdlib-docs", help="corpus: stdlib-docs, wikitext103 or a UTF-8 file")
    p.add_argument("--layers", type=int, default=2, help="transformer layers (>= 1)")
    p.add_argument("--cache-dir", help="corpus cache (default runs/cache)")
    p.add_argument("--threads", type=int, default=1, help="torch threads while training (>= 1)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Build the series; a bad value ends it with one line and exit status 2."""
    return run_cli(PROG, argv, _parse, _main)


def _main(args: argparse.Namespace) -> int:
    build_series(args.out, list(flatten(args.steps)), args.corpus, args.layers, args.cache_dir, args.threads)
    return 0


def build_series(out: str, steps: list[int] | tuple[int, ...] = DEFAULT_STEPS, corpus: str = "stdlib-docs",
                 layers: int = 2, cache_dir: str | None = None, threads: int = 1) -> Manifest:
    """The command as a function: check every value (errors name its flag), ``build``, print a line."""
    steps = list(steps)
    if not steps:
        raise UsageError("--steps needs at least one step")
    for step in steps:
        at_least("--steps", step, 0)
    at_least("--layers", layers, 1)
    at_least("--threads", threads, 1)
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out}: a file is in the way (need a folder)")
    from model.corpus import load_corpus

    load_corpus(corpus, cache_dir=cache_dir, context=CONTEXT)  # checked before training
    t0 = time.perf_counter()
    manifest = build(out, steps, corpus, layers, cache_dir=cache_dir, threads=threads)
    n = len(manifest.series[0].revisions)
    print(f"[tiny_series] {n} revisions of {SERIES_NAME} -> {Path(out).resolve()}/manifest.json "
          f"({time.perf_counter() - t0:.1f} s)")
    return manifest


if __name__ == "__main__":
    raise SystemExit(main())
