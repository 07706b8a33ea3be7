"""model/graphs.py on a real GPU (marked ``gpu``: ``pytest -m gpu``; skipped without CUDA, so CI
stays green). ``bench/gpu.sh`` runs these first, so the first GPU that runs the script proves the
recorded step right before it measures its speed. The CPU tests (test_model_graphs.py) re-call the
Python step; only a real recording can freeze a hook's state at capture, leave a gradient set to
None inside the graph, or bake a value into it.

For every condition, packed (3 members, if the condition is pack-aware) and unpacked, fp32, bf16
and fp16: N = 12 recorded steps (after the warm-up, whose effect is undone) against N eager steps
from the same seeds: the epoch's losses and norms, every member's weights and every member's
intervention state (``state_dict``). Then what only a GPU shows:

- an fp16 overflow forced into one member's gradient at a chosen step, on the device, so that it is
  recorded into the graph (a factor the gradient is multiplied by, set to inf between replays): the
  masked AdamW step skips that member only (its step count one behind, its scale halved) and the
  recorded run equals the eager one; the member ends where its own run with the same skip ends;
- the validation graph replayed after more training steps, against the eager validation loss at
  the same weights (a graph recorded at the first weights must read the current ones);
- a resumed trainer records again and trains as one that never stopped;
- TF32 on: every legacy reader answers, TF32 reaches cuBLAS, and the recorded step still equals
  the eager one within TF32's rounding;
- ``--compile``: the compiled pack recorded and equal to the eager uncompiled one;
- the pack's AdamW (one step count per member, fused) bit for bit the fused AdamW over the stacked
  tensors; the clamp's timed choice of decomposition; the memory model against the peak.

Tolerances. Replaying launches the kernels the eager step launches, so the two agree bit for bit
except where a kernel is not deterministic from run to run (SDPA's backward accumulates with
atomics; cuBLAS may choose another algorithm while capturing). So each case also trains eagerly a
second time, and the graph may differ from the eager run by at most 4 × the eager runs' own
difference, elementwise, plus a floor:

- fp32 (TF32 off for these tests): rtol 1e-5, atol 1e-5. float32 rounds at ~6e-8; 12 AdamW steps
  of lr 1e-3 normalise each gradient, so a rounding difference in a near-zero gradient becomes
  a step difference of up to lr in the worst case, but stays ~1e-6 for gradients away from zero;
- bf16 autocast: rtol 5e-3, atol 2e-3. bf16 rounds at 4e-3 relative; the weights stay fp32;
- fp16 autocast: rtol 2e-3, atol 1e-3 (fp16 rounds at 5e-4 relative); TF32 (10 mantissa bits, as
  fp16): the same.

The key bias is left out (its gradient is zero in exact arithmetic: it holds only rounding noise,
which AdamW turns into steps of up to lr, as in test_model_trainer_pack.py). What the test exists
to catch is far outside both floors: a frozen hook state, a dropped gradient or a stale optimiser
step moves a weight by ~lr per step, 1e-2 after 12 steps.
"""

from __future__ import annotations

import io
import math
from dataclasses import replace

import pytest
import torch
from helpers import tiny_corpus, tiny_model_cfg, tiny_train_cfg

from interventions import make_intervention, packable_condition
from interventions.spectrum import choose, chosen, clamp_spectrum
from model import graphs as graphs_mod
from model.memory import Shape, estimate
from model.optimiser import MemberAdamW
from model.recipe import native_bf16, resolve_amp, set_tf32
from model.stack import Member
from model.trainer import Trainer

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (pytest -m gpu on a GPU)")]

CONDITIONS = ("none", "forced_k_contraction", "k_spectrum_clamp", "freeze_k", "freeze_q", "qk_align_reg")
STEPS = 12
FLOOR = {"off": (1e-5, 1e-5), "bf16": (5e-3, 2e-3), "fp16": (2e-3, 1e-3), "tf32": (2e-3, 1e-3)}  # (rtol, atol)
SPREAD = 4.0
MEMBERS = (("independent_xavier", 1, 3), ("qk_identical", 2, 4), ("disjoint_support_xavier", 1, 3))


CUDA = torch.device("cuda")
WHERE = "blocks.0.attn.v_proj.weight"  # the weight whose gradient an overflow is forced into


@pytest.fixture(autouse=True)
def no_tf32():
    """TF32 off for every test (set_tf32 writes both of PyTorch's APIs), put back after."""
    legacy = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    set_tf32(False, CUDA)
    yield
    set_tf32(legacy[0], CUDA)
    torch.backends.cudnn.allow_tf32 = legacy[1]


