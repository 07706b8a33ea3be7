"""sweep/packing.py: how a grid is cut into packed trials, and the plan a dry run prints (no Ray)."""

from __future__ import annotations

import pytest

from sweep.cli import UsageError, pack_request
from sweep.packing import (
    Pack,
    check_pack,
    describe_plan,
    gpu_share,
    plan_frame,
    plan_packs,
    steps_per_epoch,
    trial_work,
)
from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS
from sweep.schedule import best_split, lower_bound, simulate, split_sizes, work

PAPER = BASELINE_PRESETS["paper"]
PAPER_IV = INTERVENTION_PRESETS["paper"]


def everything(condition: str) -> bool:
    return True


@pytest.mark.parametrize(("preset", "packs", "size"), [(PAPER, 3, 12), (PAPER_IV, 6, 5)])
def test_auto_packs_each_shape_on_one_gpu(preset, packs, size) -> None:
    plan, notes = plan_packs(preset.cells(), "auto", cluster_gpus=1, packable=everything)
    assert [p.size for p in plan] == [size] * packs and not notes
    for p in plan:
        assert len({(c.init, c.seed) for c in p.cells}) == size
    assert sorted(c.run_id for p in plan for c in p.cells) == sorted(c.run_id for c in preset.cells())


def test_auto_is_one_run_per_trial_without_gpus() -> None:
    plan, _ = plan_packs(PAPER.cells(), "auto", cluster_gpus=0, packable=everything)
    assert [p.cells for p in plan] == [(c,) for c in PAPER.cells()]  # today's trials, in today's order


def test_explicit_sizes_cut_each_shape_in_grid_order() -> None:
    plan, _ = plan_packs(PAPER.cells(), 5, cluster_gpus=0, packable=everything)
    assert sorted(p.size for p in plan) == [2] * 3 + [5] * 6
    assert {(p.depth, p.condition) for p in plan} == {(d, "none") for d in PAPER.depths}


def test_a_condition_that_is_not_pack_aware_runs_unpacked_with_one_note() -> None:
    plan, notes = plan_packs(PAPER_IV.cells(), "auto", 1, packable=lambda c: c != "k_spectrum_clamp")
    sizes = {p.condition: p.size for p in plan}
    assert sizes["k_spectrum_clamp"] == 1 and sizes["none"] == 5 and len(plan) == 5 + 5
    assert notes == ["condition k_spectrum_clamp is not pack-aware: its runs train unpacked, one per trial"]


def test_a_pack_holds_one_shape() -> None:
    with pytest.raises(ValueError, match="mixes shapes"):
        Pack((PAPER.cells()[0], PAPER.cells()[-1]))


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "x", "", 0, True])
def test_bad_pack_values(value) -> None:
    with pytest.raises(UsageError, match=r"--pack must be auto or a whole number of runs >= 1, got"):
        pack_request("--pack", value)


def test_pack_larger_than_a_shape_is_refused() -> None:
    assert pack_request("--pack", "12") == 12 and pack_request("--pack", "auto") == "auto"
    check_pack("--pack", 12, PAPER.cells())
    with pytest.raises(UsageError, match=r"--pack 13: a shape \(depth, condition\) of the baseline grid has at "
                       r"most 12 runs; use 1..12 or auto"):
        check_pack("--pack", 13, PAPER.cells())


def test_plan_text_names_trials_members_resources_and_steps() -> None:
    plan, notes = plan_packs(PAPER.cells(), "auto", 1, packable=everything)
    text = describe_plan("baseline-paper", PAPER, plan, notes, "auto", 1, {"cpu": 1, "gpu": 0.25})
    assert "36 runs in 3 trials, packs of 12 (auto: the Ray cluster has 1 GPUs)" in text
    assert "resources per trial: 1 CPU, 0.25 GPU" in text
    assert steps_per_epoch(PAPER) == (4394, True)
    assert f"45 epochs × ≈4,394 = ≈{45 * 4394:,} per trial" in text and f"≈{36 * 45 * 4394:,} run steps" in text
    assert "trial   1: none L8, 12 runs: independent_xavier: 37,42,105,210 · " in text  # longest first
    assert "estimated makespan on 1 GPU: ≈" in text and "×1.00)" in text  # 1 GPU: all the work on it
    frame = plan_frame(plan)
    assert len(frame) == 36 and frame.groupby("trial").size().tolist() == [12, 12, 12]


