"""Weight initialisation: NanoGPT everywhere, then one of three Q/K regimes (SPEC §1.1).

=========================  ===========================  =============================  ==============
regime                     W_Q                          W_K                            alignment@init
=========================  ===========================  =============================  ==============
independent_xavier         xavier                       xavier, independent draw       ≈ sqrt(2/(πD))
qk_identical               xavier                       exact copy of W_Q              1
disjoint_support_xavier    √2·xavier on columns S_Q     √2·xavier on columns S_K       0
=========================  ===========================  =============================  ==============

xavier = U(−a, a), a = sqrt(6 / (fan_in + fan_out)). S_Q, S_K: a random
half/half partition of the input coordinates, drawn per layer. q/k biases
start at zero. Every draw comes from one CPU generator seeded by the run's
seed, in a fixed order, so (regime, depth, seed) fixes the weights bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from model.gpt import GPT, GPTConfig

QKInit = Callable[[Tensor, Tensor, torch.Generator], None]


def _xavier_(w: Tensor, gen: torch.Generator) -> None:
    fan_out, fan_in = w.shape
    a = math.sqrt(6.0 / (fan_in + fan_out))
    w.uniform_(-a, a, generator=gen)


def independent_xavier(wq: Tensor, wk: Tensor, gen: torch.Generator) -> None:
    """W_Q and W_K: independent xavier draws."""
    _xavier_(wq, gen)
    _xavier_(wk, gen)


def qk_identical(wq: Tensor, wk: Tensor, gen: torch.Generator) -> None:
    """W_Q xavier; W_K an exact copy (a separate parameter, trained freely)."""
    _xavier_(wq, gen)
    wk.copy_(wq)


def disjoint_support_xavier(wq: Tensor, wk: Tensor, gen: torch.Generator) -> None:
    """W_Q on a random half of the input columns, W_K on the other half, each ×√2."""
    d_in = wq.shape[1]
    perm = torch.randperm(d_in, generator=gen)
    s_q, s_k = perm[: d_in // 2], perm[d_in // 2 :]
    for w, support in ((wq, s_q), (wk, s_k)):
        _xavier_(w, gen)
        keep = torch.zeros(d_in, dtype=torch.bool)
        keep[support] = True
        w.mul_(keep.to(w.dtype) * math.sqrt(2.0))


QK_INITS: dict[str, QKInit] = {
    "independent_xavier": independent_xavier,
    "qk_identical": qk_identical,
    "disjoint_support_xavier": disjoint_support_xavier,
}


def check_qk_init(name: str) -> str:
    """Return ``name`` if it is a known regime, else raise naming the valid ones."""
    if name not in QK_INITS:
        raise ValueError(f"unknown qk_init {name!r}; valid: {', '.join(QK_INITS)}")
    return name


@torch.no_grad()
def init_weights(model: GPT, qk_init: str, seed: int) -> None:
    """NanoGPT init for every weight (normal 0.02, residual projections
    0.02/sqrt(2·layers), zero biases, LayerNorm 1/0), then the Q/K regime."""
    check_qk_init(qk_init)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    resid_std = 0.02 / math.sqrt(2 * model.cfg.n_layer)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module is not model.lm_head:
            std = resid_std if name.endswith(("out_proj", "mlp.proj")) else 0.02
            module.weight.normal_(0.0, std, generator=gen)
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, 0.02, generator=gen)
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
    for block in model.blocks:
        attn = block.attn
        QK_INITS[qk_init](attn.q_proj.weight, attn.k_proj.weight, gen)
        attn.q_proj.bias.zero_()
        attn.k_proj.bias.zero_()


def build_model(cfg: GPTConfig, qk_init: str, seed: int) -> GPT:
    """A GPT on the CPU in float32 with the weights that (cfg, qk_init, seed) fix."""
    check_qk_init(qk_init)
    model = GPT(cfg)
    init_weights(model, qk_init, seed)
    return model