def _trainer(cond: str, packed: bool, amp: str, graphs: bool, epochs: int = 1, compile: bool = False,
             specs=MEMBERS) -> Trainer:
    cfg = tiny_train_cfg(lr=1e-3, epochs=epochs, steps_per_epoch=STEPS, check_every=STEPS, device="cuda", amp=amp,
                         compile=compile)
    specs = specs if packed else specs[:1]
    members = [Member(init, model_seed, replace(cfg, seed=seed)) for init, model_seed, seed in specs]
    return Trainer(tiny_model_cfg(), members, tiny_corpus(), lambda: make_intervention(cond), graphs=graphs)


def _train(cond: str, packed: bool, amp: str, graphs: bool, **kw) -> tuple[Trainer, dict]:
    trainer = _trainer(cond, packed, amp, graphs, **kw)
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
            for amp in ("off", "bf16") if cond != "none" else ("off", "bf16", "fp16"):
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
        def record(fn, pool=None):
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


# -- an fp16 overflow, forced on the device -------------------------------------------------------------


def _poisoned(trainer: Trainer, member: int, at: int | None) -> None:
    """Overflow ``member``'s fp16 gradients at step ``at`` (None: never): one weight's gradient is
    multiplied by a device factor (the multiplication is recorded into the graph with the step), set
    to inf between the replays around step ``at`` (before the first step for ``at`` = 0: the
    warm-up's overflows are undone with the rest of the warm-up)."""
    factor = torch.ones(len(trainer.members), device=CUDA)

    def hook(g: torch.Tensor) -> torch.Tensor:
        f = factor.view(-1, *([1] * (g.dim() - 1))) if trainer.packed else factor[0]
        return g * f.to(g.dtype)

    trainer.params[WHERE].register_hook(hook)
    after = trainer._after_step

    def after_step() -> None:
        after()
        done = trainer.step  # the step that just ran (counted after this hook)
        factor[member] = float("inf") if at is not None and done + 1 == at else 1.0

    trainer._after_step = after_step
    if at == 0:
        factor[member] = float("inf")


def _overflowed(packed: bool, at: int | None, graphs: bool, specs=MEMBERS) -> tuple[Trainer, dict]:
    trainer = _trainer("none", packed, "fp16", graphs, specs=specs)
    _poisoned(trainer, 1 if packed else 0, at)
    means = trainer.train_epoch()
    torch.cuda.synchronize()
    return trainer, means


def _counts(trainer: Trainer) -> list[list[float]]:
    """Every trained tensor's AdamW step count(s)."""
    return [s["step"].reshape(-1).tolist() for s in trainer.optimizer.state.values()]


@pytest.mark.parametrize(("packed", "at"), [(True, 0), (True, 3), (False, 3)], ids=["pack3-step0", "pack3-step3",
                                                                                      "one-step3"])
def test_a_forced_fp16_overflow_skips_that_member_only_in_the_recorded_step(packed: bool, at: int) -> None:
    """The masked step inside the graph: the member that overflowed skips step ``at`` besides any step
    the same run skips on its own (a run without the forced overflow says which): its AdamW step count
    one behind, its scale half, one more skipped step counted; the others as in that run. The
    recorded run equals the eager one; and the member ends where its own run with the same skip ends,
    to fp16 rounding (a pack's shared step count put it ~70 % of its movement away)."""
    bad = 1 if packed else 0
    clean, c_means = _overflowed(packed, None, graphs=False)
    graphed, g_means = _overflowed(packed, at, graphs=True)
    eager, e_means = _overflowed(packed, at, graphs=False)
    again, a_means = _overflowed(packed, at, graphs=False)
    assert graphed.graph_status == "on" and graphed._step_graph is not None
    members = range(len(clean.members))
    for t, means in ((graphed, g_means), (eager, e_means)):
        assert [means[i].skipped for i in members] == [c_means[i].skipped + (i == bad) for i in members]
        assert t.scaler.scale.tolist() == [s / 2 if i == bad else s for i, s in enumerate(clean.scaler.scale.tolist())]
        assert _counts(t) == [[n - (i == bad) for i, n in enumerate(c)] for c in _counts(clean)], _counts(t)
    _assert_within(_means(g_means), _means(e_means), _means(a_means), "fp16", f"overflow at {at}")
    _assert_within(_flat(graphed), _flat(eager), _flat(again), "fp16", f"overflow at {at}")
    if packed:  # the member against its own run (graphed too), which skipped the same step
        alone, _ = _overflowed(False, at, graphs=True, specs=MEMBERS[1:])
        start = dict(_trainer("none", False, "fp16", False, specs=MEMBERS[1:]).model.named_parameters())
        mine = dict(graphed.member_model(1).named_parameters())
        off = moved = 0.0
        for name, p in alone.model.named_parameters():
            if not name.endswith("attn.k_proj.bias"):
                off += (mine[name] - p).double().pow(2).sum().item()
                moved += (p - start[name]).double().pow(2).sum().item()
        assert off <= 0.1**2 * moved, f"member 1 ends {off**0.5:.2e} from its own run, which moved {moved**0.5:.2e}"


