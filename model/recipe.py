"""The optimisation recipe (SPEC §3): its settings, the device and precision they resolve to, and
the AdamW they build. No Ray, no files.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

# the recipe's settings are plain data without torch (model/config.py); importing them from here keeps working
from model.config import TrainConfig
from model.optimiser import MemberAdamW


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes in bfloat16 natively: a CUDA GPU of compute capability 8.0 or
    later (Ampere on). ``torch.cuda.is_bf16_supported()`` also says yes where it is emulated
    (its ``including_emulation`` defaults to True): a T4 (7.5) or a V100 (7.0), where bf16 is slow."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype ``TrainConfig.amp`` means on ``device`` (None: full precision). ``auto``:
    bf16 where the GPU has it natively (``native_bf16``), else fp16 (with per-member loss scaling,
    ``model.scaler``); on the CPU always None. No side effect: TF32 is ``set_tf32``'s."""
    if device.type != "cuda" or amp == "off":
        return None
    if amp == "auto":
        return torch.bfloat16 if native_bf16(device) else torch.float16
    return torch.bfloat16 if amp == "bf16" else torch.float16


def set_tf32(enabled: bool, device: torch.device) -> None:
    """Let fp32 matmuls and convolutions on CUDA use TF32 (``enabled``) or not: called where a run
    starts (``python -m model.train``, the sweep's trial), never as a side effect; the probe forces
    full precision for itself (``metrics.probe``). Nothing to do on the CPU.

    Both of PyTorch's APIs are written, to the same value: first the legacy flags
    (``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.cudnn.allow_tf32``), then the
    per-backend ``fp32_precision`` (cuBLAS matmul, cuDNN conv and rnn). PyTorch 2.13's older
    readers (the two flags, ``torch.get_float32_matmul_precision()``, which Inductor's
    max-autotune reads) raise when the two APIs disagree, e.g. after the new API alone set
    ``"tf32"``, or set cuDNN's conv but not its rnn; written so, every reader, old or new, answers
    (tests/test_model_recipe.py reads them all). oneDNN (CPU) matmuls are left alone."""
    if device.type != "cuda":
        return
    value = "tf32" if enabled else "ieee"
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    torch.backends.cuda.matmul.fp32_precision = value
    torch.backends.cudnn.conv.fp32_precision = value
    torch.backends.cudnn.rnn.fp32_precision = value


#: the modules whose ``weight`` AdamW decays (SPEC §3: matrices and embeddings); biases and
#: LayerNorm gains are not decayed, whatever their rank (a pack's LayerNorm gain is [M, d])
DECAYED = (nn.Linear, nn.Embedding)


def split_params(model: nn.Module, trainable: Callable[[str, nn.Parameter], bool]
                 ) -> tuple[list[str], list[str], list[str]]:
    """Parameter names (``named_parameters`` order, the tied head once): (decayed, not decayed, frozen).

    A parameter is decayed by its role, a ``DECAYED`` module's ``weight``; one for which
    ``trainable`` (the intervention's hook) says False is frozen: kept out of both."""
    role = {f"{m_name}.{p_name}".lstrip("."): isinstance(module, DECAYED) and p_name == "weight"
            for m_name, module in model.named_modules() for p_name, _ in module.named_parameters(recurse=False)}
    decay, no_decay, frozen = [], [], []
    for name, p in model.named_parameters():
        if not trainable(name, p):
            frozen.append(name)
        else:
            (decay if role[name] else no_decay).append(name)
    return decay, no_decay, frozen


def make_adamw(decay: list[Tensor], no_decay: list[Tensor], cfg: TrainConfig, device: torch.device,
               capturable: bool = False, members: int = 1, fused: bool | None = None) -> torch.optim.Optimizer:
    """The recipe's AdamW: weight decay on ``decay`` only; fused on CUDA (``fused``: None) or as
    asked; ``capturable`` when its step is recorded in a CUDA graph (the step count lives on the
    device). ``members`` > 1: the tensors are a pack's, stacked [M, ...], and the optimiser is
    ``model.optimiser.MemberAdamW`` (one step count per member)."""
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    kwargs = {"lr": cfg.lr, "betas": (cfg.beta1, cfg.beta2), "capturable": capturable,
              "fused": device.type == "cuda" if fused is None else fused}
    if members > 1:
        return MemberAdamW(groups, members, **kwargs)
    return torch.optim.AdamW(groups, **kwargs)


def load_optimizer(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """``optimizer.load_state_dict(state)`` keeping this optimiser's own ``fused`` and
    ``capturable`` (the saved groups carry those of the device that saved them)."""
    own = [{k: g[k] for k in ("fused", "capturable") if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, flags in zip(optimizer.param_groups, own, strict=True):
        group.update(flags)


def compile_model(model: nn.Module, backend: str = "inductor") -> Callable[..., Any]:
    """``torch.compile(model)``, guarding on module hooks. Dynamo's default skips those guards, so a
    worker that compiled a run without an intervention's capture hooks (trainers come and go in
    one Ray worker) would replay that graph for a run with them: without the hooks."""
    import torch._dynamo

    torch._dynamo.config.skip_nnmodule_hook_guards = False
    if os.environ.get("ATEN_CPU_CAPABILITY") == "default":
        # PyTorch's portable kernels asked for: inductor would still emit C++ vectorized for this
        # CPU's ISA, which does not compile against them ("'at::vec' has not been declared")
        import torch._inductor.config

        torch._inductor.config.cpp.simdlen = 1
    return torch.compile(model, backend=backend)
