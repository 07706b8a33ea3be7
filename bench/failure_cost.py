"""What a hung tracker server and a deterministic error cost a sweep, each beside a clean sweep, back to back.

    python -m bench.failure_cost [--pairs hung,raising] [--out /tmp/qkfail]

* ``hung``: the baseline smoke sweep with ``--tracker mlflow`` and ``MLFLOW_TRACKING_URI`` at a
  loopback socket that accepts and never answers, against the same sweep without a tracker;
* ``raising``: the interventions smoke sweep with ``--conditions none,explode`` (``tests.plugin_explode``:
  its ``after_step`` always raises), against ``--conditions none,freeze_k``, and the raising one again
  with ``--retry-deterministic`` (every failure retried, Tune's own behaviour).

Each sweep is a fresh ``python -m sweep.…`` process (its own local Ray, ``--num-cpus 2``) with fresh
store and storage; the pair runs back to back so that both see the same machine load. Prints each
command's wall time, exit status, and the ratio. Not part of ``bench.run_all``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def hung_server() -> tuple[str, socket.socket]:
    """A loopback socket that accepts connections and never answers; its URI."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return f"http://127.0.0.1:{server.getsockname()[1]}", server


def sweep(module: str, args: list[str], out: Path, name: str, env: dict[str, str]) -> tuple[float, int, str]:
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)
    cmd = [sys.executable, "-m", module, "--preset", "smoke", "--num-cpus", "2", "--store", str(folder / "store"),
           "--storage", str(folder / "ray"), "--name", name, *args]
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
    wall = time.perf_counter() - t
    (folder / "log.txt").write_text(done.stdout + done.stderr)
    return wall, done.returncode, " ".join(cmd[1:])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.failure_cost", description=__doc__.splitlines()[0])
    p.add_argument("--pairs", default="hung,raising", help="hung, raising or both (comma-separated)")
    p.add_argument("--out", default="/tmp/qkfail", help="scratch folder for the sweeps' stores and logs")
    args = p.parse_args(argv)
    out = Path(args.out)
    base = {"PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    for pair in args.pairs.split(","):
        if pair == "hung":
            uri, server = hung_server()
            runs = [("clean", "sweep.baseline", [], {}),
                    ("hung", "sweep.baseline", ["--tracker", "mlflow"], {"MLFLOW_TRACKING_URI": uri})]
        elif pair == "raising":
            server = None
            runs = [("clean", "sweep.interventions", ["--conditions", "none,freeze_k"], {}),
                    ("raising", "sweep.interventions", ["--conditions", "none,explode", "--plugin",
                                                        "tests.plugin_explode"], {}),
                    ("retried", "sweep.interventions", ["--conditions", "none,explode", "--plugin",
                                                        "tests.plugin_explode", "--retry-deterministic"], {})]
        else:
            p.error(f"--pairs {pair}: choose hung or raising")
        walls = []
        for label, module, extra, env in runs:
            wall, rc, cmd = sweep(module, extra, out, f"{pair}-{label}", {**base, **env})
            walls.append(wall)
            print(f"{pair:<8} {label:<8} {wall:6.1f} s  exit {rc}  ({'MLFLOW_TRACKING_URI=<hung> ' if env else ''}"
                  f"{cmd})", flush=True)
        for label, wall in zip([r[0] for r in runs[1:]], walls[1:], strict=True):
            print(f"{pair:<8} {label} / clean {wall / walls[0]:.2f}  (difference {wall - walls[0]:+.1f} s)", flush=True)
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
