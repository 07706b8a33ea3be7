"""The raw tensors of one checkpoint-probe pass (``metrics.hf_probe``'s hooks), for tests only."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from metrics.hf_probe import _forward, _tapped


@dataclass
class LayerTrace:
    """What one layer produced in the probe pass.

    q: [B, T, H·d_head] pre-rotary query projection; k: [B, T, H_kv·d_head];
    scores: [B, H, T, T] float32, post-rotary, scaled, before the mask.
    """

    q: Tensor | None = None
    k: Tensor | None = None
    scores: Tensor | None = None


@torch.no_grad()
def trace_hf_model(model: nn.Module, input_ids: Tensor) -> list[LayerTrace]:
    """Raw per-layer tensors (see ``LayerTrace``) of one probe pass. input_ids: [B, T]."""
    traces: list[LayerTrace] = []

    def emit(layer: int, name: str, x: Tensor) -> None:
        setattr(traces[layer], name, x)

    with _tapped(model, emit) as n_layers:
        traces.extend(LayerTrace() for _ in range(n_layers))
        _forward(model, input_ids)
    return traces
