"""Freezing interventions (SPEC §5): a projection's weight and bias never update.

Frozen parameters are kept out of the optimiser (no update, no weight decay);
the trainer also sets ``requires_grad`` False on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from interventions.base import Intervention, register

if TYPE_CHECKING:
    from torch import nn


@dataclass
class _FreezeProjection(Intervention):
    """Keeps ``blocks.*.attn.<projection>.{weight,bias}`` at their initial values."""

    projection: ClassVar[str]

    def trainable(self, name: str, param: nn.Parameter) -> bool:
        return not name.endswith((f".attn.{self.projection}.weight", f".attn.{self.projection}.bias"))


@register
@dataclass
class FreezeK(_FreezeProjection):
    """W_K and b_K never updated (kept at initialisation). No strength.
    Predicted vs ``none``: attention entropy ↑, logit_std ↓, qk_erank ↑.
    """

    name: ClassVar[str] = "freeze_k"
    pack_aware: ClassVar[bool] = True
    graph_safe: ClassVar[bool] = True
    predicted: ClassVar[dict[str, int]] = {"attn_entropy": +1, "logit_std": -1, "qk_erank": +1}
    projection: ClassVar[str] = "k_proj"


@register
@dataclass
class FreezeQ(_FreezeProjection):
    """W_Q and b_Q never updated (kept at initialisation). No strength.
    Predicted vs ``none``: attention entropy ↑.
    """

    name: ClassVar[str] = "freeze_q"
    pack_aware: ClassVar[bool] = True
    graph_safe: ClassVar[bool] = True
    predicted: ClassVar[dict[str, int]] = {"attn_entropy": +1}
    projection: ClassVar[str] = "q_proj"
