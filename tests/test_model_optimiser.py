"""model/optimiser.py: ``MemberAdamW`` is PyTorch's AdamW per member, with one step count per member;
a skipped member ends as its own AdamW that skipped the same step; the skip is never read on the host
(fused: the library's ``found_inf``). Fused and unfused, on the CPU (torch has a fused CPU AdamW: the
same Python path as CUDA's).

Unfused (the CPU's AdamW, the one the trainer uses here): bit for bit. Fused on the CPU: to float32
rounding only, because the CPU's fused kernel computes a tensor's last elements (fewer than one
vector) in a scalar loop that rounds otherwise (measured: one ulp in ``exp_avg_sq`` of a [3, 7]
tensor, whose slices of 7 are all tail), so a slice [i] is not always computed as the same elements
of the whole tensor. CUDA's fused kernel has no such tail (tests/test_model_graphs_cuda.py checks
it bit for bit there)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from model.optimiser import MemberAdamW, optimiser_step

M = 3
#: odd sizes on purpose: a vectorised kernel's tail must not make a slice differ from the whole tensor
SHAPES = ((M, 67, 32), (M, 32), (M, 32, 32), (M, 7))
LR, BETAS = 3e-3, (0.9, 0.95)
STEPS = 6

pytestmark = pytest.mark.usefixtures("one_thread")


def tensors(dtype=torch.float32) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
    """Stacked weights and STEPS rounds of gradients, from a private generator."""
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(s, generator=g, dtype=dtype) for s in SHAPES]
    grads = [[torch.randn(s, generator=g, dtype=dtype) for s in SHAPES] for _ in range(STEPS)]
    return params, grads


def groups(params: list[torch.Tensor]) -> list[dict]:
    return [{"params": params[:3], "weight_decay": 0.1}, {"params": params[3:], "weight_decay": 0.0}]


def assert_same(a: torch.Tensor, b: torch.Tensor, fused: bool, what: str = "") -> None:
    """Bit for bit unfused; fused (CPU), to float32 rounding (the module docstring)."""
    if fused:
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(a, b), what


def train(opt: torch.optim.Optimizer, params: list[torch.Tensor], grads, skip_at: dict[int, torch.Tensor]) -> None:
    for t, round_ in enumerate(grads):
        for p, g in zip(params, round_, strict=True):
            p.grad = g.clone()
        optimiser_step(opt, skip_at.get(t))


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_without_a_skip_it_is_adamw_over_the_stacked_tensors_bit_for_bit(fused: bool) -> None:
    mine, grads = tensors()
    theirs = [p.clone() for p in mine]
    ours = MemberAdamW(groups(mine), M, lr=LR, betas=BETAS, fused=fused)
    plain = torch.optim.AdamW(groups(theirs), lr=LR, betas=BETAS, fused=fused)
    train(ours, mine, grads, {})
    train(plain, theirs, grads, {})
    for p, q in zip(mine, theirs, strict=True):
        assert_same(p, q, fused)
        assert ours.state[p]["step"].tolist() == [STEPS] * M and plain.state[q]["step"].item() == STEPS
        assert_same(ours.state[p]["exp_avg_sq"], plain.state[q]["exp_avg_sq"], fused)


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("bad", [0, 3])
def test_a_skipped_member_ends_as_its_own_adamw_that_skipped_the_step(fused: bool, bad: int) -> None:
    """Member 1 skips step ``bad``: it ends where member 1's own AdamW (one tensor per weight, as an
    unpacked run) ends when it skips that step too; the others where they end with no skip anywhere;
    the count of member 1 is one behind."""
    mine, grads = tensors()
    start = [p.clone() for p in mine]
    ours = MemberAdamW(groups(mine), M, lr=LR, betas=BETAS, fused=fused)
    train(ours, mine, grads, {bad: torch.tensor([False, True, False])})
    for i in range(M):
        alone = [p[i].clone() for p in start]
        opt = torch.optim.AdamW(groups(alone), lr=LR, betas=BETAS, fused=fused)
        train(opt, alone, [[g[i] for g in round_] for round_ in grads],
              {bad: torch.tensor([i == 1])} if i == 1 else {})
        for p, q in zip(mine, alone, strict=True):
            assert_same(p[i], q, fused, f"member {i}")
    assert {tuple(ours.state[p]["step"].tolist()) for p in mine} == {(STEPS, STEPS - 1, STEPS)}


def test_every_member_skipped_changes_nothing() -> None:
    mine, grads = tensors()
    ours = MemberAdamW(groups(mine), M, lr=LR, betas=BETAS, fused=True)
    train(ours, mine, grads[:2], {})
    before = [p.clone() for p in mine]
    train(ours, mine, grads[2:3], {0: torch.ones(M, dtype=torch.bool)})
    assert all(torch.equal(a, b) for a, b in zip(mine, before, strict=True))
    assert all(ours.state[p]["step"].tolist() == [2] * M for p in mine)


class HostReads(TorchDispatchMode):
    """Counts the ops that bring a value to the host (on CUDA: a synchronisation)."""

    HOST = {"aten::_local_scalar_dense", "aten::nonzero", "aten::item", "aten::is_nonzero"}

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in self.HOST:
            self.reads.append(func._schema.name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("members", [M, 1], ids=["pack", "one run"])
def test_a_fused_masked_step_reads_nothing_on_the_host(members: int) -> None:
    """What a CUDA graph needs: the skip decided on the device (the step before used nonzero())."""
    params, grads = tensors()
    if members == 1:
        params, grads = [p[0].clone() for p in params], [[g[0] for g in r] for r in grads]
        opt = torch.optim.AdamW(groups(params), lr=LR, betas=BETAS, fused=True)
    else:
        opt = MemberAdamW(groups(params), M, lr=LR, betas=BETAS, fused=True)
    train(opt, params, grads[:1], {})
    for p, g in zip(params, grads[1], strict=True):
        p.grad = g.clone()
    skip = torch.tensor([False, True, False][:members])
    with HostReads() as mode:
        optimiser_step(opt, skip)
    assert mode.reads == []


def test_a_plain_adamw_state_loads_with_its_count_for_every_member() -> None:
    """A pack's checkpoint from before the per-member count (one 0-d count a tensor) loads: every
    member's count is the pack's, as that optimiser counted it."""
    params, grads = tensors()
    plain = torch.optim.AdamW(groups(params), lr=LR, betas=BETAS)
    train(plain, params, grads[:2], {})
    again = [p.clone() for p in params]
    ours = MemberAdamW(groups(again), M, lr=LR, betas=BETAS)
    ours.load_state_dict(copy.deepcopy(plain.state_dict()))  # as from a checkpoint: no shared tensors
    train(ours, again, grads[2:], {})
    train(plain, params, grads[2:], {})
    assert all(torch.equal(a, b) for a, b in zip(again, params, strict=True))
    assert all(ours.state[p]["step"].tolist() == [STEPS] * M for p in again)
