"""model/trainer.py with several members (SPEC §5.1): a pack equals its members' one-run ``Trainer``s.

Every comparison is against independent one-member Trainers (float64 unless said otherwise).
Weights are compared with an absolute floor, and in float32 without the key bias: its gradient
is zero in exact arithmetic (softmax is shift-invariant per query), so it holds only rounding
noise, which AdamW's normalisation turns into steps of up to lr (float64: ~1e-13 after 20 steps;
float32, or forced_k_contraction's float32 loss: up to ~1e-4, different in every run however it
is computed, packed or not).
"""

from __future__ import annotations

import io
import math
from dataclasses import replace

import pytest
import torch
from helpers import random_tokens, tiny_corpus, tiny_model_cfg, tiny_train_cfg

from interventions import Intervention, make_intervention, packable_condition
from interventions.freeze import FreezeK
from model.qk_init import build_model
from model.recipe import compile_model
from model.report import EpochReport
from model.stack import Member, check_packable
from model.trainer import Trainer

CONDITIONS = ("none", "forced_k_contraction", "k_spectrum_clamp", "freeze_k", "freeze_q", "qk_align_reg")
TIMING = ("wall_s", "tokens_per_s")
EPOCHS, STEPS = 2, 10  # 20 steps
#: (init, weight seed, batch seed): three inits, two seeds mixed
MEMBERS = (("independent_xavier", 1, 3), ("qk_identical", 2, 4), ("disjoint_support_xavier", 1, 3))
# (relative, absolute floor for weights). The float64 floor: k_proj's bias has no gradient in exact
# arithmetic (softmax ignores a shift of every key's score), so its value is AdamW's rounding noise,
# lr · noise / eps ≈ 1e-12 a step: it differs between a pack and a run by that much on PyTorch's
# portable kernels (ATEN_CPU_CAPABILITY=default), 1e-6 of the other weights' scale below any real change.
TOL = {torch.float64: (1e-9, 1e-10), torch.float32: (1e-4, 1e-6)}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(params=[torch.float64], ids=["float64"])
def dtype(request):
    """The default dtype for the test (weights built by build_model take it), restored after."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(request.param)
    yield request.param
    torch.set_default_dtype(old)


def train_cfg(seed: int, **overrides):
    return tiny_train_cfg(**{"lr": 3e-3, "seed": seed, "epochs": EPOCHS, "steps_per_epoch": STEPS, **overrides})


def members(specs=MEMBERS, **overrides) -> list[Member]:
    return [Member(init, model_seed, train_cfg(seed, **overrides)) for init, model_seed, seed in specs]


def condition(name: str):
    return lambda: make_intervention(name)


def run_pack(pack: Trainer, on_epoch=None) -> dict[int, list[EpochReport]]:
    reports: dict[int, list[EpochReport]] = {i: [] for i in range(len(pack.members))}

    def record(i: int, report: EpochReport) -> None:
        reports[i].append(report)
        if on_epoch is not None:
            on_epoch(i, report)

    pack.run(record)
    return reports


def run_unpacked(member: Member, cond: str = "none", on_epoch=None) -> tuple[Trainer, list[EpochReport]]:
    trainer = Trainer(tiny_model_cfg(), [member], tiny_corpus(), condition(cond))
    reports: list[EpochReport] = []

    def record(_: int, report: EpochReport) -> None:
        reports.append(report)
        if on_epoch is not None:
            on_epoch(trainer, report)

    trainer.run(record)
    return trainer, reports


def assert_value_close(a, b, rtol: float, where: str) -> None:
    if isinstance(a, list):
        assert len(a) == len(b), where
        for x, y in zip(a, b, strict=True):
            assert_value_close(x, y, rtol, where)
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    elif isinstance(a, float):
        assert b == pytest.approx(a, rel=rtol, abs=rtol * 1e-3), f"{where}: {b!r} vs unpacked {a!r}"
    else:
        assert a == b, f"{where}: {b!r} vs unpacked {a!r}"


def assert_reports_close(packed: list[EpochReport], unpacked: list[EpochReport], rtol: float) -> None:
    """Same epochs, statuses, keys; every value within ``rtol`` (timing columns aside)."""
    assert [(r.epoch, r.run["status"]) for r in packed] == [(r.epoch, r.run["status"]) for r in unpacked]
    for p, u in zip(packed, unpacked, strict=True):
        assert p.run.keys() == u.run.keys()
        for key in p.run.keys() - set(TIMING):
            assert_value_close(u.run[key], p.run[key], rtol, f"epoch {u.epoch} {key}")
        assert len(p.layers) == len(u.layers)
        for row_p, row_u in zip(p.layers, u.layers, strict=True):
            assert row_p.keys() == row_u.keys()
            for key in row_u:
                assert_value_close(row_u[key], row_p[key], rtol, f"epoch {u.epoch} layer {row_u['layer']} {key}")


def assert_weights_close(pack: Trainer, i: int, model: torch.nn.Module, dtype: torch.dtype,
                         cond: str = "none") -> None:
    rtol, atol = TOL[dtype]
    mine = dict(pack.member_model(i).named_parameters())
    noisy_k_bias = dtype == torch.float32 or cond == "forced_k_contraction"
    for name, p in model.named_parameters():
        if noisy_k_bias and name.endswith("attn.k_proj.bias"):
            continue
        torch.testing.assert_close(mine[name], p.detach(), rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"], indirect=True)
def test_pack_of_three_equals_three_unpacked_trainers(dtype: torch.dtype) -> None:
    ms = members()
    pack = Trainer(tiny_model_cfg(), ms, tiny_corpus())
    initial = [pack.member_model(i) for i in range(len(ms))]
    packed = run_pack(pack)
    assert pack.statuses == ["completed"] * 3 and pack.epoch == EPOCHS
    for i, m in enumerate(ms):
        # initial weights bit-identical to build_model's
        for name, p in build_model(tiny_model_cfg(), m.qk_init, m.model_seed).named_parameters():
            assert torch.equal(dict(initial[i].named_parameters())[name], p), name
        trainer, unpacked = run_unpacked(m)
        assert_reports_close(packed[i], unpacked, TOL[dtype][0])
        assert_weights_close(pack, i, trainer.model, dtype)
    # the members really differ (a pack that trained one model thrice would fail above)
    assert packed[0][-1].run["train_loss"] != packed[1][-1].run["train_loss"]


@pytest.mark.parametrize("cond", CONDITIONS)
def test_each_condition_packed_equals_unpacked(cond: str, dtype: torch.dtype) -> None:
    ms = members(MEMBERS[:2])
    pack = Trainer(tiny_model_cfg(), ms, tiny_corpus(), condition(cond))
    packed = run_pack(pack)
    for i, m in enumerate(ms):
        trainer, unpacked = run_unpacked(m, cond)
        assert_reports_close(packed[i], unpacked, TOL[dtype][0])
        assert_weights_close(pack, i, trainer.model, dtype, cond)
        if cond == "freeze_k":  # frozen: still the initial weights, exactly
            initial = build_model(tiny_model_cfg(), m.qk_init, m.model_seed)
            assert torch.equal(pack.member_model(i).blocks[1].attn.k_proj.weight, initial.blocks[1].attn.k_proj.weight)


def test_packed_forward_equals_plain_gpt_forward_member_by_member(dtype: torch.dtype) -> None:
    ms = members()
    pack = Trainer(tiny_model_cfg(), ms, tiny_corpus())
    V = tiny_model_cfg().vocab_size
    x = torch.stack([random_tokens(4, 16, V, seed=i) for i in range(3)])  # [M, B, T]
    y = torch.stack([random_tokens(4, 16, V, seed=10 + i) for i in range(3)])
    logits, loss = pack.forward(x, y)
    assert logits.shape == (3, 4, 16, V) and loss.shape == (3,)
    for i, m in enumerate(ms):
        plain_logits, plain_loss = build_model(tiny_model_cfg(), m.qk_init, m.model_seed)(x[i], y[i])
        torch.testing.assert_close(logits[i], plain_logits, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(loss[i], plain_loss, rtol=1e-12, atol=0)
    assert not torch.allclose(logits[0], logits[1])


def _scale_gradients(params: dict[str, torch.Tensor], scale: torch.Tensor) -> None:
    """Multiply each gradient by ``scale`` (broadcast from the front) before it accumulates."""
    for p in params.values():
        if p.requires_grad:
            p.register_hook(lambda g, s=scale: g * s.view(-1, *([1] * (g.dim() - 1))).to(g.dtype))


def test_each_member_is_clipped_by_its_own_gradient_norm(dtype: torch.dtype) -> None:
    ms = members()
    pack = Trainer(tiny_model_cfg(), ms, tiny_corpus())
    _scale_gradients(pack.params, torch.tensor([1.0, 100.0, 1.0]))  # member 1's gradients 100× larger
    packed = run_pack(pack)
    for i in (0, 2):  # a norm over the whole stack would have shrunk their updates
        trainer, unpacked = run_unpacked(ms[i])
        assert_reports_close(packed[i], unpacked, 1e-9)
        assert_weights_close(pack, i, trainer.model, dtype)
    # member 1 equals an unpacked run whose gradients are 100× larger: clipped to its own norm
    trainer = Trainer(tiny_model_cfg(), [ms[1]], tiny_corpus())
    _scale_gradients(dict(trainer.model.named_parameters()), torch.tensor([100.0]))
    unpacked: list[EpochReport] = []
    trainer.run(lambda _, report: unpacked.append(report))
    assert_reports_close(packed[1], unpacked, 1e-9)
    assert_weights_close(pack, 1, trainer.model, dtype)
    assert packed[1][1].run["grad_norm"] > 50 * packed[0][1].run["grad_norm"]


@pytest.mark.parametrize("check_every", [1, 25])
@pytest.mark.parametrize("cond", ["none", "k_spectrum_clamp"])
def test_a_diverged_member_stops_and_the_others_carry_on(check_every: int, cond: str, dtype: torch.dtype) -> None:
    ms = members(check_every=check_every, epochs=3)
    pack = Trainer(tiny_model_cfg(), ms, tiny_corpus(), condition(cond))

    def poison(i: int, report: EpochReport) -> None:
        if report.epoch == 0 and i == 1:
            with torch.no_grad():
                pack.params["blocks.0.attn.v_proj.weight"][1].fill_(float("nan"))

    packed = run_pack(pack, poison)
    assert pack.statuses == ["completed", "diverged", "completed"]
    assert [r.epoch for r in packed[1]] == [0, 1]  # no report after the divergence
    last = packed[1][-1]
    assert last.run["status"] == "diverged" and math.isnan(last.run["train_loss"])
    steps = 1 if check_every == 1 else STEPS
    assert last.run["tokens_seen"] == steps * 8 * 16 and last.layers == []
    if cond == "none":  # the unpacked run of the poisoned member reports the same
        def poison_unpacked(trainer: Trainer, report: EpochReport) -> None:
            if report.epoch == 0:
                with torch.no_grad():
                    trainer.model.blocks[0].attn.v_proj.weight.fill_(float("nan"))

        _, unpacked = run_unpacked(ms[1], cond, poison_unpacked)
        assert_reports_close(packed[1], unpacked, 1e-9)
    for i in (0, 2):
        trainer, unpacked = run_unpacked(ms[i], cond)
        assert_reports_close(packed[i], unpacked, 1e-9)
        assert_weights_close(pack, i, trainer.model, dtype)


class _Stop(Exception):
    pass


@pytest.mark.parametrize("stop_at", [0, 1])
def test_resume_is_bit_identical(stop_at: int, dtype: torch.dtype) -> None:
    ms = members(MEMBERS[:2], epochs=3)
    make = lambda: Trainer(tiny_model_cfg(), ms, tiny_corpus(), condition("k_spectrum_clamp"))  # noqa: E731
    full = make()
    full_reports = run_pack(full)
    first = make()
    saved = io.BytesIO()

    def stop(i: int, report: EpochReport) -> None:
        if report.epoch == stop_at and i == first.reporting[-1]:  # after the epoch's last report
            torch.save(first.state_dict(), saved)
            raise _Stop

    with pytest.raises(_Stop):
        first.run(stop)
    saved.seek(0)
    torch.manual_seed(999)
    resumed = make()
    resumed.load_state_dict(torch.load(saved, weights_only=False))
    reports = run_pack(resumed)
    first_epoch = 0 if stop_at == 0 else stop_at + 1
    for i in range(2):
        assert [r.epoch for r in reports[i]] == list(range(first_epoch, 4))
        for mine, theirs in zip(reports[i], full_reports[i][first_epoch:], strict=True):
            assert (mine.epoch, mine.run["status"], mine.layers) == (theirs.epoch, theirs.run["status"], theirs.layers)
            assert {k: v for k, v in mine.run.items() if k not in TIMING} == \
                {k: v for k, v in theirs.run.items() if k not in TIMING}
    for name, t in full.params.items():
        assert torch.equal(resumed.params[name], t), name
    # the resumed pack really continued from the state: a fresh one differs
    assert not torch.equal(make().params["blocks.0.attn.k_proj.weight"], full.params["blocks.0.attn.k_proj.weight"])


def test_check_packable_names_what_differs() -> None:
    ms = members()
    check_packable(ms)  # seeds, inits and weight seeds may differ
    with pytest.raises(ValueError, match=r"member 2 has another schedule.*lr 0\.001 vs 0\.003"):
        check_packable(ms[:2] + [replace(ms[2], train=replace(ms[2].train, lr=1e-3))])
    with pytest.raises(ValueError, match=r"schedule.*steps_per_epoch 5 vs 10"):
        check_packable(ms[:1] + [replace(ms[1], train=replace(ms[1].train, steps_per_epoch=5))])
    with pytest.raises(ValueError, match=r"member 1 has another shape.*n_layer 3 vs 2"):
        check_packable(ms[:2], model_cfgs=[tiny_model_cfg(), tiny_model_cfg(n_layer=3)])
    with pytest.raises(ValueError, match=r"member 1 has another condition.*freeze_q.*freeze_k"):
        check_packable(ms[:2], conditions=[make_intervention("freeze_k"), make_intervention("freeze_q")])
    with pytest.raises(ValueError, match=r"another condition.*lam.*0\.1.*0\.05"):
        check_packable(ms[:2], conditions=[make_intervention("forced_k_contraction"),
                                           make_intervention("forced_k_contraction", lam=0.1)])
    with pytest.raises(ValueError, match="at least one member"):
        check_packable([])
    with pytest.raises(ValueError, match="another schedule"):
        Trainer(tiny_model_cfg(), ms[:1] + [replace(ms[1], train=replace(ms[1].train, batch_size=4))],
                      tiny_corpus())


class _PluginFreeze(FreezeK):
    """A plugin's condition that does not declare itself pack-aware."""


