"""Attention statistics of SPEC §4.1, batched over sequences and heads (and, in
``batched_attention_stats``, over items: layers, or packed members × layers).

All functions take the attention scores S = q kᵀ · scale *before* masking
([B, H, T, T], or [N, B, H, T, T]) so that a model's own scaling (rotary,
per-layer scale) is respected.
"""

from __future__ import annotations

import torch
from torch import Tensor

from metrics.spectra import effective_rank


def causal_mask(t: int, device: torch.device | None = None) -> Tensor:
    """[T, T] bool, True where query t may attend to key j (j ≤ t)."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def batched_attention_stats(scores: Tensor, mask: Tensor | None = None) -> dict[str, Tensor]:
    """The attention columns of SPEC §4.1 of each item, from unmasked scores.

    scores: [N, B, H, T, T] (item, sequence, head, query, key). mask: [T, T] or
    broadcastable bool, True = allowed; default causal. Returns five [N] float64
    tensors on the scores' device, each a mean over B and H: ``qk_erank`` (erank
    of the unmasked S), ``attn_entropy`` (nats, mean over rows too), ``attn_top1``,
    ``attn_erank`` (erank of the attention matrix), ``logit_std`` (std of S over the
    allowed entries of each (b, h)). The two eranks are one ``svdvals`` call each
    over all N·B·H matrices.
    """
    if scores.dim() != 5 or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(f"scores must be [N, B, H, T, T], got {tuple(scores.shape)}")
    s = scores.to(torch.float64)
    if mask is None:
        mask = causal_mask(s.shape[-1], s.device)
    mask = mask.expand_as(s)
    probs = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)  # [N, B, H, T, T]
    row_entropy = -torch.special.xlogy(probs, probs).sum(-1)  # [N, B, H, T]
    allowed = mask.to(torch.float64)
    count = allowed.sum(dim=(-2, -1))  # [N, B, H]
    mean = (s * allowed).sum(dim=(-2, -1)) / count
    var = (((s - mean[..., None, None]) * allowed) ** 2).sum(dim=(-2, -1)) / count  # ddof 0
    return {
        "qk_erank": effective_rank(s).mean(dim=(-2, -1)),
        "attn_entropy": row_entropy.mean(dim=(-3, -2, -1)),
        "attn_top1": probs.amax(-1).mean(dim=(-3, -2, -1)),
        "attn_erank": effective_rank(probs).mean(dim=(-2, -1)),
        "logit_std": var.sqrt().mean(dim=(-2, -1)),
    }


def attention_stats(scores: Tensor, mask: Tensor | None = None) -> dict[str, float]:
    """``batched_attention_stats`` of one layer, as floats. scores: [B, H, T, T]; mask as there."""
    if scores.dim() != 4 or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(f"scores must be [B, H, T, T], got {tuple(scores.shape)}")
    stats = batched_attention_stats(scores[None], mask)
    values = torch.stack(list(stats.values()))[:, 0].tolist()  # one transfer
    return dict(zip(stats, values, strict=True))
