"""model/gpt.py (SPEC §1): the two attention paths, traces, tying, counts (GPTConfig's checks: test_model_config.py)."""

from __future__ import annotations

import fnmatch
import math

import pytest
import torch
from helpers import CONTEXT, random_tokens, tiny_model

from model.gpt import GPT, GPTConfig


def sharpened_model() -> GPT:
    """A tiny model whose attention is far from uniform, so a wrong mask or scale would show."""
    model = tiny_model("independent_xavier", seed=1)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(4.0)
            block.attn.k_proj.weight.mul_(4.0)
    return model


@pytest.mark.parametrize("training", [True, False])
def test_fast_and_probe_paths_agree(training: bool) -> None:
    model = sharpened_model().train(training)
    cfg = model.cfg
    idx = random_tokens(3, CONTEXT, cfg.vocab_size, seed=0)
    targets = random_tokens(3, CONTEXT, cfg.vocab_size, seed=1)
    with torch.no_grad():
        logits_fast, loss_fast = model(idx, targets)
        logits_probe, loss_probe, traces = model.probe(idx, targets)
    assert logits_fast.shape == (3, CONTEXT, cfg.vocab_size)
    torch.testing.assert_close(logits_probe, logits_fast, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss_probe, loss_fast, rtol=1e-6, atol=1e-6)
    # the attention really is sharp here, so agreement says something about mask and scale
    assert traces[0].probs.amax(-1).mean() > 0.3
    # the loss is the mean token cross-entropy of the returned logits
    manual = torch.nn.functional.cross_entropy(logits_fast.reshape(-1, cfg.vocab_size), targets.reshape(-1))
    torch.testing.assert_close(loss_fast, manual)


def test_paths_agree_on_shorter_sequences_and_without_targets() -> None:
    model = sharpened_model().eval()
    idx = random_tokens(2, 5, model.cfg.vocab_size)
    with torch.no_grad():
        logits_fast, loss_fast = model(idx)
        logits_probe, loss_probe, traces = model.probe(idx)
    assert loss_fast is None and loss_probe is None
    torch.testing.assert_close(logits_probe, logits_fast, rtol=1e-5, atol=1e-5)
    assert traces[0].scores.shape == (2, 4, 5, 5)


def test_causality_future_tokens_do_not_change_past_logits() -> None:
    model = sharpened_model().eval()
    idx = random_tokens(2, CONTEXT, model.cfg.vocab_size)
    changed = idx.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % model.cfg.vocab_size
    with torch.no_grad():
        a, _ = model(idx)
        b, _ = model(changed)
        pa, _, _ = model.probe(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(a[:, 10:], b[:, 10:])
    torch.testing.assert_close(pa, b, rtol=1e-5, atol=1e-5)


def test_probe_traces_have_documented_shapes() -> None:
    model = sharpened_model()
    cfg = model.cfg
    B, T, H, dh = 3, CONTEXT, cfg.n_head, cfg.d_head
    idx = random_tokens(B, T, cfg.vocab_size)
    _, _, traces = model.probe(idx)
    assert len(traces) == cfg.n_layer
    for tr in traces:
        assert tr.x.shape == (B, T, cfg.d_model)
        assert tr.q.shape == (B, H, T, dh)
        assert tr.k.shape == (B, H, T, dh)
        assert tr.scores.shape == (B, H, T, T)
        assert tr.probs.shape == (B, H, T, T)
        for t in (tr.x, tr.q, tr.k, tr.scores, tr.probs):
            assert not t.requires_grad
        # probabilities: rows sum to one, nothing above the diagonal
        torch.testing.assert_close(tr.probs.sum(-1), torch.ones(B, H, T))
        assert torch.all(tr.probs.triu(1) == 0)
        # scores are q kᵀ / sqrt(d_head), unmasked (upper triangle present)
        torch.testing.assert_close(tr.scores, tr.q @ tr.k.transpose(-1, -2) / math.sqrt(dh))
        assert torch.any(tr.scores.triu(1) != 0)
    # layer 0's x is LN1 of the embeddings; q is its projection split into heads
    block = model.blocks[0]
    with torch.no_grad():
        emb = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
        x0 = block.ln1(emb)
        q0 = block.attn.q_proj(x0).view(B, T, H, dh).transpose(1, 2)
    torch.testing.assert_close(traces[0].x, x0)
    torch.testing.assert_close(traces[0].q, q0)


def test_sequence_longer_than_context_is_an_error() -> None:
    model = tiny_model()
    idx = random_tokens(1, CONTEXT + 1, model.cfg.vocab_size)
    with pytest.raises(ValueError, match=rf"{CONTEXT + 1}.*context {CONTEXT}"):
        model(idx)
    with pytest.raises(ValueError, match="exceeds context"):
        model.probe(idx)


def test_lm_head_is_tied_to_token_embedding() -> None:
    model = tiny_model()
    assert model.lm_head.weight is model.tok_emb.weight
    names = [n for n, _ in model.named_parameters()]
    assert "tok_emb.weight" in names and "lm_head.weight" not in names  # counted once
    assert model.num_params() == sum(p.numel() for _, p in model.named_parameters())
    # changing the embedding changes the head's output
    idx = random_tokens(1, 4, model.cfg.vocab_size)
    with torch.no_grad():
        before, _ = model(idx)
        model.tok_emb.weight[0].add_(1.0)
        after, _ = model(idx)
    assert not torch.allclose(before[..., 0], after[..., 0])


def test_parameter_names_expose_separate_q_and_k() -> None:
    model = tiny_model(n_layer=3)
    params = dict(model.named_parameters())
    for pattern in ("*.q_proj.weight", "*.k_proj.weight", "*.v_proj.weight",
                    "*.q_proj.bias", "*.k_proj.bias"):
        matches = fnmatch.filter(params, pattern)
        assert len(matches) == 3, (pattern, matches)
    for i in range(3):
        q, k = params[f"blocks.{i}.attn.q_proj.weight"], params[f"blocks.{i}.attn.k_proj.weight"]
        assert q.shape == k.shape == (32, 32)
        assert q is not k and q.data_ptr() != k.data_ptr()


@pytest.mark.parametrize("n_layer,expected", [(4, 3_642_368), (8, 6_801_408)])
def test_parameter_count_at_paper_config(n_layer: int, expected: int) -> None:
    cfg = GPTConfig(vocab_size=1758, n_layer=n_layer)
    assert (cfg.n_head, cfg.d_model, cfg.d_mlp, cfg.context) == (4, 256, 1024, 128)
    assert GPT(cfg).num_params() == expected
