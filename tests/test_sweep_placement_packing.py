"""sweep/placement/packing.py: how a grid is cut into packed trials, and the plan a dry run prints (no Ray):
each condition's steps priced by its cost factor (sweep/costs.json), no pack larger than the GPU's
free memory holds (model.memory; the free memory given, or read with ``torch.cuda.mem_get_info``
mocked)."""

from __future__ import annotations

import os
import sys

import pytest

from sweep.cli import UsageError
from sweep.placement import ray_env
from sweep.placement.flags import pack_request
from sweep.placement.packing import (
    Pack,
    check_pack,
    describe_plan,
    memory,
    plan_frame,
    plan_packs,
    steps_per_epoch,
    trial_work,
)
from sweep.placement.ray_env import gpu_share
from sweep.placement.schedule import (
    Cost,
    best_split,
    cost_factor,
    load_costs,
    lower_bound,
    simulate,
    split_sizes,
    work,
)
from sweep.presets import BASELINE_PRESETS, INTERVENTION_PRESETS

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

def _runs_work(plan, costs=None) -> list[float]:
    """Each run's work, priced by its condition's cost factor (sweep/costs.json unless given)."""
    costs = load_costs() if costs is None else costs
    return [work(1, p.depth, cost=cost_factor(p.condition, costs)) for p in plan for _ in p.cells]


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
    # the lower bound, computed here from the runs themselves (of the G+1 largest, two share a GPU)
    runs = sorted(_runs_work(plan), reverse=True)
    bound = max(sum(runs) / gpus, runs[0], runs[gpus - 1] + runs[gpus])
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
    assert lower_bound([4.0] * 5, 4) == 8.0  # five equal runs on four GPUs: two of them share one


# -- the clamp's cost and the GPU's memory in the plan ----------------------------------------------

CLAMP = {"k_spectrum_clamp": Cost(29.0, "a test's figure", measured=True)}


@pytest.mark.parametrize("gpus", [4, 8])
def test_a_clamp_trial_is_priced_by_its_cost_factor_so_the_makespan_holds(gpus: int) -> None:
    """With the clamp's step 29 × a none step, the plan splits the clamp runs and its makespan is
    within 1.25 × the bound of the priced runs; a plan that priced every condition alike (members ×
    depth, as the planner did) would end far later on the same priced runs."""
    priced, _ = plan_packs(PAPER_IV.cells(), "auto", gpus, packable=everything, free_bytes=None, costs=CLAMP)
    alike, _ = plan_packs(PAPER_IV.cells(), "auto", gpus, packable=everything, free_bytes=None, costs={})
    bound = lower_bound(_runs_work(priced, CLAMP), gpus)
    span = simulate([trial_work(p, costs=CLAMP) for p in priced], gpus).makespan
    assert span <= 1.25 * bound
    clamp_sizes = [p.size for p in priced if p.condition == "k_spectrum_clamp"]
    assert max(clamp_sizes) < 5 and sum(clamp_sizes) == 5
    worst = simulate(sorted((trial_work(p, costs=CLAMP) for p in alike), reverse=True), gpus).makespan
    assert worst >= (2 if gpus == 8 else 1) * span, (worst, span)
    text = describe_plan("x", PAPER_IV, priced, [], "auto", gpus, {"cpu": 1, "gpu": 1.0}, free_bytes=None, costs=CLAMP)
    assert "cost of a k_spectrum_clamp step: ×29 a none step of the same shape (measured: a test's figure" in text
    steps = PAPER_IV.train.epochs * steps_per_epoch(PAPER_IV)[0]
    assert f"(none-step equivalents × layers; the best split of the runs: ≈{bound * steps:,.0f}, " \
        f"×{span / bound:.2f})" in text
    assert set(plan_frame(priced, CLAMP).groupby("condition")["cost"].first()) == {1.0, 29.0}


def test_the_stored_cost_factors_are_read_and_named() -> None:
    """sweep/costs.json prices the clamp, says whether the figure was measured, and says where it comes from."""
    costs = load_costs()
    assert costs["k_spectrum_clamp"].factor > 1 and costs["k_spectrum_clamp"].source
    assert cost_factor("none", costs) == 1.0 and cost_factor("freeze_k", costs) == 1.0


GIB = 2**30


