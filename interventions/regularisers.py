"""Extra-loss interventions (SPEC §5): a differentiable term added to each step's loss.

- ``forced_k_contraction``: λ·Σ_ℓ PR(K_ℓ)/d_model on the batch's own keys;
- ``qk_align_reg``: λ·Σ_ℓ (1 − mean_i cos(W_Q[i], W_K[i])) on the weights.

Both return ``None`` at λ = 0 (and register nothing), so that a λ = 0 run is
bit-identical to ``none``. Both compute in float32 with autocast switched
off: the trainer calls ``extra_loss`` inside autocast, where a matmul would
otherwise silently drop to bf16/fp16.

torch is imported by the functions that compute, not by the module: the registry (a parser reads
it) loads without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from interventions.base import Intervention, register

if TYPE_CHECKING:
    from torch import Tensor, nn
    from torch.utils.hooks import RemovableHandle


def participation_ratio_f32(x: Tensor) -> Tensor:
    """Differentiable participation ratio for a loss term.

    x: [..., N, D] (a pack: one [N, D] per member). Returns float32 ``tr(C)² / ‖C‖_F²`` [...]
    of the centred covariance C, which equals (Σλ)²/Σλ² (SPEC §4) without an eigensolver, so
    gradients are plain matmuls. Float32 on purpose: float64 is slow on GPUs, and the reported
    metric (``metrics.spectra.participation_ratio``, float64) stays the reference. Autocast is
    disabled inside.
    """
    import torch

    if x.dim() < 2 or x.shape[-2] < 2:
        raise ValueError(f"participation_ratio_f32 expects [..., N >= 2, D], got shape {tuple(x.shape)}")
    n, d = x.shape[-2:]
    with torch.autocast(device_type=x.device.type, enabled=False):
        x = x.float()
        xc = x - x.mean(dim=-2, keepdim=True)
        # the N×N Gram matrix has the same non-zero spectrum; use whichever is smaller
        cov = xc.mT @ xc if n >= d else xc @ xc.mT  # (..., D, D) or (..., N, N)
        cov = cov / (n - 1)
        trace = torch.diagonal(cov, dim1=-2, dim2=-1).sum(-1)
        return trace**2 / (cov**2).sum(dim=(-2, -1)).clamp_min(torch.finfo(torch.float32).tiny)


@register
@dataclass
class ForcedKContraction(Intervention):
    """Push key participation down: loss += λ·Σ_ℓ PR(K_ℓ)/d_model on each training batch.

    K_ℓ is the batch's own key activations of layer ℓ ([B·T, d_model], heads
    concatenated; in a pack one per member, and the term is [M]), captured by forward hooks on ``attn.hook_k`` with autograd
    intact (no second forward pass). Captures are taken only in training mode
    with grad enabled, so the no-grad validation and probe passes leave them
    alone. Default λ = 0.05. Predicted vs ``none``: attention entropy ↓,
    logit_std ↑, qk_erank ↓.
    """

    name: ClassVar[str] = "forced_k_contraction"
    pack_aware: ClassVar[bool] = True
    graph_safe: ClassVar[bool] = True
    predicted: ClassVar[dict[str, int]] = {"attn_entropy": -1, "logit_std": +1, "qk_erank": -1}

    lam: float = 0.05  # λ, weight of Σ_ℓ PR(K_ℓ)/d_model in the loss

    def __post_init__(self) -> None:
        super().__post_init__()
        self._keys: dict[int, Tensor] = {}  # layer → [B·T, d_model] keys of the batch (a pack: [M, B·T, d_model])
        self._handles: list[RemovableHandle] = []
        self._n_layer = 0
        self._d_model = 0

    def setup(self, model: nn.Module) -> None:
        self.remove_hooks()
        if self.lam == 0:
            return
        self._n_layer, self._d_model = len(model.blocks), model.cfg.d_model
        for layer, block in enumerate(model.blocks):
            self._handles.append(block.attn.hook_k.register_forward_hook(self._capture(layer)))

    def _capture(self, layer: int):
        import torch

        def hook(module: nn.Module, args: tuple[Tensor, ...], k: Tensor) -> None:
            if module.training and torch.is_grad_enabled():
                self._keys[layer] = k.flatten(-3, -2)  # (B·T, d_model); a pack's k [M, B, T, d]: (M, B·T, d)
        return hook

    def remove_hooks(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._keys.clear()

    def extra_loss(self, model: nn.Module) -> Tensor | None:
        if self.lam == 0:
            return None
        if len(self._keys) != self._n_layer:
            raise RuntimeError(
                f"forced_k_contraction captured keys for {len(self._keys)} of {self._n_layer} layers: "
                "extra_loss must follow a training-mode forward pass with grad enabled, after setup(model)"
            )
        import torch

        keys, self._keys = self._keys, {}  # drop the references so the graph can be freed
        pr = torch.stack([participation_ratio_f32(keys[layer]) for layer in range(self._n_layer)])  # (L[, M])
        return self.lam * pr.sum(0) / self._d_model

    def load_state_dict(self, state: dict) -> None:
        self._keys.clear()


def qk_cos_loss(wq: Tensor, wk: Tensor) -> Tensor:
    """1 − mean_i cos(W_Q[i,:], W_K[i,:]), signed, float32, differentiable.

    wq, wk: [..., D_out, D_in] (a pack: [M, D_out, D_in]) → [...]. Unlike the reported alignment (|cos|, zero rows
    skipped) the sign counts here, so the pull is toward W_K ∥ +W_Q.
    """
    import torch
    import torch.nn.functional as F

    with torch.autocast(device_type=wq.device.type, enabled=False):
        return 1 - F.cosine_similarity(wq.float(), wk.float(), dim=-1, eps=1e-8).mean(-1)


@register
@dataclass
class QKAlignReg(Intervention):
    """A weak pull toward Q/M alignment: loss += λ·Σ_ℓ (1 − mean_i cos(W_Q[i], W_K[i])).

    Acts on the weights (signed cosine of matching rows), not on activations.
    Default λ = 1e-3. No predicted direction (SPEC §5: "small change").
    """

    name: ClassVar[str] = "qk_align_reg"
    pack_aware: ClassVar[bool] = True
    graph_safe: ClassVar[bool] = True
    predicted: ClassVar[dict[str, int]] = {}

    lam: float = 1e-3  # λ, weight of Σ_ℓ (1 − mean_i cos) in the loss

    def extra_loss(self, model: nn.Module) -> Tensor | None:
        if self.lam == 0:
            return None
        import torch

        terms = [qk_cos_loss(b.attn.q_proj.weight, b.attn.k_proj.weight) for b in model.blocks]
        return self.lam * torch.stack(terms).sum(0)  # (L[, M]) → scalar (a pack: [M])
