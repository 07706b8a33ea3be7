"""How long a demo tier will take on *this* machine: a few timed steps per shape, then arithmetic.

No Ray here (it runs before Ray starts, so Ray's processes do not compete with the timing).
``measure(presets, corpus)`` builds one ``Trainer`` per depth the presets use, times ``steps``
optimiser steps on one torch thread (after one warm-up step) and one epoch's probe +
validation; ``sweep_seconds(preset, costs, cores)`` replays Tune's first-in, first-out
placement of the grid's trials onto ``cores`` one-CPU slots and divides by the share of the
machine a sweep turns into training (``SWEEP_EFFICIENCY``, measured; LOG.md). A resumed demo
counts only the work left: ``epochs_done`` reads what the store already holds.

Every timing goes through a ``clock`` (``time.perf_counter`` by default) and a ``cpu_clock``
(``time.process_time``), so a test can drive the whole estimate with fake ones. The two differ
when other programs share the cores: the estimate follows the wall clock (what this machine
gives now), and ``busy`` says how much slower that is than the steps' own CPU time (what an
otherwise idle machine would give).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from sweep.presets import Preset

Clock = Callable[[], float]

#: Trainer wall time over (sweep wall × cores), measured around Tune on the 2-core machines with
#: Ray's background processes trimmed (``sweep.ray_env``): trial start, reports, checkpoints,
#: store writes and Ray's own processes take the rest (LOG.md, the demo's minutes).
SWEEP_EFFICIENCY = 0.9
#: Per trial, besides its epochs: building the Trainer, the epoch-0 probe, the last checkpoint.
TRIAL_START_S = 1.0


@dataclass(frozen=True)
class ShapeCost:
    """What one trial of a depth costs on this machine, in seconds of one core."""

    step_s: float  # one optimiser step
    epoch_s: float  # one epoch's probe of every layer + validation loss
    cpu_step_s: float | None = None  # the step's own CPU time (None: not measured)

    @property
    def busy(self) -> float:
        """Wall time over CPU time of a step: 1 on an idle machine, 3 when it got a third of a core."""
        return self.step_s / self.cpu_step_s if self.cpu_step_s else 1.0


def time_per_call(fn: Callable[[], object], calls: int, clock: Clock) -> float:
    """Seconds per call of ``fn``: one untimed warm-up call, then ``calls`` timed back to back."""
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    fn()
    t0 = clock()
    for _ in range(calls):
        fn()
    return (clock() - t0) / calls


def measure(presets: Iterable[Preset], corpus, steps: int = 3, clock: Clock | None = None,
            cpu_clock: Clock | None = None, threads: int = 1) -> dict[int, ShapeCost]:
    """Time ``steps`` optimiser steps and one probe per depth the presets use (seconds in all).

    Every preset must share one model width (the demo tiers do); the first preset's shape,
    its first init and seed, and the ``none`` condition stand for every cell of that depth
    (the interventions cost the same as ``none`` within ±15 %, LOG.md).
    """
    import time

    import torch

    from metrics.probe import probe_layers
    from model.stack import Member
    from model.trainer import Trainer

    clock = clock or time.perf_counter
    cpu_clock = cpu_clock or time.process_time
    presets = list(presets)
    first = presets[0]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    costs: dict[int, ShapeCost] = {}
    try:
        for depth in sorted({d for p in presets for d in p.depths}):
            member = Member(first.inits[0], first.seeds[0],
                            replace(first.train_config(first.seeds[0], "cpu"), steps_per_epoch=1))
            trainer = Trainer(first.model_config(depth, corpus.vocab_size), [member], corpus)
            c0 = cpu_clock()
            step_s = time_per_call(trainer.train_epoch, steps, clock)  # one step per "epoch"
            cpu_step_s = (cpu_clock() - c0) / (steps + 1)  # the warm-up step included
            epoch_s = time_per_call(lambda t=trainer: (probe_layers(t.model, t.probe_x), t.val_losses()), 1, clock)
            costs[depth] = ShapeCost(step_s, epoch_s, cpu_step_s)
    finally:
        torch.set_num_threads(previous)
    return costs


def trial_seconds(preset: Preset, depth: int, costs: dict[int, ShapeCost], done: int = 0) -> float:
    """One trial of ``depth`` on one core: its epochs' steps and probes, epoch 0's probe, its start;
    ``done`` epochs already trained (a resumed trial starts from that checkpoint: its epochs left and
    its start; none when it finished)."""
    c, t = costs[depth], preset.train
    if t.steps_per_epoch is None:
        raise ValueError(f"preset {preset.name!r}: steps_per_epoch None (a pass over the corpus) is not estimated")
    if done >= t.epochs:
        return 0.0
    return (t.epochs - done) * (t.steps_per_epoch * c.step_s + c.epoch_s) + (0.0 if done else c.epoch_s) \
        + TRIAL_START_S


def sweep_seconds(preset: Preset, costs: dict[int, ShapeCost], cores: int, cpus_per_trial: float = 1.0,
                  efficiency: float = SWEEP_EFFICIENCY, done: dict[str, int] | None = None) -> float:
    """Wall seconds of the preset's sweep: its trials, in grid order, each to the first free slot;
    ``done``: epochs already trained by run id (``epochs_done``), so that a resumed sweep's estimate
    is of the work left."""
    done = done or {}
    slots = max(1, math.floor(cores / cpus_per_trial))
    free = [0.0] * slots
    for cell in preset.cells():
        heapq.heappush(free, heapq.heappop(free) + trial_seconds(preset, cell.depth, costs, done.get(cell.run_id, 0)))
    return max(free) / efficiency


def epochs_done(epochs, presets: Iterable[Preset], checkpoint_every: int) -> dict[str, int]:
    """Epochs of each run of ``presets`` a resumed sweep need not train again, from the store's
    ``epochs`` table (run_id, epoch; a DataFrame): a finished run's all, a cut one's up to its last
    checkpoint (a multiple of ``checkpoint_every`` at or below its last stored epoch: it restarts
    there)."""
    if epochs is None or len(epochs) == 0:
        return {}
    last = epochs.groupby("run_id")["epoch"].max()
    out = {}
    for p in presets:
        for cell in p.cells():
            e = int(last.get(cell.run_id, 0))
            out[cell.run_id] = e if e >= p.train.epochs else e - e % max(1, checkpoint_every)
    return {k: v for k, v in out.items() if v > 0}


def expected_line(expected: dict[str, float], cores: int, presets: Iterable[Preset], done: dict[str, int],
                  rounds: bool = False) -> str:
    """``expected ≈ 12 min on 2 cores (baseline ≈ 5 min, interventions ≈ 6 min)``, or on a run again
    ``work left ≈ 6 min on 2 cores (20 of 48 runs already trained, 3 started; baseline ≈ …)``:
    ``expected`` by part (``sweep_seconds`` with ``done``), ``presets`` the sweeps estimated,
    ``rounds``: only ``--seeds auto``'s first rounds are."""
    cells = [(c, p.train.epochs) for p in presets for c in p.cells()]
    finished = sum(1 for c, e in cells if done.get(c.run_id, 0) >= e)
    started = sum(1 for c, e in cells if 0 < done.get(c.run_id, 0) < e)
    total = minutes(sum(expected.values()))
    parts = [f"{k} ≈ {minutes(v)}" for k, v in expected.items() if k != "rest"]
    head = f"expected ≈ {total} on {cores} cores ("
    if finished or started:
        head = (f"work left ≈ {total} on {cores} cores ({finished} of {len(cells)} runs already trained"
                + (f", {started} started" if started else "") + "; ")
    return head + ("first rounds: " if rounds else "") + ", ".join(parts) + ")"


