"""Tiny shared fixtures for the foundation tests (model, corpus, trainer, metrics).

Everything here is small enough that a test using it runs in well under a
second on one CPU core: a generated character corpus of ~6k characters, a
2-layer / 4-head / d_model 32 GPT with context 16, and a training recipe of
2 epochs × 5 steps of batch 8.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
import torch

from model.corpus import Corpus
from model.gpt import GPTConfig
from model.qk_init import build_model
from model.recipe import TrainConfig

CONTEXT = 16
WORDS = ("the", "key", "query", "attends", "to", "a", "sharp", "broad", "head", "layer", "of")


def generated_text(n_words: int = 1200, seed: int = 0) -> str:
    """Random 'sentences' over a small word list: a little structure to learn."""
    rng = np.random.default_rng(seed)
    return " ".join(rng.choice(WORDS, size=n_words)) + ".\n"


@cache
def tiny_corpus() -> Corpus:
    """A Corpus built directly (no files, no cache): 90/10 split of ``generated_text()``."""
    text = generated_text()
    vocab = "".join(sorted(set(text)))
    ids = np.array([vocab.index(c) for c in text], dtype=np.uint16)
    cut = int(0.9 * len(ids))
    return Corpus("tiny-words", vocab, ids[:cut], ids[cut:])


def tiny_model_cfg(vocab_size: int | None = None, **overrides) -> GPTConfig:
    """GPTConfig(vocab_size=V, n_layer=2, n_head=4, d_model=32, d_mlp=64, context=16)."""
    if vocab_size is None:
        vocab_size = tiny_corpus().vocab_size
    cfg = GPTConfig(vocab_size=vocab_size, n_layer=2, n_head=4,
                    d_model=32, d_mlp=64, context=CONTEXT)
    return replace(cfg, **overrides)


def tiny_train_cfg(**overrides) -> TrainConfig:
    """TrainConfig(device="cpu", batch_size=8, epochs=2, steps_per_epoch=5, eval_batches=2, probe_seqs=4)."""
    cfg = TrainConfig(device="cpu", batch_size=8, epochs=2, steps_per_epoch=5, eval_batches=2,
                      probe_seqs=4)
    return replace(cfg, **overrides)


def tiny_model(qk_init: str = "independent_xavier", seed: int = 0, **overrides) -> torch.nn.Module:
    return build_model(tiny_model_cfg(**overrides), qk_init, seed)


def random_tokens(batch: int, length: int, vocab_size: int, seed: int = 0) -> torch.Tensor:
    """[batch, length] int64 ids from a private generator (the global RNG is left alone)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(vocab_size, (batch, length), generator=gen)


def np_participation_ratio(x: np.ndarray) -> float:
    """Reference PR: eigenvalues of numpy's (ddof=1) covariance, float64. x: [N, D]."""
    cov = np.cov(np.asarray(x, dtype=np.float64), rowvar=False, ddof=1)
    lam = np.linalg.eigvalsh(np.atleast_2d(cov))
    return float(lam.sum() ** 2 / (lam**2).sum())


def np_effective_rank(m: np.ndarray) -> float:
    """Reference erank: exp of the entropy of normalised singular values; 0 for the zero matrix."""
    s = np.linalg.svd(np.asarray(m, dtype=np.float64), compute_uv=False)
    if s.sum() == 0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


class SimulatedGraphs:
    """``model.graphs.backend`` on the CPU: the warm-up calls run, ``record`` returns the function
    without calling it (a CUDA graph records without executing) and each replay calls it. What it
    checks is the bookkeeping around a graph (the warm-up leaves no trace in the training, static
    buffers, running sums, dropped gradients), not CUDA; ``fail`` makes the recordings from the
    ``fail_from``-th on (0-based) raise it."""

    def __init__(self, fail: str | None = None, fail_from: int = 0) -> None:
        self.fail, self.fail_from = fail, fail_from
        self.warm_ups = self.recorded = self.replays = 0
        self.pools: list[object] = []  # the pool each recording was given

    def warm_up(self, fn, calls: int) -> None:
        self.warm_ups += calls
        for _ in range(calls):
            fn()

    @staticmethod
    def pool() -> object:
        return object()

    def record(self, fn, pool=None):
        if self.fail and self.recorded >= self.fail_from:
            raise RuntimeError(self.fail)
        self.recorded += 1
        self.pools.append(pool)

        def replay():
            self.replays += 1
            return fn()

        return replay

    @staticmethod
    def synchronize() -> None:
        pass
