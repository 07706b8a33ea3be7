"""metrics.hf_probe against an independent float64 reference built from the weights.

For each architecture a tiny random model is perturbed (so LayerNorm gains and
biases are not trivial), run once for its hidden states, and one layer's
Q, K, rotary, scores and softmax are recomputed here in numpy float64 from the
model's own weights: fused projections split by hand, rotary from the config.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
import transformers as tf
from hf_trace_helpers import trace_hf_model

from metrics.hf_arch import UnsupportedArchitecture, tiny_config
from metrics.hf_probe import SUPPORTED_MODEL_TYPES, probe_hf_model

D, H, T, B, V = 32, 4, 16, 3, 100
D_HEAD = D // H

#: The paper's four families are checked against a reference from the residual stream;
#: the others against one from the attention module's input (``_generic_reference``).
PAPER_FAMILIES = ("gpt2", "gpt_neox", "llama", "olmo")

#: Test-specific settings on top of each adapter's tiny config (``metrics.hf_arch``).
OVERRIDES = {
    # Stanford CRFM runs: per-layer scale 1/(sqrt(d_head)·(i+1)) and the upcast path.
    "gpt2": {"scale_attn_by_inverse_layer_idx": True, "reorder_and_upcast_attn": True},
    # Pythia: fused QKV interleaved per head, partial rotary (50 % here).
    "gpt_neox": {"rotary_pct": 0.5},
    # OLMo: parameter-free LayerNorm, clip_qkv clamping in place (set low to bite).
    "olmo": {"clip_qkv": 1.0},
    # Phi-3 with partial rotary, so the fused split and the rotary split both have teeth.
    "phi3": {"partial_rotary_factor": 0.5},
}
#: Every supported family's tiny model (llama: 4 query / 2 KV heads; gemma: d_head 16 ≠ 32 / 4).
CONFIGS = {kind: partial(tiny_config, kind, **OVERRIDES.get(kind, {})) for kind in SUPPORTED_MODEL_TYPES}


def tiny_model(kind: str, seed: int = 0) -> tf.PreTrainedModel:
    """A random model whose every parameter is perturbed away from its init."""
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(CONFIGS[kind]()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().double().numpy()


def _layer_norm(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, eps: float) -> np.ndarray:
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


def _rotary(x: np.ndarray, rot_dims: int, theta: float) -> np.ndarray:
    """x: [B, T, heads, d_head]; rotate-half rotary on the first rot_dims dims."""
    inv_freq = 1.0 / theta ** (np.arange(0, rot_dims, 2) / rot_dims)
    ang = np.arange(x.shape[1])[:, None] * inv_freq[None]  # (T, rot/2)
    cos = np.concatenate([np.cos(ang)] * 2, -1)[None, :, None]  # (1, T, 1, rot)
    sin = np.concatenate([np.sin(ang)] * 2, -1)[None, :, None]
    r, rest = x[..., :rot_dims], x[..., rot_dims:]
    half = rot_dims // 2
    rotated = np.concatenate([-r[..., half:], r[..., :half]], -1)
    return np.concatenate([r * cos + rotated * sin, rest], -1)


def reference(model: tf.PreTrainedModel, ids: torch.Tensor, layer: int) -> dict:
    """Pre-rotary Q, K [B·T, ·], post-rotary scaled scores [B, H, T, T], all float64."""
    cfg = model.config
    kind = cfg.model_type
    if kind not in PAPER_FAMILIES:
        return _generic_reference(model, ids, layer)
    with torch.no_grad():
        hs = _np(model(ids, output_hidden_states=True).hidden_states[layer])  # (B, T, D)
    scale = D_HEAD**-0.5
    rot_dims, theta = 0, 1.0
    if kind == "gpt2":
        blk = model.transformer.h[layer]
        x = _layer_norm(hs, _np(blk.ln_1.weight), _np(blk.ln_1.bias), cfg.layer_norm_epsilon)
        w, bias = _np(blk.attn.c_attn.weight), _np(blk.attn.c_attn.bias)  # Conv1D: [D, 3D]
        q = x @ w[:, :D] + bias[:D]
        k = x @ w[:, D : 2 * D] + bias[D : 2 * D]
        scale /= layer + 1
    elif kind == "gpt_neox":
        blk = model.gpt_neox.layers[layer]
        ln = blk.input_layernorm
        x = _layer_norm(hs, _np(ln.weight), _np(ln.bias), cfg.layer_norm_eps)
        w = _np(blk.attention.query_key_value.weight).reshape(H, 3, D_HEAD, D)  # per-head [q|k|v]
        bias = _np(blk.attention.query_key_value.bias).reshape(H, 3, D_HEAD)
        q = x @ w[:, 0].reshape(D, D).T + bias[:, 0].reshape(D)
        k = x @ w[:, 1].reshape(D, D).T + bias[:, 1].reshape(D)
        rot_dims = int(D_HEAD * cfg.rope_parameters["partial_rotary_factor"])
        theta = cfg.rope_parameters["rope_theta"]
    else:
        blk = model.model.layers[layer]
        if kind == "llama":
            x = hs / np.sqrt((hs**2).mean(-1, keepdims=True) + cfg.rms_norm_eps)
            x = x * _np(blk.input_layernorm.weight)
        else:
            x = _layer_norm(hs, None, None, 1e-5)
        q = x @ _np(blk.self_attn.q_proj.weight).T
        k = x @ _np(blk.self_attn.k_proj.weight).T
        rot_dims, theta = D_HEAD, cfg.rope_parameters["rope_theta"]
    q_pre, k_pre = q, k
    if getattr(cfg, "clip_qkv", None) is not None:
        q, k = np.clip(q, -cfg.clip_qkv, cfg.clip_qkv), np.clip(k, -cfg.clip_qkv, cfg.clip_qkv)
    qh = q.reshape(B, T, H, D_HEAD)
    kh = k.reshape(B, T, -1, D_HEAD)
    if rot_dims:
        qh, kh = _rotary(qh, rot_dims, theta), _rotary(kh, rot_dims, theta)
    kh = np.repeat(kh, H // kh.shape[2], axis=2)  # KV head g serves query heads g·n_rep … (g+1)·n_rep−1
    scores = np.einsum("bthd,bshd->bhts", qh, kh) * scale
    return {"q": q_pre.reshape(B * T, -1), "k": k_pre.reshape(B * T, -1), "scores": scores}


def _generic_reference(model: tf.PreTrainedModel, ids: torch.Tensor, layer: int) -> dict:
    """As ``reference`` for the other families, from the attention module's own input x [B, T, D]:
    Q, K by hand from the weights (Phi-3's fused rows sliced by hand, OLMo-2's RMS Q/K norm
    applied), rotary from the config, d_head from the config's ``head_dim`` when it has one."""
    cfg = model.config
    attn = model.model.layers[layer].self_attn
    seen = {}
    handle = attn.register_forward_pre_hook(lambda m, a, kw: seen.update(x=kw["hidden_states"]), with_kwargs=True)
    with torch.no_grad():
        model(ids)
    handle.remove()
    x = _np(seen["x"])
    n, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // n
    if cfg.model_type == "phi3":
        w = _np(attn.qkv_proj.weight)  # rows [Q (n·d) | K (n_kv·d) | V (n_kv·d)]
        assert w.shape[0] == (n + 2 * n_kv) * d_head
        q, k = x @ w[: n * d_head].T, x @ w[n * d_head : (n + n_kv) * d_head].T
    else:
        q, k = x @ _np(attn.q_proj.weight).T, x @ _np(attn.k_proj.weight).T
        if attn.q_proj.bias is not None:
            q, k = q + _np(attn.q_proj.bias), k + _np(attn.k_proj.bias)
    if cfg.model_type == "olmo2":  # RMSNorm over all heads, with its gain, before rotary
        rms = lambda y, g: y / np.sqrt((y**2).mean(-1, keepdims=True) + cfg.rms_norm_eps) * g  # noqa: E731
        q, k = rms(q, _np(attn.q_norm.weight)), rms(k, _np(attn.k_norm.weight))
    if cfg.model_type == "stablelm" and cfg.qk_layernorm:  # one LayerNorm (gain, no bias) per head
        def per_head(y: np.ndarray, norms: torch.nn.ModuleList) -> np.ndarray:
            yh = y.reshape(B, T, len(norms), d_head)
            gains = np.stack([_np(m.weight) for m in norms])  # (heads, d_head)
            return _layer_norm(yh, gains, None, cfg.layer_norm_eps).reshape(B, T, -1)

        q, k = per_head(q, attn.q_layernorm.norms), per_head(k, attn.k_layernorm.norms)
    assert q.shape[-1] == n * d_head and k.shape[-1] == n_kv * d_head
    rot_dims = int(d_head * cfg.rope_parameters.get("partial_rotary_factor", 1.0))
    qh = _rotary(q.reshape(B, T, n, d_head), rot_dims, cfg.rope_parameters["rope_theta"])
    kh = _rotary(k.reshape(B, T, n_kv, d_head), rot_dims, cfg.rope_parameters["rope_theta"])
    kh = np.repeat(kh, n // n_kv, axis=2)
    scores = np.einsum("bthd,bshd->bhts", qh, kh) * d_head**-0.5
    return {"q": q.reshape(B * T, -1), "k": k.reshape(B * T, -1), "scores": scores}


def _pr(x: np.ndarray) -> float:
    lam = np.linalg.eigvalsh(np.cov(x, rowvar=False))
    return lam.sum() ** 2 / (lam**2).sum()


def _attention_reference(s: np.ndarray) -> dict[str, float]:
    mask = np.tril(np.ones((T, T), dtype=bool))
    z = np.where(mask, s, -np.inf)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)
    logit_std = np.array([[s[b, h][mask].std() for h in range(H)] for b in range(B)])
    return {"attn_entropy": ent.mean(), "attn_top1": p.max(-1).mean(), "logit_std": logit_std.mean()}


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", SUPPORTED_MODEL_TYPES)
@pytest.mark.parametrize("layer", [0, 1])
def test_probe_matches_float64_reference(kind: str, layer: int, ids: torch.Tensor) -> None:
    model = tiny_model(kind)
    ref = reference(model, ids, layer)
    row = probe_hf_model(model, ids)[layer]
    assert row["layer"] == layer
    assert row["pr_q"] == pytest.approx(_pr(ref["q"]), rel=1e-5)
    assert row["pr_k"] == pytest.approx(_pr(ref["k"]), rel=1e-5)
    assert row["pr_q_minus_pr_k"] == pytest.approx(row["pr_q"] - row["pr_k"])
    att = _attention_reference(ref["scores"])
    assert row["attn_entropy"] == pytest.approx(att["attn_entropy"], rel=1e-5)
    assert row["attn_top1"] == pytest.approx(att["attn_top1"], rel=1e-5)
    assert row["logit_std"] == pytest.approx(att["logit_std"], rel=1e-5)
    # The perturbed model attends far from uniformly, so these checks have teeth.
    assert att["attn_top1"] > 0.3  # uniform causal attention would give 0.21