def test_compile_packs_too() -> None:
    """``--compile`` does not change the plan: ``model.trainer`` compiles a pack's batched loss."""
    plan, notes = plan_packs(PAPER.cells(), "auto", 1, packable=everything)
    assert {p.size for p in plan} == {12} and notes == []


# -- --pack auto on G GPUs: every GPU busy ----------------------------------------------------------

def _runs_work(plan) -> list[float]:
    return [work(1, p.depth) for p in plan for _ in p.cells]


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
@pytest.mark.parametrize("preset", [PAPER, PAPER_IV], ids=["baseline", "interventions"])
def test_auto_keeps_every_gpu_busy_within_a_quarter_of_the_best_split(preset, gpus) -> None:
    plan, _ = plan_packs(preset.cells(), "auto", cluster_gpus=gpus)
    assert sorted(c.run_id for p in plan for c in p.cells) == sorted(c.run_id for c in preset.cells())
    assert len(plan) >= gpus  # at least as many trials as GPUs (the grid has 30+ runs)
    works = [trial_work(p) for p in plan]
    assert works == sorted(works, reverse=True)  # Tune gets them longest first
    sched = simulate(works, gpus)
    # no GPU idle while a trial waits: just before each trial starts, all GPUs are running one
    # (counted from the intervals, independently of how simulate picks GPUs)
    for start in sched.starts:
        if start > 0:
            running = sum(1 for s, e in zip(sched.starts, sched.ends, strict=True) if s < start <= e)
            assert running >= gpus, (start, running)
    # the lower bound, computed here from the runs themselves
    runs = _runs_work(plan)
    bound = max(sum(runs) / gpus, max(runs))
    assert sched.makespan <= 1.25 * bound, (gpus, sched.makespan / bound)
    text = describe_plan("x", preset, plan, [], "auto", gpus, {"cpu": 1, "gpu": gpu_share(None, "auto", gpus)})
    assert "resources per trial: 1 CPU, 1 GPU" in text
    assert f"estimated makespan on {gpus} GPU" in text and f"×{sched.makespan / bound:.2f})" in text


def test_a_whole_shape_alone_on_a_gpu_gets_the_whole_gpu() -> None:
    smoke = BASELINE_PRESETS["smoke"]
    plan, _ = plan_packs(smoke.cells(), "auto", cluster_gpus=1)
    assert len(plan) == len({c.depth for c in smoke.cells()}) and gpu_share(None, "auto", 1) == 1.0
    assert gpu_share(None, 3, 1) == 0.25 and gpu_share(None, "auto", 0) == 0.0 and gpu_share(0.5, "auto", 8) == 0.5


def test_fewer_runs_than_gpus_gives_every_run_its_own_trial() -> None:
    assert best_split([(2, 4.0, True), (1, 8.0, True)], 8) == [2, 1]
    assert best_split([(12, 1.0, False)], 2) == [12]  # not pack-aware: one run per trial
    assert split_sizes(12, 5) == [3, 3, 2, 2, 2] and split_sizes(5, 5) == [1] * 5


def test_simulate_is_list_scheduling() -> None:
    sched = simulate([5.0, 3.0, 3.0, 2.0], 2)
    assert sched.starts == (0.0, 0.0, 3.0, 5.0) and sched.makespan == 7.0
    assert lower_bound([5.0, 3.0, 3.0, 2.0], 2) == 6.5 and lower_bound([9.0, 1.0], 4) == 9.0
