"""metrics/attention.py: the causal mask and attention statistics against closed forms and a numpy float64 softmax."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import np_effective_rank

from metrics.attention import attention_stats, causal_mask


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


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


def test_causal_mask() -> None:
    m = causal_mask(4)
    assert m.dtype == torch.bool
    assert torch.equal(m, torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool))


@pytest.mark.parametrize("shape", [(3, 4, 4), (1, 2, 4, 5), (2, 1, 1, 3, 3)])
def test_attention_stats_shape_errors(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match=r"\[B, H, T, T\]"):
        attention_stats(torch.zeros(shape))


# -- over a leading item dimension (layers, packed members × layers) --------------------------


def test_batched_attention_stats_equal_todays_per_item_stats() -> None:
    """Item n of the batched statistics is today's attention_stats of scores[n] (to 1e-10), on
    scores from several scales, a zero item (qk_erank 0) and an explicit full mask."""
    from probe_helpers import attention_stats as old_attention_stats

    from metrics.attention import batched_attention_stats

    items = [torch.from_numpy(random_scores(2, 3, 9, seed)).float() for seed in range(3)]
    scores = torch.stack([*items, torch.zeros(2, 3, 9, 9)])
    for mask in (None, torch.ones(9, 9, dtype=torch.bool)):
        got = batched_attention_stats(scores, mask)
        assert list(got) == ["qk_erank", "attn_entropy", "attn_top1", "attn_erank", "logit_std"]
        for n in range(scores.shape[0]):
            want = old_attention_stats(scores[n], mask)
            for key, value in want.items():
                assert got[key].shape == (4,) and got[key].dtype == torch.float64
                assert got[key][n].item() == pytest.approx(value, rel=1e-10, abs=1e-14), (n, key)
    assert got["qk_erank"][3].item() == 0.0


@pytest.mark.parametrize("shape", [(3, 4, 4), (2, 1, 3, 3), (1, 2, 2, 4, 5)])
def test_batched_attention_stats_shape_errors(shape: tuple[int, ...]) -> None:
    from metrics.attention import batched_attention_stats

    with pytest.raises(ValueError, match=r"\[N, B, H, T, T\]"):
        batched_attention_stats(torch.zeros(shape))
