"""model/scaler.py: fp16 loss scaling per member (SPEC §3). One member's overflow skips only its
own step: the pack's other members equal their unpacked runs, and the one that overflowed ends
where its own unpacked run that skipped the same step ends (its AdamW step count is its own:
model/optimiser.py); the skip is counted and its norms are not in the epoch's means. The scaling is
forced on (on the CPU autocast is off, but scaling and the skip are dtype-independent: powers of
two, exact in float64)."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from helpers import tiny_corpus, tiny_model_cfg
from test_model_trainer_pack import (
    MEMBERS,
    assert_reports_close,
    assert_weights_close,
    condition,
    members,
    run_pack,
)

from model import trainer as trainer_mod
from model.qk_init import build_model
from model.recipe import make_adamw
from model.scaler import INIT_SCALE, MemberScaler
from model.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")

BAD_STEP = 3  # the 0-based step whose gradient overflows
WHERE = "blocks.0.attn.v_proj.weight"


def scaled(trainer: Trainer) -> Trainer:
    trainer.scaler = MemberScaler(len(trainer.members), trainer.device, enabled=True)
    return trainer


def overflow_at(trainer: Trainer, member: int | None, step: int = BAD_STEP) -> None:
    """At ``step`` set one gradient of ``member`` (None: the one run's) to inf."""
    def hook(g: torch.Tensor) -> torch.Tensor:
        if trainer.step != step:
            return g
        g = g.clone()
        g[(0, 0) if member is None else (member, 0, 0)] = float("inf")
        return g

    trainer.params[WHERE].register_hook(hook)


@pytest.fixture
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield torch.float64
    torch.set_default_dtype(old)


def unpacked(member, bad: bool) -> tuple[Trainer, list]:
    trainer = scaled(Trainer(tiny_model_cfg(), [member], tiny_corpus(), condition("none")))
    if bad:
        overflow_at(trainer, None)
    reports: list = []
    trainer.run(lambda _, r: reports.append(r))
    return trainer, reports


def test_one_members_overflow_skips_its_step_only(float64) -> None:
    ms = members()
    pack = scaled(Trainer(tiny_model_cfg(), ms, tiny_corpus(), condition("none")))
    overflow_at(pack, 1)
    packed = run_pack(pack)
    assert [[r.run["skipped_steps"] for r in packed[i]] for i in range(3)] == [[None, 0, 0], [None, 1, 0],
                                                                               [None, 0, 0]]
    assert pack.scaler.scale.tolist() == [INIT_SCALE, INIT_SCALE / 2, INIT_SCALE]
    for i in (0, 2):  # the others: as if alone, with no overflow anywhere
        trainer, reports = unpacked(ms[i], bad=False)
        assert_reports_close(packed[i], reports, 1e-9)
        assert_weights_close(pack, i, trainer.model, torch.float64)
    # the one that overflowed: its epoch's norms are the means over the 9 steps it took, finite
    bad = packed[1][1]
    assert math.isfinite(bad.run["grad_norm"]) and all(math.isfinite(r["grad_norm_q"]) for r in bad.layers)
    one, alone = unpacked(ms[1], bad=True)  # unpacked, GradScaler's rule: the same skip, the same count
    assert [r.run["skipped_steps"] for r in alone] == [None, 1, 0]
    assert one.scaler.scale.tolist() == [INIT_SCALE / 2]
    # and the same training: its AdamW count skipped the step too, as the unpacked run's did
    assert_reports_close(packed[1], alone, 1e-9)
    assert_weights_close(pack, 1, one.model, torch.float64)


@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
def test_an_overflowed_member_ends_where_its_own_run_with_the_same_skip_ends(monkeypatch, fused: bool) -> None:
    """fp32, per-member scaler on, an inf forced into member 1's gradient at step 0 of 8: the others
    end bit for bit where the pack without the overflow ends; member 1 where its own run that skipped
    the same step ends, to float32 rounding: within 1 % of how far it moved. (When a pack's AdamW
    kept one step count for all, member 1 ended 72 % of its movement away; 3.8 % with the skip at
    step 3, which the float64 test above covers.) Fused: the CPU's fused AdamW, the Python path CUDA
    takes."""
    bad = 0
    if fused:
        monkeypatch.setattr(trainer_mod, "make_adamw", functools.partial(make_adamw, fused=True))
    ms = members(epochs=1, steps_per_epoch=8)

    def pack(overflow: bool) -> Trainer:
        t = scaled(Trainer(tiny_model_cfg(), ms, tiny_corpus(), condition("none")))
        if overflow:
            overflow_at(t, 1, bad)
        t.run()
        return t

    hit, clean = pack(True), pack(False)
    assert hit.scaler.scale.tolist() == [INIT_SCALE, INIT_SCALE / 2, INIT_SCALE]
    for i in (0, 2):
        for name, p in hit.params.items():
            assert torch.equal(p[i], clean.params[name][i]), f"member {i} {name}"
    alone = scaled(Trainer(tiny_model_cfg(), [ms[1]], tiny_corpus(), condition("none")))
    overflow_at(alone, None, bad)
    alone.run()
    assert alone.scaler.scale.tolist() == [INIT_SCALE / 2]
    start = dict(build_model(tiny_model_cfg(), ms[1].qk_init, ms[1].model_seed).named_parameters())
    mine = dict(hit.member_model(1).named_parameters())
    off = moved = 0.0
    for name, p in alone.model.named_parameters():
        if name.endswith("attn.k_proj.bias"):  # rounding noise only (test_model_trainer_pack.py)
            continue
        off = max(off, (mine[name] - p).abs().max().item())
        moved = max(moved, (p - start[name]).abs().max().item())
    assert off <= 0.01 * moved, f"member 1 ends {off:.2e} from its own run, which moved {moved:.2e}"
    assert_weights_close(hit, 1, alone.model, torch.float32)


def test_skipped_norms_are_left_out_of_the_mean(float64) -> None:
    """The epoch's grad_norm with a skipped step = the mean of the other steps' norms, measured by a
    run that records each step's pre-clip norm."""
    (m,) = members(MEMBERS[:1])
    trainer, reports = unpacked(m, bad=True)
    seen: list[float] = []
    ref = scaled(Trainer(tiny_model_cfg(), [m], tiny_corpus(), condition("none")))
    overflow_at(ref, None)
    clip = ref._clip

    def recording(params):
        norms = clip(params)
        seen.append(norms.item())
        return norms

    ref._clip = recording
    ref.run(lambda _, r: None)
    steps = len(seen) // 2
    first = [n for n in seen[:steps] if math.isfinite(n)]
    assert len(first) == steps - 1 and math.isinf(seen[BAD_STEP])
    assert reports[1].run["grad_norm"] == pytest.approx(sum(first) / len(first), rel=1e-12)


def test_scale_follows_grad_scalers_rule() -> None:
    """Halve on an overflow, double after 2000 clean steps: against torch.amp.GradScaler on the CPU."""
    pattern = [False] * 1999 + [True] + [False] * 2001
    mine = MemberScaler(2, torch.device("cpu"), enabled=True)
    theirs = torch.amp.GradScaler("cpu", growth_interval=2000)
    theirs._lazy_init_scale_growth_tracker(torch.device("cpu"))
    for bad in pattern:
        mine.update(torch.tensor([bad, False]))
        found = torch.tensor([1.0 if bad else 0.0])
        torch._amp_update_scale_(theirs._scale, theirs._growth_tracker, found, 2.0, 0.5, 2000)
        assert mine.scale[0].item() == theirs._scale.item()
    assert mine.scale[1].item() == INIT_SCALE * 4  # 4001 clean steps: doubled twice
    state = mine.state_dict()
    other = MemberScaler(2, torch.device("cpu"), enabled=True)
    other.load_state_dict(state)
    assert torch.equal(other.scale, mine.scale) and torch.equal(other.growth, mine.growth)
