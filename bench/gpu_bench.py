"""The GPU script's set-up check and its report (``bench/gpu.sh``).

    python -m bench.gpu_bench --dry-run --out DIR      whether CUDA is there and what gpu.sh would run
    python -m bench.gpu_bench --check-cuda --out DIR   exit 0 with CUDA; else write the no-CUDA file, exit 1
    python -m bench.gpu_bench --report --out DIR       every section's figures → DIR/gpu_results.json, one table

The sections (each its own module, each writing its JSON under DIR; budgets from ``bench.gpu_plan``):
``throughput`` (``bench.gpu_packing``: unpacked eager and graphed, packs of 12 and 36 eager and
graphed, ``k_spectrum_clamp`` unpacked and in a pack of 12, 4 processes, GPU busy, a compiled pack;
each against unpacked eager, with the paper grid's projected hours), ``clamp``
(``bench.clamp_cost``: the clamp's decomposition methods and devices, as × the none step), ``probe`` (``bench.probe_cost``: the per-epoch probe plus validation in training steps at depth 8),
``equivalence`` (``bench.pack_equivalence``: a pack against its unpacked runs, against the noise of
switching the attention backend, fp32 and bf16) and ``sweep`` (``bench.gpu_sweep``: the baseline
sweep with default flags and with ``--pack 1``). The report prints what each measured, "not
measured" for what did not run, and each section's planned budget beside the seconds it ran
(``DIR/timings.jsonl``, written by gpu.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"probe_steps": 5.0, "sweep_speedup": 5.0, "first_step_s": 30.0}


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(), "hostname": platform.node()}
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.cuda.is_available())
        if info["cuda"]:
            p = torch.cuda.get_device_properties(0)
            info.update(gpu=p.name, gpu_memory_gb=p.total_memory / 2**30, cuda_version=torch.version.cuda,
                        bf16=torch.cuda.is_bf16_supported(including_emulation=False))
    except Exception as exc:  # noqa: BLE001 - the report says what was there
        info.update(torch=None, cuda=False, torch_error=f"{type(exc).__name__}: {exc}")
    try:
        import ray

        info["ray"] = ray.__version__
    except Exception as exc:  # noqa: BLE001
        info.update(ray=None, ray_error=f"{type(exc).__name__}: {exc}")
    return info


def cuda_available() -> tuple[bool, str]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return False, f"torch not importable: {exc}"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} sees no CUDA device"
    return True, torch.cuda.get_device_name(0)


def no_cuda(out: Path, why: str) -> dict[str, Any]:
    result = {"cuda": False, "measured": False, "reason": why, "environment": environment(),
              "note": "GPU numbers not measured: run bash bench/gpu.sh on a machine with a CUDA GPU"}
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"[gpu_bench] no CUDA found ({why}): nothing measured; wrote {out / 'gpu_results.json'}")
    return result


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def probe_device(probe: dict[str, Any]) -> str:
    """Where ``decomp_device="auto"`` put the probe's decompositions, at the probe's real shapes: the
    worst depth's own figure (``auto_decomp_device``), else the file's top-level ``decomp_device``."""
    worst = [r for r in probe.get("results", []) if r.get("depth") == probe.get("worst_depth")]
    if worst and worst[0].get("auto_decomp_device"):
        return f"{worst[0]['auto_decomp_device']}, chosen at the probe's shapes"
    return str(probe.get("decomp_device", "?"))


def clamp_lines(clamp: dict[str, Any] | None) -> list[str]:
    """bench.clamp_cost's figures: per shape, each method and device as × the none step, and the fastest."""
    if not clamp:
        return ["k_spectrum_clamp's decomposition: not measured"]
    lines = []
    for r in clamp["results"]:
        shape = "unpacked" if r["members"] == 1 else f"pack of {r['members']}"
        each = ", ".join(f"{x['clamp']} {x['x_none_step']:.2f}×" for x in r["rows"])
        auto = f"; the clamp's own choice {r['auto']}" if r.get("auto") else ""
        lines.append(f"k_spectrum_clamp's decomposition, depth {r['depth']}, {shape}, × the none step "
                     f"({r['none_step_s'] * 1e3:.1f} ms): {each}; fastest {r['fastest']} (clamped step "
                     f"{r['fastest_step_with_clamp']:.2f}×){auto}")
    return lines


