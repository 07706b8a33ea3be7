"""metrics/probe.py (SPEC §4.1): the layer probe on a tiny model."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch
from helpers import (
    CONTEXT,
    np_effective_rank,
    np_participation_ratio,
    random_tokens,
    tiny_corpus,
    tiny_model,
)
from probe_helpers import old_probe_layers
from probe_pack_helpers import HostReads, assert_rows_equal_to_1e10, random_model

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


def test_a_shared_function_runs_once_per_probe(monkeypatch) -> None:
    """batched_attention_stats fills five columns from one call over every layer."""
    import metrics.attention

    calls = []
    real = metrics.attention.batched_attention_stats

    def counted(scores: torch.Tensor) -> dict[str, torch.Tensor]:
        calls.append(tuple(scores.shape))
        return real(scores)

    monkeypatch.setattr(metrics.attention, "batched_attention_stats", counted)
    model = tiny_model()
    rows = probe_layers(model, tokens())
    cfg = model.cfg
    assert calls == [(cfg.n_layer, 4, cfg.n_head, CONTEXT, CONTEXT)] and len(rows) == cfg.n_layer


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


# -- the batched probe against today's per-layer code -----------------------------------------


SHAPES = [{}, {"n_layer": 3, "n_head": 2}, {"n_layer": 4, "n_head": 8, "d_model": 64}, {"n_layer": 1, "n_head": 1}]


@pytest.mark.parametrize("seed", range(len(SHAPES)))
@pytest.mark.parametrize("decomp_device", ["auto", "cpu", "same"])
def test_batched_probe_equals_todays_per_layer_probe(seed: int, decomp_device: str) -> None:
    model = random_model(seed, **SHAPES[seed])
    idx = random_tokens(3 + seed, CONTEXT - seed, model.cfg.vocab_size, seed=seed)
    assert_rows_equal_to_1e10(probe_layers(model, idx, decomp_device=decomp_device), old_probe_layers(model, idx))


def test_batched_probe_equals_todays_on_edge_cases() -> None:
    """Layer 0: W_Q and its bias zero (q = 0: scores 0, qk_erank 0, pr_q NaN, wq_erank 0, alignment
    NaN); layer 1: one zero row of W_K (skipped by the alignment) and head 2's rows of W_Q zero
    (its alignment NaN, its erank 0); layer 2: untouched."""
    model = random_model(5, n_layer=3)
    dh = model.cfg.d_head
    with torch.no_grad():
        model.blocks[0].attn.q_proj.weight.zero_()
        model.blocks[0].attn.q_proj.bias.zero_()
        model.blocks[1].attn.k_proj.weight[3].zero_()
        model.blocks[1].attn.q_proj.weight[2 * dh:3 * dh].zero_()
    idx = tokens()
    new, old = probe_layers(model, idx), old_probe_layers(model, idx)
    assert new[0]["qk_erank"] == 0.0 and new[0]["wq_erank"] == 0.0 and new[0]["wq_norm"] == 0.0
    assert math.isnan(new[0]["pr_q"]) and math.isnan(new[0]["qk_alignment"])
    assert math.isnan(new[1]["qk_alignment_head"][2]) and not math.isnan(new[1]["qk_alignment"])
    assert_rows_equal_to_1e10(new, old)


def test_chunked_probe_equals_the_one_chunk_probe(monkeypatch) -> None:
    """chunk_bytes for 2 layers' float64 scores: 5 layers in chunks of 2, 2, 1, the same values
    as one chunk, and today's; each chunk one attention call. By default a tiny model is one
    chunk on the CPU, and the paper's 8 layers are 8 (1 layer = 8 MiB of scores)."""
    import metrics.attention
    import metrics.probe as probe
    from metrics.probe import probe_inputs, probe_rows

    calls = []
    real = metrics.attention.batched_attention_stats
    monkeypatch.setattr(metrics.attention, "batched_attention_stats",
                        lambda scores: calls.append(scores.shape[0]) or real(scores))
    model = random_model(2, n_layer=5)
    idx = tokens()
    x = probe_inputs(model, idx)
    per_layer = x.scores[0].numel() * 8
    chunked = probe_rows(x.q, x.k, x.scores, x.wq, x.wk, x.n_head, chunk_bytes=3 * per_layer - 1)
    assert calls == [2, 2, 1]
    whole = probe_rows(x.q, x.k, x.scores, x.wq, x.wk, x.n_head)
    assert calls[3:] == [5]
    assert 16 * 4 * 128 * 128 * 8 == probe.CHUNK_BYTES["cpu"]  # paper width: one layer a chunk
    old = old_probe_layers(model, idx)
    assert_rows_equal_to_1e10([{"layer": i, **r} for i, r in enumerate(chunked)], old)
    assert_rows_equal_to_1e10([{"layer": i, **r} for i, r in enumerate(whole)], old)


def test_every_decomposition_is_one_batched_call(monkeypatch) -> None:
    """Four SVD batches per probe: the scores and the attention matrices of every (layer, b, h),
    W_Q and W_K of every layer together, and every head's rows of both."""
    import metrics.spectra

    shapes = []
    real = metrics.spectra.svdvals
    monkeypatch.setattr(metrics.spectra, "svdvals", lambda m: shapes.append(tuple(m.shape)) or real(m))
    model = random_model(1, n_layer=3)
    L, H, D, dh = 3, model.cfg.n_head, model.cfg.d_model, model.cfg.d_head
    probe_layers(model, tokens())
    assert sorted(shapes) == sorted([(L, 4, H, CONTEXT, CONTEXT)] * 2 + [(2 * L, D, D), (2 * L, H, dh, D)])


