"""Projection interventions (SPEC §5): constrain weights after every optimiser step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from interventions.base import Intervention, register


@register
@dataclass
class KSpectrumClamp(Intervention):
    """Keep W_K's initial singular values: after every step W_K ← U·diag(σ⁽⁰⁾)·Vᵀ.

    σ⁽⁰⁾ is recorded per layer in ``setup`` (at initialisation); U, V come from
    the SVD of the current W_K, so the singular vectors are learned while the
    spectrum stays fixed. The SVD runs in float64 and the result is cast back;
    b_K is not touched. σ⁽⁰⁾ travels in the checkpoint. No strength.
    Predicted vs ``none``: attention entropy ↑, logit_std ↓, qk_erank ↑.
    """

    name: ClassVar[str] = "k_spectrum_clamp"
    pack_aware: ClassVar[bool] = True
    graph_safe: ClassVar[bool] = True
    predicted: ClassVar[dict[str, int]] = {"attn_entropy": +1, "logit_std": -1, "qk_erank": +1}

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sigma0: Tensor | None = None  # [L, d_model] float64, on the weights' device

    @staticmethod
    def _weights(model: nn.Module) -> list[Tensor]:
        return [block.attn.k_proj.weight for block in model.blocks]

    @torch.no_grad()
    def setup(self, model: nn.Module) -> None:
        w = torch.stack(self._weights(model)).double()  # (L, D, D)
        self.sigma0 = torch.linalg.svdvals(w)  # (L, D), descending

    @torch.no_grad()
    def after_step(self, model: nn.Module) -> None:
        if self.sigma0 is None:
            raise RuntimeError("k_spectrum_clamp: after_step called before setup(model)")
        weights = self._weights(model)
        u, _, vh = torch.linalg.svd(torch.stack(weights).double(), full_matrices=False)  # batched over L
        clamped = (u * self.sigma0[:, None, :]) @ vh  # U·diag(σ⁽⁰⁾)·Vᵀ, (L, D, D)
        for w, new in zip(weights, clamped, strict=True):
            w.copy_(new)  # cast back to the parameter's dtype

    @classmethod
    @torch.no_grad()
    def after_step_packed(cls, members: Sequence[Intervention], params: dict[str, Tensor],
                          models: Sequence[nn.Module]) -> None:
        """The clamp for K members at once: one SVD of [K, L, D, D]. A member whose W_K is
        non-finite is left as it is (its loss is non-finite too: it will be marked diverged)."""
        if any(iv.sigma0 is None for iv in members):
            raise RuntimeError("k_spectrum_clamp: after_step_packed called before setup(model)")
        stacked = [params[f"blocks.{layer}.attn.k_proj.weight"] for layer in range(len(models[0].blocks))]
        w = torch.stack(stacked, dim=1).double()  # (K, L, D, D)
        sigma0 = torch.stack([iv.sigma0 for iv in members])  # (K, L, D)
        finite = torch.isfinite(w).flatten(1).all(dim=1)[:, None, None, None]  # (K, 1, 1, 1)
        u, _, vh = torch.linalg.svd(torch.where(finite, w, 0.0), full_matrices=False)
        clamped = torch.where(finite, (u * sigma0[..., None, :]) @ vh, w)  # U·diag(σ⁽⁰⁾)·Vᵀ
        for layer, weight in enumerate(stacked):
            weight.copy_(clamped[:, layer])

    def state_dict(self) -> dict[str, Any]:
        return {"sigma0": None if self.sigma0 is None else self.sigma0.cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        sigma0 = state["sigma0"]
        device = self.sigma0.device if self.sigma0 is not None else sigma0.device
        self.sigma0 = sigma0.to(device=device, dtype=torch.float64)
