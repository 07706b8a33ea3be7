"""Projection interventions (SPEC §5): constrain weights after every optimiser step.

``clamp_spectrum`` is the clamp itself, for a whole batch of matrices in one decomposition call
(all L layers of a run, all M·L of a pack). How it decomposes is a class setting of
``KSpectrumClamp`` (``method``, ``decomp_device``), not a strength: every method gives the clamp
within 1e-6 of the SVD's (eigh to float64 rounding, refine to ~2e-8; tests/test_interventions_spectrum.py
checks 600 steps against the clamp as it was before the batched one), they differ in cost only.
Both default to ``"auto"`` (``choose``): on the CPU, eigh there (no timing); on a GPU, the fastest
method and device (the GPU's, or the CPU's with one copy there and back) measured once, at the
first step, on a few of the run's own matrices, as ``metrics.probe.decomposition_device`` chooses
the probe's (``bench/clamp_cost.py``, run by ``bench/gpu.sh``, measures them all and the plan's
cost factor).

torch is imported by the functions that compute, not by the module: the registry (a parser reads
it) loads without torch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from interventions.base import Intervention, register

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

#: the ways ``clamp_spectrum`` can decompose W (module docstring; LOG.md, the clamp batched and priced, weighs them)
METHODS = ("eigh", "svd", "refine")
#: Ogita–Aishima refinement steps after the float32 eigh of ``method="refine"``
REFINE_STEPS = 2
#: ``KSpectrumClamp.method`` / ``decomp_device``: chosen at run time (``choose``)
AUTO = "auto"
#: the matrices ``choose`` times each candidate on (a decomposition's cost grows with their number,
#: on either device: cuSOLVER takes 256×256 matrices one call each, as LAPACK does)
CALIBRATION_MATRICES = 8
#: ``choose``'s pick per (device, D, threads, candidates), for the process
_AUTO_CHOICE: dict[tuple[object, ...], tuple[str, str | None]] = {}


def _refine(a: Tensor, x: Tensor) -> Tensor:
    """One Ogita–Aishima refinement step (Ogita & Aishima 2018, Algorithm 1) of approximate
    eigenvectors x of the symmetric a, both [..., n, n] float64; matrix products only, so a
    batch costs a few batched GEMMs. Pairs of eigenvalues closer than the error bound δ are
    only re-orthogonalised (Frobenius norms stand in for 2-norms: a larger, safe δ)."""
    import torch

    r = -(x.mT @ x)
    r.diagonal(dim1=-2, dim2=-1).add_(1.0)  # R = I − XᵀX
    s = x.mT @ a @ x  # S = XᵀAX
    lam = s.diagonal(dim1=-2, dim2=-1) / (1 - r.diagonal(dim1=-2, dim2=-1))  # (..., n)
    off = s - torch.diag_embed(lam)
    delta = 2 * (torch.linalg.matrix_norm(off) + torch.linalg.matrix_norm(a) * torch.linalg.matrix_norm(r))
    gap = lam[..., None, :] - lam[..., :, None]  # [i, j] = λ_j − λ_i
    apart = gap.abs() > delta[..., None, None]
    e = torch.where(apart, (s + lam[..., None, :] * r) / torch.where(apart, gap, 1.0), r / 2)
    return x + x @ e


def _right_vectors(w: Tensor, method: str) -> tuple[Tensor, Tensor]:
    """W [..., D, D] float64 → (σ [..., D], V [..., D, D]), V's columns ordered by σ descending, from the
    eigenvectors of WᵀW (eigh: float64; refine: float32, refined in float64). σᵢ = ‖W·vᵢ‖, not
    √λᵢ: near zero, √λ has an error of √eps·σ_max, and σ⁽⁰⁾ᵢ/σᵢ would then scale noise up without
    bound (a rank-deficient W at initialisation, disjoint_support_xavier); with the norm, direction
    i of the result is σ⁽⁰⁾ᵢ times a unit vector, whatever the rounding."""
    import torch

    gram = w.mT @ w
    if method == "eigh":
        v = torch.linalg.eigh(gram)[1]
    else:
        try:
            v = torch.linalg.eigh(gram.float())[1].double()
        except torch.linalg.LinAlgError:  # float32 LAPACK gives up on a rank-deficient W (disjoint_support_xavier)
            v = torch.linalg.eigh(gram)[1]
        for _ in range(REFINE_STEPS):
            v = _refine(gram, v)
    v = v.flip(-1)  # eigh is ascending
    return torch.linalg.vector_norm(w @ v, dim=-2), v


def clamp_spectrum(w: Tensor, sigma0: Tensor, method: str = "eigh", device: str | torch.device | None = None
                   ) -> Tensor:
    """U·diag(σ⁽⁰⁾)·Vᵀ for W = U·diag(σ)·Vᵀ, for a batch: w [..., D, D] (any float dtype), sigma0
    [..., D] descending → [..., D, D] float64 on w's device. One decomposition call for the whole
    batch, in float64 on ``device`` (None: w's device). A matrix with a non-finite entry comes
    back as it is (its run is diverged; the loop marks it at its next check).

    ``svd``: the SVD of W (the clamp before the batched one). ``eigh``: WᵀW = V·diag(σ²)·Vᵀ, then
    U·diag(σ⁽⁰⁾)·Vᵀ = W·V·diag(σ⁽⁰⁾/σ)·Vᵀ (half an SVD's work on the CPU; U needs no sign
    pairing; σᵢ = ‖W·vᵢ‖). ``refine``: the same from a float32 eigh refined by ``REFINE_STEPS`` float64
    Ogita–Aishima steps (matrix products: a GPU runs them batched, where cuSOLVER loops over
    256×256 matrices one solver call each)."""
    import torch

    if method not in METHODS:
        raise ValueError(f"k_spectrum_clamp: unknown method {method!r}; valid: {', '.join(METHODS)}")
    home = w.device
    w64 = w.detach().to(device=device or home, dtype=torch.float64)
    sigma0 = sigma0.to(device=w64.device, dtype=torch.float64)
    finite = torch.isfinite(w64).flatten(-2).all(-1)[..., None, None]  # (..., 1, 1)
    w64 = torch.where(finite, w64, 0.0)
    if method == "svd":
        u, _, vh = torch.linalg.svd(w64, full_matrices=False)
        clamped = (u * sigma0[..., None, :]) @ vh
    else:
        sigma, v = _right_vectors(w64, method)
        scale = torch.where(sigma > 0, sigma0 / torch.where(sigma > 0, sigma, 1.0), 0.0)
        clamped = w64 @ (v * scale[..., None, :]) @ v.mT
    return torch.where(finite, clamped, w.detach().to(clamped)).to(home)


def choose(w: Tensor, sigma0: Tensor, method: str = AUTO, place: str | None = AUTO) -> tuple[str, str | None]:
    """(method, decomposition device) for ``clamp_spectrum`` of w [..., D, D] (sigma0 [..., D]).

    ``method`` and ``place`` as set (``"cpu"``, None: the weights' device), or ``AUTO``: on the CPU,
    eigh there, untimed (the clamp as it always ran there); on another device, the fastest candidate
    on ``CALIBRATION_MATRICES`` of w's own matrices (``fastest``), chosen once per device, width,
    thread count and candidate set, and kept for the process."""
    import torch

    methods = METHODS if method == AUTO else (method,)
    places: tuple[str | None, ...] = (None, "cpu") if place == AUTO else (place,)
    if len(methods) == 1 and len(places) == 1:
        return methods[0], places[0]
    if w.device.type == "cpu":
        return ("eigh" if method == AUTO else method), None
    key = (str(w.device), w.shape[-1], torch.get_num_threads(), methods, places)
    if key not in _AUTO_CHOICE:
        n = CALIBRATION_MATRICES
        sample = w.detach().reshape(-1, *w.shape[-2:])[:n]
        _AUTO_CHOICE[key] = fastest(sample, sigma0.reshape(-1, sigma0.shape[-1])[:n],
                                    [(m, p) for m in methods for p in places])
    return _AUTO_CHOICE[key]


def chosen(device: str) -> tuple[str, str | None] | None:
    """The last (method, device) ``choose`` timed its way to on ``device`` (None: none yet)."""
    picks = [how for key, how in _AUTO_CHOICE.items() if key[0] == device]
    return picks[-1] if picks else None


def fastest(w: Tensor, sigma0: Tensor, candidates: Sequence[tuple[str, str | None]]) -> tuple[str, str | None]:
    """The candidate (method, device) that clamps w [N, D, D] in the fewest wall seconds, the copies
    to and from the device included: the best of two timed calls after an untimed one (the first
    listed on a tie)."""
    seconds = {c: _seconds(w, sigma0, *c) for c in candidates}
    return min(seconds, key=seconds.__getitem__)


def _seconds(w: Tensor, sigma0: Tensor, method: str, place: str | None) -> float:
    import torch

    def run() -> float:
        if w.device.type == "cuda":
            torch.cuda.synchronize(w.device)
        t0 = time.perf_counter()
        clamp_spectrum(w, sigma0, method, place)
        if w.device.type == "cuda":
            torch.cuda.synchronize(w.device)
        return time.perf_counter() - t0

    run()
    return min(run(), run())


@register
@dataclass
class KSpectrumClamp(Intervention):
    """Keep W_K's initial singular values: after every step W_K ← U·diag(σ⁽⁰⁾)·Vᵀ.

    σ⁽⁰⁾ is recorded per layer in ``setup`` (at initialisation); U, V come from
    the current W_K, so the singular vectors are learned while the spectrum
    stays fixed. The decomposition runs in float64 (``clamp_spectrum``: one call
    for all layers, all members in a pack) and the result is cast back; b_K is
    not touched. σ⁽⁰⁾ travels in the checkpoint. No strength.
    Predicted vs ``none``: attention entropy ↑, logit_std ↓, qk_erank ↑.
    """

    name: ClassVar[str] = "k_spectrum_clamp"
    pack_aware: ClassVar[bool] = True
    graph_safe: ClassVar[bool] = True
    predicted: ClassVar[dict[str, int]] = {"attn_entropy": +1, "logit_std": -1, "qk_erank": +1}
    #: how ``clamp_spectrum`` decomposes (``METHODS``, or ``AUTO``: ``choose``); the same clamp, another cost
    method: ClassVar[str] = AUTO
    #: where: None = the weights' device, "cpu" (one copy there and back per step), or ``AUTO`` (``choose``)
    decomp_device: ClassVar[str | None] = AUTO

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sigma0: Tensor | None = None  # [L, d_model] float64, on the weights' device

    @staticmethod
    def _weights(model: nn.Module) -> list[Tensor]:
        return [block.attn.k_proj.weight for block in model.blocks]

    def setup(self, model: nn.Module) -> None:
        import torch

        with torch.no_grad():
            w = torch.stack(self._weights(model)).double()  # (L, D, D)
            self.sigma0 = torch.linalg.svdvals(w)  # (L, D), descending

    def after_step(self, model: nn.Module) -> None:
        import torch

        if self.sigma0 is None:
            raise RuntimeError("k_spectrum_clamp: after_step called before setup(model)")
        with torch.no_grad():
            weights = self._weights(model)
            w = torch.stack(weights)  # (L, D, D)
            clamped = clamp_spectrum(w, self.sigma0, *choose(w, self.sigma0, self.method, self.decomp_device))
            for w, new in zip(weights, clamped, strict=True):
                w.copy_(new)  # cast back to the parameter's dtype

    @classmethod
    def after_step_packed(cls, members: Sequence[Intervention], params: dict[str, Tensor],
                          models: Sequence[nn.Module]) -> None:
        """The clamp for M members at once: one decomposition call for [M, L, D, D]. A member whose
        W_K is non-finite is left as it is (its loss is non-finite too: it will be marked diverged)."""
        import torch

        if any(iv.sigma0 is None for iv in members):
            raise RuntimeError("k_spectrum_clamp: after_step_packed called before setup(model)")
        with torch.no_grad():
            stacked = [params[f"blocks.{layer}.attn.k_proj.weight"] for layer in range(len(models[0].blocks))]
            sigma0 = torch.stack([iv.sigma0 for iv in members])  # (M, L, D)
            w = torch.stack(stacked, dim=1)  # (M, L, D, D)
            clamped = clamp_spectrum(w, sigma0, *choose(w, sigma0, cls.method, cls.decomp_device))  # (M, L, D, D)
            for layer, weight in enumerate(stacked):
                weight.copy_(clamped[:, layer])

    def state_dict(self) -> dict[str, Any]:
        return {"sigma0": None if self.sigma0 is None else self.sigma0.cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import torch

        sigma0 = state["sigma0"]
        device = self.sigma0.device if self.sigma0 is not None else sigma0.device
        self.sigma0 = sigma0.to(device=device, dtype=torch.float64)
