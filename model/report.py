"""What a trainer reports after each epoch (SPEC §3, §4.1): run-level columns and the probe's rows.
No Ray, no files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from torch import Tensor

Status = Literal["running", "completed", "diverged"]


@dataclass
class EpochReport:
    """What ``on_epoch`` receives for one member: run-level columns and one row per layer."""

    epoch: int
    run: dict[str, Any]  # train_loss, val_loss, grad_norm, tokens_seen, wall_s, tokens_per_s, status, skipped_steps
    layers: list[dict[str, Any]] = field(default_factory=list)  # §4.1 columns incl. grad norms


class EpochMeans(NamedTuple):
    """One member's means over an epoch's steps (all None at epoch 0, before any step)."""

    loss: float | None
    grad_norm: float | None  # pre-clip global gradient norm
    grad_qk: Tensor | None  # [L, 2] mean q/k gradient norms
    skipped: int | None = None  # steps skipped by fp16 loss scaling (their norms are in neither mean)


BEFORE_TRAINING = EpochMeans(None, None, None)


def epoch_report(layers: list[dict[str, Any]], means: EpochMeans, epoch: int, status: Status, *,
                 val_loss: float, tokens_seen: int, wall_s: float, tokens_epoch: int,
                 epoch_wall: float | None) -> EpochReport:
    """One member's report after an epoch (or at initialisation): its probe rows ``layers`` (one
    per layer, gaining the q/k gradient norms) and the run-level columns."""
    for i, row in enumerate(layers):
        row["grad_norm_q"] = None if means.grad_qk is None else means.grad_qk[i, 0].item()
        row["grad_norm_k"] = None if means.grad_qk is None else means.grad_qk[i, 1].item()
    run = {
        "train_loss": means.loss, "val_loss": val_loss, "grad_norm": means.grad_norm,
        "tokens_seen": tokens_seen, "wall_s": wall_s,
        "tokens_per_s": None if not epoch_wall else tokens_epoch / epoch_wall,
        "status": status, "skipped_steps": means.skipped,
    }
    return EpochReport(epoch, run, layers)


def diverged_report(epoch: int, tokens_seen: int, wall_s: float) -> EpochReport:
    """The one report of the epoch in which a member's loss turned non-finite (no probe)."""
    run = {"train_loss": float("nan"), "val_loss": None, "grad_norm": None,
           "tokens_seen": tokens_seen, "wall_s": wall_s, "tokens_per_s": None, "status": "diverged",
           "skipped_steps": None}
    return EpochReport(epoch, run, [])
