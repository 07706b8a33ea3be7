"""Spectral summaries of activations and weights (SPEC §4).

Pure functions of tensors: no model, no I/O. Everything accumulates in
float64 so that the numbers do not depend on the training dtype. Each function
is batched over leading dimensions (one value per leading index), which is how
the probe reduces every layer (and every packed member) in one call.

The float64 SVDs (``svdvals``) run on the input's device unless a caller picks
another with ``decompositions_on`` (the probe: the CPU or the model's device,
whichever is faster); the results come back on the input's device.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor

_DECOMPOSE_ON: ContextVar[torch.device | None] = ContextVar("qkgeom_decompose_on", default=None)


def participation_ratio(x: Tensor) -> Tensor:
    """Participation ratio of activation vectors.

    x: [..., N, D] (N vectors of dimension D, batched over leading dims).
    Returns [...] float64: ``(Σλ)² / Σλ²`` over the eigenvalues λ of the centred
    covariance (1/(N−1)); lies in [1, D]. Data with zero variance gives NaN.

    Uses Σλ = tr C and Σλ² = ‖C‖_F², so no eigendecomposition is needed.
    """
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
    """Participation ratio of every vector of ``x`` together. x: [..., D] (e.g. [B, T, D]).

    Returns a float64 scalar: ``participation_ratio`` of the [N, D] matrix of all N vectors.
    """
    return participation_ratio(x.reshape(-1, x.shape[-1]))


def batched_pooled_participation_ratio(x: Tensor) -> Tensor:
    """``pooled_participation_ratio`` of each item. x: [N, ..., D] (e.g. [N, B, T, D]). Returns [N]."""
    return participation_ratio(x.reshape(x.shape[0], -1, x.shape[-1]))


@contextmanager
def decompositions_on(device: torch.device | str | None) -> Iterator[None]:
    """Inside the block, ``svdvals`` (so ``effective_rank``) decomposes on ``device``; None: on
    the input's device. A context variable, so each thread keeps its own."""
    token = _DECOMPOSE_ON.set(None if device is None else torch.device(device))
    try:
        yield
    finally:
        _DECOMPOSE_ON.reset(token)


def svdvals(m: Tensor) -> Tensor:
    """Singular values, descending, in float64. m: [..., R, C] → [..., min(R, C)].

    Computed on the device ``decompositions_on`` names (default: m's device) and returned
    there. On the CPU the batch is spread over ``torch.get_num_threads()`` threads
    (``cpu_svdvals``).
    """
    device = _DECOMPOSE_ON.get() or m.device
    x = m.to(device).to(torch.float64)  # move first: a float32 input crosses at half the bytes
    if device.type == "cpu":
        return cpu_svdvals(x, torch.get_num_threads())
    return torch.linalg.svdvals(x)


def cpu_svdvals(x: Tensor, workers: int) -> Tensor:
    """``torch.linalg.svdvals`` of a CPU batch x [..., R, C] on ``workers`` threads.

    torch's batched CPU SVD runs its batch one matrix after another on one thread (LOG.md,
    a cheap per-epoch probe), and releases the GIL inside LAPACK: contiguous chunks on a thread pool, with
    LAPACK itself held to one thread meanwhile (MKL's own threads on top oversubscribe the
    cores; ``torch.set_num_threads`` is process-wide, so this is for a caller, like the probe,
    that runs no other torch work meanwhile). Each matrix is decomposed by the same call as
    unsplit, so the values are the same.
    """
    flat = x.reshape(-1, *x.shape[-2:])
    workers = min(workers, flat.shape[0])
    if workers <= 1:
        return torch.linalg.svdvals(x)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="svdvals") as pool:
            parts = list(pool.map(torch.linalg.svdvals, flat.tensor_split(workers)))
    finally:
        torch.set_num_threads(previous)
    return torch.cat(parts).reshape(*x.shape[:-2], -1)


def effective_rank(m: Tensor) -> Tensor:
    """Effective rank (Roy & Vetterli 2007) of each matrix.

    m: [..., R, C]. Returns [...] float64: ``exp(−Σ p log p)`` with
    p = σ/Σσ over the singular values σ, in [1, min(R, C)].
    The zero matrix has no spectrum to spread; we define its erank as 0.
    The SVD runs where ``svdvals`` puts it; the result is on m's device.
    """
    if m.dim() < 2:
        raise ValueError(f"effective_rank expects [..., R, C], got shape {tuple(m.shape)}")
    s = svdvals(m)  # [..., min(R, C)]
    total = s.sum(-1, keepdim=True)
    p = s / total.clamp_min(torch.finfo(torch.float64).tiny)
    entropy = -torch.special.xlogy(p, p).sum(-1)  # xlogy gives 0·log 0 = 0
    erank = torch.where(total.squeeze(-1) > 0, entropy.exp(), torch.zeros_like(entropy))
    return erank.to(m.device)


def head_effective_rank(w: Tensor, n_head: int) -> Tensor:
    """Effective rank of each head's rows of a projection, mean over heads.

    w: [..., n_head·d_head, D_in]; head h owns rows ``h*d_head:(h+1)*d_head``. Returns [...]
    float64 (a scalar for one matrix).
    """
    rows, cols = w.shape[-2:]
    return effective_rank(w.reshape(*w.shape[:-2], n_head, rows // n_head, cols)).mean(-1)


def frobenius_norm(w: Tensor) -> Tensor:
    """‖w‖_F in float64. w: [..., R, C]. Returns [...] (a scalar for one matrix)."""
    return w.double().norm(dim=(-2, -1))


def _row_abs_cos(wq: Tensor, wk: Tensor) -> Tensor:
    """|cos| between matching rows; NaN where either row is zero. [..., R]."""
    if wq.shape != wk.shape:
        raise ValueError(f"W_Q and W_K shapes differ: {tuple(wq.shape)} vs {tuple(wk.shape)}")
    wq, wk = wq.to(torch.float64), wk.to(torch.float64)
    nq, nk = wq.norm(dim=-1), wk.norm(dim=-1)
    dot = (wq * wk).sum(-1)
    valid = (nq > 0) & (nk > 0)
    cos = dot.abs() / torch.where(valid, nq * nk, torch.ones_like(dot))
    return torch.where(valid, cos, torch.full_like(cos, float("nan")))


def qk_alignment(wq: Tensor, wk: Tensor) -> Tensor:
    """Q/K alignment: mean over rows i of |cos(W_Q[i,:], W_K[i,:])|.

    wq, wk: [..., D_out, D_in] (PyTorch Linear layout). Rows where either weight is
    zero are skipped. Returns [...] float64 in [0, 1] (NaN if no valid row; a scalar for
    one pair).
    """
    return torch.nanmean(_row_abs_cos(wq, wk), dim=-1)


def qk_alignment_per_head(wq: Tensor, wk: Tensor, n_head: int) -> Tensor:
    """Alignment per head: head h owns rows ``h*d_head:(h+1)*d_head``. wq, wk: [..., D_out,
    D_in]. Returns [..., n_head]."""
    if wq.shape[-2] % n_head:
        raise ValueError(f"{wq.shape[-2]} output rows do not split into n_head={n_head} heads")
    return torch.nanmean(_row_abs_cos(wq, wk).view(*wq.shape[:-2], n_head, -1), dim=-1)
