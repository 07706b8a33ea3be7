"""NanoGPT-style decoder with separate Q/K/V projections (SPEC §1).

Plain PyTorch: no Ray, no I/O, no metrics. Two attention paths:
- fast: ``F.scaled_dot_product_attention(is_causal=True)`` for training;
- probe: the same attention computed explicitly, returning per layer the
  attention input, q, k, scores and probabilities for the geometry probe.

``hook_q`` / ``hook_k`` are identity modules on the fast path: forward hooks
registered on them see each batch's q and k ([B, T, d_model], heads
concatenated) with autograd intact, which is how interventions add losses
on the batch's own activations without a second forward pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class GPTConfig:
    """Model shape. Defaults are the paper's (SPEC §1)."""

    vocab_size: int = 1758  # characters in the corpus slice (paper: WikiText-103, 40M chars)
    n_layer: int = 4  # transformer blocks (paper: 4, 6, 8)
    n_head: int = 4  # attention heads per block
    d_model: int = 256  # residual width; d_head = d_model / n_head
    d_mlp: int = 1024  # MLP hidden width (GELU)
    context: int = 128  # maximum sequence length (learned positions)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_head", "d_model", "d_mlp", "context"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"GPTConfig.{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(
                f"GPTConfig.d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                f"choose n_head among the divisors of d_model"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head


@dataclass
class AttentionTrace:
    """What the probe path exposes for one layer (all detached from autograd)."""

    x: Tensor  # [B, T, d_model] attention input, LN1(residual)
    q: Tensor  # [B, H, T, d_head]
    k: Tensor  # [B, H, T, d_head]
    scores: Tensor  # [B, H, T, T] q kᵀ / sqrt(d_head), before the causal mask
    probs: Tensor  # [B, H, T, T] softmax of masked scores


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head, self.d_head = cfg.n_head, cfg.d_head
        self.q_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.k_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.v_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.hook_q = nn.Identity()  # [B, T, d_model]
        self.hook_k = nn.Identity()  # [B, T, d_model]

    def _heads(self, t: Tensor) -> Tensor:
        b, T, _ = t.shape
        return t.view(b, T, self.n_head, self.d_head).transpose(1, 2)  # (B, H, T, d_head)

    def forward(self, x: Tensor, trace: list[AttentionTrace] | None = None) -> Tensor:
        """x: [B, T, d_model] → [B, T, d_model]. With ``trace``, attend explicitly and record."""
        q = self._heads(self.hook_q(self.q_proj(x)))
        k = self._heads(self.hook_k(self.k_proj(x)))
        v = self._heads(self.v_proj(x))
        if trace is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            T = x.shape[1]
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)  # (B, H, T, T)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = probs @ v
            trace.append(AttentionTrace(x.detach(), q.detach(), k.detach(), scores.detach(), probs.detach()))
        y = y.transpose(1, 2).reshape(x.shape)  # (B, T, d_model)
        return self.out_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.proj = nn.Linear(cfg.d_mlp, cfg.d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-LN block: x + attn(LN1(x)), then x + mlp(LN2(x))."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, trace: list[AttentionTrace] | None = None) -> Tensor:
        x = x + self.attn(self.ln1(x), trace)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only character model; LM head tied to the token embedding."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight  # tied

    def num_params(self) -> int:
        """Distinct parameters (the tied head counted once)."""
        return sum(p.numel() for p in self.parameters())

    def forward(
        self, idx: Tensor, targets: Tensor | None = None, trace: list[AttentionTrace] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """idx: [B, T] int64 → logits [B, T, vocab], mean cross-entropy (nats) if targets given.

        Pass an empty list as ``trace`` to take the probe path; it is filled
        with one ``AttentionTrace`` per layer.
        """
        T = idx.shape[1]
        if T > self.cfg.context:
            raise ValueError(f"sequence length {T} exceeds context {self.cfg.context}")
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (B, T, d_model)
        for block in self.blocks:
            x = block(x, trace)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        loss = None
        if targets is not None:
            # autocast's bf16/fp16 logits go up to float32; a float64 model keeps float64
            loss = F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)).flatten(0, 1),
                                   targets.flatten())
        return logits, loss

    def probe(self, idx: Tensor, targets: Tensor | None = None) -> tuple[Tensor, Tensor | None, list[AttentionTrace]]:
        """The probe path: same outputs as ``forward`` plus one trace per layer."""
        trace: list[AttentionTrace] = []
        logits, loss = self.forward(idx, targets, trace)
        return logits, loss, trace
