"""How long each command takes to answer ``--help`` and a bad flag, and what its parser imports.

    python -m bench.cli_latency [--rounds 3] [--commands sweep.store,model.train] [--json FILE]

Each command (``COMMANDS``: every ``python -m`` entry point the README and docs/ name) runs in a fresh
interpreter, as a user types it; the figure is the median wall time over ``--rounds`` runs of
``--help`` and of ``--no-such-flag`` (which must exit 2), with the heavy modules (``HEAVY``) its
parser imported. The target is 0.5 s for each: a parser that imports nothing that trains.
``tests/test_entry_points.py`` checks the imports (not the times) of the same list.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: every ``python -m`` command of the project (README.md, docs/), in the order docs/architecture.md lists them
COMMANDS = ("sweep.demo", "sweep.baseline", "sweep.interventions", "sweep.extension", "sweep.tiny_series",
            "sweep.report", "sweep.browse", "sweep.store", "model.train", "bench.run_all", "bench.verdicts")
#: modules that train or analyse: none of them should load before a command's flags are parsed
HEAVY = ("torch", "ray", "ray.tune", "scipy", "pandas", "pyarrow", "transformers", "matplotlib")
TARGET_S = 0.5
#: run in the child: the command as ``python -m`` runs it, then the heavy modules it had imported
_PROBE = ("import json, runpy, sys\n"
          "module, flag, heavy = sys.argv[1], sys.argv[2], sys.argv[3].split(',')\n"
          "sys.argv = ['python -m ' + module, flag]\n"
          "code = 0\n"
          "try:\n"
          "    runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
          "except SystemExit as exc:\n"
          "    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)\n"
          "sys.stdout.flush()\n"
          "print(json.dumps({'code': code, 'heavy': [m for m in heavy if m in sys.modules]}), file=sys.stderr)\n")


def answer(module: str, flag: str) -> dict[str, Any]:
    """Run ``python -m module flag`` once: its exit code, the heavy modules its parser imported, wall s."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _PROBE, module, flag, ",".join(HEAVY)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    last = (proc.stderr.strip().splitlines() or ["{}"])[-1]
    try:
        out = json.loads(last)
    except json.JSONDecodeError:
        out = {"code": proc.returncode, "heavy": None, "stderr": proc.stderr[-500:]}
    return {**out, "wall_s": wall}


def python_m(module: str, flag: str) -> float:
    """Wall time of ``python -m module flag`` itself (no probe around it)."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", module, flag], cwd=ROOT, capture_output=True, timeout=120)
    return time.perf_counter() - t0


def measure(module: str, rounds: int) -> dict[str, Any]:
    helped = answer(module, "--help")
    bad = answer(module, "--no-such-flag")
    help_s = statistics.median(python_m(module, "--help") for _ in range(rounds))
    bad_s = statistics.median(python_m(module, "--no-such-flag") for _ in range(rounds))
    return {"command": f"python -m {module}", "help_s": help_s, "bad_flag_s": bad_s,
            "help_exit": helped["code"], "bad_flag_exit": bad["code"],
            "heavy_at_parse": sorted(set(helped.get("heavy") or []) | set(bad.get("heavy") or []))}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.cli_latency", description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3, help="runs per command and flag (the median is kept)")
    p.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated subset of the commands")
    p.add_argument("--tiny", action="store_true", help="one round of two commands (tests)")
    p.add_argument("--quick", action="store_true", help="two rounds")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args(argv)
    commands = args.commands.split(",")
    bad = [c for c in commands if c not in COMMANDS]
    if bad:
        p.error(f"--commands: unknown {', '.join(bad)}; valid: {', '.join(COMMANDS)}")
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    rounds = 1 if args.tiny else 2 if args.quick else args.rounds
    if args.tiny:
        commands = ["sweep.store", "model.train"]
    print(f"bench.cli_latency: --help and a bad flag, median of {rounds} run(s) each, target <= {TARGET_S} s",
          flush=True)
    print(f"{'command':34s} {'--help':>8s} {'bad flag':>9s}  heavy modules at parse time")
    results = []
    for module in commands:
        r = measure(module, rounds)
        results.append(r)
        print(f"{r['command']:34s} {r['help_s']:7.2f}s {r['bad_flag_s']:8.2f}s  "
              f"{', '.join(r['heavy_at_parse']) or '-'}", flush=True)
    worst = max(max(r["help_s"], r["bad_flag_s"]) for r in results)
    from bench.common import machine, print_ratio  # after the timings: bench.common imports torch

    out: dict[str, Any] = {"benchmark": "cli_latency", "results": results, "ratio": worst / TARGET_S,
                           "target": f"<= 1 (slowest answer / {TARGET_S} s)", "met": worst <= TARGET_S,
                           "slowest_s": worst, "machine": machine()}
    print_ratio("slowest command's answer / 0.5 s", out["ratio"], out["target"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")
    return out


if __name__ == "__main__":
    main()
