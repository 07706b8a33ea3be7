"""A head started the way cluster.yaml, cluster.local.yaml and slurm/qkgeom.sbatch start it
(cluster/ray_node.sh: `ray get-auth-token --generate`, then `RAY_AUTH_MODE=token ray start --head`)
refuses a client without the token or with a wrong one, and accepts one with the token.

Everything runs in subprocesses with copied environments: a scratch HOME (where the token is
written), a short scratch --temp-dir, free ports; the head is stopped through its own process
group (`ray start --block` in a new session), never with `ray stop`, which would stop every
Ray on the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE_SH = ROOT / "cluster" / "ray_node.sh"
RAY = Path(sys.executable).parent / "ray"

pytestmark = [
    pytest.mark.skipif(not RAY.exists() and shutil.which("ray") is None, reason="no `ray` CLI"),
    pytest.mark.skipif(shutil.which("bash") is None, reason="no bash"),
    pytest.mark.timeout(120),
]

CLIENT = """
import logging, sys, ray
try:
    ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)
    print("CONNECTED", int(ray.cluster_resources().get("CPU", 0)))
except Exception as e:
    print("REFUSED", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    sys.exit(3)
"""


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RAY_AUTH") and k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    env["HOME"] = str(home)
    env["QKGEOM_VENV"] = sys.prefix  # ray_node.sh uses $QKGEOM_VENV/bin/ray
    return env


def _client(address: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", CLIENT, address], env=env, capture_output=True,
                         text=True, timeout=90)
    out.elapsed = round(time.monotonic() - t0, 1)
    return out


def _refused(address: str, envs: dict[str, dict[str, str]], tmp: Path) -> dict[str, str]:
    """Start one client per env at once; each is refused once GCS answers InvalidAuthToken.

    A refused client retries about 20 s before ray.init gives up; the server's first
    refusal is the evidence, so a client is stopped (its own pid) as soon as it shows one.
    Returns what each printed: its first refusal line, or its output if it ended otherwise.
    """
    procs = {}
    for name, env in envs.items():
        err = open(tmp / f"{name}.err", "w+")
        procs[name] = (subprocess.Popen([sys.executable, "-c", CLIENT, address], env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=err), err)
    seen: dict[str, str] = {}
    deadline = time.monotonic() + 60
    while len(seen) < len(procs) and time.monotonic() < deadline:
        for name, (proc, err) in procs.items():
            if name in seen:
                continue
            err.seek(0)
            text = err.read()
            hit = [line for line in text.splitlines() if "InvalidAuthToken" in line]
            if hit:
                seen[name] = hit[0]
                proc.kill()
            elif proc.poll() is not None:
                seen[name] = f"exit {proc.returncode}: {proc.stdout.read()} {text[-500:]}"
        time.sleep(0.3)
    for proc, err in procs.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        err.close()
    return seen


@pytest.fixture
def token_head(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    temp_dir = tempfile.mkdtemp(prefix="rqa", dir="/tmp")  # short: Ray's socket paths < 108 chars
    port, agent, agent_grpc, metrics, rt_env, nm, om = _free_ports(7)
    env = _clean_env(home)
    cmd = ["bash", str(NODE_SH), "head", "--block", f"--port={port}",
           f"--temp-dir={temp_dir}", "--num-cpus=1", "--num-gpus=0", "--include-dashboard=false",
           f"--dashboard-agent-listen-port={agent}",
           f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
           f"--runtime-env-agent-port={rt_env}", f"--node-manager-port={nm}",
           f"--object-manager-port={om}", "--disable-usage-stats"]
    log = open(tmp_path / "head.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield {"address": f"127.0.0.1:{port}", "home": home, "env": env, "proc": proc,
               "log": tmp_path / "head.log"}
    finally:
        # our own process group only: SIGTERM lets `ray start --block` stop its children
        for sig, wait_s in ((signal.SIGTERM, 8), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=wait_s)
                time.sleep(0.5)
                os.killpg(proc.pid, 0)  # stragglers of the group still there?
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.ray  # a real head: `ray start --head` in a subprocess
def test_token_head_refuses_clients_without_the_token(token_head, tmp_path):
    token_file = token_head["home"] / ".ray" / "auth_token"
    with_token = {**token_head["env"], "RAY_AUTH_MODE": "token"}
    port = int(token_head["address"].rsplit(":", 1)[1])
    deadline = time.monotonic() + 60
    while True:  # wait for `ray start` to finish: it prints this line once GCS and raylet are up
        assert token_head["proc"].poll() is None, token_head["log"].read_text()[-3000:]
        if "Ray runtime started" in token_head["log"].read_text():
            break
        assert time.monotonic() < deadline, token_head["log"].read_text()[-3000:]
        time.sleep(0.5)
    with socket.create_connection(("127.0.0.1", port), timeout=5):  # GCS listening
        pass
    ok = _client(token_head["address"], with_token)
    print("client with the token:", ok.stdout.strip())
    assert ok.returncode == 0 and "CONNECTED 1" in ok.stdout, ok.stdout + ok.stderr

    # generated by `ray get-auth-token --generate` before the head started, private
    assert token_file.exists() and len(token_file.read_text().strip()) >= 32
    assert token_file.stat().st_mode & 0o077 == 0
    log = token_head["log"].read_text()
    assert "Token authentication is disabled" not in log

    other_home = tmp_path / "elsewhere"
    other_home.mkdir()
    refused = _refused(token_head["address"], {
        "no_token": _clean_env(other_home),  # no token anywhere, RAY_AUTH_MODE unset
        "wrong_token": {**_clean_env(other_home), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 32},
    }, tmp_path)
    for name in ("no_token", "wrong_token"):
        print(f"client {name}:", refused.get(name))
        assert "InvalidAuthToken" in refused.get(name, ""), refused


def test_worker_without_the_token_refuses_to_start(tmp_path):
    """ray_node.sh worker stops before `ray start` when the head's token is not on the node."""
    home = tmp_path / "home"
    home.mkdir()
    out = subprocess.run(["bash", str(NODE_SH), "worker", "127.0.0.1:1", "--block"], env=_clean_env(home),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert "no Ray auth token" in out.stderr