# -- what a graph must read afresh -------------------------------------------------------------------------


def test_the_validation_graph_reads_the_current_weights_after_more_replayed_steps() -> None:
    """Three epochs of replayed steps; after each, the replayed validation loss against the eager one
    at the same weights (both graphs share one memory pool: the step's replays must not disturb the
    validation graph's output either)."""
    trainer = _trainer("none", True, "bf16", graphs=True, epochs=3)
    seen = []
    for _ in range(3):
        trainer.train_epoch()
        replayed = trainer.val_losses()
        trainer._val_graphs = False
        eager = trainer.val_losses()
        trainer._val_graphs = True
        assert trainer._val_graph is not None
        for r, e in zip(replayed, eager, strict=True):  # stale weights would be ~1e-2 off
            assert r == pytest.approx(e, rel=1e-3), (replayed, eager)
        seen.append(replayed)
    assert seen[0] != seen[1] != seen[2]  # the weights moved, and the replay saw it


def test_a_resumed_trainer_records_again_and_trains_as_one_that_never_stopped() -> None:
    first = _trainer("forced_k_contraction", True, "bf16", graphs=True, epochs=1)
    first.run()
    buf = io.BytesIO()
    torch.save(first.state_dict(), buf)
    buf.seek(0)
    resumed = _trainer("forced_k_contraction", True, "bf16", graphs=True, epochs=2)
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    resumed.run()
    assert resumed.graph_status == "on" and resumed._step_graph is not None and resumed.step == 2 * STEPS
    straight = _trainer("forced_k_contraction", True, "bf16", graphs=True, epochs=2)
    straight.run()
    eager = _trainer("forced_k_contraction", True, "bf16", graphs=False, epochs=2)
    eager.run()
    _assert_within(_flat(resumed), _flat(straight), _flat(eager), "bf16", "resumed vs straight")


def test_tf32_on_reaches_cublas_leaves_every_reader_working_and_the_graph_exact() -> None:
    set_tf32(True, CUDA)
    assert torch.backends.cuda.matmul.allow_tf32 is True and torch.backends.cudnn.allow_tf32 is True
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cuda.matmul.fp32_precision == "tf32" == torch.backends.cudnn.conv.fp32_precision
    if torch.cuda.get_device_capability(CUDA)[0] >= 8:  # TF32 exists from Ampere on
        g = torch.Generator(device=CUDA).manual_seed(0)
        a, b = (torch.randn(512, 512, device=CUDA, generator=g) for _ in range(2))
        exact = a.double() @ b.double()
        tf32_err = (a @ b - exact).abs().max().item()
        set_tf32(False, CUDA)
        ieee_err = (a @ b - exact).abs().max().item()
        set_tf32(True, CUDA)
        assert tf32_err > 10 * ieee_err, (tf32_err, ieee_err)
    graphed, g_means = _train("none", True, "off", graphs=True)
    eager, e_means = _train("none", True, "off", graphs=False)
    again, a_means = _train("none", True, "off", graphs=False)
    assert graphed.graph_status == "on"
    _assert_within(_flat(graphed), _flat(eager), _flat(again), "tf32", "tf32")


def test_a_compiled_pack_is_recorded_and_trains_as_the_eager_one() -> None:
    compiled, c_means = _train("none", True, "bf16", graphs=True, compile=True)
    eager, e_means = _train("none", True, "bf16", graphs=False)
    again, a_means = _train("none", True, "bf16", graphs=False)
    assert compiled.graph_status == "on" and compiled._step_graph is not None
    assert compiled._forward is not compiled.model  # torch.compile's wrapper
    _assert_within(_means(c_means), _means(e_means), _means(a_means), "bf16", "compiled")
    _assert_within(_flat(compiled), _flat(eager), _flat(again), "bf16", "compiled")


# -- the pieces the plan and the step rely on ----------------------------------------------------------------