@pytest.mark.parametrize("kind", SUPPORTED_MODEL_TYPES)
def test_trace_tensors_match_reference(kind: str, ids: torch.Tensor) -> None:
    model = tiny_model(kind, seed=3)
    traces = trace_hf_model(model, ids)
    assert len(traces) == 2
    ref = reference(model, ids, 1)
    tr = traces[1]
    np.testing.assert_allclose(_np(tr.q).reshape(B * T, -1), ref["q"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(tr.k).reshape(B * T, -1), ref["k"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(_np(tr.scores), ref["scores"], rtol=1e-4, atol=1e-4)
    assert tr.k.shape == (B, T, ref["k"].shape[-1])  # PR_K is over the KV heads only
    if kind in ("llama", "qwen2", "mistral", "gemma", "phi3", "olmo2", "stablelm"):
        assert tr.k.shape[-1] < tr.q.shape[-1]  # grouped-query: fewer KV heads than query heads


@pytest.mark.parametrize("kind", ["gpt2", "gpt_neox", "llama"])
def test_rows_are_bit_identical_to_the_hand_written_columns(kind: str, ids: torch.Tensor) -> None:
    """The vocabulary-driven row equals, to the bit and in order, the columns as probe_hf_model
    wrote them by hand before ``metrics.columns.LAYER_COLUMNS`` drove it (llama: grouped-query K)."""
    from metrics.attention import attention_stats
    from metrics.spectra import participation_ratio

    model = tiny_model(kind, seed=3)
    rows = probe_hf_model(model, ids)
    for layer, (tr, row) in enumerate(zip(trace_hf_model(model, ids), rows, strict=True)):
        pr_q = participation_ratio(tr.q.reshape(-1, tr.q.shape[-1])).item()
        pr_k = participation_ratio(tr.k.reshape(-1, tr.k.shape[-1])).item()
        want = {"layer": layer, "pr_q": pr_q, "pr_k": pr_k, "pr_q_minus_pr_k": pr_q - pr_k,
                **attention_stats(tr.scores), "dtype": "float32"}
        assert row == want and list(row) == list(want), (kind, layer)


def test_olmo_clip_is_applied_to_scores_not_to_captured_projection(ids: torch.Tensor) -> None:
    model = tiny_model("olmo")
    tr = trace_hf_model(model, ids)[0]
    assert tr.q.abs().max() > model.config.clip_qkv  # the hook kept q_proj(x), cloned before the clamp


@pytest.mark.parametrize("kind", SUPPORTED_MODEL_TYPES)
def test_capture_leaves_model_output_and_state_unchanged(kind: str, ids: torch.Tensor) -> None:
    model = tiny_model(kind)
    model.set_attn_implementation("eager")
    model.train()
    with torch.no_grad():
        eager = model.eval()(ids).logits
    model.train()
    probe_hf_model(model, ids)
    assert model.training
    assert model.config._attn_implementation == "eager"
    for mod in model.modules():
        assert not hasattr(mod, "_qkgeom_tap")
        assert not mod._forward_hooks
    # the capturing attention reproduces eager attention: same logits
    model.set_attn_implementation("qkgeom_capture")
    with torch.no_grad():
        captured = model.eval()(ids).logits
    torch.testing.assert_close(captured, eager, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "gpt_neox", "llama"])
def test_the_unembedding_is_not_run(kind: str, ids: torch.Tensor) -> None:
    """No column reads the vocabulary logits: the probe runs the decoder only (Pythia-14M spent a
    third of its probe in the unembedding), and its rows are those of the float64 reference above."""
    model = tiny_model(kind)
    calls: list[int] = []
    handle = model.get_output_embeddings().register_forward_hook(lambda *_: calls.append(1))
    try:
        row = probe_hf_model(model, ids)[1]
    finally:
        handle.remove()
    assert calls == []
    assert row["pr_k"] == pytest.approx(_pr(reference(model, ids, 1)["k"]), rel=1e-5)


def test_unsupported_architecture_is_a_clear_error(ids: torch.Tensor) -> None:
    cfg = tf.Gemma2Config(
        vocab_size=V, hidden_size=D, num_hidden_layers=1, num_attention_heads=H,
        num_key_value_heads=H, intermediate_size=64, head_dim=D_HEAD,
    )
    model = tf.AutoModelForCausalLM.from_config(cfg)
    with pytest.raises(UnsupportedArchitecture, match=r"'gemma2' is not supported.*supported: gpt2, gpt_neox"):
        probe_hf_model(model, ids)
    assert model.config._attn_implementation != "qkgeom_capture"


def test_probe_computes_in_float32_and_records_it(ids: torch.Tensor) -> None:
    """A bf16 model is probed in float32 (SPEC §7), and every row (and checkpoints row) says so."""
    from sweep.extension.revision_probe import Job, checkpoint_rows

    ref = probe_hf_model(tiny_model("gpt2"), ids)
    model = tiny_model("gpt2").to(torch.bfloat16)
    rows = probe_hf_model(model, ids)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert [r["dtype"] for r in rows] == ["float32"] * len(rows)
    # computed in float32 from bf16-rounded weights: close to, not equal to, the float32 model
    assert rows[0]["pr_q"] == pytest.approx(ref[0]["pr_q"], rel=0.05)
    job = Job("s", "step1", "org/s", None, 1, 10, 1.0)
    ck = checkpoint_rows(job, ref)
    assert {r["dtype"] for r in ck} == {"float32"}
    from sweep.store.schema import CHECKPOINTS

    assert CHECKPOINTS.field("dtype").type == "string"


def plant_rank_one_queries(model: tf.PreTrainedModel, seed: int = 0) -> None:
    """Every layer's query map becomes x ↦ u (vᵀx) (bias 0): all queries on one line, so PR(Q) = 1.

    u repeats one d_head pattern in every head, so per-head Q norms (StableLM) scale all heads
    alike and keep the line a line (a whole-vector norm, OLMo-2's, keeps any line a line).

    Written on the weights by hand per layout (not through the adapter): separate ``q_proj``,
    the first H·d_head rows of Phi-3's ``qkv_proj``, GPT-2's first D columns of ``c_attn``
    (Conv1D, [D, 3D]), the per-head Q rows of GPT-NeoX's ``query_key_value``.
    """
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    heads = cfg.num_attention_heads

    def line(rows: int) -> torch.Tensor:  # [rows] = one d_head pattern per head
        return torch.randn(rows // heads, generator=g).repeat(heads)

    with torch.no_grad():
        for block in model.base_model.h if cfg.model_type == "gpt2" else model.base_model.layers:
            attn = getattr(block, "attn", None) or getattr(block, "attention", None) or block.self_attn
            if cfg.model_type == "gpt2":
                w, b, d = attn.c_attn.weight, attn.c_attn.bias, cfg.hidden_size
                w[:, :d] = torch.outer(torch.randn(d, generator=g), line(d))
                b[:d] = 0
            elif cfg.model_type == "gpt_neox":
                w, b = attn.query_key_value.weight, attn.query_key_value.bias  # rows (H, [q|k|v], d_head)
                d_head = cfg.hidden_size // cfg.num_attention_heads
                wv = w.view(cfg.num_attention_heads, 3, d_head, -1)
                u, v = line(cfg.hidden_size), torch.randn(cfg.hidden_size, generator=g)
                wv[:, 0] = torch.outer(u, v).view(cfg.num_attention_heads, d_head, -1)
                b.view(cfg.num_attention_heads, 3, d_head)[:, 0] = 0
            elif cfg.model_type == "phi3":
                n_q = cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads)
                w = attn.qkv_proj.weight
                w[:n_q] = torch.outer(line(n_q), torch.randn(w.shape[1], generator=g))
            else:
                w = attn.q_proj.weight
                w.copy_(torch.outer(line(w.shape[0]), torch.randn(w.shape[1], generator=g)))
                if attn.q_proj.bias is not None:
                    attn.q_proj.bias.zero_()


@pytest.mark.parametrize("kind", SUPPORTED_MODEL_TYPES)
def test_planted_rank_one_queries_give_pr_q_one(kind: str, ids: torch.Tensor) -> None:
    """Planted structure: rank-one queries give pr_q = 1 in every layer of every family, while K
    (untouched, random) keeps pr_k well above 1; pr_k matches the float64 reference."""
    model = tiny_model(kind, seed=5)
    plant_rank_one_queries(model)
    rows = probe_hf_model(model, ids)
    for layer, row in enumerate(rows):
        assert row["pr_q"] == pytest.approx(1.0, abs=1e-4), (kind, layer)
        assert row["pr_k"] > 1.5
        assert row["pr_k"] == pytest.approx(_pr(reference(model, ids, layer)["k"]), rel=1e-5)


def test_olmo2_q_k_are_taken_after_the_q_k_norm(ids: torch.Tensor) -> None:
    """OLMo-2: the captured Q, K are q_norm(q_proj(x)), k_norm(k_proj(x)) (metrics.hf_arch's
    decision), not the raw projections: they differ, and the RMS norm makes each token's Q have
    mean square equal to that of the gain pattern."""
    model = tiny_model("olmo2", seed=2)
    tr = trace_hf_model(model, ids)[0]
    ref = _generic_reference(model, ids, 0)
    np.testing.assert_allclose(_np(tr.q).reshape(B * T, -1), ref["q"], rtol=1e-4, atol=1e-5)
    attn = model.model.layers[0].self_attn
    gain = _np(attn.q_norm.weight)
    unit = _np(tr.q).reshape(B * T, -1) / gain  # the RMS-normalised vector before its gain
    np.testing.assert_allclose((unit**2).mean(-1), 1.0, rtol=1e-3)


def test_a_new_family_is_one_adapter(monkeypatch, ids: torch.Tensor) -> None:
    """Starcoder2 is refused until one ``ArchAdapter`` entry is registered; with it, the probe
    captures its Q and K (planted rank-one queries give pr_q = 1) and matches the reference."""
    from metrics import hf_arch

    cfg = dict(hf_arch.ADAPTERS["llama"].tiny, use_bias=True, sliding_window=None)
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(tf.AutoConfig.for_model("starcoder2", **cfg)).eval()
    with pytest.raises(UnsupportedArchitecture, match="'starcoder2' is not supported"):
        probe_hf_model(model, ids)
    adapter = hf_arch.ArchAdapter("starcoder2", "StarCoder2", hf_arch.blocks("layers"), "self_attn",
                                  hf_arch.separate(), "rotate-half rotary", tiny=cfg)
    monkeypatch.setitem(hf_arch.ADAPTERS, "starcoder2", adapter)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    ref = _generic_reference(model, ids, 1)
    assert probe_hf_model(model, ids)[1]["pr_k"] == pytest.approx(_pr(ref["k"]), rel=1e-5)
    plant_rank_one_queries(model)
    assert [r["pr_q"] for r in probe_hf_model(model, ids)] == pytest.approx([1.0, 1.0], abs=1e-4)
