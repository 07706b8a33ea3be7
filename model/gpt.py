"""NanoGPT-style decoder with separate Q/K/V projections (SPEC §1).

Plain PyTorch: no Ray, no I/O, no metrics. The same modules hold one run or a pack of M runs
(SPEC §5.1): with stacked parameters (a leading member dimension M on every weight, as
``model.stack`` builds them) each layer maps [M, ..., d] to [M, ..., d'], member by member,
with one batched kernel (``bmm``, one LayerNorm, one embedding gather), and attention folds
the members into SDPA's batch dimension (M·B, H, T, d_head), so the flash kernel serves a
whole pack. Shapes: M members, B sequences, T positions, H heads, V vocabulary. An unpacked model runs exactly the plain ``nn.Linear``/``nn.LayerNorm``/
``nn.Embedding`` code. Two attention paths:
- fast: ``F.scaled_dot_product_attention(is_causal=True)`` for training;
- probe: the same attention computed explicitly, returning per layer the
  attention input, q, k, scores and probabilities for the geometry probe.

``hook_q`` / ``hook_k`` are identity modules on the fast path: forward hooks
registered on them see each batch's q and k ([B, T, d_model], heads
concatenated; a pack: [M, B, T, d_model]) with autograd intact, which is how interventions add losses
on the batch's own activations without a second forward pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# the shape is plain data without torch (model/config.py); importing it from here keeps working
from model.config import GPTConfig


def _with_members(weight: Tensor, stacked_dim: int, plain: str) -> str:
    """A layer's ``repr`` arguments, led by ``members=M`` when its weight is stacked."""
    return f"members={weight.shape[0]}, {plain}" if weight.dim() == stacked_dim else plain


def _member_shape(t: Tensor, ndim: int) -> tuple[int, ...]:
    """The shape that broadcasts a per-member [M, d] tensor against an ``ndim``-dim [M, ..., d] one."""
    return (t.shape[0],) + (1,) * (ndim - 2) + (t.shape[-1],)


