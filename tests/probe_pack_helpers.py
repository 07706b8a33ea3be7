"""Helpers of the probe tests: random tiny GPTs off their init, a pack stacked from plain GPTs,
row comparison to 1e-10, and a counter of host reads."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from helpers import tiny_model
from torch import nn

from model.stack import stack


def random_model(seed: int, **shape) -> nn.Module:
    """A tiny GPT off its init: scaled Q, random q/k biases, so no column sits at a trivial value."""
    model = tiny_model(("independent_xavier", "qk_identical")[seed % 2], seed=seed, **shape)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(1.0 + 3.0 * torch.rand((), generator=gen))
            block.attn.q_proj.bias.copy_(0.3 * torch.randn(block.attn.q_proj.bias.shape, generator=gen))
            block.attn.k_proj.bias.copy_(0.3 * torch.randn(block.attn.k_proj.bias.shape, generator=gen))
    return model


def stacked_gpt(models: Sequence[nn.Module]) -> nn.Module:
    """The pack of plain GPTs of one shape, as the trainer builds it (``model.stack.stack``): its
    parameters are every member's stacked with a leading member dimension M, so ``members`` is M."""
    return stack(models)[0]


def assert_rows_equal_to_1e10(new: list[dict], old: list[dict]) -> None:
    """Same columns in the same order; every value within 1e-10 relative (1e-12 absolute near
    zero), NaN where the old probe gave NaN."""
    assert len(new) == len(old)
    for layer, (n, o) in enumerate(zip(new, old, strict=True)):
        assert list(n) == list(o), layer
        for col, want in o.items():
            got = n[col]
            pairs = zip(got, want, strict=True) if isinstance(want, list) else [(got, want)]
            for g, w in pairs:
                assert isinstance(g, type(w)), (layer, col, g)
                assert (math.isnan(g) and math.isnan(w)) or math.isclose(g, w, rel_tol=1e-10, abs_tol=1e-12), \
                    (layer, col, g, w)


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts the tensor methods that read a value back to Python (on a GPU: a device sync)."""

    READS = {"item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__", "__index__"}

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.READS:
            self.reads.append(name)
        return func(*args, **(kwargs or {}))
