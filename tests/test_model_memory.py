"""model/memory.py: the memory model against what autograd keeps on the CPU, byte for byte.

The bytes the backward keeps are measured with ``torch.autograd.graph.saved_tensors_hooks`` (each
saved tensor's storage counted once; the trained parameters, which the model counts as weights,
left out) for one run and a pack of three, in fp32 and under bf16 autocast, at shapes whose width,
depth, MLP, vocabulary, context and batch all differ. CUDA's kernels keep the same tensors
(its flash attention keeps the output and the log-sum-exp, as the CPU's does); what the GPU's
caching allocator adds is for ``bench/gpu.sh`` to measure.
"""

from __future__ import annotations

import pytest
import torch
from helpers import random_tokens

from model.gpt import GPTConfig
from model.memory import (
    CONTEXT_BYTES,
    USABLE,
    Shape,
    estimate,
    half_weights,
    params,
    saved_per_token,
)
from model.qk_init import build_model
from model.stack import stack

pytestmark = pytest.mark.usefixtures("one_thread")

#: (d_model, n_layer, n_head, d_mlp, vocab, context, batch)
SHAPES = ((32, 2, 4, 64, 67, 16, 8), (48, 1, 2, 96, 200, 24, 6))


def saved_bytes(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, half: bool) -> int:
    """Bytes of the distinct storages autograd keeps for the backward of one loss (parameters aside)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast("cpu", dtype=torch.bfloat16, enabled=half):
        model(x, y)
    return sum(kept.values())


@pytest.mark.parametrize("half", [False, True], ids=["fp32", "bf16"])
@pytest.mark.parametrize("members", [1, 3], ids=["one run", "pack of 3"])
@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: f"d{d[0]}-L{d[1]}-f{d[3]}-V{d[4]}-T{d[5]}-B{d[6]}")
def test_the_activations_modelled_are_what_autograd_keeps(dims: tuple[int, ...], members: int, half: bool) -> None:
    d, layers, heads, f, vocab, context, batch = dims
    cfg = GPTConfig(vocab_size=vocab, n_layer=layers, n_head=heads, d_model=d, d_mlp=f, context=context)
    built = [build_model(cfg, "independent_xavier", seed) for seed in range(members)]
    model = built[0] if members == 1 else stack(built)[0]
    lead = (batch,) if members == 1 else (members, batch)
    x = random_tokens(members * batch, context, vocab, seed=1).view(*lead, context)
    y = random_tokens(members * batch, context, vocab, seed=2).view(*lead, context)
    s = Shape(d, layers, heads, f, vocab, context, batch, half)
    assert params(s) * members == model.num_params()
    modelled = members * (batch * context * saved_per_token(s, members > 1) + (2 * half_weights(s) if half else 0))
    measured = saved_bytes(model, x, y, half)
    assert measured == pytest.approx(modelled, abs=64), f"measured {measured}, modelled {modelled:.0f}"


def test_the_paper_shape_and_the_most_members_a_gpu_holds() -> None:
    """The paper's shape at depth 8 in bf16: about 1.1 GiB a member, so a pack of 36 needs about
    40 GiB (more than a 40 GB A100 holds) and an 80 GB GPU about 60 members; one member more than
    ``most_members`` does not fit, that many do."""
    paper = Shape(d_model=256, n_layer=8, n_head=4, d_mlp=1024, vocab_size=1758, context=128, batch_size=64, half=True)
    est = estimate(paper, packed=True, train_tokens=36_000_000, eval_batches=8)
    assert 1.0 * 2**30 < est.member < 1.3 * 2**30
    assert 38 * 2**30 < est.total(36) < 50 * 2**30
    for free in (40e9, 80e9, 141e9):
        m = est.most_members(int(free))
        assert est.total(m) <= free * USABLE < est.total(m + 1), free
    assert est.most_members(int(40e9)) < 36 < est.most_members(int(80e9))
    assert est.most_members(CONTEXT_BYTES) == 0
    # fp32 keeps more than bf16; a pack's member more than one run's (its LayerNorms)
    fp32 = estimate(Shape(**{**paper.__dict__, "half": False}), packed=True, train_tokens=0, eval_batches=8)
    assert fp32.member > est.member > estimate(paper, packed=False, train_tokens=0, eval_batches=8).member
