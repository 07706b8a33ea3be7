"""The layer probe (SPEC §4.1): every per-layer column of ``metrics.columns.LAYER_COLUMNS``.

``probe_layers`` runs one no-grad pass of the model's probe path and reduces
each layer's trace with the functions the vocabulary names (``metrics.spectra``,
``metrics.attention``, ...). It relies only on the model exposing ``probe(idx)``
returning per-layer traces and ``blocks[i].attn.{q_proj,k_proj}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any

import torch
from torch import Tensor, nn

from metrics import columns
from metrics.columns import PER_HEAD, LayerMetric

Value = float | list[float]


def resolve(path: str) -> Callable[..., Any]:
    """The function a ``LayerMetric.compute`` names (``"module:function"``), looked up on each call."""
    module, _, name = path.partition(":")
    return getattr(import_module(module), name)


def _plain(value: Any, metric: LayerMetric) -> Value:
    """A float (or, for a per-head column, a list of floats) from a tensor or number."""
    if metric.kind == PER_HEAD:
        return [float(v) for v in (value.tolist() if isinstance(value, Tensor) else value)]
    return value.item() if isinstance(value, Tensor) else float(value)


def layer_columns(metrics: Sequence[LayerMetric], inputs: Mapping[str, Any]) -> dict[str, Value]:
    """The columns of ``metrics`` for one layer, in order, from its tensors by input name.

    Each distinct (function, inputs) runs once: the entries naming ``attention_stats``
    share one call, and a derived column (``pr_q_minus_pr_k``) reads the earlier columns.
    """
    known: dict[str, Any] = dict(inputs)
    calls: dict[tuple[str, tuple[str, ...]], Any] = {}
    row: dict[str, Value] = {}
    for m in metrics:
        key = (m.compute, m.inputs)
        if key not in calls:
            calls[key] = resolve(m.compute)(*(known[i] for i in m.inputs))
        got = calls[key]
        row[m.name] = known[m.name] = _plain(got[m.name] if isinstance(got, Mapping) else got, m)
    return row


def entries(side: str) -> tuple[LayerMetric, ...]:
    """The vocabulary's entries of one ``side`` (``"activation"`` or ``"weight"``), read at call time."""
    return tuple(m for m in columns.LAYER_COLUMNS if m.side == side)


def activation_columns(q: Tensor, k: Tensor, scores: Tensor) -> dict[str, Value]:
    """Activation-side columns of one layer. q: [B, T, H·d_head]; k: [B, T, H_kv·d_head]
    (heads concatenated); scores: [B, H, T, T] unmasked."""
    return layer_columns(entries("activation"), {"q": q, "k": k, "scores": scores})


def weight_columns(wq: Tensor, wk: Tensor, n_head: int) -> dict[str, Value]:
    """Weight-side columns of one layer. wq, wk: [d_model, d_model] ([out, in]).

    ``qk_alignment_head`` is a list of n_head floats (head h: rows h*d_head:(h+1)*d_head).
    """
    return layer_columns(entries("weight"), {"wq": wq, "wk": wk, "n_head": n_head})


@torch.no_grad()
def probe_layers(model: nn.Module, tokens: Tensor) -> list[dict[str, Value]]:
    """One dict per layer (0 = embedding side) with every §4.1 column except grad norms.

    tokens: [B, T] int64 on the model's device. Runs in eval mode and restores
    the model's previous mode afterwards.
    """
    was_training = model.training
    model.eval()
    try:
        _, _, traces = model.probe(tokens)
        rows = []
        for layer, (block, tr) in enumerate(zip(model.blocks, traces, strict=True)):
            attn = block.attn
            b, h, t, dh = tr.q.shape  # trace q, k: [B, H, T, d_head]
            q = tr.q.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, d_model), heads concatenated
            k = tr.k.transpose(1, 2).reshape(b, t, h * dh)
            row: dict[str, Any] = {"layer": layer}
            row.update(activation_columns(q, k, tr.scores))
            row.update(weight_columns(attn.q_proj.weight, attn.k_proj.weight, attn.n_head))
            rows.append(row)
        return rows
    finally:
        model.train(was_training)
