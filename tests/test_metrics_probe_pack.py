"""metrics/probe.py's probe_members (SPEC §4.1): a pack of M runs probed in one call, its values
those of each member's own probe."""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import CONTEXT, random_tokens
from probe_pack_helpers import HostReads, assert_rows_equal_to_1e10, random_model, stacked_gpt

from metrics import columns
from metrics.columns import LayerMetric, check_layer_columns
from metrics.probe import probe_layers, probe_members

SHAPES = [{"n_layer": 3, "n_head": 2}, {"n_layer": 2, "n_head": 4, "d_model": 64}]


def members(k: int, first_seed: int = 0, **shape) -> list[torch.nn.Module]:
    """M float64 tiny GPTs of one shape, each off its init in its own way (alternating inits)."""
    return [random_model(first_seed + i, **shape).double() for i in range(k)]


def tokens(vocab_size: int, seed: int = 0, batch: int = 3) -> torch.Tensor:
    return random_tokens(batch, CONTEXT, vocab_size, seed=seed)


@pytest.mark.parametrize("shape", range(len(SHAPES)))
@pytest.mark.parametrize("decomp_device", ["auto", "cpu", "same"])
def test_a_pack_in_one_call_equals_each_members_own_probe(shape: int, decomp_device: str) -> None:
    """M = 3 members, more than one layer, float64: every row of every member within 1e-10 of
    probe_layers on that member's own plain GPT."""
    plain = members(3, first_seed=10 * shape, **SHAPES[shape])
    pack = stacked_gpt(plain)
    assert pack.members == 3 and pack.blocks[0].attn.q_proj.weight.shape[0] == 3
    idx = tokens(pack.cfg.vocab_size, seed=shape)
    got = probe_members(pack, idx, decomp_device=decomp_device)
    assert len(got) == 3
    for m, model in enumerate(plain):
        assert [r["layer"] for r in got[m]] == list(range(model.cfg.n_layer))
        assert_rows_equal_to_1e10(got[m], probe_layers(model, idx, decomp_device=decomp_device))
    assert got[0] != got[1]  # members measured separately


def test_members_are_not_mixed_up_by_their_order() -> None:
    """Reversing the pack reverses the rows: item m·L + l is member m's layer l."""
    plain = members(3, first_seed=4, n_layer=2)
    idx = tokens(plain[0].cfg.vocab_size)
    forward, backward = probe_members(stacked_gpt(plain), idx), probe_members(stacked_gpt(plain[::-1]), idx)
    for m in range(3):
        assert_rows_equal_to_1e10(backward[2 - m], forward[m])


def test_chosen_members_are_reduced_alone_in_the_order_given() -> None:
    """``members=``: a trainer leaves out a member whose weights turned non-finite (its SVDs would
    fail); the others' rows are those of the whole pack's call."""
    plain = members(3, first_seed=7, n_layer=2)
    idx = tokens(plain[0].cfg.vocab_size)
    pack = stacked_gpt(plain)
    whole = probe_members(pack, idx)
    with torch.no_grad():
        pack.blocks[0].attn.k_proj.weight[1].fill_(float("nan"))
    got = probe_members(pack, idx, members=[2, 0])
    assert len(got) == 2
    assert_rows_equal_to_1e10(got[0], whole[2])
    assert_rows_equal_to_1e10(got[1], whole[0])


def test_a_plain_model_is_one_member_probed_by_probe_layers() -> None:
    model = random_model(3, n_layer=3)
    idx = tokens(model.cfg.vocab_size)
    assert probe_members(model, idx) == [probe_layers(model, idx)]


def test_a_pack_is_one_probe_pass_and_one_host_read() -> None:
    """One forward of the stacked model, one .tolist(), whatever M (member by member: M of each)."""
    plain = members(3, n_layer=2)
    pack = stacked_gpt(plain)
    idx = tokens(pack.cfg.vocab_size)
    passes = []
    handle = pack.blocks[0].register_forward_hook(lambda module, args, out: passes.append(tuple(args[0].shape)))
    try:
        with HostReads() as mode:
            probe_members(pack, idx)
    finally:
        handle.remove()
    assert mode.reads == ["tolist"] and passes == [(3, *idx.shape, pack.cfg.d_model)]
    with HostReads() as mode:
        for model in plain:
            probe_members(model, idx)
    assert mode.reads == ["tolist"] * 3