def test_auto_caps_a_pack_at_what_the_gpus_free_memory_holds() -> None:
    """16 GiB free: at depth 8 a member needs about 1.1 GiB (bf16, batch 64), so no pack is larger than
    ``model.memory`` says fits; with 80 GiB the plan is the uncapped one (packs of 12)."""
    tight, notes = plan_packs(PAPER.cells(), "auto", 1, packable=everything, free_bytes=16 * GIB)
    assert not notes
    for p in tight:
        est = memory(PAPER, p.depth, True)
        assert p.size <= est.most_members(16 * GIB) and est.total(p.size) <= 16 * GIB
    assert max(p.size for p in tight if p.depth == 8) < 12 and sum(p.size for p in tight) == 36
    roomy, _ = plan_packs(PAPER.cells(), "auto", 1, packable=everything, free_bytes=80 * GIB)
    uncapped, _ = plan_packs(PAPER.cells(), "auto", 1, packable=everything, free_bytes=None)
    assert [p.cells for p in roomy] == [p.cells for p in uncapped] and {p.size for p in roomy} == {12}
    # fp32 (--amp off) keeps more: fewer members fit
    assert memory(PAPER, 8, True, "off").most_members(16 * GIB) < memory(PAPER, 8, True).most_members(16 * GIB)


def test_a_run_that_does_not_fit_at_all_gets_a_note() -> None:
    plan, notes = plan_packs(PAPER.cells(), "auto", 1, packable=everything, free_bytes=GIB)
    assert {p.size for p in plan} == {1}
    assert notes[0].startswith("one run at depth 4 needs about ") and notes[0].endswith(
        "of GPU memory, more than the 1.0 GiB free: it will likely run out of memory")


def test_the_dry_run_text_has_the_memory_estimate_against_the_free_memory() -> None:
    plan, notes = plan_packs(PAPER.cells(), "auto", 1, packable=everything, free_bytes=80 * GIB)
    est = memory(PAPER, 8, True)
    text = describe_plan("x", PAPER, plan, notes, "auto", 1, {"cpu": 1, "gpu": 1.0}, free_bytes=80 * GIB)
    assert (f"GPU memory (model.memory): ≈{est.member / GIB:.1f} GiB a member at L8 (bf16/fp16, batch 64); the "
            f"largest trial, 12 runs at L8, ≈{est.total(12) / GIB:.1f} GiB; free on a GPU: 80.0 GiB (as given): "
            f"fits; at most {est.most_members(80 * GIB)} members a trial at L8") in text
    # an explicit --pack 12 at 0.25 GPU a trial: four trials share a GPU of 40 GiB, which they do not fit
    plan12, _ = plan_packs(PAPER.cells(), 12, 1, packable=everything)
    text = describe_plan("x", PAPER, plan12, [], 12, 1, {"cpu": 1, "gpu": 0.25}, free_bytes=40 * GIB)
    assert "× 4 trials a GPU; free on a GPU: 40.0 GiB (as given): does NOT fit" in text
    unknown = describe_plan("x", PAPER, plan, notes, "auto", 1, {"cpu": 1, "gpu": 1.0}, free_bytes=None)
    assert "free on a GPU: unknown (not given: packs not capped)" in unknown


def test_free_memory_is_read_with_mem_get_info_in_a_process_of_its_own(monkeypatch, tmp_path) -> None:
    """``free_gpu_memory`` on a machine with CUDA (faked: a ``sitecustomize`` in the subprocess puts a
    stand-in ``torch`` whose ``cuda`` has 2 GPUs, 30 and 70 GiB free by ``mem_get_info``; importing
    the real one there would cost seconds) gives the least free GPU's bytes; the plan then caps by
    them. In this process ``device_free_bytes`` reads the real module's ``mem_get_info``, mocked."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys, types\n"
        "cuda = types.SimpleNamespace(is_available=lambda: True, device_count=lambda: 2,\n"
        f"                            mem_get_info=lambda i=0: ((30, 70)[i] * {GIB}, 80 * {GIB}))\n"
        "sys.modules['torch'] = types.SimpleNamespace(cuda=cuda)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setattr(ray_env, "local_gpus", lambda: 2)
    monkeypatch.setitem(sys.modules, "ray", None)  # no Ray running in this process
    ray_env.free_gpu_memory.cache_clear()
    try:
        assert ray_env.free_gpu_memory() == (30 * GIB, "read on this machine's GPUs")
        plan, _ = plan_packs(PAPER.cells(), "auto", 1, packable=everything)  # asks free_gpu_memory
        assert all(p.size <= memory(PAPER, p.depth, True).most_members(30 * GIB) for p in plan)
    finally:
        ray_env.free_gpu_memory.cache_clear()
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=0: (5 * GIB, 80 * GIB))
    assert ray_env.device_free_bytes() == [5 * GIB]
