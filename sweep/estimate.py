"""How long a demo tier will take on *this* machine: a few timed steps per shape, then arithmetic.

No Ray here (it runs before Ray starts, so Ray's processes do not compete with the timing).
``measure(presets, corpus)`` builds one ``Trainer`` per depth the presets use, times ``steps``
optimiser steps on one torch thread (after one warm-up step) and one epoch's probe +
validation; ``sweep_seconds(preset, costs, cores)`` replays Tune's first-in, first-out
placement of the grid's trials onto ``cores`` one-CPU slots and divides by the share of the
machine a sweep turns into training (``SWEEP_EFFICIENCY``, measured; LOG.md).

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


def trial_seconds(preset: Preset, depth: int, costs: dict[int, ShapeCost]) -> float:
    """One trial of ``depth`` on one core: its epochs' steps and probes, epoch 0's probe, its start."""
    c, t = costs[depth], preset.train
    if t.steps_per_epoch is None:
        raise ValueError(f"preset {preset.name!r}: steps_per_epoch None (a pass over the corpus) is not estimated")
    return t.epochs * (t.steps_per_epoch * c.step_s + c.epoch_s) + c.epoch_s + TRIAL_START_S


def sweep_seconds(preset: Preset, costs: dict[int, ShapeCost], cores: int, cpus_per_trial: float = 1.0,
                  efficiency: float = SWEEP_EFFICIENCY) -> float:
    """Wall seconds of the preset's sweep: its trials, in grid order, each to the first free slot."""
    slots = max(1, math.floor(cores / cpus_per_trial))
    free = [0.0] * slots
    for cell in preset.cells():
        heapq.heappush(free, heapq.heappop(free) + trial_seconds(preset, cell.depth, costs))
    return max(free) / efficiency


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

__all__ = ["BUSY", "SWEEP_EFFICIENCY", "ShapeCost", "busy", "describe_costs", "idle", "measure", "minutes",
           "sweep_seconds", "time_per_call", "trial_seconds"]