def test_every_decomposition_of_a_pack_is_one_batched_call(monkeypatch) -> None:
    """Four SVD batches for M members × L layers: every (member, layer, b, h) score and attention
    matrix, every member's W_Q and W_K of every layer together, every head block."""
    import metrics.spectra

    shapes = []
    real = metrics.spectra.svdvals
    monkeypatch.setattr(metrics.spectra, "svdvals", lambda m: shapes.append(tuple(m.shape)) or real(m))
    M, L = 3, 2
    pack = stacked_gpt(members(M, n_layer=L))
    H, D, dh = pack.cfg.n_head, pack.cfg.d_model, pack.cfg.d_head
    probe_members(pack, tokens(pack.cfg.vocab_size, batch=4))
    N = M * L
    assert sorted(shapes) == sorted([(N, 4, H, CONTEXT, CONTEXT)] * 2 + [(2 * N, D, D), (2 * N, H, dh, D)])


def test_a_per_item_plugin_metric_sees_one_member_layer_at_a_time() -> None:
    """LayerMetric(batched=False) on both sides: called once per (member, layer) with that
    item's tensors, and its values are the member-by-member probe's."""
    seen: dict[str, list] = {"activation": [], "weight": []}

    def per_item_q(q, scores):
        seen["activation"].append((tuple(q.shape), tuple(scores.shape)))
        return q.abs().mean() + scores.amax()

    def per_item_w(wq, wk, n_head):
        seen["weight"].append((tuple(wq.shape), n_head))
        return (wq - wk).abs().amax() * n_head

    module = type(sys)("probe_pack_plugin_toy")
    module.per_item_q, module.per_item_w = per_item_q, per_item_w
    extra = (LayerMetric("toy_q", "activation", ("q", "scores"), "probe_pack_plugin_toy:per_item_q", "toy"),
             LayerMetric("toy_w", "weight", ("wq", "wk", "n_head"), "probe_pack_plugin_toy:per_item_w", "toy"))
    M, L = 3, 2
    plain = members(M, n_layer=L)
    pack = stacked_gpt(plain)
    idx = tokens(pack.cfg.vocab_size)
    B, T, D, H = idx.shape[0], CONTEXT, pack.cfg.d_model, pack.cfg.n_head
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "probe_pack_plugin_toy", module)
        vocabulary = (*columns.LAYER_COLUMNS, *extra)
        check_layer_columns(vocabulary)
        mp.setattr(columns, "LAYER_COLUMNS", vocabulary)
        got = probe_members(pack, idx)
        assert seen == {"activation": [((B, T, D), (B, H, T, T))] * (M * L), "weight": [((D, D), H)] * (M * L)}
        for m, model in enumerate(plain):
            want = probe_layers(model, idx)
            assert_rows_equal_to_1e10(got[m], want)
            assert [r["toy_w"] for r in want] == [
                float((b.attn.q_proj.weight - b.attn.k_proj.weight).detach().abs().max() * H) for b in model.blocks]


@pytest.mark.parametrize("pack", [False, True])
def test_the_cpu_probe_pass_over_chunks_of_the_batch_equals_one_pass(monkeypatch, pack: bool) -> None:
    """PASS_BYTES for two sequences' scores: a batch of 5 in passes of 2, 2, 1, the same rows as
    one pass (and, for a pack, as each member's own probe)."""
    import metrics.probe as probe

    plain = members(3, first_seed=7, n_layer=2)
    model = stacked_gpt(plain) if pack else plain[0]
    idx = tokens(model.cfg.vocab_size, batch=5)
    one_pass = probe_members(model, idx)
    assert probe.PASS_BYTES // (12 * 4 * 128 * 128 * 4) == 2  # a pack of 12 at paper width: 2 sequences a pass
    passes = []
    handle = model.blocks[0].register_forward_hook(lambda module, args, out: passes.append(args[0].shape[-3]))
    per_sequence = (3 if pack else 1) * model.cfg.n_head * CONTEXT * CONTEXT * 4
    monkeypatch.setattr(probe, "PASS_BYTES", 3 * per_sequence - 1)
    try:
        chunked = probe_members(model, idx)
    finally:
        handle.remove()
    assert passes == [2, 2, 1]
    for m, rows in enumerate(chunked):
        assert_rows_equal_to_1e10(rows, one_pass[m])
        assert_rows_equal_to_1e10(rows, probe_layers(plain[m], idx))