def test_the_values_reach_the_host_in_one_read() -> None:
    """No .item() per metric: the probe's one host read is a single .tolist() of every value of
    every layer (today's code read each of its 15 metrics per layer on its own)."""
    from metrics.probe import probe_inputs, probe_rows

    model = random_model(3, n_layer=3)
    x = probe_inputs(model, tokens())
    with HostReads() as mode:
        probe_rows(x.q, x.k, x.scores, x.wq, x.wk, x.n_head)
    assert mode.reads == ["tolist"]
    with HostReads() as mode:
        old_probe_layers(model, tokens())
    assert len(mode.reads) == 3 * 15  # the reference: 14 .item() and one .tolist() per layer


def test_a_per_layer_plugin_metric_sees_one_layer_and_a_batched_one_every_layer() -> None:
    """A LayerMetric with batched=False is called per layer with that layer's tensors (an earlier
    column as a 0-d tensor); one with batched=True once with all of them."""
    from dataclasses import replace as dc_replace

    from metrics import columns
    from metrics.columns import LayerMetric, check_layer_columns

    seen: dict[str, list] = {"per_layer": [], "batched": [], "derived": []}

    def per_layer(q, scores):
        seen["per_layer"].append((tuple(q.shape), tuple(scores.shape)))
        return q.double().abs().mean()

    def batched(wq, n_head):
        seen["batched"].append((tuple(wq.shape), n_head))
        return wq.double().flatten(1).abs().amax(1)

    def derived(pr_q, mine):
        seen["derived"].append((tuple(pr_q.shape), float(mine)))
        return pr_q * mine

    module = type(sys)("probe_plugin_toy")
    module.per_layer, module.batched, module.derived = per_layer, batched, derived
    extra = (LayerMetric("toy_per_layer", "activation", ("q", "scores"), "probe_plugin_toy:per_layer", "toy"),
             LayerMetric("toy_derived", "activation", ("pr_q", "toy_per_layer"), "probe_plugin_toy:derived", "toy"),
             LayerMetric("toy_batched", "weight", ("wq", "n_head"), "probe_plugin_toy:batched", "toy", batched=True))
    model = random_model(4, n_layer=3)
    idx = tokens()
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "probe_plugin_toy", module)
        vocabulary = (*columns.LAYER_COLUMNS, *extra)
        check_layer_columns(vocabulary)
        mp.setattr(columns, "LAYER_COLUMNS", vocabulary)
        rows = probe_layers(model, idx)
    B, T, D, H = idx.shape[0], CONTEXT, model.cfg.d_model, model.cfg.n_head
    assert seen["per_layer"] == [((B, T, D), (B, H, T, T))] * 3
    assert seen["batched"] == [((3, D, D), H)]
    assert [s for s, _ in seen["derived"]] == [()] * 3
    old = old_probe_layers(model, idx)
    for layer, (row, block) in enumerate(zip(rows, model.blocks, strict=True)):
        assert list(row)[:11] == list(old[layer])[:9] + ["toy_per_layer", "toy_derived"]
        assert row["toy_derived"] == pytest.approx(row["pr_q"] * row["toy_per_layer"], rel=1e-12)
        assert row["toy_batched"] == block.attn.q_proj.weight.double().abs().max().item()
    assert dc_replace(extra[0], batched=True).batched  # the field is an ordinary dataclass field


def test_where_the_decompositions_run(monkeypatch) -> None:
    """The decomposition device: "cpu", "same" and a name as they are; "auto" is the CPU for CPU
    tensors without timing, elsewhere the faster of the two as timed once on the real matrices,
    then kept (the meta device stands for a GPU)."""
    import metrics.probe as probe

    timed: list[str] = []
    cost = {"cpu": 2.0, "meta": 1.0}

    def seconds(sample: torch.Tensor, device: torch.device) -> float:
        timed.append(device.type)
        assert sample.shape == (probe.CALIBRATION_MATRICES, 8, 8)
        return cost[device.type]

    monkeypatch.setattr(probe, "_decomposition_seconds", seconds)
    monkeypatch.setattr(probe, "_AUTO_CHOICE", {})
    cpu, meta = torch.zeros(2, 40, 3, 8, 8), torch.zeros(2, 40, 3, 8, 8, device="meta")
    assert probe.decomposition_device("cpu", meta).type == "cpu"
    assert probe.decomposition_device("same", meta).type == "meta"
    assert probe.decomposition_device("meta", cpu).type == "meta"
    assert probe.decomposition_device("auto", cpu).type == "cpu" and timed == []
    assert probe.decomposition_device("auto", meta).type == "meta" and timed == ["cpu", "meta"]
    cost["cpu"] = 0.5  # kept for the process: not timed again
    assert probe.decomposition_device("auto", meta).type == "meta" and len(timed) == 2
    monkeypatch.setattr(probe, "_AUTO_CHOICE", {})
    assert probe.decomposition_device("auto", meta).type == "cpu"


@pytest.mark.parametrize("choice", ["meta", "auto"])
def test_the_chosen_device_reaches_every_decomposition(monkeypatch, choice: str) -> None:
    """probe_layers' decomp_device is where each SVD batch is asked to run (recorded, then run
    here: the meta device stands for a GPU)."""
    import metrics.spectra as spectra

    asked = []
    real = spectra.svdvals

    def recorded(m: torch.Tensor) -> torch.Tensor:
        asked.append(spectra._DECOMPOSE_ON.get())
        with spectra.decompositions_on(None):
            return real(m)

    monkeypatch.setattr(spectra, "svdvals", recorded)
    probe_layers(tiny_model(), tokens(), decomp_device=choice)
    assert asked == [torch.device("meta" if choice == "meta" else "cpu")] * 4
