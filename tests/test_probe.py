"""metrics/probe.py (SPEC §4.1): the layer probe on a tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from metrics.probe import probe_layers
from model.corpus import probe_batch
from sweep.schema import LAYER_METRICS
from tests.helpers import (
    CONTEXT,
    np_effective_rank,
    np_participation_ratio,
    tiny_corpus,
    tiny_model,
)


def tokens() -> torch.Tensor:
    return probe_batch(tiny_corpus(), 4, CONTEXT)


def trained_looking_model(qk_init: str = "independent_xavier"):
    """Init plus non-zero q/k biases and a sharper Q, so no column sits at a trivial value."""
    model = tiny_model(qk_init, seed=3)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(3.0)
            block.attn.q_proj.bias.copy_(0.3 * torch.randn(32, generator=gen))
            block.attn.k_proj.bias.copy_(0.3 * torch.randn(32, generator=gen))
    return model


def test_one_row_per_layer_with_every_column_in_bounds() -> None:
    model = trained_looking_model()
    cfg = model.cfg
    rows = probe_layers(model, tokens())
    assert len(rows) == cfg.n_layer
    T = CONTEXT
    for layer, row in enumerate(rows):
        assert row["layer"] == layer
        missing = set(LAYER_METRICS) - set(row)
        assert not missing, missing
        for c in LAYER_METRICS:
            assert isinstance(row[c], float) and math.isfinite(row[c]), c
        for c in ("pr_q", "pr_k"):
            assert 1.0 <= row[c] <= cfg.d_model
        assert row["pr_q_minus_pr_k"] == row["pr_q"] - row["pr_k"]
        assert 1.0 <= row["qk_erank"] <= min(cfg.d_head, T) + 1e-9
        assert 1.0 <= row["attn_erank"] <= T + 1e-9
        assert 0.0 <= row["attn_entropy"] <= math.log(T)
        assert 0.0 < row["attn_top1"] <= 1.0
        assert 0.0 <= row["qk_alignment"] <= 1.0
        assert 0.0 < row["logit_std"]
        for c in ("wq_erank", "wk_erank"):
            assert 1.0 <= row[c] <= cfg.d_model
        for c in ("wq_erank_head", "wk_erank_head"):
            assert 1.0 <= row[c] <= cfg.d_head
        assert row["wq_norm"] > 0 and row["wk_norm"] > 0
    assert rows[0]["pr_q"] != rows[1]["pr_q"]  # layers measured separately


def test_probe_is_deterministic() -> None:
    model = trained_looking_model()
    assert probe_layers(model, tokens()) == probe_layers(model, tokens())


@pytest.mark.parametrize("training", [True, False])
def test_probe_runs_in_eval_mode_and_restores_the_mode(training: bool) -> None:
    model = tiny_model().train(training)
    seen = []
    handle = model.blocks[0].register_forward_hook(lambda module, args, out: seen.append(module.training))
    try:
        probe_layers(model, tokens())
    finally:
        handle.remove()
    assert seen == [False]
    assert model.training is training
    assert all(m.training is training for m in model.modules())


def test_probe_restores_the_mode_after_an_error() -> None:
    model = tiny_model().train()
    with pytest.raises(ValueError, match="exceeds context"):
        probe_layers(model, torch.zeros(1, CONTEXT + 1, dtype=torch.int64))
    assert model.training


def test_columns_match_a_float64_reference() -> None:
    model = trained_looking_model()
    idx = tokens()
    rows = probe_layers(model, idx)
    _, _, traces = model.probe(idx)
    B, T = idx.shape
    H, dh = model.cfg.n_head, model.cfg.d_head
    # the trace's x is LN1 of the residual stream entering each block: recompute it
    with torch.no_grad():
        resid = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
        for block, tr in zip(model.blocks, traces, strict=True):
            torch.testing.assert_close(tr.x, block.ln1(resid))
            resid = block(resid)
    for layer, (block, tr, row) in enumerate(zip(model.blocks, traces, rows, strict=True)):
        attn = block.attn
        x = tr.x.double().numpy().reshape(B * T, -1)  # LN1(residual), all B·T tokens
        wq, bq = attn.q_proj.weight.detach().double().numpy(), attn.q_proj.bias.detach().double().numpy()
        wk, bk = attn.k_proj.weight.detach().double().numpy(), attn.k_proj.bias.detach().double().numpy()
        q, k = x @ wq.T + bq, x @ wk.T + bk  # [B·T, d_model], heads concatenated
        assert row["pr_q"] == pytest.approx(np_participation_ratio(q), rel=1e-4), layer
        assert row["pr_k"] == pytest.approx(np_participation_ratio(k), rel=1e-4), layer
        # scores per (b, h) from the same float64 q and k
        qh = q.reshape(B, T, H, dh).transpose(0, 2, 1, 3)
        kh = k.reshape(B, T, H, dh).transpose(0, 2, 1, 3)
        s = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(dh)
        qk_erank = np.mean([np_effective_rank(s[b, h]) for b in range(B) for h in range(H)])
        assert row["qk_erank"] == pytest.approx(qk_erank, rel=1e-4)
        tril = np.tril(np.ones((T, T), bool))
        logit_std = np.mean([np.std(s[b, h][tril]) for b in range(B) for h in range(H)])
        assert row["logit_std"] == pytest.approx(logit_std, rel=1e-4)
        # weight columns
        assert row["wq_norm"] == pytest.approx(np.linalg.norm(wq), rel=1e-10)
        assert row["wk_norm"] == pytest.approx(np.linalg.norm(wk), rel=1e-10)
        assert row["wq_erank"] == pytest.approx(np_effective_rank(wq), rel=1e-5)
        head_erank = np.mean([np_effective_rank(wk[h * dh:(h + 1) * dh]) for h in range(H)])
        assert row["wk_erank_head"] == pytest.approx(head_erank, rel=1e-5)
        cos = np.abs((wq * wk).sum(1)) / (np.linalg.norm(wq, axis=1) * np.linalg.norm(wk, axis=1))
        assert row["qk_alignment"] == pytest.approx(cos.mean(), rel=1e-10)


def test_qk_identical_model_has_equal_q_and_k_geometry() -> None:
    model = tiny_model("qk_identical", seed=4)
    for row in probe_layers(model, tokens()):
        assert row["qk_alignment"] == pytest.approx(1.0, abs=1e-12)
        assert row["pr_q"] == row["pr_k"] and row["pr_q_minus_pr_k"] == 0.0
        assert row["wq_erank"] == row["wk_erank"] and row["wq_norm"] == row["wk_norm"]
