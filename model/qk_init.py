"""Weight initialisation: NanoGPT everywhere, then one Q/K regime from the registry (SPEC §1.1).

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

The registry ``QK_INITS`` maps a regime's name to an ``InitRegime``: its
function, the label and colour the report uses, and whether it couples W_Q and
W_K (the "coupled" group of SPEC §8). The built-ins above register themselves
with ``@register_init``; a researcher's module registers its own the same way
and is loaded with ``--plugin MODULE``::

    from model.qk_init import register_init

    @register_init("orthogonal_qk", label="Orthogonal Q/K", coupled=False)
    def orthogonal_qk(w_q, w_k, gen):  # fills both [d_model, d_model] weights in place
        ...
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where weights are drawn: the registry's names cost no torch (--help)
    import torch
    from torch import Tensor

    from model.gpt import GPT, GPTConfig

QKInit = Callable[["Tensor", "Tensor", "torch.Generator"], None]

#: Colours for regimes registered without one (matplotlib's tab10 after the built-ins' three).
_PALETTE = ("#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")


@dataclass(frozen=True)
class InitRegime:
    """One Q/K regime: everything the study needs of it."""

    name: str  # the store's ``init`` column and the CLI's --inits value
    fn: QKInit  # fn(w_q, w_k, gen) fills both [d_model, d_model] weights in place
    label: str  # how tables, figure legends and report.md name it
    colour: str  # matplotlib colour of its lines and points
    coupled: bool  # W_K starts tied to W_Q (SPEC §8: the "coupled" group)
    #: the alignment the regime fixes at initialisation, where it fixes one (a copy: 1, disjoint
    #: supports: 0; a random draw: None). At a bound of |cos| (0 or 1) the final alignment can only
    #: move one way, so the scorecard shows that claim as a sanity check, not as evidence (SPEC §8)
    initial_alignment: float | None = None


#: name -> regime, in registration order (built-ins first).
QK_INITS: dict[str, InitRegime] = {}


def register_init(name: str, *, label: str, coupled: bool, colour: str | None = None,
                  initial_alignment: float | None = None) -> Callable[[QKInit], QKInit]:
    """Function decorator adding a Q/K regime to ``QK_INITS`` under ``name``.

    ``colour=None`` takes the next unused colour of a fixed palette. Registering a
    name twice is an error unless it is the same function again (a re-imported module).
    """

    def add(fn: QKInit) -> QKInit:
        old = QK_INITS.get(name)
        if old is not None and (old.fn.__module__, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"qk_init {name!r} is already registered by {old.fn.__module__}.{old.fn.__qualname__}")
        used = {r.colour for n, r in QK_INITS.items() if n != name}
        chosen = colour or next((c for c in _PALETTE if c not in used), _PALETTE[len(QK_INITS) % len(_PALETTE)])
        QK_INITS[name] = InitRegime(name, fn, label, chosen, coupled, initial_alignment)
        return fn

    return add


def _xavier_(w: Tensor, gen: torch.Generator) -> None:
    fan_out, fan_in = w.shape
    a = math.sqrt(6.0 / (fan_in + fan_out))
    w.uniform_(-a, a, generator=gen)


@register_init("independent_xavier", label="Independent Xavier", coupled=False, colour="#1f77b4")
def independent_xavier(wq: Tensor, wk: Tensor, gen: torch.Generator) -> None:
    """W_Q and W_K: independent xavier draws."""
    _xavier_(wq, gen)
    _xavier_(wk, gen)


@register_init("qk_identical", label="QK Identical", coupled=True, colour="#d62728", initial_alignment=1.0)
def qk_identical(wq: Tensor, wk: Tensor, gen: torch.Generator) -> None:
    """W_Q xavier; W_K an exact copy (a separate parameter, trained freely)."""
    _xavier_(wq, gen)
    wk.copy_(wq)


@register_init("disjoint_support_xavier", label="Disjoint Support Xavier", coupled=False, colour="#2ca02c",
               initial_alignment=0.0)
def disjoint_support_xavier(wq: Tensor, wk: Tensor, gen: torch.Generator) -> None:
    """W_Q on a random half of the input columns, W_K on the other half, each ×√2."""
    import torch

    d_in = wq.shape[1]
    perm = torch.randperm(d_in, generator=gen)
    s_q, s_k = perm[: d_in // 2], perm[d_in // 2 :]
    for w, support in ((wq, s_q), (wk, s_k)):
        _xavier_(w, gen)
        keep = torch.zeros(d_in, dtype=torch.bool)
        keep[support] = True
        w.mul_(keep.to(w.dtype) * math.sqrt(2.0))


#: The paper's three regimes (the presets' grid), in the paper's order.
PAPER_INITS: tuple[str, ...] = tuple(QK_INITS)
#: The regime of ``model.train`` and of the intervention family (SPEC §5).
DEFAULT_INIT = "independent_xavier"


def check_qk_init(name: str) -> str:
    """Return ``name`` if it is a known regime, else raise naming the valid ones."""
    if name not in QK_INITS:
        raise ValueError(f"unknown qk_init {name!r}; valid: {', '.join(QK_INITS)}")
    return name


def init_weights(model: GPT, qk_init: str, seed: int) -> None:
    """NanoGPT init for every weight (normal 0.02, residual projections
    0.02/sqrt(2·layers), zero biases, LayerNorm 1/0), then the Q/K regime."""
    import torch

    check_qk_init(qk_init)
    with torch.no_grad():
        _init_weights(model, qk_init, seed)


def _init_weights(model: GPT, qk_init: str, seed: int) -> None:
    import torch
    from torch import nn

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
        QK_INITS[qk_init].fn(attn.q_proj.weight, attn.k_proj.weight, gen)
        attn.q_proj.bias.zero_()
        attn.k_proj.bias.zero_()


def build_model(cfg: GPTConfig, qk_init: str, seed: int) -> GPT:
    """A GPT on the CPU in float32 with the weights that (cfg, qk_init, seed) fix."""
    from model.gpt import GPT

    check_qk_init(qk_init)
    model = GPT(cfg)
    init_weights(model, qk_init, seed)
    return model
