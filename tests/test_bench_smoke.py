"""Every benchmark's entry point runs at a tiny size and returns its figures.

No timing assertions: only that each ratio is a positive finite number and
that the keys the results file and RESULTS.md rely on are there.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ray_cluster(ray_env):
    """One throw-away local cluster (2 CPUs, 1 logical GPU) for the benchmarks that use Ray.

    ``ray_env`` (tests/conftest.py) restores the environment after the module, PYTHONPATH included.
    """
    import ray

    old = os.environ.get("PYTHONPATH")
    ray_env.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), old) if p))  # workers import bench
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def _start_dry_run(out: Path) -> tuple[Path, subprocess.Popen]:
    """``bash bench/gpu.sh --dry-run`` (seconds of imports, in its own processes), RAY_TMPDIR inside
    ``out`` (its test checks that no Ray session appeared there)."""
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "RAY_TMPDIR": str(out / "ray_tmp"),
           "HF_HUB_OFFLINE": "1"}
    return out, subprocess.Popen(["bash", str(ROOT / "bench" / "gpu.sh"), "--dry-run"], cwd=ROOT, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def gpu_dry_run(tmp_path_factory):
    out, proc = _start_dry_run(tmp_path_factory.mktemp("gpu_dry_run"))
    yield out, proc
    proc.kill()
    proc.communicate()


def _check(out: dict, keys: set[str]) -> None:
    missing = (keys | {"benchmark", "ratio", "target", "met", "machine", "results"}) - set(out)
    assert not missing, missing
    assert isinstance(out["ratio"], float) and math.isfinite(out["ratio"]) and out["ratio"] > 0
    json.dumps(out, default=str)  # run_all writes it as JSON


def test_train_step_tiny() -> None:
    from bench import train_step

    out = train_step.main(["--tiny"])
    _check(out, {"ratio_geomean"})
    (r,) = out["results"]
    for key in ("trainer_tokens_per_s", "reference_tokens_per_s", "trainer_step_ms", "reference_step_ms"):
        assert r[key] > 0, key


def test_probe_cost_tiny() -> None:
    from bench import probe_cost

    out = probe_cost.main(["--tiny"])
    _check(out, set())
    (r,) = out["results"]
    assert r["probe_in_steps"] > 0 and r["val_loss_in_steps"] > 0 and r["probe_rows"] == 2
    for key in ("probe_old", "probe_cpu", "probe_same", "forward", "probe_plus_val"):
        assert r[f"{key}_in_steps"] > 0, key
    assert r["auto_decomp_device"] == "cpu" and r["probe_in_steps"] == r["probe_cpu_in_steps"]
    assert out["ratio"] == r["probe_plus_val_in_steps"] and out["target"] == "<= 5 steps"
    assert max(r["max_rel_diff_vs_old"].values()) < 1e-10  # the new rows are today's
    # a pack of 12 probed in one call, against one run's probe
    assert out["pack"] == r["pack"] == 12 and out["pack_ratio"] == r["pack_per_member_ratio"] > 0
    assert out["pack_target"] == "<= 0.5x" and r["max_rel_diff_pack_vs_members"] < 1e-5
    assert len(r["probe_run_s"]) == len(r["probe_pack_s"]) == 2
    # the decomposition device from the probe's own matrices, one run and the pack (12 × as many)
    assert out["decomp_device"] == r["decomp_device_run"] == "cpu" and out["decomp_device_pack"] == "cpu"
    assert r["decomp_matrices"]["pack"] == 12 * r["decomp_matrices"]["run"] > 0
    assert set(r["decomp_seconds"]["run"]) == {"cpu"} and r["decomp_seconds"]["pack"]["cpu"] > 0


def test_reducer_scaling_tiny(monkeypatch) -> None:
    """End to end at 1× and 2×; the memory pass's two probes (a report under tracemalloc costs ~4×
    a plain one) are stand-ins here that record their calls, and are checked for real below."""
    from bench import reducer_scaling

    probed: list[str] = []

    def probe(name: str, value):
        def fake(fn) -> object:
            assert callable(fn)
            probed.append(name)
            return value
        return fake

    monkeypatch.setattr(reducer_scaling, "peak_rss_delta_mb", probe("rss", (7.0, "VmHWM after clear_refs")))
    monkeypatch.setattr(reducer_scaling, "tracemalloc_peak_mb", probe("tracemalloc", 3.0))
    out = reducer_scaling.main(["--tiny"])
    _check(out, {"time_at_smallest_s"})
    assert [r["scale"] for r in out["results"]] == [1, 2]
    assert probed == ["rss", "tracemalloc"] * 2  # once per scale
    for r in out["results"]:
        assert r["report_median_s"] > 0 and r["layer_rows"] > 0
        assert r["peak_rss_delta_mb"] == 7.0 and r["tracemalloc_peak_mb"] == 3.0


def test_reducer_memory_probes_see_an_allocation() -> None:
    """The memory pass's probes, on a 64 MB NumPy array made and dropped inside the call."""
    from bench.reducer_scaling import peak_rss_delta_mb, tracemalloc_peak_mb

    mb = 64

    def allocate() -> None:
        a = np.ones(mb * 2**20 // 8)
        assert a.sum() == a.size

    assert mb <= tracemalloc_peak_mb(allocate) < 2 * mb
    rss, method = peak_rss_delta_mb(allocate)
    if method == "VmHWM after clear_refs":
        assert mb * 0.9 <= rss < 2 * mb
    else:  # ru_maxrss growth counts only what exceeds the process's earlier peak
        assert method == "ru_maxrss growth" and rss >= 0


def test_packing_tiny() -> None:
    from bench import packing

    out = packing.main(["--tiny"])
    _check(out, {"dispatch", "throughput_ratio_geomean"})
    (r,) = out["results"]
    assert r["members"] == 2 and r["pack_tokens_per_s"] > 0 and r["unpacked_tokens_per_s"] > 0
    for counts in out["dispatch"]:
        assert counts["unpacked_ops_per_step"] > 0 and counts["packed"][0]["ops_per_member_step"] > 0


@pytest.mark.ray
def test_sweep_overhead_tiny(tmp_path: Path, ray_cluster) -> None:
    from bench import sweep_overhead

    out = sweep_overhead.main(["--tiny", "--workdir", str(tmp_path)])
    _check(out, {"in_process", "ray_wall_s", "concurrency", "efficiency", "train_inflation"})
    assert out["ray_statuses"] == ["completed"]
    assert out["ray_wall_s"] > 0 and out["mean_trial_s"] > 0


def test_gpu_script_dry_run_without_cuda(gpu_dry_run) -> None:
    out, proc = gpu_dry_run
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stdout + stderr
    if "no CUDA" in stdout:
        result = json.loads((out / "gpu_results.json").read_text())
        assert result["cuda"] is False and result["measured"] is False
    assert not list(out.glob("ray_tmp/**/session_*"))
    # the plan: every item's need and budget printed, the call's budget derived from them
    plan = json.loads((out / "plan.json").read_text())
    assert set(plan["order"]) == {"tests", "throughput", "clamp", "probe", "equivalence", "sweep"}
    assert all(plan["ops_per_step"][k] > 100 for k in ("1", "12", "36"))  # counted here, not the fallback
    assert plan["gpu_tests"]["cases"] > 20  # collected here (skipped without CUDA, but counted)
    for name, item in plan["items"].items():
        assert item["budget_s"] > item["need_s"] > 0 and f"  {name} " in stdout, name
    assert "prerequisites (torch, pytest, pytest-timeout, the project importable)" in stdout and ": ok" in stdout
    assert "sections: tests clamp " in stdout  # the tests first, in the call's budget
    tests = plan["items"]["gpu-tests"]
    assert "first: " in stdout and f"tests/test_model_graphs_cuda.py (timeout {tests['budget_s']}s; pytest -m gpu: " \
        f"{plan['gpu_tests']['cases']} cases, counted" in stdout
    assert "compile                  throughput" in stdout and "(only with that much time left)" in stdout


def test_gpu_plan_budgets_fit_a_call_and_throughput_fits_four_minutes() -> None:
    from bench import gpu_packing, gpu_plan

    plan = gpu_plan.plan(dict(gpu_plan.OPS_FALLBACK), tests={"cases": 30, "compile": 1})
    assert set(gpu_packing.GROUPS) <= set(plan["items"]) and plan["items"]["compile"]["optional"]
    assert gpu_plan.call_budget(plan, ["throughput"]) <= gpu_plan.THROUGHPUT_ALONE_S == 255
    # the GPU tests are counted in the call: 29 cases at 2 s and one compiling at 60 s, start-up, margin
    tests = plan["items"]["gpu-tests"]
    assert tests["need_s"] == 12 + 29 * 2 + 60 and tests["budget_s"] == math.ceil(130 * 1.3 + 8)
    # a call naming no section: the tests first, then what fits in BUDGET_S, the rest for a second call
    now, later = gpu_plan.call_sections(plan)
    assert now[:2] == ["tests", "clamp"] and set(now) | set(later) == set(gpu_plan.SECTIONS)
    assert sum(plan["sections"].get(s, 0) for s in now) + gpu_plan.OVERHEAD_S <= gpu_plan.BUDGET_S
    assert all(sum(plan["sections"].get(s, 0) for s in now) + plan["sections"][s] + gpu_plan.OVERHEAD_S
               > gpu_plan.BUDGET_S for s in later)
    assert gpu_plan.call_budget(plan, ["sweep"]) >= plan["items"]["sweep"]["need_s"]  # asked alone, it can run
    # a need grows with what an item runs: a clamp step adds M·L decompositions
    ops = dict(gpu_plan.OPS_FALLBACK)
    assert gpu_plan.step_s(12, ops, True, clamp=True) > gpu_plan.step_s(12, ops, True) + 12 * 6 * 4e-3


def test_gpu_script_runs_a_section_and_skips_what_does_not_fit(tmp_path: Path) -> None:
    """CPU_CHECK=1 (tiny sizes on the CPU): the clamp section runs under its budget; the sweep, optional,
    needs more than is left and says so; the report gives each section's budget and actual seconds."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "CPU_CHECK": "1", "BUDGET_S": "100",
           "RAY_TMPDIR": str(tmp_path / "ray_tmp"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh"), "clamp", "sweep"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    timings = [json.loads(line) for line in (tmp_path / "timings.jsonl").read_text().splitlines()]
    # the sections named, and only those (the GPU tests run when named: `tests`, first by default)
    assert [(t["item"], t["rc"]) for t in timings] == [("clamp", 0), ("sweep", None)]
    assert timings[1]["status"].startswith("skipped: needs")
    assert "skip sweep: it needs about" in proc.stdout and "s left in this call (to run it: BUDGET_S=" in proc.stdout
    result = json.loads((tmp_path / "gpu_results.json").read_text())
    assert any(line.startswith("section clamp: ran ") for line in result["targets"]["time"])
    assert "k_spectrum_clamp's decomposition, depth 2, unpacked" in proc.stdout
    assert not list(tmp_path.glob("ray_tmp/**/session_*"))


PLANTED = """
import time

import pytest


@pytest.mark.gpu
def test_planted_pass():
    pass


@pytest.mark.gpu
def test_planted_{kind}():
    {body}
"""


def _gpu_tests(tmp_path: Path, kind: str, body: str, **env_extra: str) -> subprocess.Popen:
    """``CPU_CHECK=1 bash bench/gpu.sh tests`` on a planted GPU test file (a passing test and one more)."""
    folder = tmp_path / kind
    folder.mkdir()
    (folder / "test_planted.py").write_text(PLANTED.format(kind=kind, body=body))
    env = {**os.environ, "OUT": str(folder / "out"), "PYTHON": sys.executable, "CPU_CHECK": "1", "BUDGET_S": "120",
           "GPU_TESTS": str(folder / "test_planted.py"), "HF_HUB_OFFLINE": "1", **env_extra}
    return subprocess.Popen(["bash", str(ROOT / "bench" / "gpu.sh"), "tests"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_gpu_script_says_failed_and_exits_1_when_a_gpu_test_fails_or_times_out(tmp_path: Path) -> None:
    """A planted failing ``gpu`` test and a planted one that outlives the tests' timeout: each call
    says so in its status line and the last line, and exits 1; the timings say the same."""
    failing = _gpu_tests(tmp_path, "failure", 'assert False, "planted"')
    hanging = _gpu_tests(tmp_path, "timeout", "time.sleep(120)", GPU_TESTS_S="8")
    for proc, kind in ((failing, "failure"), (hanging, "timeout")):
        out, _ = proc.communicate(timeout=240)
        assert proc.returncode == 1, out
        timings = [json.loads(line) for line in (tmp_path / kind / "out" / "timings.jsonl").read_text().splitlines()]
        assert [(t["item"], t["rc"]) for t in timings] == [("gpu-tests", 1 if kind == "failure" else 124)], out
        if kind == "failure":
            assert "[gpu.sh] gpu-tests: failed (pytest rc 1: 1 failed, 1 passed in " in out, out
        else:
            assert "[gpu.sh] gpu-tests: timed out after 8s" in out, out
        assert "[gpu.sh] failed: 1 of this call's runs did not pass: gpu-tests " in out.splitlines()[-1], out


def test_gpu_script_checks_its_prerequisites_first_in_one_line(tmp_path: Path) -> None:
    """Without pytest-timeout (pyproject's --timeout would make pytest stop with "unrecognized
    arguments") the script says what is missing in one line and stops before anything runs, exit 1."""
    blocked = tmp_path / "site"
    blocked.mkdir()
    (blocked / "sitecustomize.py").write_text('import sys\nsys.modules["pytest_timeout"] = None  # not installed\n')
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, "CPU_CHECK": "1",
           "PYTHONPATH": str(blocked)}
    proc = subprocess.run(["bash", str(ROOT / "bench" / "gpu.sh"), "tests"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        f"[gpu.sh] prerequisites (torch, pytest, pytest-timeout, the project importable) with {sys.executable}: "
        "missing: pytest-timeout", "[gpu.sh] failed: prerequisites missing, nothing run"], proc.stdout
    assert not (tmp_path / "out" / "plan.json").exists()


def test_clamp_cost_tiny(tmp_path: Path) -> None:
    """Each method's cost, the clamp's own choice (on the CPU: eigh there), and the plan's cost factor
    written in sweep/costs.json's format: the plan reads it back (not measured: a CPU's figure)."""
    from bench import clamp_cost
    from sweep.schedule import load_costs

    out = clamp_cost.main(["--tiny", "--members", "1,2", "--depths", "1", "--rounds", "1",
                           "--costs", str(tmp_path / "costs.json")])
    assert [(r["members"], len(r["rows"])) for r in out["results"]] == [(1, 3), (2, 3)]
    for r in out["results"]:
        assert r["none_step_s"] > 0 and r["auto"] == "eigh@cpu"
        for row in r["rows"]:
            assert row["x_none_step"] > 0 and row["step_with_clamp"] > 1 and row["max_abs_vs_svd"] < 1e-8
    cost = load_costs(tmp_path / "costs.json")["k_spectrum_clamp"]
    assert cost.factor == round(out["results"][1]["fastest_step_with_clamp"], 3) and not cost.measured
    assert "a pack of 2 at depth 1" in cost.source


def test_sequential_error_tiny(capsys) -> None:
    from bench import sequential_error

    out = sequential_error.main(["--tiny"])
    _check(out, set())
    r = out["results"]
    assert [row["law"] for row in r["null"]][:3] == ["normal", "t, 3 df", "skewed 0.71"]
    assert r["alone"]["family_wise"] > 0.2 > r["null"][0]["family_wise"]  # the design before has no family control
    assert r["planted"][0]["power"] > 0.9 and r["fixed_same_power"]["seeds"] == 9
    null = r["joint"]["rows"][0]
    assert null["case"] == "null" and null["separate"] > null["joint"]  # one family, not two at α each
    paper = {(row["claim"], row["family"]): row for row in r["paper"]["rows"]}
    assert paper[("alignment.gap.L8", 15)]["power"] > 0.9 and len(r["paper"]["fixed"]) == 4
    assert "RATIO " in capsys.readouterr().out


def test_gpu_report_tables_every_section_on_the_cpu(tmp_path: Path, capsys) -> None:
    """bench/gpu.sh's sections at a tiny size on the CPU, then its report: every figure is in the
    table and in gpu_results.json, and what did not run says "not measured"."""
    from bench import gpu_bench, gpu_packing, pack_equivalence

    for name in ("unpacked", "unpacked_graphs", "pack12_graphs"):
        assert gpu_packing.run_variant(name, tmp_path, "cpu", True, 0.01) == 0
    (tmp_path / "timings.jsonl").write_text(
        '{"item": "unpacked", "section": "throughput", "budget_s": 43, "ran_s": 19, "rc": 0, "status": "ok"}\n'
        '{"item": "compile", "section": "throughput", "budget_s": 149, "ran_s": 0, "rc": null, '
        '"status": "skipped: needs 108s, 30s left"}\n'
        '{"item": "probe", "section": "probe", "budget_s": 46, "ran_s": 46, "rc": 124, "status": "timed out after 46s"}\n')
    (tmp_path / "clamp.json").write_text(json.dumps({"results": [
        {"members": 12, "depth": 8, "none_step_s": 0.02, "fastest": "eigh@cpu", "fastest_step_with_clamp": 3.5,
         "rows": [{"clamp": "eigh@cuda", "x_none_step": 4.0}, {"clamp": "eigh@cpu", "x_none_step": 2.5}]}]}))
    eq = pack_equivalence.main(["--size", "tiny", "--members", "2", "--depth", "1", "--steps", "2",
                                "--json", str(tmp_path / "equivalence-off.json")])
    assert eq["held"], eq["worst"]  # CPU float32: the pack is far inside the backend noise
    (tmp_path / "probe.json").write_text(json.dumps({"ratio": 3.5, "decomp_device": "cuda:0", "worst_depth": 8,
                                                     "results": [{"depth": 8, "auto_decomp_device": "cpu"}]}))
    result = gpu_bench.main(["--report", "--out", str(tmp_path)])
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "gpu_results.json").read_text())
    assert saved["targets"].keys() == result["targets"].keys()
    assert set(saved["throughput"]["variants"]) == {"unpacked", "unpacked_graphs", "pack12_graphs"}
    assert "unpacked with graphs ≥ 3× eager" in printed and "paper grid ≤ 2 h" in printed
    assert "probe + validation at depth 8: 3.50 training steps (decompositions on cpu, chosen at the probe's " \
        "shapes)" in printed and "target ≤ 5: met" in printed
    assert "k_spectrum_clamp's decomposition, depth 8, pack of 12, × the none step (20.0 ms): eigh@cuda 4.00×, " \
        "eigh@cpu 2.50×; fastest eigh@cpu (clamped step 3.50×)" in printed
    assert "section throughput: ran 19 s of 43 s budgeted: unpacked 19/43 s (ok), compile 0/149 s (skipped: " \
        "needs 108s, 30s left)" in printed
    assert "section probe: ran 46 s of 46 s budgeted: probe 46/46 s (timed out after 46s)" in printed
    assert "pack vs unpacked, cpu amp off, M = 2" in printed and "standard holds" in printed
    assert "pack vs unpacked, amp bf16: not measured" in printed and "sweep twice: not measured" in printed


