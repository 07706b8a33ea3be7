"""sweep/placement/plan.py (no Ray): a sweep's trials planned once, from the GPUs passed in, with the
resources each asks for; ``SweepSettings.plan`` makes it from the sweep's own flags, so that a run
and its dry run plan alike (``--amp`` included: it sizes a member's GPU memory)."""

from __future__ import annotations

import pytest

from sweep.cli import UsageError
from sweep.driver.settings import SweepSettings
from sweep.placement import ray_env
from sweep.placement.packing import memory, plan_packs
from sweep.placement.plan import plan_trials
from sweep.presets import BASELINE_PRESETS
from sweep.trial.options import TrialOptions

PAPER = BASELINE_PRESETS["paper"]
GIB = 2**30


@pytest.fixture
def free_16_gib(monkeypatch):
    """A GPU with 16 GiB free, as ``free_gpu_memory`` would read it (no CUDA needed)."""
    monkeypatch.setattr(ray_env, "free_gpu_memory", lambda: (16 * GIB, "a test's GPU"))


def test_the_plan_holds_the_packs_and_each_trials_resources(free_16_gib) -> None:
    plan = plan_trials(PAPER.cells(), "auto", 2.0, 1.0, cpus=3.0, gpus=None, amp=None)
    packs, notes = plan_packs(PAPER.cells(), "auto", 2.0, free_bytes=16 * GIB)
    assert [p.cells for p in plan.packs] == [p.cells for p in packs] and list(plan.notes) == notes
    assert plan.resources == {"cpu": 3.0, "gpu": 1.0} and plan.packed and plan.cluster_gpus == 2.0
    # an explicit pack shares a GPU; --gpus-per-trial wins; no GPUs, none asked for
    assert plan_trials(PAPER.cells(), 3, 2.0, 1.0, 1.0, None, None).gpus == ray_env.DEFAULT_GPU_FRACTION
    assert plan_trials(PAPER.cells(), 3, 2.0, 1.0, 1.0, 0.5, None).gpus == 0.5
    assert plan_trials(PAPER.cells(), "auto", 0.0, 0.0, 1.0, None, None).resources == {"cpu": 1.0, "gpu": 0.0}


def test_gpus_per_trial_beyond_the_largest_node_is_refused_before_planning() -> None:
    with pytest.raises(UsageError, match="--gpus-per-trial 2: one node here has 1 GPUs"):
        plan_trials(PAPER.cells(), "auto", 4.0, 1.0, 1.0, 2.0, None)


def test_the_settings_plan_with_their_own_amp(free_16_gib, tmp_path) -> None:
    """fp32 (``--amp off``) members need more memory: at depth 6 a 16 GiB GPU holds 14 bf16 members but
    11 fp32 ones, so the 12 runs of that shape are one pack at the default precision and two under
    ``--amp off``; the run and its dry run both plan through ``SweepSettings.plan``."""
    def settings(amp: str) -> SweepSettings:
        return SweepSettings("x", TrialOptions(str(tmp_path / "s"), str(tmp_path / "r"), cpus_per_trial=2.0, amp=amp))

    half, full = settings("auto").plan(PAPER.cells(), 1.0, 1.0), settings("off").plan(PAPER.cells(), 1.0, 1.0)
    assert (half.amp, full.amp, full.cpus) == ("auto", "off", 2.0)
    assert memory(PAPER, 6, True, "off").most_members(16 * GIB) < 12 <= memory(PAPER, 6, True).most_members(16 * GIB)
    assert [p.size for p in half.packs if p.depth == 6] == [12]
    assert [p.size for p in full.packs if p.depth == 6] == [6, 6]