def timing_lines(out: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """gpu.sh's timings.jsonl: each item's planned budget, actual seconds and ending; one line a section."""
    path = out / "timings.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    sections: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        sections.setdefault(r["section"], []).append(r)
    lines = []
    for section, items in sections.items():
        each = ", ".join(f"{r['item']} {r['ran_s']}/{r['budget_s']} s ({r['status']})" for r in items)
        lines.append(f"section {section}: ran {sum(r['ran_s'] for r in items)} s of "
                     f"{sum(r['budget_s'] for r in items if not r['status'].startswith('skipped'))} s budgeted: {each}")
    return rows, lines


def report(out: Path) -> dict[str, Any]:
    """Every section's figures in one table and in DIR/gpu_results.json."""
    from bench.gpu_packing import summary

    env = environment()
    print(f"[gpu_bench] report: {env.get('gpu', 'no GPU')}, torch {env.get('torch')}, CUDA {env.get('cuda_version')}, "
          f"Ray {env.get('ray')}, {env.get('cpus')} CPUs")
    result: dict[str, Any] = {"environment": env, "measured": True, "targets": {}}
    result["throughput"] = summary(out) if (out / "packing").exists() else None
    if result["throughput"]:
        result["targets"]["throughput"] = result["throughput"]["targets"]

    probe = _load(out / "probe.json")
    result["probe"] = probe
    if probe and probe.get("ratio") is not None:
        line = (f"probe + validation at depth {probe.get('worst_depth', 8)}: {probe['ratio']:.2f} training steps "
                f"(decompositions on {probe_device(probe)}); target ≤ {TARGETS['probe_steps']:g}: "
                f"{'met' if probe['ratio'] <= TARGETS['probe_steps'] else 'not met'}")
    else:
        line = "probe + validation: not measured"
    print(f"  {line}")
    result["targets"]["probe"] = line

    for amp in ("off", "bf16"):
        eq = _load(out / f"equivalence-{amp}.json")
        result[f"equivalence_{amp}"] = eq
        if eq:
            worst = eq["worst"]
            line = (f"pack vs unpacked, {eq['device']} amp {amp}, M = {eq['members']}, depth {eq['depth']}, {eq['steps']} steps: "
                    f"largest (pack − unpacked)/(math − flash attention) {worst['ratio']:.2f} at {worst['what']}; "
                    f"standard {'holds' if eq['held'] else 'does not hold'}; largest pack difference in a tensor "
                    f"{eq['largest_pack_param']['pack_vs_unpacked']:.2e} ({eq['largest_pack_param']['what']})")
        else:
            line = f"pack vs unpacked, amp {amp}: not measured"
        print(f"  {line}")
        result["targets"][f"equivalence_{amp}"] = line

    result["clamp"] = _load(out / "clamp.json")
    result["targets"]["clamp"] = clamp_lines(result["clamp"])
    for line in result["targets"]["clamp"]:
        print(f"  {line}")

    sweep = _load(out / "sweep.json")
    result["sweep"] = sweep
    if sweep and "compare" in sweep:
        d, p1 = sweep["default"], sweep["pack1"]
        first = d.get("last_first_step_s")
        line = (f"sweep, default flags {d['wall_s']:.0f} s vs --pack 1 {p1['wall_s']:.0f} s: "
                f"×{sweep['speedup_default_over_pack1']:.2f} (target ≥ {TARGETS['sweep_speedup']:g}: "
                f"{'met' if sweep['speedup_default_over_pack1'] >= TARGETS['sweep_speedup'] else 'not met'}); "
                f"rows equal: {sweep['compare']['rows_equal']}; every run's first step within "
                f"{first:.1f} s of the start (target ≤ {TARGETS['first_step_s']:g} s: "
                f"{'met' if first is not None and first <= TARGETS['first_step_s'] else 'not met'})")
    else:
        line = "sweep twice: not measured" + (f" ({sweep})" if sweep else "")
    print(f"  {line}")
    result["targets"]["sweep"] = line
    result["timings"], result["targets"]["time"] = timing_lines(out)
    result["plan"] = _load(out / "plan.json")
    for line in result["targets"]["time"] or ["section times: not recorded (gpu.sh writes timings.jsonl)"]:
        print(f"  {line}")
    path = out / "gpu_results.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"[gpu_bench] wrote {path}")
    return result


def _terminate(signum, frame):  # noqa: ARG001 - signal handler signature
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_bench", description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--report", action="store_true")
    g.add_argument("--dry-run", action="store_true")
    g.add_argument("--check-cuda", action="store_true", help="exit 0 if CUDA is there, else write the "
                   "no-CUDA results file and exit 1")
    p.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _terminate)
    if args.report:
        return report(out)
    ok, what = cuda_available()
    if args.dry_run:
        if not ok:
            return no_cuda(out, what)
        plan = _load(out / "plan.json")
        print(f"[gpu_bench] CUDA found: {what}. Dry run: nothing measured. Planned seconds per section: "
              + (", ".join(f"{k} {v}" for k, v in plan["sections"].items()) if plan else "no plan.json"))
        return {"cuda": True, "measured": False, "plan": plan}
    if not ok:
        no_cuda(out, what)
        raise SystemExit(1)
    print(f"[gpu_bench] CUDA: {what}")
    return {"cuda": True}


if __name__ == "__main__":
    main()
