"""model/graphs.py on a real GPU (marked ``gpu``: ``pytest -m gpu``; skipped without CUDA, so CI
stays green). ``bench/gpu.sh`` runs these first, so the first GPU that runs the script proves the
recorded step right before it measures its speed. The CPU tests (test_model_graphs.py) re-call the
Python step; only a real recording can freeze a hook's state at capture, leave a gradient set to
None inside the graph, or bake a value into it.

For every condition, packed (3 members, if the condition is pack-aware) and unpacked, fp32 and bf16:
N = 12 recorded steps (after the warm-up, whose effect is undone) against N eager steps from the
same seeds: the epoch's losses and norms, every member's weights and every member's intervention
state (``state_dict``).

Tolerances. Replaying launches the kernels the eager step launches, so the two agree bit for bit
except where a kernel is not deterministic from run to run (SDPA's backward accumulates with
atomics; cuBLAS may choose another algorithm while capturing). So each case also trains eagerly a
second time, and the graph may differ from the eager run by at most 4 × the eager runs' own
difference, elementwise, plus a floor:

- fp32 (TF32 off for these tests): rtol 1e-5, atol 1e-5. float32 rounds at ~6e-8; 12 AdamW steps
  of lr 1e-3 normalise each gradient, so a rounding difference in a near-zero gradient becomes
  a step difference of up to lr in the worst case, but stays ~1e-6 for gradients away from zero;
- bf16 autocast: rtol 5e-3, atol 2e-3. bf16 rounds at 4e-3 relative; the weights stay fp32.

The key bias is left out (its gradient is zero in exact arithmetic: it holds only rounding noise,
which AdamW turns into steps of up to lr, as in test_model_trainer_pack.py). What the test exists
to catch is far outside both floors: a frozen hook state, a dropped gradient or a stale optimiser
step moves a weight by ~lr per step, 1e-2 after 12 steps.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from helpers import tiny_corpus, tiny_model_cfg, tiny_train_cfg

from interventions import make_intervention, packable_condition
from model import graphs as graphs_mod
from model.recipe import native_bf16, resolve_amp, set_tf32
from model.stack import Member
from model.trainer import Trainer

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pytest -m gpu on a GPU)")]

CONDITIONS = ("none", "forced_k_contraction", "k_spectrum_clamp", "freeze_k", "freeze_q", "qk_align_reg")
STEPS = 12
FLOOR = {"off": (1e-5, 1e-5), "bf16": (5e-3, 2e-3)}  # (rtol, atol), see the docstring
SPREAD = 4.0
MEMBERS = (("independent_xavier", 1, 3), ("qk_identical", 2, 4), ("disjoint_support_xavier", 1, 3))


@pytest.fixture(autouse=True)
def no_tf32():
    saved = torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision
    set_tf32(False, torch.device("cuda"))
    yield
    torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = saved


def _trainer(cond: str, packed: bool, amp: str, graphs: bool) -> Trainer:
    cfg = tiny_train_cfg(lr=1e-3, epochs=1, steps_per_epoch=STEPS, check_every=STEPS, device="cuda", amp=amp)
    specs = MEMBERS if packed else MEMBERS[:1]
    members = [Member(init, model_seed, replace(cfg, seed=seed)) for init, model_seed, seed in specs]
    return Trainer(tiny_model_cfg(), members, tiny_corpus(), lambda: make_intervention(cond), graphs=graphs)


def _train(cond: str, packed: bool, amp: str, graphs: bool) -> tuple[Trainer, dict]:
    trainer = _trainer(cond, packed, amp, graphs)
    means = trainer.train_epoch()
    torch.cuda.synchronize()
    return trainer, means


def _flat(trainer: Trainer) -> dict[str, torch.Tensor]:
    """Every compared value, by name: each member's weights (key bias aside) and intervention state."""
    out: dict[str, torch.Tensor] = {}
    for i in range(len(trainer.members)):
        for name, p in trainer.member_model(i).named_parameters():
            if not name.endswith("attn.k_proj.bias"):
                out[f"member {i} {name}"] = p.detach().float().cpu()
        _state(out, f"member {i} intervention", trainer.interventions[i].state_dict())
    return out


def _state(out: dict, prefix: str, value) -> None:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            out[prefix] = value.detach().float().cpu()
    elif isinstance(value, dict):
        for k, v in value.items():
            _state(out, f"{prefix}.{k}", v)
    elif isinstance(value, list | tuple):
        for k, v in enumerate(value):
            _state(out, f"{prefix}[{k}]", v)
    elif isinstance(value, float):
        out[prefix] = torch.tensor([value])


