"""metrics/probe.py (SPEC §4.1): the layer probe on a tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers import (
    CONTEXT,
    np_effective_rank,
    np_participation_ratio,
    tiny_corpus,
    tiny_model,
)

from metrics.probe import probe_layers
from model.corpus import probe_batch
from sweep.store.schema import LAYER_METRICS


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


def _hand_written_columns(q, k, scores, wq, wk, n_head: int) -> dict:
    """The columns as metrics/probe.py listed them by hand before ``metrics.columns.LAYER_COLUMNS``
    drove it (q, k: [B, H, T, d_head]; scores: [B, H, T, T]; wq, wk: [D, D])."""
    from metrics.attention import attention_stats
    from metrics.spectra import (
        effective_rank,
        participation_ratio,
        qk_alignment,
        qk_alignment_per_head,
    )

    b, h, t, dh = q.shape
    pr_q = participation_ratio(q.transpose(1, 2).reshape(b * t, h * dh)).item()
    pr_k = participation_ratio(k.transpose(1, 2).reshape(b * t, h * dh)).item()
    d_head = wq.shape[0] // n_head
    return {
        "pr_q": pr_q, "pr_k": pr_k, "pr_q_minus_pr_k": pr_q - pr_k, **attention_stats(scores),
        "wq_erank": effective_rank(wq).item(),
        "wk_erank": effective_rank(wk).item(),
        "wq_erank_head": effective_rank(wq.reshape(n_head, d_head, -1)).mean().item(),
        "wk_erank_head": effective_rank(wk.reshape(n_head, d_head, -1)).mean().item(),
        "qk_alignment": qk_alignment(wq, wk).item(),
        "qk_alignment_head": qk_alignment_per_head(wq, wk, n_head).tolist(),
        "wq_norm": wq.double().norm().item(),
        "wk_norm": wk.double().norm().item(),
    }


def test_rows_are_bit_identical_to_the_hand_written_columns() -> None:
    """The store rows of a training run do not change with the vocabulary-driven probe: equal to the
    bit, in the same order (the derived pr_q_minus_pr_k included)."""
    model = trained_looking_model().eval()
    idx = tokens()
    rows = probe_layers(model, idx)
    with torch.no_grad():
        _, _, traces = model.probe(idx)
        for layer, (block, tr, row) in enumerate(zip(model.blocks, traces, rows, strict=True)):
            attn = block.attn
            want = {"layer": layer, **_hand_written_columns(tr.q, tr.k, tr.scores, attn.q_proj.weight,
                                                            attn.k_proj.weight, attn.n_head)}
            assert row == want and list(row) == list(want), layer


def test_a_shared_function_runs_once_per_layer(monkeypatch) -> None:
    """attention_stats fills five columns from one call; each layer calls it once."""
    import metrics.attention

    calls = []
    real = metrics.attention.attention_stats

    def counted(scores: torch.Tensor) -> dict[str, float]:
        calls.append(scores.shape)
        return real(scores)

    monkeypatch.setattr(metrics.attention, "attention_stats", counted)
    rows = probe_layers(tiny_model(), tokens())
    assert len(calls) == len(rows) == 2


def test_qk_identical_model_has_equal_q_and_k_geometry() -> None:
    model = tiny_model("qk_identical", seed=4)
    for row in probe_layers(model, tokens()):
        assert row["qk_alignment"] == pytest.approx(1.0, abs=1e-12)
        assert row["pr_q"] == row["pr_k"] and row["pr_q_minus_pr_k"] == 0.0
        assert row["wq_erank"] == row["wk_erank"] and row["wq_norm"] == row["wk_norm"]


def _hand_head_alignment(wq: np.ndarray, wk: np.ndarray, n_head: int) -> list[float]:
    """Per head: mean over its rows of |cos| between W_Q and W_K rows, zero rows skipped (loops)."""
    d_head = wq.shape[0] // n_head
    out = []
    for h in range(n_head):
        vals = []
        for i in range(h * d_head, (h + 1) * d_head):
            nq, nk = math.sqrt(sum(x * x for x in wq[i])), math.sqrt(sum(x * x for x in wk[i]))
            if nq == 0 or nk == 0:
                continue
            vals.append(abs(sum(a * b for a, b in zip(wq[i], wk[i], strict=True))) / (nq * nk))
        out.append(sum(vals) / len(vals))
    return out


def test_per_head_alignment_on_a_hand_built_pair() -> None:
    """Head 0: W_K rows = ±2·W_Q rows (|cos| 1); head 1: orthogonal rows (0); head 2: 45° rows
    and one zero row that must be skipped (1/√2); head 3: random rows (loop reference)."""
    from metrics.probe import weight_columns
    from metrics.spectra import qk_alignment_per_head

    rng = np.random.default_rng(0)
    n_head, d_head, d_in = 4, 3, 6
    wq = rng.normal(size=(n_head * d_head, d_in))
    wk = rng.normal(size=(n_head * d_head, d_in))
    wk[0:3] = 2.0 * wq[0:3] * np.array([[1.0], [-1.0], [1.0]])
    wq[3:6], wk[3:6] = np.eye(d_in)[0:3], np.eye(d_in)[3:6]
    wq[6:9], wk[6:9] = np.eye(d_in)[0:3], np.eye(d_in)[0:3] + np.eye(d_in)[3:6]
    wk[8] = 0.0  # a zero row: skipped, not counted as 0
    hand = _hand_head_alignment(wq, wk, n_head)
    assert hand[:3] == pytest.approx([1.0, 0.0, 1 / math.sqrt(2)])
    got = qk_alignment_per_head(torch.tensor(wq), torch.tensor(wk), n_head)
    assert got.tolist() == pytest.approx(hand, rel=1e-12)
    cols = weight_columns(torch.tensor(wq, dtype=torch.float32), torch.tensor(wk, dtype=torch.float32), n_head)
    assert cols["qk_alignment_head"] == pytest.approx(hand, rel=1e-6)
    # the whole-matrix alignment is the mean over the 11 valid rows, not over heads
    assert cols["qk_alignment"] == pytest.approx((3 * 1 + 0 + 2 / math.sqrt(2) + 3 * hand[3]) / 11, rel=1e-6)


def test_probe_rows_carry_per_head_alignment_that_the_store_keeps(tmp_path) -> None:
    from sweep.store import Store
    from sweep.store.schema import run_id

    model = trained_looking_model("qk_identical")
    rows = probe_layers(model, tokens())
    for block, row in zip(model.blocks, rows, strict=True):
        wq = block.attn.q_proj.weight.detach().double().numpy()
        wk = block.attn.k_proj.weight.detach().double().numpy()
        assert row["qk_alignment_head"] == pytest.approx(_hand_head_alignment(wq, wk, block.attn.n_head), rel=1e-6)
        assert np.mean(row["qk_alignment_head"]) == pytest.approx(row["qk_alignment"], rel=1e-6)
    ident = {"sweep": "baseline", "preset": "smoke", "init": "qk_identical", "depth": len(rows), "seed": 1,
             "condition": "none"}
    ident["run_id"] = run_id(*(ident[k] for k in ("sweep", "preset", "init", "depth", "seed", "condition")))
    store = Store(str(tmp_path))
    store.write_layers([{**ident, "epoch": 0, **row, "grad_norm_q": None, "grad_norm_k": None} for row in rows])
    back = store.read("layers")
    for layer, row in enumerate(rows):
        assert list(back.loc[back["layer"] == layer, "qk_alignment_head"].iloc[0]) == pytest.approx(
            row["qk_alignment_head"])



# -- the probe against a naive float64 reference ------------------------------------------


def _erank(m: np.ndarray) -> float:
    s = np.linalg.svd(m, compute_uv=False)
    if s.sum() == 0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def _pr(x: np.ndarray) -> float:
    lam = np.linalg.eigvalsh(np.cov(x, rowvar=False))
    return float(lam.sum() ** 2 / (lam**2).sum())


def _naive_rows(model, tokens: torch.Tensor) -> list[dict[str, float]]:
    with torch.no_grad():
        _, _, traces = model.probe(tokens)
    rows = []
    for block, tr in zip(model.blocks, traces, strict=True):
        attn = block.attn
        H, dh = attn.n_head, attn.d_head
        wq = attn.q_proj.weight.detach().double().numpy()
        wk = attn.k_proj.weight.detach().double().numpy()
        x = tr.x.double().numpy()  # (B, T, D) attention input
        q = x @ wq.T + attn.q_proj.bias.detach().double().numpy()
        k = x @ wk.T + attn.k_proj.bias.detach().double().numpy()
        B, T, D = q.shape
        cols = {n: [] for n in ("qk_erank", "attn_entropy", "attn_top1", "attn_erank", "logit_std")}
        for b in range(B):
            for h in range(H):
                qh, kh = q[b, :, h * dh:(h + 1) * dh], k[b, :, h * dh:(h + 1) * dh]
                s = qh @ kh.T / math.sqrt(dh)
                a = np.zeros_like(s)
                ent, top = [], []
                for t in range(T):
                    z = np.exp(s[t, :t + 1] - s[t, :t + 1].max())
                    a[t, :t + 1] = z / z.sum()
                    nz = a[t, :t + 1][a[t, :t + 1] > 0]
                    ent.append(-(nz * np.log(nz)).sum())
                    top.append(a[t].max())
                cols["qk_erank"].append(_erank(s))
                cols["attn_erank"].append(_erank(a))
                cols["attn_entropy"].append(np.mean(ent))
                cols["attn_top1"].append(np.mean(top))
                cols["logit_std"].append(s[np.tril_indices(T)].std())
        pr_q, pr_k = _pr(q.reshape(B * T, D)), _pr(k.reshape(B * T, D))
        cos = [abs(wq[i] @ wk[i]) / (np.linalg.norm(wq[i]) * np.linalg.norm(wk[i])) for i in range(D)]
        rows.append({
            "pr_q": pr_q, "pr_k": pr_k, "pr_q_minus_pr_k": pr_q - pr_k,
            **{n: float(np.mean(v)) for n, v in cols.items()},
            "wq_erank": _erank(wq), "wk_erank": _erank(wk),
            "wq_erank_head": float(np.mean([_erank(wq[h * dh:(h + 1) * dh]) for h in range(H)])),
            "wk_erank_head": float(np.mean([_erank(wk[h * dh:(h + 1) * dh]) for h in range(H)])),
            "qk_alignment": float(np.mean(cos)),
            "wq_norm": float(np.linalg.norm(wq)), "wk_norm": float(np.linalg.norm(wk)),
        })
    return rows


def test_probe_rows_equal_a_naive_float64_reference() -> None:
    model = tiny_model("independent_xavier", seed=3)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # move off the init so no column sits at a trivial value
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(3.0)
            block.attn.q_proj.bias.copy_(0.3 * torch.randn(block.attn.q_proj.bias.shape, generator=gen))
            block.attn.k_proj.bias.copy_(0.3 * torch.randn(block.attn.k_proj.bias.shape, generator=gen))
    tokens = probe_batch(tiny_corpus(), 3, CONTEXT)
    fast, naive = probe_layers(model, tokens), _naive_rows(model, tokens)
    assert len(fast) == len(naive) == model.cfg.n_layer
    for layer, (f, n) in enumerate(zip(fast, naive, strict=True)):
        assert f["layer"] == layer
        for col, want in n.items():
            # q, k are float32 in the model; the reference recomputes them in float64
            assert f[col] == pytest.approx(want, rel=1e-4, abs=1e-5), (layer, col)
