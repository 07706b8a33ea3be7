"""Today's per-layer probe (main at 09645bb), kept verbatim as the reference of the batched one.

Before the batched probe ``metrics.probe.probe_layers`` reduced each layer on its own: one ``svdvals``
call per layer and input, and one ``.item()`` (a device sync) per metric. The functions below
are copied from ``metrics/spectra.py`` and ``metrics/attention.py`` as they were, and
``old_probe_layers`` is that probe's loop with its columns written out (the hand-written
form ``tests/test_metrics_probe.py`` checked bit-identical to the vocabulary-driven rows).
The batched probe must equal it to 1e-10 (tests/test_metrics_probe.py); ``bench.probe_cost``
times it as "old". Do not edit the numerics here.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

# -- metrics/spectra.py at 09645bb ---------------------------------------------------------


def participation_ratio(x: Tensor) -> Tensor:
    if x.dim() < 2:
        raise ValueError(f"participation_ratio expects [..., N, D], got shape {tuple(x.shape)}")
    n = x.shape[-2]
    if n < 2:
        raise ValueError(f"participation_ratio needs N >= 2 vectors, got N={n}")
    x = x.to(torch.float64)
    xc = x - x.mean(dim=-2, keepdim=True)
    if n >= x.shape[-1]:
        cov = xc.transpose(-1, -2) @ xc / (n - 1)  # [..., D, D]
    else:  # the N×N Gram matrix has the same non-zero spectrum and is smaller
        cov = xc @ xc.transpose(-1, -2) / (n - 1)  # [..., N, N]
    trace = torch.diagonal(cov, dim1=-2, dim2=-1).sum(-1)
    return trace**2 / (cov**2).sum(dim=(-2, -1))


def pooled_participation_ratio(x: Tensor) -> Tensor:
    return participation_ratio(x.reshape(-1, x.shape[-1]))


def effective_rank(m: Tensor) -> Tensor:
    if m.dim() < 2:
        raise ValueError(f"effective_rank expects [..., R, C], got shape {tuple(m.shape)}")
    s = torch.linalg.svdvals(m.to(torch.float64))  # [..., min(R, C)]
    total = s.sum(-1, keepdim=True)
    p = s / total.clamp_min(torch.finfo(torch.float64).tiny)
    entropy = -torch.special.xlogy(p, p).sum(-1)  # xlogy gives 0·log 0 = 0
    return torch.where(total.squeeze(-1) > 0, entropy.exp(), torch.zeros_like(entropy))


def head_effective_rank(w: Tensor, n_head: int) -> Tensor:
    return effective_rank(w.reshape(n_head, w.shape[0] // n_head, -1)).mean()


def frobenius_norm(w: Tensor) -> Tensor:
    return w.double().norm()


def _row_abs_cos(wq: Tensor, wk: Tensor) -> Tensor:
    if wq.shape != wk.shape:
        raise ValueError(f"W_Q and W_K shapes differ: {tuple(wq.shape)} vs {tuple(wk.shape)}")
    wq, wk = wq.to(torch.float64), wk.to(torch.float64)
    nq, nk = wq.norm(dim=-1), wk.norm(dim=-1)
    dot = (wq * wk).sum(-1)
    valid = (nq > 0) & (nk > 0)
    cos = dot.abs() / torch.where(valid, nq * nk, torch.ones_like(dot))
    return torch.where(valid, cos, torch.full_like(cos, float("nan")))


def qk_alignment(wq: Tensor, wk: Tensor) -> Tensor:
    return torch.nanmean(_row_abs_cos(wq, wk))


def qk_alignment_per_head(wq: Tensor, wk: Tensor, n_head: int) -> Tensor:
    if wq.shape[0] % n_head:
        raise ValueError(f"{wq.shape[0]} output rows do not split into n_head={n_head} heads")
    return torch.nanmean(_row_abs_cos(wq, wk).view(n_head, -1), dim=-1)


# -- metrics/attention.py at 09645bb -------------------------------------------------------


def causal_mask(t: int, device: torch.device | None = None) -> Tensor:
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def attention_stats(scores: Tensor, mask: Tensor | None = None) -> dict[str, float]:
    if scores.dim() != 4 or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(f"scores must be [B, H, T, T], got {tuple(scores.shape)}")
    s = scores.to(torch.float64)
    if mask is None:
        mask = causal_mask(s.shape[-1], s.device)
    mask = mask.expand_as(s)
    probs = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)  # [B, H, T, T]
    row_entropy = -torch.special.xlogy(probs, probs).sum(-1)  # [B, H, T]
    allowed = mask.to(torch.float64)
    count = allowed.sum(dim=(-2, -1))  # [B, H]
    mean = (s * allowed).sum(dim=(-2, -1)) / count
    var = (((s - mean[..., None, None]) * allowed) ** 2).sum(dim=(-2, -1)) / count  # ddof 0
    return {
        "qk_erank": effective_rank(s).mean().item(),
        "attn_entropy": row_entropy.mean().item(),
        "attn_top1": probs.amax(-1).mean().item(),
        "attn_erank": effective_rank(probs).mean().item(),
        "logit_std": var.sqrt().mean().item(),
    }


# -- metrics/probe.py at 09645bb, its columns written out ----------------------------------


def activation_columns(q: Tensor, k: Tensor, scores: Tensor) -> dict[str, Any]:
    """q: [B, T, H·d_head]; k: [B, T, H_kv·d_head]; scores: [B, H, T, T]."""
    pr_q = pooled_participation_ratio(q).item()
    pr_k = pooled_participation_ratio(k).item()
    return {"pr_q": pr_q, "pr_k": pr_k, "pr_q_minus_pr_k": pr_q - pr_k, **attention_stats(scores)}


def weight_columns(wq: Tensor, wk: Tensor, n_head: int) -> dict[str, Any]:
    """wq, wk: [D, D]."""
    return {
        "wq_erank": effective_rank(wq).item(),
        "wk_erank": effective_rank(wk).item(),
        "wq_erank_head": head_effective_rank(wq, n_head).item(),
        "wk_erank_head": head_effective_rank(wk, n_head).item(),
        "qk_alignment": qk_alignment(wq, wk).item(),
        "qk_alignment_head": [float(v) for v in qk_alignment_per_head(wq, wk, n_head).tolist()],
        "wq_norm": frobenius_norm(wq).item(),
        "wk_norm": frobenius_norm(wk).item(),
    }


@torch.no_grad()
def old_probe_layers(model: nn.Module, tokens: Tensor) -> list[dict[str, Any]]:
    """One dict per layer, as ``metrics.probe.probe_layers`` returned it at 09645bb."""
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