def _means(means: dict) -> dict[str, torch.Tensor]:
    out = {}
    for i, m in means.items():
        out[f"member {i} train_loss"] = torch.tensor([m.loss])
        out[f"member {i} grad_norm"] = torch.tensor([m.grad_norm])
        out[f"member {i} grad_qk"] = m.grad_qk.float()
    return out


def _assert_within(graph: dict, eager: dict, again: dict, amp: str, what: str) -> None:
    rtol, atol = FLOOR[amp]
    assert graph.keys() == eager.keys() == again.keys(), what
    for key in eager:
        g, e, e2 = graph[key], eager[key], again[key]
        allowed = SPREAD * (e - e2).abs() + atol + rtol * e.abs()
        excess = ((g - e).abs() - allowed).max().item()
        assert excess <= 0, (f"{what}: {key}: recorded vs eager differs by {(g - e).abs().max().item():.3g}, "
                             f"eager vs eager by {(e - e2).abs().max().item():.3g}")


def _cases():
    for cond in CONDITIONS:
        for packed in (False, True):
            if packed and not packable_condition(cond):
                continue
            for amp in ("off", "bf16"):
                yield pytest.param(cond, packed, amp, id=f"{cond}-{'pack3' if packed else 'one'}-{amp}")


@pytest.mark.parametrize(("cond", "packed", "amp"), list(_cases()))
def test_recorded_steps_equal_eager_steps(cond: str, packed: bool, amp: str) -> None:
    if amp == "bf16" and not torch.cuda.is_bf16_supported(including_emulation=True):
        pytest.skip("no bf16 on this GPU, not even emulated")
    graphed, g_means = _train(cond, packed, amp, graphs=True)
    eager, e_means = _train(cond, packed, amp, graphs=False)
    again, a_means = _train(cond, packed, amp, graphs=False)
    safe = type(graphed.interventions[0]).graph_safe
    assert (graphed._step_graph is not None) == safe, graphed.graph_status  # recorded, or refused up front
    assert graphed.graph_status == "on" if safe else graphed.graph_status.startswith("off: condition")
    assert all(math.isfinite(m.loss) for m in g_means.values())
    what = f"{cond} {'pack of 3' if packed else 'one run'} amp {amp}"
    _assert_within(_means(g_means), _means(e_means), _means(a_means), amp, what)
    _assert_within(_flat(graphed), _flat(eager), _flat(again), amp, what)
    # the validation loss is replayed too
    val_g, val_e = graphed.val_losses(), eager.val_losses()
    for vg, ve in zip(val_g, val_e, strict=True):
        assert vg == pytest.approx(ve, rel=FLOOR[amp][0] * 10, abs=FLOOR[amp][1] * 10), what


def test_a_failed_recording_falls_back_with_one_line(monkeypatch, capfd) -> None:
    class Broken(graphs_mod.CudaGraphs):
        @staticmethod
        def record(fn):
            raise RuntimeError("capture refused (test)")

    monkeypatch.setattr(graphs_mod, "backend", Broken())
    trainer, means = _train("none", True, "off", graphs=True)
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "CUDA graphs off" in line]
    assert len(lines) == 1 and "capture refused (test)" in lines[0], err
    assert trainer.graph_status.startswith("off: recording the step failed") and trainer._step_graph is None
    monkeypatch.undo()
    eager, e_means = _train("none", True, "off", graphs=False)
    again, a_means = _train("none", True, "off", graphs=False)
    _assert_within(_flat(trainer), _flat(eager), _flat(again), "off", "fallen back")


def test_fp16_packs_train_with_per_member_loss_scaling() -> None:
    trainer, means = _train("none", True, "fp16", graphs=True)
    assert trainer.amp_dtype == torch.float16 and trainer.scaler.enabled
    assert trainer.graph_status.startswith("off: fp16 autocast")
    assert all(math.isfinite(m.loss) and m.skipped is not None for m in means.values())


def test_the_amp_choice_on_this_gpu() -> None:
    """Printed for bench/gpu.sh's log: what ``--amp auto`` trains in here."""
    device = torch.device("cuda")
    cc = torch.cuda.get_device_capability(device)
    chosen = resolve_amp("auto", device)
    print(f"\n[gpu tests] {torch.cuda.get_device_name(device)} (compute capability {cc[0]}.{cc[1]}): "
          f"--amp auto trains in {chosen}; bf16 native: {native_bf16(device)}, "
          f"with emulation: {torch.cuda.is_bf16_supported(including_emulation=True)}")
    assert chosen == (torch.bfloat16 if cc[0] >= 8 else torch.float16)
