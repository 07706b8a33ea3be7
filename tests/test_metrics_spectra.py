"""metrics/spectra.py: participation ratio, effective rank and Q/K alignment against closed forms and numpy float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import np_effective_rank, np_participation_ratio

from metrics.spectra import effective_rank, participation_ratio, qk_alignment, qk_alignment_per_head


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def orthonormal_rows(r: int, d: int, seed: int = 0) -> np.ndarray:
    q, _ = np.linalg.qr(rng(seed).standard_normal((d, r)))
    return q.T  # [r, d], orthonormal rows


def equal_variance_uncorrelated(n: int, r: int, seed: int = 0) -> np.ndarray:
    """[n, r] centred columns, mutually orthogonal, of equal norm: sample covariance ∝ I exactly."""
    z = rng(seed).standard_normal((n, r))
    z -= z.mean(0)
    q, _ = np.linalg.qr(z)
    return q * 3.0


# -- participation ratio -------------------------------------------------------------------


def test_pr_of_isotropic_gaussian_is_d() -> None:
    d = 16
    x = torch.from_numpy(rng(1).standard_normal((20_000, d)))
    assert participation_ratio(x).item() == pytest.approx(d, rel=0.05)
    assert participation_ratio(x.float()).dtype == torch.float64


@pytest.mark.parametrize("r", [1, 3, 5])
def test_pr_of_rank_r_data(r: int) -> None:
    n, d = 400, 24
    # equal-variance orthogonal directions: exactly r
    x = equal_variance_uncorrelated(n, r, seed=r) @ orthonormal_rows(r, d, seed=r)
    assert participation_ratio(torch.from_numpy(x)).item() == pytest.approx(r, rel=1e-9)
    # any rank-r data: at most r
    y = rng(r).standard_normal((n, r)) @ rng(r + 10).standard_normal((r, d))
    assert 1.0 - 1e-9 <= participation_ratio(torch.from_numpy(y)).item() <= r + 1e-9
    assert participation_ratio(torch.from_numpy(y)).item() == pytest.approx(np_participation_ratio(y), rel=1e-9)


def test_pr_of_one_direction_is_one() -> None:
    z = rng(2).standard_normal((300, 1))
    v = rng(3).standard_normal((1, 10))
    assert participation_ratio(torch.from_numpy(z @ v + 5.0)).item() == pytest.approx(1.0, abs=1e-9)


def test_pr_matches_numpy_and_is_centred_and_scale_free() -> None:
    x = rng(4).standard_normal((200, 12)) @ rng(5).standard_normal((12, 12))
    ref = np_participation_ratio(x)
    t = torch.from_numpy(x)
    assert participation_ratio(t).item() == pytest.approx(ref, rel=1e-10)
    shifted = t + torch.from_numpy(rng(6).standard_normal(12)) * 100  # a mean offset does not count
    assert participation_ratio(shifted).item() == pytest.approx(ref, rel=1e-8)
    assert participation_ratio(t * 7.5).item() == pytest.approx(ref, rel=1e-10)


def test_pr_with_fewer_vectors_than_dimensions_uses_gram_and_matches_numpy() -> None:
    n, d = 10, 50
    x = rng(7).standard_normal((n, d)) * np.linspace(0.1, 3.0, d)
    ref = np_participation_ratio(x)  # eigenvalues of the full D×D covariance
    assert participation_ratio(torch.from_numpy(x)).item() == pytest.approx(ref, rel=1e-10)
    assert participation_ratio(torch.from_numpy(x)).item() <= n - 1 + 1e-9  # centred: rank ≤ N−1


def test_pr_is_batched_over_leading_dims() -> None:
    x = torch.from_numpy(rng(8).standard_normal((3, 2, 40, 6)) * rng(9).uniform(0.1, 2.0, (3, 2, 1, 6)))
    out = participation_ratio(x)
    assert out.shape == (3, 2)
    for i in range(3):
        for j in range(2):
            assert out[i, j].item() == pytest.approx(np_participation_ratio(x[i, j].numpy()), rel=1e-10)
    assert len(set(out.flatten().tolist())) == 6  # items really differ


def test_pr_shape_errors() -> None:
    with pytest.raises(ValueError, match=r"\[\.\.\., N, D\]"):
        participation_ratio(torch.zeros(5))
    with pytest.raises(ValueError, match="N=1"):
        participation_ratio(torch.zeros(1, 5))


# -- effective rank ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 4, 9])
def test_erank_of_identity_is_n(n: int) -> None:
    assert effective_rank(torch.eye(n)).item() == pytest.approx(n, rel=1e-12)
    assert effective_rank(3.0 * torch.eye(n)).item() == pytest.approx(n, rel=1e-12)


def test_erank_closed_forms() -> None:
    u, v = torch.randn(7, 1, dtype=torch.float64), torch.randn(1, 5, dtype=torch.float64)
    assert effective_rank(u @ v).item() == pytest.approx(1.0, abs=1e-6)
    assert effective_rank(torch.zeros(4, 6)).item() == 0.0  # defined as 0
    assert effective_rank(torch.diag(torch.tensor([2.0, 2.0, 0.0, 0.0]))).item() == pytest.approx(2.0)
    # singular values (3, 1): p = (3/4, 1/4)
    p = np.array([0.75, 0.25])
    expected = math.exp(-(p * np.log(p)).sum())
    assert effective_rank(torch.diag(torch.tensor([3.0, -1.0]))).item() == pytest.approx(expected, rel=1e-12)


def test_erank_is_batched() -> None:
    m = torch.stack([torch.eye(4), torch.ones(4, 4), torch.zeros(4, 4)])  # [3, 4, 4]
    out = effective_rank(m)
    assert out.shape == (3,) and out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor([4.0, 1.0, 0.0], dtype=torch.float64))
    assert effective_rank(m.view(3, 1, 4, 4)).shape == (3, 1)


@pytest.mark.parametrize("shape", [(8, 8), (5, 12), (12, 5)])
def test_erank_matches_numpy_svd(shape: tuple[int, int]) -> None:
    m = rng(10).standard_normal(shape) * rng(11).uniform(0.01, 3.0, shape[1])
    value = effective_rank(torch.from_numpy(m).float()).item()
    assert value == pytest.approx(np_effective_rank(m), rel=1e-5)
    assert 1.0 <= value <= min(shape)


def test_erank_shape_error() -> None:
    with pytest.raises(ValueError, match=r"\[\.\.\., R, C\]"):
        effective_rank(torch.ones(3))


# -- Q/K alignment ---------------------------------------------------------------------------


def np_alignment(wq: np.ndarray, wk: np.ndarray) -> float:
    cos = [abs(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))
           for a, b in zip(wq, wk, strict=True) if np.linalg.norm(a) > 0 and np.linalg.norm(b) > 0]
    return float(np.mean(cos))


def test_alignment_closed_forms() -> None:
    w = torch.randn(16, 16, dtype=torch.float64)
    assert qk_alignment(w, w.clone()).item() == pytest.approx(1.0, abs=1e-12)
    assert qk_alignment(w, -2.0 * w).item() == pytest.approx(1.0, abs=1e-12)  # |cos|
    cols = torch.randperm(16)
    wq, wk = w.clone(), w.clone()
    wq[:, cols[:8]] = 0
    wk[:, cols[8:]] = 0
    assert qk_alignment(wq, wk).item() == 0.0


def test_alignment_matches_numpy() -> None:
    wq, wk = rng(12).standard_normal((32, 20)), rng(13).standard_normal((32, 20))
    wk[:5] += 3 * wq[:5]  # some rows aligned, so the value is not just the random baseline
    value = qk_alignment(torch.from_numpy(wq).float(), torch.from_numpy(wk).float()).item()
    assert value == pytest.approx(np_alignment(wq, wk), rel=1e-6)


def test_alignment_skips_zero_rows() -> None:
    wq, wk = rng(14).standard_normal((10, 6)), rng(15).standard_normal((10, 6))
    wq[3] = 0
    wk[7] = 0
    value = qk_alignment(torch.from_numpy(wq), torch.from_numpy(wk)).item()
    assert value == pytest.approx(np_alignment(wq, wk), rel=1e-12)  # mean over the 8 other rows
    keep = [i for i in range(10) if i not in (3, 7)]
    assert value == pytest.approx(np_alignment(wq[keep], wk[keep]), rel=1e-12)
    assert math.isnan(qk_alignment(torch.zeros(3, 3), torch.ones(3, 3)).item())


def test_alignment_per_head() -> None:
    wq, wk = rng(16).standard_normal((12, 8)), rng(17).standard_normal((12, 8))
    wk[4:8] = wq[4:8]  # head 1 (of 3) is identical
    out = qk_alignment_per_head(torch.from_numpy(wq), torch.from_numpy(wk), n_head=3)
    assert out.shape == (3,)
    for h in range(3):
        rows = slice(4 * h, 4 * (h + 1))
        assert out[h].item() == pytest.approx(np_alignment(wq[rows], wk[rows]), rel=1e-12)
    assert out[1].item() == pytest.approx(1.0)
    # the mean of equal-sized heads is the overall alignment
    assert out.mean().item() == pytest.approx(qk_alignment(torch.from_numpy(wq), torch.from_numpy(wk)).item())
    with pytest.raises(ValueError, match="n_head=5"):
        qk_alignment_per_head(torch.from_numpy(wq), torch.from_numpy(wk), n_head=5)


def test_alignment_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="differ"):
        qk_alignment(torch.ones(4, 4), torch.ones(4, 5))
