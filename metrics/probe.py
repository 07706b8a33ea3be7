"""The layer probe (SPEC §4.1): every activation and weight column per layer.

``probe_layers`` runs one no-grad pass of the model's probe path and reduces
each layer's trace with the pure functions of ``metrics.spectra`` and
``metrics.attention``. It relies only on the model exposing ``probe(idx)``
returning per-layer traces and ``blocks[i].attn.{q_proj,k_proj}``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from metrics.attention import attention_stats
from metrics.spectra import effective_rank, participation_ratio, qk_alignment, qk_alignment_per_head


def weight_columns(wq: Tensor, wk: Tensor, n_head: int) -> dict[str, float | list[float]]:
    """Weight-side columns of one layer. wq, wk: [d_model, d_model] ([out, in]).

    ``qk_alignment_head`` is a list of n_head floats (head h: rows h*d_head:(h+1)*d_head).
    """
    d_head = wq.shape[0] // n_head
    heads_q = wq.reshape(n_head, d_head, -1)  # (H, d_head, D)
    heads_k = wk.reshape(n_head, d_head, -1)
    return {
        "wq_erank": effective_rank(wq).item(),
        "wk_erank": effective_rank(wk).item(),
        "wq_erank_head": effective_rank(heads_q).mean().item(),
        "wk_erank_head": effective_rank(heads_k).mean().item(),
        "qk_alignment": qk_alignment(wq, wk).item(),
        "qk_alignment_head": qk_alignment_per_head(wq, wk, n_head).tolist(),
        "wq_norm": wq.double().norm().item(),
        "wk_norm": wk.double().norm().item(),
    }


def activation_columns(q: Tensor, k: Tensor, scores: Tensor) -> dict[str, float]:
    """Activation-side columns. q, k: [B, H, T, d_head]; scores: [B, H, T, T] unmasked."""
    b, h, t, dh = q.shape
    q_flat = q.transpose(1, 2).reshape(b * t, h * dh)  # (B·T, d_model), heads concatenated
    k_flat = k.transpose(1, 2).reshape(b * t, h * dh)
    pr_q = participation_ratio(q_flat).item()
    pr_k = participation_ratio(k_flat).item()
    return {"pr_q": pr_q, "pr_k": pr_k, "pr_q_minus_pr_k": pr_q - pr_k, **attention_stats(scores)}


@torch.no_grad()
def probe_layers(model: nn.Module, tokens: Tensor) -> list[dict[str, float]]:
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
            row = {"layer": layer}
            row.update(activation_columns(tr.q, tr.k, tr.scores))
            row.update(weight_columns(attn.q_proj.weight, attn.k_proj.weight, attn.n_head))
            rows.append(row)
        return rows
    finally:
        model.train(was_training)
