"""The demo's time estimate (sweep/estimate.py) against a fake clock: no Ray, no real timings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sweep.estimate import (
    SWEEP_EFFICIENCY,
    TRIAL_START_S,
    ShapeCost,
    measure,
    minutes,
    sweep_seconds,
    time_per_call,
    trial_seconds,
)
from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS


class FakeClock:
    """Reads 0, then ``tick`` more at every read."""

    def __init__(self, tick: float) -> None:
        self.now, self.tick = -tick, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


class Workload:
    """A fake step: every call advances a shared clock by ``cost`` seconds."""

    def __init__(self, clock: list[float], cost: float) -> None:
        self.clock, self.cost, self.calls = clock, cost, 0

    def __call__(self) -> None:
        self.calls += 1
        self.clock[0] += self.cost


def test_time_per_call_warms_up_then_averages():
    now = [0.0]
    step = Workload(now, 0.25)
    assert time_per_call(step, 4, lambda: now[0]) == pytest.approx(0.25)
    assert step.calls == 5  # one warm-up call, untimed
    with pytest.raises(ValueError, match="calls must be >= 1"):
        time_per_call(step, 0, lambda: now[0])


def test_trial_and_sweep_arithmetic():
    b = replace(BASELINE_PRESETS["demo"], train=replace(BASELINE_PRESETS["demo"].train, epochs=10,
                                                          steps_per_epoch=100))
    costs = {d: ShapeCost(step_s=0.01 * d, epoch_s=0.5) for d in b.depths}
    # 10 epochs × (100 steps × 0.02 s + 0.5 s probe) + epoch 0's probe + start
    assert trial_seconds(b, 2, costs) == pytest.approx(10 * (2.0 + 0.5) + 0.5 + TRIAL_START_S)
    total = sum(trial_seconds(b, c.depth, costs) for c in b.cells())
    one = sweep_seconds(b, costs, cores=1)
    assert one == pytest.approx(total / SWEEP_EFFICIENCY)
    # 18 trials on 2 cores: at least half the work, at most half plus the longest trial
    two = sweep_seconds(b, costs, cores=2, efficiency=1.0)
    longest = max(trial_seconds(b, d, costs) for d in b.depths)
    assert total / 2 <= two <= total / 2 + longest
    # more cores than trials: the longest trial
    assert sweep_seconds(b, costs, cores=64, efficiency=1.0) == pytest.approx(longest)
    # two CPUs a trial on 2 cores is one slot
    assert sweep_seconds(b, costs, cores=2, cpus_per_trial=2, efficiency=1.0) == pytest.approx(total)


def test_sweep_without_a_fixed_step_count_is_refused():
    paper = BASELINE_PRESETS["paper"]
    with pytest.raises(ValueError, match="steps_per_epoch None"):
        trial_seconds(paper, 4, {4: ShapeCost(1.0, 1.0)})


def test_minutes_is_whole_and_at_least_one():
    assert minutes(10) == "1 min" and minutes(89) == "1 min" and minutes(91) == "2 min"
    assert minutes(14.6 * 60) == "15 min"


def test_measure_times_each_depth_with_the_given_clock(one_thread):
    """The real trainer steps (smoke shape, a second), the clock a fake: every read advances it
    by 0.1 s, so each timed block reads exactly two ticks apart."""
    from sweep.runner import prepare_corpus

    b, i = BASELINE_PRESETS["smoke"], INTERVENTION_PRESETS["smoke"]
    costs = measure([b, i], prepare_corpus(b), steps=4, clock=FakeClock(0.1), cpu_clock=FakeClock(0.05))
    assert sorted(costs) == sorted(set(b.depths) | set(i.depths))
    for cost in costs.values():
        assert cost.step_s == pytest.approx(0.1 / 4)  # one tick over the 4 timed steps
        assert cost.cpu_step_s == pytest.approx(0.05 / 5)  # one tick over the 5 steps, warm-up included
        assert cost.epoch_s == pytest.approx(0.1)
    # and the estimate built from them is the arithmetic above
    expected = sum(trial_seconds(b, c.depth, costs) for c in b.cells()) / SWEEP_EFFICIENCY
    assert sweep_seconds(b, costs, cores=1) == pytest.approx(expected)


def test_a_busy_machine_is_said_and_the_idle_estimate_scaled():
    """Wall 3× the CPU time: the steps got a third of a core; idle, everything takes a third."""
    from sweep.estimate import busy, idle

    costs = {1: ShapeCost(step_s=0.03, epoch_s=0.6, cpu_step_s=0.01), 2: ShapeCost(0.06, 0.9, 0.02)}
    assert busy(costs) == pytest.approx(3.0) and costs[1].busy == pytest.approx(3.0)
    quiet = idle(costs)
    assert quiet[1] == ShapeCost(pytest.approx(0.01), pytest.approx(0.2), 0.01)
    assert busy(quiet) == pytest.approx(1.0)
    assert busy({1: ShapeCost(0.01, 0.2)}) == 1.0  # no CPU time measured: taken as idle


def test_a_demo_run_again_estimates_the_work_left_not_the_whole_demo():
    """Half the baseline already in the store, one run cut at epoch 7 (checkpoints every 5: it
    restarts at 5): the estimate is of the runs and epochs left, and says so."""
    import pandas as pd

    from sweep.estimate import epochs_done, expected_line

    b = replace(BASELINE_PRESETS["demo"], train=replace(BASELINE_PRESETS["demo"].train, epochs=10,
                                                          steps_per_epoch=100))
    costs = {d: ShapeCost(step_s=0.01 * d, epoch_s=0.5) for d in b.depths}
    cells = b.cells()
    rows = [{"run_id": c.run_id, "epoch": e} for c in cells[::2] for e in range(11)]
    rows += [{"run_id": cells[1].run_id, "epoch": e} for e in range(8)]
    done = epochs_done(pd.DataFrame(rows), [b], checkpoint_every=5)
    assert len(done) == len(cells[::2]) + 1 and done[cells[1].run_id] == 5
    left = sum(trial_seconds(b, c.depth, costs) for c in cells[3::2])  # the untouched ones
    left += 5 * (100 * costs[cells[1].depth].step_s + 0.5) + TRIAL_START_S  # the cut one, from epoch 5
    assert sweep_seconds(b, costs, cores=1, efficiency=1.0, done=done) == pytest.approx(left)
    assert sweep_seconds(b, costs, cores=1, efficiency=1.0) > 1.8 * left  # what the old estimate said
    line = expected_line({"baseline": left, "rest": 45.0}, 2, [b], done)
    assert line == f"work left ≈ {minutes(left + 45)} on 2 cores (27 of 54 runs already trained, 1 started; " \
                   f"baseline ≈ {minutes(left)})"
    assert expected_line({"baseline": left}, 2, [b], {}, rounds=True).startswith(
        f"expected ≈ {minutes(left)} on 2 cores (first rounds: baseline ≈ ")
