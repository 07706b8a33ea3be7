"""The tiny training runs of the intervention tests (test_interventions_*.py): a ~25k-character
word corpus, a 2-layer / 2-head GPT, 3 epochs x 8 steps, and the matched ``none`` run (cached,
so every file shares one)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
import torch

from interventions import Intervention
from model.corpus import Corpus
from model.gpt import GPTConfig
from model.recipe import TrainConfig
from model.report import EpochReport
from model.stack import Member
from model.trainer import Trainer

CONDITIONS = ("none", "forced_k_contraction", "k_spectrum_clamp", "freeze_k", "freeze_q", "qk_align_reg")
SEED = 3
EPOCHS, STEPS = 3, 8


@cache
def tiny_corpus() -> Corpus:
    """Random 'sentences' over a small word list: learnable structure, ~25k characters."""
    rng = np.random.default_rng(0)
    words = ["the", "key", "query", "attends", "to", "a", "sharp", "broad", "head", "layer", "of"]
    text = " ".join(rng.choice(words, size=5000)) + "."
    vocab = "".join(sorted(set(text)))
    ids = np.array([vocab.index(c) for c in text], dtype=np.uint16)
    split = int(0.9 * len(ids))
    return Corpus("tiny-words", vocab, ids[:split], ids[split:])


def model_cfg() -> GPTConfig:
    return GPTConfig(vocab_size=tiny_corpus().vocab_size, n_layer=2, n_head=2, d_model=32,
                     d_mlp=64, context=16)


def train_cfg() -> TrainConfig:
    return TrainConfig(lr=3e-3, batch_size=8, epochs=EPOCHS, steps_per_epoch=STEPS, device="cpu",
                       eval_batches=2, probe_seqs=4, seed=SEED)


def make_trainer(iv: Intervention, model_seed: int = SEED) -> Trainer:
    return Trainer(model_cfg(), [Member("independent_xavier", model_seed, train_cfg())], tiny_corpus(), lambda: iv)


def train(iv: Intervention, on_epoch: Callable[[Trainer, EpochReport], None] | None = None
          ) -> tuple[Trainer, list[EpochReport]]:
    """A full run; ``on_epoch(trainer, report)`` is called at epoch 0 and after every epoch."""
    trainer = make_trainer(iv)
    reports: list[EpochReport] = []

    def record(_: int, report: EpochReport) -> None:
        reports.append(report)
        if on_epoch is not None:
            on_epoch(trainer, report)

    assert trainer.run(record) == ["completed"]
    return trainer, reports


def params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


def assert_params_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    differ = [n for n in a if not torch.equal(a[n], b[n])]
    assert not differ, f"parameters differ: {differ}"


def layer_mean(report: EpochReport, column: str) -> float:
    return float(np.mean([row[column] for row in report.layers]))


@cache
def none_run() -> tuple[dict[str, torch.Tensor], EpochReport]:
    """The matched ``none`` run (same seed and init): final parameters and final report."""
    trainer, reports = train(Intervention())
    return params(trainer), reports[-1]


class OldKSpectrumClamp(Intervention):
    """The k_spectrum_clamp as it was before the batched clamp (one float64 SVD per layer batch), kept verbatim
    as the reference of the batched clamp (test_interventions_spectrum.py). Not registered."""

    name = "k_spectrum_clamp"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sigma0: torch.Tensor | None = None

    @staticmethod
    def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
        return [block.attn.k_proj.weight for block in model.blocks]

    @torch.no_grad()
    def setup(self, model: torch.nn.Module) -> None:
        w = torch.stack(self._weights(model)).double()  # (L, D, D)
        self.sigma0 = torch.linalg.svdvals(w)  # (L, D), descending

    @torch.no_grad()
    def after_step(self, model: torch.nn.Module) -> None:
        if self.sigma0 is None:
            raise RuntimeError("k_spectrum_clamp: after_step called before setup(model)")
        weights = self._weights(model)
        u, _, vh = torch.linalg.svd(torch.stack(weights).double(), full_matrices=False)  # batched over L
        clamped = (u * self.sigma0[:, None, :]) @ vh  # U·diag(σ⁽⁰⁾)·Vᵀ, (L, D, D)
        for w, new in zip(weights, clamped, strict=True):
            w.copy_(new)  # cast back to the parameter's dtype
