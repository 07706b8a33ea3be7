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


# -- leading item dimensions and where the SVDs run -----------------------------------------


def test_weight_functions_take_leading_dimensions_item_by_item() -> None:
    """head_effective_rank, frobenius_norm, qk_alignment(_per_head) over [N, D_out, D_in] equal
    today's one-matrix functions item by item (to 1e-12), a zero row and a zero head included."""
    import probe_helpers as old

    from metrics.spectra import frobenius_norm, head_effective_rank

    wq = torch.from_numpy(rng(1).standard_normal((3, 12, 6))).float()
    wk = torch.from_numpy(rng(2).standard_normal((3, 12, 6))).float()
    wk[1, 4] = 0.0
    wq[2, 3:6] = 0.0  # head 1 of item 2: NaN alignment, erank 0
    got = {"head_erank": head_effective_rank(wq, 4), "norm": frobenius_norm(wq),
           "align": qk_alignment(wq, wk), "align_head": qk_alignment_per_head(wq, wk, 4)}
    assert [v.shape for v in got.values()] == [(3,), (3,), (3,), (3, 4)]
    for n in range(3):
        want = {"head_erank": old.head_effective_rank(wq[n], 4), "norm": old.frobenius_norm(wq[n]),
                "align": old.qk_alignment(wq[n], wk[n]), "align_head": old.qk_alignment_per_head(wq[n], wk[n], 4)}
        for key, value in want.items():
            torch.testing.assert_close(got[key][n], value, rtol=1e-12, atol=0, equal_nan=True, msg=key)
    assert math.isnan(got["align_head"][2, 1]) and not math.isnan(got["align"][2])


def test_batched_pooled_participation_ratio_is_per_item() -> None:
    from metrics.spectra import batched_pooled_participation_ratio, pooled_participation_ratio

    x = torch.from_numpy(rng(3).standard_normal((4, 2, 5, 3)))
    got = batched_pooled_participation_ratio(x)
    assert got.shape == (4,)
    for n in range(4):
        assert got[n].item() == pytest.approx(pooled_participation_ratio(x[n]).item(), rel=1e-12)


@pytest.mark.parametrize("workers", [2, 3, 40])
def test_cpu_svdvals_on_threads_equal_one_call(workers: int) -> None:
    """Split over a thread pool (each chunk on its own thread, LAPACK on one thread meanwhile),
    the singular values are those of one torch call, bit for bit; torch's thread count is restored."""
    import threading

    import metrics.spectra as spectra

    m = torch.from_numpy(rng(4).standard_normal((3, 5, 7, 6)))
    threads, calls = torch.get_num_threads(), []
    real = torch.linalg.svdvals

    def recorded(x):
        calls.append((threading.current_thread().name.split("_")[0], torch.get_num_threads(), x.shape[0]))
        return real(x)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.linalg, "svdvals", recorded)
        got = spectra.cpu_svdvals(m, workers)
    assert torch.equal(got, real(m)) and got.shape == (3, 5, 6)
    sizes = [len(c) for c in torch.arange(15).tensor_split(min(workers, 15))]  # one chunk per worker
    assert sorted(calls) == sorted(("svdvals", 1, n) for n in sizes)
    assert torch.get_num_threads() == threads


def test_svdvals_runs_on_the_device_decompositions_on_names() -> None:
    """The meta device stands for another device: the SVD runs there, in float64."""
    from metrics.spectra import decompositions_on, svdvals

    m = torch.ones(2, 3, 4)
    assert svdvals(m).device.type == "cpu"
    with decompositions_on("meta"):
        s = svdvals(m)
        assert s.device.type == "meta" and s.dtype == torch.float64 and s.shape == (2, 3)
        with decompositions_on(None):
            assert svdvals(m).device.type == "cpu"
    assert svdvals(m).device.type == "cpu"