def test_the_packs_fused_adamw_is_the_fused_adamw_over_the_stacked_tensors_bit_for_bit() -> None:
    """CUDA's fused kernel has no scalar tail: a member's slices are computed as the whole tensor's
    elements (the CPU's fused kernel rounds a tensor's last elements otherwise)."""
    g = torch.Generator(device=CUDA).manual_seed(0)
    shapes = ((3, 67, 32), (3, 32), (3, 7))
    mine = [torch.randn(s, device=CUDA, generator=g) for s in shapes]
    theirs = [p.clone() for p in mine]
    ours = MemberAdamW([{"params": mine}], 3, lr=1e-3, betas=(0.9, 0.95), fused=True, capturable=True)
    plain = torch.optim.AdamW([{"params": theirs}], lr=1e-3, betas=(0.9, 0.95), fused=True, capturable=True)
    for _ in range(5):
        grads = [torch.randn(s, device=CUDA, generator=g) for s in shapes]
        for p, q, gr in zip(mine, theirs, grads, strict=True):
            p.grad, q.grad = gr.clone(), gr.clone()
        ours.step()
        plain.step()
    for p, q in zip(mine, theirs, strict=True):
        assert torch.equal(p, q)
        assert torch.equal(ours.state[p]["exp_avg_sq"], plain.state[q]["exp_avg_sq"])


def test_the_clamp_times_its_decomposition_once_on_the_gpu() -> None:
    g = torch.Generator(device=CUDA).manual_seed(0)
    w = 0.06 * torch.randn(3, 8, 256, 256, device=CUDA, generator=g)  # about xavier's scale at 256
    sigma0 = torch.linalg.svdvals(w.double()) * 0.9
    method, place = choose(w, sigma0)
    assert chosen(str(w.device)) == (method, place)
    print(f"\n[gpu tests] k_spectrum_clamp at 256², 24 matrices: {method} on {place or 'the GPU'}")
    torch.testing.assert_close(clamp_spectrum(w, sigma0, method, place), clamp_spectrum(w, sigma0, "svd"),
                               rtol=0, atol=1e-6)


def test_the_memory_model_against_a_graphed_packs_peak() -> None:
    """A pack of 3 at the paper's width, depth 2, bf16, recorded: its peak allocation within
    0.6–1.5 × ``model.memory``'s estimate (a plan that trusts the model must not overcommit a GPU)."""
    from model.gpt import GPTConfig
    from model.recipe import TrainConfig

    corpus = tiny_corpus()
    cfg = GPTConfig(vocab_size=corpus.vocab_size, n_layer=2, n_head=4, d_model=256, d_mlp=1024, context=128)
    train = TrainConfig(lr=1e-4, batch_size=64, epochs=1, steps_per_epoch=4, eval_batches=1, probe_seqs=4,
                        device="cuda", amp="bf16")
    members = [Member(init, seed, replace(train, seed=seed)) for init, seed, _ in MEMBERS]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    trainer = Trainer(cfg, members, corpus, graphs=True)
    trainer.train_epoch()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    shape = Shape(256, 2, 4, 1024, corpus.vocab_size, 128, 64, half=True)
    est = estimate(shape, True, len(corpus.train), 1)
    modelled = est.total(3) - est.context
    print(f"\n[gpu tests] memory of a graphed pack of 3 (d 256, L2, bf16, batch 64): peak {peak / 2**20:.0f} MiB, "
          f"model {modelled / 2**20:.0f} MiB (×{peak / modelled:.2f})")
    assert trainer.graph_status == "on"
    assert 0.6 * modelled <= peak <= 1.5 * modelled


def test_the_amp_choice_on_this_gpu() -> None:
    """Printed for bench/gpu.sh's log: what ``--amp auto`` trains in here, and a trainer's forward
    really computes in it (bf16 only where native: compute capability 8.0 on)."""
    cc = torch.cuda.get_device_capability(CUDA)
    chosen_dtype = resolve_amp("auto", CUDA)
    print(f"\n[gpu tests] {torch.cuda.get_device_name(CUDA)} (compute capability {cc[0]}.{cc[1]}): "
          f"--amp auto trains in {chosen_dtype}; bf16 native: {native_bf16(CUDA)}, "
          f"with emulation: {torch.cuda.is_bf16_supported(including_emulation=True)}")
    assert chosen_dtype == (torch.bfloat16 if cc[0] >= 8 else torch.float16)
    trainer = _trainer("none", False, "auto", graphs=True)
    assert trainer.amp_dtype == chosen_dtype and trainer.scaler.enabled == (chosen_dtype == torch.float16)
    x, y = trainer.val_x[:2], trainer.val_y[:2]
    with trainer._autocast():
        logits, loss = trainer.forward(x, y)
    assert logits.dtype == chosen_dtype and loss.dtype == torch.float32 and math.isfinite(loss.item())
