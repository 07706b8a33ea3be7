"""metrics/spectra.py and metrics/attention.py (SPEC §4): closed forms and float64 numpy references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from metrics.attention import attention_stats, causal_mask, causal_scores
from metrics.spectra import effective_rank, participation_ratio, qk_alignment, qk_alignment_per_head
from tests.helpers import np_effective_rank, np_participation_ratio


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


# -- attention statistics --------------------------------------------------------------------


def np_causal_softmax(s: np.ndarray) -> np.ndarray:
    t = s.shape[-1]
    masked = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    e = np.exp(masked - masked.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_uniform_attention_closed_forms() -> None:
    B, H, T = 2, 3, 8
    stats = attention_stats(torch.zeros(B, H, T, T))
    # row t attends uniformly to t+1 keys: entropy log(t+1), top-1 1/(t+1)
    expected_entropy = (math.log(1) + math.log(2) + math.log(3) + math.log(4) + math.log(5)
                        + math.log(6) + math.log(7) + math.log(8)) / 8  # = log(8!)/8
    assert expected_entropy == pytest.approx(math.log(40320) / 8)
    expected_top1 = (1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5 + 1 / 6 + 1 / 7 + 1 / 8) / 8
    assert stats["attn_entropy"] == pytest.approx(expected_entropy, rel=1e-12)
    assert stats["attn_top1"] == pytest.approx(expected_top1, rel=1e-12)
    assert stats["logit_std"] == 0.0
    assert stats["qk_erank"] == 0.0  # S is the zero matrix
    a = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    assert stats["attn_erank"] == pytest.approx(np_effective_rank(a), rel=1e-10)


def test_full_mask_uniform_attention_has_entropy_log_t() -> None:
    T = 6
    stats = attention_stats(torch.zeros(1, 2, T, T), mask=torch.ones(T, T, dtype=torch.bool))
    assert stats["attn_entropy"] == pytest.approx(math.log(T), rel=1e-12)
    assert stats["attn_top1"] == pytest.approx(1 / T, rel=1e-12)
    assert stats["attn_erank"] == pytest.approx(1.0, rel=1e-9)  # all rows equal: rank one


def test_one_hot_attention() -> None:
    B, H, T = 2, 2, 10
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(B, H, T, T, generator=gen)
    for t in range(T):
        j = torch.randint(t + 1, (B, H), generator=gen)  # an allowed key per row
        scores[..., t, :].scatter_(-1, j[..., None], 1e4)
    scores[..., 0, 5] = 1e6  # a huge logit on a *masked* key must not count
    stats = attention_stats(scores)
    assert stats["attn_entropy"] == pytest.approx(0.0, abs=1e-9)
    assert stats["attn_top1"] == pytest.approx(1.0, abs=1e-9)


def random_scores(B: int = 2, H: int = 3, T: int = 7, seed: int = 0) -> np.ndarray:
    return rng(seed).standard_normal((B, H, T, T)) * rng(seed + 1).uniform(0.5, 3.0, (B, H, 1, 1))


def test_attention_stats_match_numpy() -> None:
    s = random_scores()
    B, H, T, _ = s.shape
    stats = attention_stats(torch.from_numpy(s).float())
    tril = np.tril(np.ones((T, T), bool))
    a = np_causal_softmax(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(a > 0, a * np.log(a), 0.0).sum(-1)
    ref = {
        "logit_std": np.mean([np.std(s[b, h][tril], ddof=0) for b in range(B) for h in range(H)]),
        "qk_erank": np.mean([np_effective_rank(s[b, h]) for b in range(B) for h in range(H)]),
        "attn_erank": np.mean([np_effective_rank(a[b, h]) for b in range(B) for h in range(H)]),
        "attn_entropy": ent.mean(),
        "attn_top1": a.max(-1).mean(),
    }
    assert set(stats) == set(ref)
    for key, value in ref.items():
        assert stats[key] == pytest.approx(value, rel=1e-5), key
        assert isinstance(stats[key], float)
    # the masked (upper) entries do not enter logit_std; the unmasked S does enter qk_erank
    s2 = s.copy()
    s2[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] *= 50
    stats2 = attention_stats(torch.from_numpy(s2))
    assert stats2["logit_std"] == pytest.approx(stats["logit_std"], rel=1e-5)
    assert stats2["attn_entropy"] == pytest.approx(stats["attn_entropy"], rel=1e-5)
    assert stats2["qk_erank"] != pytest.approx(stats["qk_erank"], rel=1e-3)


def test_causal_scores_and_mask() -> None:
    q = torch.from_numpy(rng(20).standard_normal((2, 3, 5, 4)))
    k = torch.from_numpy(rng(21).standard_normal((2, 3, 5, 4)))
    expected = np.einsum("bhid,bhjd->bhij", q.numpy(), k.numpy()) / 2.0  # sqrt(d_head = 4)
    np.testing.assert_allclose(causal_scores(q, k).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(causal_scores(q, k, scale=1.0).numpy(), expected * 2.0, rtol=1e-12)
    m = causal_mask(4)
    assert m.dtype == torch.bool
    assert torch.equal(m, torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))


@pytest.mark.parametrize("shape", [(3, 4, 4), (1, 2, 4, 5), (2, 1, 1, 3, 3)])
def test_attention_stats_shape_errors(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"\[B, H, T, T\]"):
        attention_stats(torch.zeros(shape))
