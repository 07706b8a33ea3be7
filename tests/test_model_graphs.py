"""model/graphs.py: a recorded step trains exactly as the eager loop does, and whatever cannot be
recorded trains eagerly with one line saying why.

CUDA graphs need a GPU; here ``model.graphs.backend`` is ``helpers.SimulatedGraphs``, which runs
the warm-up calls, records without executing and replays by calling. So these tests check the
bookkeeping around the graph on the CPU, bit for bit against the eager loop: the warm-up steps
leave no trace (weights and AdamW state put back), the batch reaches the static buffers, the
running sums restart each epoch, gradients are dropped after each step, and a resumed run
records again. ``bench/gpu.sh`` checks the real graphs on a GPU.
"""

from __future__ import annotations

import io

import pytest
import torch
from helpers import SimulatedGraphs, tiny_corpus, tiny_model_cfg, tiny_train_cfg

from interventions import Intervention, make_intervention
from model import graphs
from model.scaler import MemberScaler
from model.stack import Member
from model.trainer import Trainer

CONDITIONS = ("none", "forced_k_contraction", "k_spectrum_clamp", "freeze_k", "qk_align_reg")
TIMING = ("wall_s", "tokens_per_s")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def simulated(monkeypatch) -> SimulatedGraphs:
    """Graphs on the CPU: the stand-in backend, and the refusal asked as if the device were CUDA."""
    sim = SimulatedGraphs()
    real = graphs.refusal
    monkeypatch.setattr(graphs, "backend", sim)
    monkeypatch.setattr(graphs, "refusal", lambda device, amp, cond: real(torch.device("cuda"), amp, cond))
    return sim


def cfg(seed: int = 3, **overrides):
    return tiny_train_cfg(**{"lr": 3e-3, "seed": seed, "epochs": 2, "steps_per_epoch": 5, **overrides})


def trainer(cond: str = "none", graphs_on: bool = True, **overrides) -> Trainer:
    return Trainer(tiny_model_cfg(), [Member("qk_identical", 1, cfg(**overrides))], tiny_corpus(),
                   lambda: make_intervention(cond), graphs=graphs_on)


def reports(t) -> list:
    out = []
    t.run(lambda i, r: out.append(r if len(t.members) == 1 else (i, r)))
    return out


def plain(report) -> tuple:
    """A report without its timing columns, comparable with ==."""
    return (report.epoch, {k: v for k, v in report.run.items() if k not in TIMING}, report.layers)


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name


@pytest.mark.parametrize("cond", CONDITIONS)
def test_recorded_step_trains_exactly_as_the_eager_loop(simulated: SimulatedGraphs, cond: str) -> None:
    eager, graphed = trainer(cond, graphs_on=False), trainer(cond)
    assert eager.graph_status == "off: graphs=False" and graphed.graph_status == "on"
    got, want = reports(graphed), reports(eager)
    assert [plain(r) for r in got] == [plain(r) for r in want]
    assert_same_weights(graphed.model, eager.model)
    for a, b in zip(graphed.optimizer.state.values(), eager.optimizer.state.values(), strict=True):
        assert all(torch.equal(a[k], b[k]) for k in b)
    # one step graph and one validation graph, recorded once and replayed every step / epoch
    assert simulated.recorded == 2
    assert simulated.replays == 2 * 5 + 3  # 10 steps; validation at epochs 0, 1, 2
    # into one memory pool, the trainer's (model.memory counts one)
    assert simulated.pools[0] is not None and simulated.pools == [graphed._graph_pool] * 2


@pytest.mark.parametrize("packed", [False, True], ids=["one run", "pack of 2"])
def test_fp16_loss_scaling_is_recorded_and_its_warm_up_leaves_no_trace(simulated: SimulatedGraphs,
                                                                       packed: bool) -> None:
    """fp16 steps are recorded (the loss scaler and a skip stay on the device); the warm-up's steps
    leave the scaler's growth trackers where they were, as the weights and AdamW's state, so the
    recorded run's scale grows at the eager run's step (scaling forced on: the CPU has no fp16)."""
    members = [Member("independent_xavier", 1, cfg(3)), Member("qk_identical", 2, cfg(4))][:2 if packed else 1]

    def run(graphs_on: bool) -> Trainer:
        t = Trainer(tiny_model_cfg(), members, tiny_corpus(), lambda: make_intervention("none"), graphs=graphs_on)
        t.scaler = MemberScaler(len(members), t.device, enabled=True)
        t.run()
        return t

    eager, graphed = run(False), run(True)
    assert graphed.graph_status == "on" and simulated.recorded == 2
    assert graphed.scaler.growth.tolist() == eager.scaler.growth.tolist() == [10] * len(members)
    assert torch.equal(graphed.scaler.scale, eager.scaler.scale)
    for name, p in graphed.params.items():
        assert torch.equal(p, eager.params[name]), name


