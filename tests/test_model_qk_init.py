"""model/qk_init.py (SPEC §1.1): the three Q/K regimes at d_model 256, NanoGPT init, determinism."""

from __future__ import annotations

import math
from functools import cache

import pytest
import torch

from metrics.spectra import qk_alignment
from model.gpt import GPT, GPTConfig
from model.qk_init import QK_INITS, build_model, init_weights

D = 256
N_LAYER = 4
XAVIER_A = math.sqrt(6.0 / (D + D))


def config(n_layer: int = N_LAYER) -> GPTConfig:
    return GPTConfig(vocab_size=64, n_layer=n_layer, n_head=4, d_model=D, d_mlp=1024, context=32)


@cache
def model(qk_init: str, seed: int = 0) -> GPT:
    """Cached: callers must not modify the returned model."""
    return build_model(config(), qk_init, seed)


def qk(m: GPT, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    attn = m.blocks[layer].attn
    return attn.q_proj.weight.detach(), attn.k_proj.weight.detach()


def column_support(w: torch.Tensor) -> set[int]:
    return set(torch.nonzero(w.abs().sum(0) > 0).flatten().tolist())


def test_qk_identical_alignment_is_one_and_k_is_a_separate_copy() -> None:
    m = build_model(config(), "qk_identical", 0)
    for layer in range(N_LAYER):
        attn = m.blocks[layer].attn
        wq, wk = attn.q_proj.weight, attn.k_proj.weight
        assert torch.equal(wq, wk)
        assert wk is not wq and wk.data_ptr() != wq.data_ptr()
        assert qk_alignment(wq.detach(), wk.detach()).item() == pytest.approx(1.0, abs=1e-12)
    # a separate parameter: changing K leaves Q alone
    attn = m.blocks[0].attn
    q_before = attn.q_proj.weight.detach().clone()
    with torch.no_grad():
        attn.k_proj.weight.add_(1.0)
    assert torch.equal(attn.q_proj.weight, q_before)
    # layers differ from one another (one generator, advancing)
    assert not torch.equal(qk(m, 0)[0], qk(m, 1)[0])


def test_disjoint_support_alignment_is_exactly_zero() -> None:
    m = model("disjoint_support_xavier")
    for layer in range(N_LAYER):
        wq, wk = qk(m, layer)
        assert qk_alignment(wq, wk).item() == 0.0
        assert torch.all((wq * wk).sum(-1) == 0)


@pytest.mark.parametrize("qk_init", [n for n, r in QK_INITS.items() if r.initial_alignment is not None])
def test_a_declared_initial_alignment_is_the_measured_one(qk_init: str) -> None:
    """``initial_alignment`` (the scorecard's sanity checks rest on it) is what the weights show."""
    m = model(qk_init)
    for layer in range(N_LAYER):
        assert qk_alignment(*qk(m, layer)).item() == pytest.approx(QK_INITS[qk_init].initial_alignment, abs=1e-6)


def test_disjoint_supports_partition_the_input_columns() -> None:
    m = model("disjoint_support_xavier")
    supports = []
    for layer in range(N_LAYER):
        wq, wk = qk(m, layer)
        s_q, s_k = column_support(wq), column_support(wk)
        assert len(s_q) == len(s_k) == D // 2
        assert s_q.isdisjoint(s_k)
        assert s_q | s_k == set(range(D))
        # inside its support each matrix is dense (no further zeros)
        assert torch.all(wq[:, sorted(s_q)] != 0) and torch.all(wk[:, sorted(s_k)] != 0)
        supports.append(frozenset(s_q))
    assert len(set(supports)) == N_LAYER  # a fresh partition per layer


def mean_sq_norm(w: torch.Tensor, n: int = 4000, seed: int = 0) -> float:
    """Monte Carlo E‖Wx‖² over n draws of x ~ N(0, I) (relative error ~ sqrt(2/D)/sqrt(n) ≈ 0.1 %)."""
    x = torch.randn(n, w.shape[1], generator=torch.Generator().manual_seed(seed))
    return (x @ w.T).double().pow(2).sum(-1).mean().item()


def test_disjoint_matrix_keeps_the_dense_xavier_output_energy() -> None:
    dense = [mean_sq_norm(w) for layer in range(N_LAYER) for w in qk(model("independent_xavier"), layer)]
    sparse = [mean_sq_norm(w) for layer in range(N_LAYER) for w in qk(model("disjoint_support_xavier"), layer)]
    ref = sum(dense) / len(dense)
    assert ref == pytest.approx(D * D * XAVIER_A**2 / 3, rel=0.05)  # ‖W‖_F² of a dense xavier matrix
    for value in sparse:
        assert value == pytest.approx(ref, rel=0.10)  # without the √2 this would be ~0.5


@pytest.mark.parametrize("qk_init", sorted(QK_INITS))
def test_xavier_bounds_are_respected(qk_init: str) -> None:
    bound = XAVIER_A * (math.sqrt(2.0) if qk_init == "disjoint_support_xavier" else 1.0)
    m = model(qk_init)
    largest = 0.0
    for layer in range(N_LAYER):
        for w in qk(m, layer):
            assert w.abs().max().item() <= bound * (1 + 1e-6)
            largest = max(largest, w.abs().max().item())
            nonzero = w[w != 0]
            assert abs(nonzero.mean().item()) < 0.01 * bound
    assert largest > 0.99 * bound  # the bound is reached: the range is not narrower than xavier


@pytest.mark.parametrize("qk_init", sorted(QK_INITS))
def test_all_biases_start_at_zero_and_layernorms_at_identity(qk_init: str) -> None:
    m = model(qk_init)
    for name, p in m.named_parameters():
        if name.endswith(".bias") and "ln" not in name:
            assert torch.all(p == 0), name
    for block in m.blocks:
        assert torch.all(block.attn.q_proj.bias == 0) and torch.all(block.attn.k_proj.bias == 0)
        for ln in (block.ln1, block.ln2):
            assert torch.all(ln.weight == 1) and torch.all(ln.bias == 0)
    assert torch.all(m.ln_f.weight == 1) and torch.all(m.ln_f.bias == 0)


def test_independent_xavier_alignment_matches_the_random_baseline() -> None:
    expected = math.sqrt(2.0 / (math.pi * D))
    assert expected == pytest.approx(0.0499, abs=5e-5)
    m = model("independent_xavier")
    values = [qk_alignment(*qk(m, layer)).item() for layer in range(N_LAYER)]
    assert sum(values) / N_LAYER == pytest.approx(0.0499, abs=0.005)
    for v in values:
        assert v == pytest.approx(expected, abs=0.012)  # ~5 sd of one layer's mean over 256 rows
    # independent draws: not a copy, not disjoint
    wq, wk = qk(m, 0)
    assert not torch.equal(wq, wk) and torch.all(wq != 0) and torch.all(wk != 0)


@pytest.mark.parametrize("qk_init", sorted(QK_INITS))
def test_same_regime_depth_seed_is_bit_identical(qk_init: str) -> None:
    cfg = config(n_layer=2)
    torch.manual_seed(1)  # the global RNG must not matter
    a = build_model(cfg, qk_init, 7).state_dict()
    torch.manual_seed(2)
    torch.randn(100)
    b = build_model(cfg, qk_init, 7).state_dict()
    c = build_model(cfg, qk_init, 8).state_dict()
    assert a.keys() == b.keys() == c.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    for name in ("tok_emb.weight", "blocks.0.attn.q_proj.weight", "blocks.1.attn.k_proj.weight",
                 "blocks.1.mlp.fc.weight"):
        assert not torch.equal(a[name], c[name]), name


def test_regimes_differ_for_the_same_seed() -> None:
    a, b = model("independent_xavier"), model("qk_identical")
    assert not torch.equal(qk(a, 0)[1], qk(b, 0)[1])


def test_unknown_init_names_it_and_the_valid_ones() -> None:
    for call in (lambda: build_model(config(1), "orthogonal", 0),
                 lambda: init_weights(GPT(config(1)), "orthogonal", 0)):
        with pytest.raises(ValueError) as err:
            call()
        message = str(err.value)
        assert "orthogonal" in message
        for name in QK_INITS:
            assert name in message


def test_nanogpt_init_stds() -> None:
    m = model("independent_xavier")
    resid = 0.02 / math.sqrt(2 * N_LAYER)
    assert resid == pytest.approx(0.00707, abs=1e-5)
    expected = {"tok_emb.weight": 0.02, "pos_emb.weight": 0.02}
    for i in range(N_LAYER):
        expected |= {
            f"blocks.{i}.attn.v_proj.weight": 0.02,
            f"blocks.{i}.mlp.fc.weight": 0.02,
            f"blocks.{i}.attn.out_proj.weight": resid,
            f"blocks.{i}.mlp.proj.weight": resid,
        }
    params = dict(m.named_parameters())
    for name, std in expected.items():
        p = params[name].detach()
        assert p.std().item() == pytest.approx(std, rel=0.05), name
        assert abs(p.mean().item()) < 0.05 * std, name
    # Q/K are not NanoGPT-normal: their std is xavier's a/sqrt(3)
    assert params["blocks.0.attn.q_proj.weight"].std().item() == pytest.approx(XAVIER_A / math.sqrt(3), rel=0.05)