@pytest.mark.ray
def test_gpu_sweep_twice_on_the_cpu(tmp_path: Path) -> None:
    """bench/gpu.sh's sweep section, tiny, on the CPU: both sweeps complete with equal rows, and each
    trial's start is timed from its epoch-0 result (sweep.hooks.StartClock)."""
    from bench import gpu_sweep

    result = gpu_sweep.main(["--tiny", "--out", str(tmp_path), "--timeout", "240"])
    assert result["default"]["rc"] == 0 and result["pack1"]["rc"] == 0, result
    assert result["compare"]["rows_equal"] and result["compare"]["rows"]["epochs"] == [4, 4]
    for name in ("default", "pack1"):
        start = result[name]["trial_start"]
        assert set(start) == set(gpu_sweep.PHASES), start
        assert 0 < start["sweep start → epoch 0 reported"][0] < result[name]["wall_s"]
        assert len(result[name]["first_step_after_start_s"]) == 2


def test_gpu_packing_variants_and_projection_on_the_cpu(tmp_path: Path, capsys) -> None:
    """bench/gpu.sh's packing section: a packed and an unpacked variant, tiny, on the CPU; the table."""
    from bench import gpu_packing

    per_epoch, baseline, interventions = gpu_packing.paper_grid_steps()
    assert per_epoch == 4394 and baseline + interventions == 9_095_580  # the paper grid: ≈ 9.1M steps
    assert gpu_packing.projected_hours(1000.0) == pytest.approx((baseline + interventions * 8 / 6) / 1000 / 3600)
    for name in ("unpacked", "pack12", "pack12_graphs", "pack12_clamp"):
        assert gpu_packing.run_variant(name, tmp_path, "cpu", True, 0.01) == 0
    assert gpu_packing.run_group("busy", tmp_path, "cpu", True, 0.01) == 0  # its own file, its own process in gpu.sh
    result = gpu_packing.summary(tmp_path)
    printed = capsys.readouterr().out
    clamp = result["variants"]["pack12_clamp"]
    assert clamp["condition"] == "k_spectrum_clamp" and clamp["x_none_step"] > 0 and clamp["clamp"]["method"] == "eigh"
    assert "k_spectrum_clamp in a pack of 12: its step" in printed and "× the pack12_graphs (none) step" in printed
    busy = json.loads((tmp_path / "packing" / "busy.json").read_text())
    assert all(0 < busy[n]["gpu_busy"] for n in ("unpacked", "unpacked_graphs")), busy
    assert result["busy"] == busy and "before the graph was recorded" in busy["method"]
    pack = result["variants"]["pack12"]
    assert pack["members"] == 12 and pack["tokens_per_s"] > 0 and math.isfinite(pack["projected_paper_grid_h"])
    assert pack["graph_status"] == "off: graphs=False"
    # the memory model beside each variant (the GPU's peak there: not measured on the CPU)
    assert pack["modelled_memory_gb"] > result["variants"]["unpacked"]["modelled_memory_gb"] > 0
    assert "memory GiB: peak / model" in printed and f"— / {pack['modelled_memory_gb']:.2f}" in printed
    assert result["variants"]["unpacked"]["speedup_vs_unpacked"] == 1.0
    assert "paper grid: 9,095,580 run-steps" in printed and "pack12" in printed


def test_verdicts_tiny() -> None:
    """Every section of the scorecard's error-rate benchmark runs, and its vectorised test agrees with
    ``analysis.inference`` (the benchmark asserts it); the landed rule's 2-seed rate is far above 0.025."""
    from bench import verdicts

    out = verdicts.main(["--tiny"])
    assert out["family_sizes"]["demo"] == 25 and out["stores"][0]["m"] == 25
    assert out["old_rule"][0]["seeds"] == 2 and out["old_rule"][0]["reproduced"] > 0.1
    assert all(0 <= r["fwer"] <= 1 for r in out["per_claim"]) and out["power"][0]["power"] > 0


def test_cli_latency_tiny(capsys) -> None:
    from bench import cli_latency

    out = cli_latency.main(["--tiny"])
    _check(out, {"slowest_s"})
    assert [r["command"] for r in out["results"]] == ["python -m sweep.store", "python -m model.train"]
    for r in out["results"]:
        assert (r["help_exit"], r["bad_flag_exit"], r["heavy_at_parse"]) == (0, 2, []), r
        assert r["help_s"] > 0 and r["bad_flag_s"] > 0
    assert "RATIO " in capsys.readouterr().out