def minutes(seconds: float) -> str:
    """``expected ≈ N min``'s N: whole minutes, at least 1."""
    return f"{max(1, round(seconds / 60))} min"


def busy(costs: dict[int, ShapeCost]) -> float:
    """How much slower the timed steps ran than their own CPU time (1: an idle machine)."""
    wall = sum(c.step_s for c in costs.values())
    cpu = sum(c.cpu_step_s or c.step_s for c in costs.values())
    return wall / cpu if cpu > 0 else 1.0


def idle(costs: dict[int, ShapeCost]) -> dict[int, ShapeCost]:
    """The same costs on an otherwise idle machine: every wall time scaled to its CPU time."""
    return {d: replace(c, step_s=c.step_s / c.busy, epoch_s=c.epoch_s / c.busy) for d, c in costs.items()}


def describe_costs(costs: dict[int, ShapeCost]) -> str:
    """``1 layer 9 ms, 2 layers 14 ms … a step on one core (probe + validation ≤ 0.2 s an epoch)``."""
    parts = [f"{d} layer{'s' if d > 1 else ''} {c.step_s * 1000:.0f} ms" for d, c in sorted(costs.items())]
    probe = max(c.epoch_s for c in costs.values())
    return f"{', '.join(parts)} a step on one core (probe + validation ≤ {probe:.1f} s an epoch)"


#: ``busy`` above this: the timing says so and gives the idle machine's estimate too.
BUSY = 1.3

__all__ = ["BUSY", "SWEEP_EFFICIENCY", "ShapeCost", "busy", "describe_costs", "epochs_done", "expected_line", "idle",
           "measure", "minutes", "sweep_seconds", "time_per_call", "trial_seconds"]
