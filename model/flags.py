"""The precision flags of a run, shared by ``python -m model.train`` and every sweep
(``sweep.trial.gpu_flags``): ``--amp``, ``--graphs/--no-graphs``, ``--tf32/--no-tf32``. No torch here, so
that a parser answers ``--help`` before anything that trains is imported."""

from __future__ import annotations

import argparse
from typing import Any

#: ``--amp``: ``model.recipe.resolve_amp`` turns one into an autocast dtype on the run's device
AMP_CHOICES = ("auto", "bf16", "fp16", "off")


def add_precision_flags(group: Any) -> None:
    """``--amp``, ``--graphs/--no-graphs``, ``--tf32/--no-tf32`` on an argparse parser or group
    (``python -m model.train`` and, through ``sweep.trial.gpu_flags``, every sweep)."""
    group.add_argument("--amp", choices=AMP_CHOICES, default="auto",
                       help="autocast on CUDA: auto (bf16 where the GPU has it natively, compute capability "
                       ">= 8.0; else fp16 with per-member loss scaling), bf16, fp16 or off; the CPU runs fp32")
    group.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=True,
                       help="replay each training step from a CUDA graph (CUDA only)")
    group.add_argument("--tf32", action=argparse.BooleanOptionalAction, default=True,
                       help="let fp32 matmuls use TF32 on CUDA")