class Linear(nn.Linear):
    """``nn.Linear``; with stacked weight [M, out, in] and bias [M, out]: x [M, ..., in] → [M, ..., out]."""

    def extra_repr(self) -> str:
        return _with_members(self.weight, 3, super().extra_repr())

    def forward(self, x: Tensor) -> Tensor:
        if self.weight.dim() == 2:
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(self.weight.shape[0], -1, x.shape[-1])  # [M, N, in]
        w = self.weight.mT  # [M, in, out]
        y = torch.bmm(flat, w) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), flat, w)
        return y.view(*x.shape[:-1], y.shape[-1])


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm``; with stacked gain and bias [M, d]: x [M, ..., d] normalised member by member."""

    def extra_repr(self) -> str:
        return _with_members(self.weight, 2, super().extra_repr())

    def forward(self, x: Tensor) -> Tensor:
        if self.weight.dim() == 1:
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        y = F.layer_norm(x, self.normalized_shape, None, None, self.eps)
        shape = _member_shape(self.weight, x.dim())
        return torch.addcmul(self.bias.view(shape), y, self.weight.view(shape))


class Embedding(nn.Embedding):
    """``nn.Embedding``; with a stacked table [M, V, d]: idx [M, ...] → [M, ..., d], member m reading
    its own table (one gather over the flattened [M·V, d] table)."""

    def extra_repr(self) -> str:
        return _with_members(self.weight, 3, super().extra_repr())

    def forward(self, idx: Tensor) -> Tensor:
        if self.weight.dim() == 2:
            return super().forward(idx)
        m, v = self.weight.shape[:2]
        offset = torch.arange(m, device=idx.device).view(m, *([1] * (idx.dim() - 1))) * v
        return F.embedding(idx + offset, self.weight.flatten(0, 1))


@dataclass
class AttentionTrace:
    """What the probe path exposes for one layer (all detached from autograd); a pack's
    tensors carry a leading member dimension M."""

    x: Tensor  # [(M,) B, T, d_model] attention input, LN1(residual)
    q: Tensor  # [(M,) B, H, T, d_head]
    k: Tensor  # [(M,) B, H, T, d_head]
    scores: Tensor  # [(M,) B, H, T, T] q kᵀ / sqrt(d_head), before the causal mask
    probs: Tensor  # [(M,) B, H, T, T] softmax of masked scores


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.d_head = cfg.n_head, cfg.d_head
        self.q_proj = Linear(cfg.d_model, cfg.d_model)
        self.k_proj = Linear(cfg.d_model, cfg.d_model)
        self.v_proj = Linear(cfg.d_model, cfg.d_model)
        self.out_proj = Linear(cfg.d_model, cfg.d_model)
        self.hook_q = nn.Identity()  # [B, T, d_model] (a pack: [M, B, T, d_model])
        self.hook_k = nn.Identity()  # [B, T, d_model] (a pack: [M, B, T, d_model])

    def _heads(self, t: Tensor) -> Tensor:
        """[..., T, d_model] → [N, H, T, d_head], N the product of the leading dims (a pack: M·B)."""
        T = t.shape[-2]
        return t.reshape(-1, T, self.n_head, self.d_head).transpose(1, 2)

    def forward(self, x: Tensor, trace: list[AttentionTrace] | None = None) -> Tensor:
        """x: [B, T, d_model] (a pack: [M, B, T, d_model]) → the same shape. With ``trace``,
        attend explicitly and record."""
        q = self._heads(self.hook_q(self.q_proj(x)))
        k = self._heads(self.hook_k(self.k_proj(x)))
        v = self._heads(self.v_proj(x))
        if trace is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # one call for the whole pack
        else:
            T = x.shape[-2]
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)  # [N, H, T, T]
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = probs @ v
            lead = x.shape[:-2]  # (B,) or (M, B)
            trace.append(AttentionTrace(x.detach(), *(t.detach().view(*lead, *t.shape[1:])
                                                      for t in (q, k, scores, probs))))
        y = y.transpose(1, 2).reshape(x.shape)  # [..., T, d_model]
        return self.out_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = Linear(cfg.d_model, cfg.d_mlp)
        self.proj = Linear(cfg.d_mlp, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LN block: x + attn(LN1(x)), then x + mlp(LN2(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, trace: list[AttentionTrace] | None = None) -> Tensor:
        x = x + self.attn(self.ln1(x), trace)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only character model; LM head tied to the token embedding.

    Built by ``GPT(cfg)`` it is one run. A pack (``model.stack``) gives the same modules stacked
    parameters with a leading member dimension M; ``members`` is then M and ``forward`` takes
    idx [M, B, T] (or [B, T], one batch for every member) and returns per-member losses [M].
    """

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = LayerNorm(cfg.d_model)
        self.lm_head = Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied

    @property
    def members(self) -> int | None:
        """M for a pack's stacked parameters, None for one run."""
        w = self.tok_emb.weight
        return w.shape[0] if w.dim() == 3 else None

    def num_params(self) -> int:
        """Distinct parameters (the tied head counted once; a pack: every member's)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, trace: list[AttentionTrace] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """idx: [B, T] int64 → logits [B, T, vocab], mean cross-entropy (nats) if targets given.

        A pack: idx, targets [M, B, T] (or [B, T] for all members) → logits [M, B, T, vocab] and
        each member's mean cross-entropy [M]. Pass an empty list as ``trace`` to take the probe
        path; it is filled with one ``AttentionTrace`` per layer.
        """
        T = idx.shape[-1]
        if T > self.cfg.context:
            raise ValueError(f"sequence length {T} exceeds context {self.cfg.context}")
        m = self.members
        pos = torch.arange(T, device=idx.device)
        if m is None:
            x = self.tok_emb(idx) + self.pos_emb(pos)  # [B, T, d_model]
        else:
            if idx.dim() == 2:
                idx = idx.expand(m, *idx.shape)
                targets = None if targets is None else targets.expand(m, *targets.shape)
            x = self.tok_emb(idx) + self.pos_emb(pos.expand(m, T)).unsqueeze(1)  # [M, B, T, d_model]
        for block in self.blocks:
            x = block(x, trace)
        logits = self.lm_head(self.ln_f(x))  # [..., T, vocab]
        loss = None
        if targets is not None:
            # autocast's bf16/fp16 logits go up to float32; a float64 model keeps float64
            flat = logits.to(torch.promote_types(logits.dtype, torch.float32)).flatten(0, -2)
            if m is None:
                loss = F.cross_entropy(flat, targets.flatten())
            else:
                loss = F.cross_entropy(flat, targets.flatten(), reduction="none").view(m, -1).mean(1)
        return logits, loss

    def probe(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None, list[AttentionTrace]]:
        """The probe path: same outputs as ``forward`` plus one trace per layer."""
        trace: list[AttentionTrace] = []
        logits, loss = self.forward(idx, targets, trace)
        return logits, loss, trace