class _PackAwarePlugin(FreezeK):
    pack_aware = True


def test_only_pack_aware_conditions_run_packed(registries) -> None:
    _, registry = registries
    assert all(packable_condition(name) for name in CONDITIONS)
    assert Intervention.pack_aware and not _PluginFreeze.pack_aware and _PackAwarePlugin.pack_aware
    registry["plugin_freeze"] = _PluginFreeze
    assert not packable_condition("plugin_freeze")
    with pytest.raises(ValueError, match="unknown intervention 'bogus'"):
        packable_condition("bogus")
    with pytest.raises(ValueError, match="does not declare itself pack_aware.*unpacked"):
        Trainer(tiny_model_cfg(), members(), tiny_corpus(), _PluginFreeze)


def _one_step(pack: Trainer, forward, x: torch.Tensor, y: torch.Tensor):
    """Each member's loss, loss + extra loss and gradients of one step through ``forward``."""
    pack._forward = forward
    loss, total = pack._losses(x, y)
    total.sum().backward()
    grads = {n: p.grad.clone() for n, p in pack.params.items() if p.grad is not None}
    pack.optimizer.zero_grad(set_to_none=True)
    return loss.detach(), total.detach(), grads


@pytest.mark.parametrize("dtype", [torch.float32], ids=["float32"], indirect=True)
def test_the_compiled_pack_equals_the_eager_pack(dtype: torch.dtype) -> None:
    """torch.compile of the packed GPT (inductor, on the CPU here; ``--compile`` on CUDA) traces as one
    graph (no graph break) and gives the eager pack's losses and gradients. Then a pack without
    hooks and one with capture hooks (forced_k_contraction) compiled in turn in the same process, as
    in a Ray worker that trains one trial after another: dynamo must not replay the hook-less graph
    (``compile_model`` guards on hooks; aot_eager: the same tracing, without inductor's C++ build)."""
    V = tiny_model_cfg().vocab_size
    x = torch.stack([random_tokens(4, 16, V, seed=i) for i in range(2)])
    y = torch.stack([random_tokens(4, 16, V, seed=10 + i) for i in range(2)])
    for cond, backend in (("none", "inductor"), ("none", "aot_eager"), ("forced_k_contraction", "aot_eager")):
        pack = Trainer(tiny_model_cfg(), members(MEMBERS[:2]), tiny_corpus(), condition(cond))
        eager = _one_step(pack, pack.model, x, y)
        torch._dynamo.utils.counters.clear()
        got = _one_step(pack, compile_model(pack.model, backend), x, y)
        assert not torch._dynamo.utils.counters["graph_break"], dict(torch._dynamo.utils.counters["graph_break"])
        torch.testing.assert_close(got[0], eager[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got[1], eager[1], rtol=1e-5, atol=1e-6)
        assert got[2].keys() == eager[2].keys()
        for name in eager[2]:
            torch.testing.assert_close(got[2][name], eager[2][name], rtol=1e-4, atol=1e-6, msg=name)


def test_members_share_one_device_copy_of_the_splits() -> None:
    """A pack holds one copy of the training split (the corpus is uint16: each sampler converting it
    on its own would make M int32 copies) and one of the validation windows."""
    pack = Trainer(tiny_model_cfg(), members(), tiny_corpus(), condition("none"))
    ptrs = {s.data.untyped_storage().data_ptr() for s in pack.samplers}
    assert len(ptrs) == 1 and len(pack.samplers) == 3
    assert pack.samplers[0].data.dtype == torch.int32 and len(pack.samplers[0].data) == len(tiny_corpus().train)
    assert pack.val_x.untyped_storage().data_ptr() != next(iter(ptrs))  # the fixed windows: their own, once
