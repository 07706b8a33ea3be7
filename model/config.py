"""A run's shape and recipe as plain data (SPEC §1, §3): ``GPTConfig`` and ``TrainConfig``.

No torch: the presets, the run spec and the parsers build and check them without loading
PyTorch. ``model.gpt`` and ``model.recipe`` re-export them beside the code that uses them.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class GPTConfig:
    """Model shape. Defaults are the paper's (SPEC §1)."""

    vocab_size: int = 1758  # characters in the corpus slice (paper: WikiText-103, 40M chars)
    n_layer: int = 4  # transformer blocks (paper: 4, 6, 8)
    n_head: int = 4  # attention heads per block
    d_model: int = 256  # residual width; d_head = d_model / n_head
    d_mlp: int = 1024  # MLP hidden width (GELU)
    context: int = 128  # maximum sequence length (learned positions)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_head", "d_model", "d_mlp", "context"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(
                f"GPTConfig.d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                f"choose n_head among the divisors of d_model"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation recipe. Defaults are the paper's (SPEC §3)."""

    lr: float = 1e-4  # constant learning rate
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.1  # on matrices and embeddings only
    grad_clip: float = 1.0  # max global grad norm
    batch_size: int = 64  # sequences per step
    epochs: int = 45  # epochs after epoch 0
    steps_per_epoch: int | None = None  # None: one pass, len(train) // (batch · context)
    eval_batches: int = 8  # fixed validation batches for val_loss
    probe_seqs: int = 16  # sequences in the fixed probe batch (× context positions)
    amp: Literal["auto", "off", "bf16", "fp16"] = "auto"  # auto: native bf16, else fp16 on CUDA; off on CPU
    device: str = "auto"  # auto: cuda if available
    seed: int = 0  # batch order (weights are seeded by build_model)
    compile: bool = False  # torch.compile the forward pass (CUDA only)
    check_every: int = 25  # steps between non-finite-loss checks (each one syncs the device)

    def __post_init__(self) -> None:
        for name in ("batch_size", "epochs", "eval_batches", "probe_seqs", "check_every", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ValueError(f"TrainConfig.{name} must be an integer, got {value!r}")
        for name in ("lr", "beta1", "beta2", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"TrainConfig.{name} must be a number, got {value!r}")
        if self.steps_per_epoch is not None and (isinstance(self.steps_per_epoch, bool)
                                                 or not isinstance(self.steps_per_epoch, numbers.Integral)):
            raise ValueError(f"TrainConfig.steps_per_epoch must be an integer or None, got {self.steps_per_epoch!r}")
        for name in ("lr", "batch_size", "eval_batches", "probe_seqs", "check_every"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TrainConfig.{name} must be positive, got {getattr(self, name)!r}")
        if self.epochs < 0:
            raise ValueError(f"TrainConfig.epochs must be >= 0, got {self.epochs}")
        if self.steps_per_epoch is not None and self.steps_per_epoch <= 0:
            raise ValueError(f"TrainConfig.steps_per_epoch must be positive or None, got {self.steps_per_epoch}")
        if self.weight_decay < 0 or self.grad_clip <= 0:
            raise ValueError("TrainConfig.weight_decay must be >= 0 and grad_clip > 0")
        if self.amp not in ("auto", "off", "bf16", "fp16"):
            raise ValueError(f"TrainConfig.amp must be auto, off, bf16 or fp16, got {self.amp!r}")