def test_a_resumed_run_records_again_and_stays_exact(simulated: SimulatedGraphs) -> None:
    first = trainer("forced_k_contraction", epochs=1)
    first.run()
    state = first.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    resumed = trainer("forced_k_contraction")
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    resumed.run()
    # the resumed trainer recorded its own two graphs, into its own one pool
    assert simulated.pools[-2:] == [resumed._graph_pool] * 2 and resumed._graph_pool is not first._graph_pool
    straight = trainer("forced_k_contraction", graphs_on=False)
    straight.run()
    assert_same_weights(resumed.model, straight.model)
    assert resumed.step == straight.step == 10


@pytest.mark.parametrize("cond", ("none", "forced_k_contraction", "k_spectrum_clamp"))
def test_a_recorded_pack_trains_exactly_as_the_eager_pack(simulated: SimulatedGraphs, cond: str) -> None:
    members = [Member("independent_xavier", 1, cfg(3)), Member("qk_identical", 2, cfg(4))]

    def pack(graphs_on: bool) -> Trainer:
        return Trainer(tiny_model_cfg(), members, tiny_corpus(), lambda: make_intervention(cond),
                             graphs=graphs_on)

    eager, graphed = pack(False), pack(True)
    got, want = reports(graphed), reports(eager)
    assert [(i, plain(r)) for i, r in got] == [(i, plain(r)) for i, r in want]
    for name, p in graphed.params.items():
        assert torch.equal(p, eager.params[name]), name
    assert simulated.recorded == 2


def test_a_step_that_cannot_be_recorded_trains_eagerly_and_says_why_once(monkeypatch, capsys) -> None:
    sim = SimulatedGraphs(fail="operation not permitted when stream is capturing\nsecond line")
    real = graphs.refusal
    monkeypatch.setattr(graphs, "backend", sim)
    monkeypatch.setattr(graphs, "refusal", lambda device, amp, cond: real(torch.device("cuda"), amp, cond))
    failing, eager = trainer("forced_k_contraction"), trainer("forced_k_contraction", graphs_on=False)
    got, want = reports(failing), reports(eager)
    assert [plain(r) for r in got] == [plain(r) for r in want]  # the warm-up left no trace
    assert_same_weights(failing.model, eager.model)
    lines = capsys.readouterr().err.strip().splitlines()
    # validation is recorded first (epoch 0); its failure turns the step's graph off too
    assert lines == ["[qkgeom] qk_identical seed 1: CUDA graphs off, training eagerly: recording the validation loss failed: "
                     "RuntimeError: operation not permitted when stream is capturing"]
    assert failing.graph_status.startswith("off: recording the validation loss failed")
    assert sim.recorded == 0


def test_a_step_that_cannot_be_recorded_keeps_the_recorded_validation(monkeypatch, capsys) -> None:
    sim = SimulatedGraphs(fail="CUDA error: operation failed due to a previous error during capture", fail_from=1)
    real = graphs.refusal
    monkeypatch.setattr(graphs, "backend", sim)
    monkeypatch.setattr(graphs, "refusal", lambda device, amp, cond: real(torch.device("cuda"), amp, cond))
    failing, eager = trainer("k_spectrum_clamp"), trainer("k_spectrum_clamp", graphs_on=False)
    assert [plain(r) for r in reports(failing)] == [plain(r) for r in reports(eager)]
    assert_same_weights(failing.model, eager.model)
    assert capsys.readouterr().err.strip().splitlines() == [
        "[qkgeom] qk_identical seed 1: CUDA graphs off, training eagerly: recording the step failed: "
        "RuntimeError: CUDA error: operation failed due to a previous error during capture"]
    assert sim.recorded == 1 and sim.replays == 3  # validation stays recorded: epochs 0, 1, 2


class _Plugin(Intervention):
    """A plugin's condition that declares nothing."""

    name = "plugin_condition"


def test_what_is_refused_before_recording() -> None:
    cuda, none = torch.device("cuda"), Intervention()
    assert graphs.refusal(torch.device("cpu"), None, none) == "not a CUDA device"
    assert graphs.refusal(cuda, torch.bfloat16, none) is None
    assert graphs.refusal(cuda, None, make_intervention("k_spectrum_clamp")) is None
    # fp16 is recorded too: its loss scaling and skipped steps stay on the device (model.optimiser)
    assert graphs.refusal(cuda, torch.float16, none) is None
    assert not _Plugin.graph_safe and "'plugin_condition' does not declare itself graph_safe" in graphs.refusal(
        cuda, torch.bfloat16, _Plugin())


def test_eager_trainer_on_the_cpu_is_unchanged_by_the_graph_switch() -> None:
    """graphs=True on the CPU is the eager loop (no graph, no line): the same bytes."""
    on, off = trainer("none"), trainer("none", graphs_on=False)
    assert on.graph_status == "off: not a CUDA device"
    assert [plain(r) for r in reports(on)] == [plain(r) for r in reports(off)]
