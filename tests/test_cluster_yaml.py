"""cluster.yaml passes Ray's own launcher checks and has the shape GPU sweeps need (RAY.md).

``ray up`` runs ``prepare_config`` then ``validate_config``
(``ray.autoscaler._private.util``, a private API: Ray's minor is pinned in
pyproject). Both are offline: no cloud is contacted.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

CLUSTER_YAML = Path(__file__).resolve().parents[1] / "cluster.yaml"

pytestmark = pytest.mark.skipif(not CLUSTER_YAML.exists(), reason="no cluster.yaml")


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


@pytest.fixture(scope="module")
def config(raw) -> dict:
    prepared = prepare_config(copy.deepcopy(raw))
    validate_config(prepared)
    return prepared


def gpu_worker_types(config: dict) -> dict[str, dict]:
    return {name: t for name, t in config["available_node_types"].items()
            if name != config["head_node_type"] and t["resources"].get("GPU", 0) >= 1}


def test_passes_ray_launcher_validation(config):
    assert config["provider"]["type"]
    assert config["head_node_type"] in config["available_node_types"]


def test_head_takes_no_trials(config):
    head = config["available_node_types"][config["head_node_type"]]
    assert head["resources"].get("CPU") == 0
    assert head["resources"].get("GPU", 0) == 0
    assert head.get("max_workers", 0) == 0  # one head, never scaled


def test_gpu_workers_scale_from_zero(config):
    workers = gpu_worker_types(config)
    assert workers, "no worker node type with a GPU"
    for name, t in workers.items():
        assert t["min_workers"] == 0, name
        assert t["max_workers"] >= 1, name
        assert config["max_workers"] >= t["max_workers"], name
        # four quarter-GPU trials per GPU at --cpus-per-trial 1 need 4 CPUs per GPU
        assert t["resources"]["CPU"] >= 4 * t["resources"]["GPU"], name


def test_dashboard_not_exposed(raw):
    head_cmds = " ".join(raw.get("head_start_ray_commands", []))
    assert "cluster/ray_node.sh head" in head_cmds  # which runs ray start --head --dashboard-host=127.0.0.1
    assert "0.0.0.0" not in head_cmds and "--dashboard-host" not in head_cmds
    assert "start --head --dashboard-host=127.0.0.1" in NODE_SH.read_text()


def test_validation_is_real(raw):
    """The checks above would notice a broken file: Ray rejects unknown keys and fractional resources."""
    bad_key = copy.deepcopy(raw)
    bad_key["max_wrokers"] = 3
    with pytest.raises(Exception, match="max_wrokers"):
        validate_config(prepare_config(bad_key))
    fractional = copy.deepcopy(raw)
    worker = next(iter(gpu_worker_types(prepare_config(copy.deepcopy(raw)))))
    fractional["available_node_types"][worker]["resources"]["GPU"] = 0.5
    with pytest.raises(Exception, match="not of type 'integer'"):
        validate_config(prepare_config(fractional))


# --- both launcher files: cluster.yaml (AWS) and cluster.local.yaml (SSH machines) -------------

ROOT = CLUSTER_YAML.parent
LOCAL_YAML = ROOT / "cluster.local.yaml"
NODE_SH = ROOT / "cluster" / "ray_node.sh"
LOCK = ROOT / "requirements.lock"
BOTH = [pytest.param(CLUSTER_YAML, id="aws"), pytest.param(LOCAL_YAML, id="local")]


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _cmds(raw: dict, key: str) -> list[str]:
    return [str(c) for c in raw.get(key, [])]


@pytest.mark.parametrize("path", BOTH)
def test_both_pass_ray_launcher_validation(path):
    raw = _load(path)
    prepared = prepare_config(copy.deepcopy(raw))
    validate_config(prepared)
    assert prepared["head_node_type"] in prepared["available_node_types"]


def test_local_yaml_is_the_ssh_provider():
    raw = _load(LOCAL_YAML)
    assert raw["provider"]["type"] == "local"
    assert "head_ip" in raw["provider"] and isinstance(raw["provider"]["worker_ips"], list)
    assert raw["auth"]["ssh_user"] and raw["auth"]["ssh_private_key"]


@pytest.mark.parametrize("path", BOTH)
def test_token_auth_on_every_node(path):
    """Token generated on the head before `ray start`, synced to the workers, token mode everywhere."""
    raw = _load(path)
    setup = " ".join(_cmds(raw, "setup_commands"))
    head = _cmds(raw, "head_start_ray_commands")
    worker = _cmds(raw, "worker_start_ray_commands")
    assert "cluster/ray_node.sh setup" in setup  # venv + RAY_AUTH_MODE=token in ~/.bashrc, all nodes
    starts = [c for c in head if "ray_node.sh head" in c]
    assert starts and not any("ray start" in c for c in head), "head must start through ray_node.sh"
    assert "--dashboard-host" not in " ".join(head) and "0.0.0.0" not in " ".join(head)
    assert any("ray_node.sh worker $RAY_HEAD_IP:" in c for c in worker)
    assert not any("ray start" in c for c in worker)
    assert "~/.ray/auth_token" in raw.get("cluster_synced_files", [])
    # one implementation: the token steps live in ray_node.sh, in this order
    sh = NODE_SH.read_text()
    head_fn = sh[sh.index("start_head() {"):sh.index("start_worker() {")]
    gen = head_fn.index("get-auth-token --generate")
    start = head_fn.index("RAY_AUTH_MODE=token exec \"$ray\" start --head --dashboard-host=127.0.0.1")
    assert gen < start
    worker_fn = sh[sh.index("start_worker() {"):]
    assert "no Ray auth token" in worker_fn  # a worker without the token refuses to start
    assert "RAY_AUTH_MODE=token exec \"$ray\" start --address=" in worker_fn
    assert "export RAY_AUTH_MODE=token" in sh  # ~/.bashrc of every node: ray exec, drivers


@pytest.mark.parametrize("path", BOTH)
def test_only_git_tracked_files_travel(path):
    raw = _load(path)
    assert raw["file_mounts"] == {"~/qkgeom": ".cluster/src"}  # written by cluster/stage.sh
    stage = (ROOT / "cluster" / "stage.sh").read_text()
    assert "git ls-files" in stage
    assert "/.cluster/" in (ROOT / ".gitignore").read_text().split()


def test_versions_pinned():
    pins = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"unpinned: {line}"
            pins[name.split("[")[0].lower()] = version
    assert pins["torch"] == "2.13.0"
    assert pins["ray"] == "2.60.0"
    for name in ("transformers", "numpy", "pandas", "pyarrow"):
        assert name in pins, name
    sh = NODE_SH.read_text()
    assert 'lock="$src/requirements.lock"' in sh and '-c "$lock"' in sh and "check_pins" in sh


def test_aws_security_group_admits_ray_ports_from_the_cluster_only(raw):
    sg = raw["provider"].get("security_group")
    assert sg and sg.get("GroupName"), "a security group of its own (Ray adds self-referencing rules)"
    for rule in sg.get("IpPermissions", []):
        for rng in rule.get("IpRanges", []):
            assert not (rng.get("CidrIp") == "0.0.0.0/0" and rule.get("FromPort") != 22), rule


# --- CUDA MPS on GPU nodes (packs share a GPU): ray_node.sh starts it before Ray, or says why not ---------


def _fake_tools(bin_dir: Path, gpu: bool, mps: bool) -> Path:
    """``nvidia-smi`` (a GPU or none) and ``nvidia-cuda-mps-control`` (logging its calls) as scripts."""
    bin_dir.mkdir()
    log = bin_dir / "mps.log"
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\n" + ("echo 'GPU 0: NVIDIA H200 (UUID: GPU-x)'\n" if gpu else "exit 9\n"))
    if mps:  # get_server_list fails until -d has run; quit ends it
        (bin_dir / "nvidia-cuda-mps-control").write_text(f"""#!/bin/sh
if [ "$1" = -d ]; then echo "-d $CUDA_MPS_PIPE_DIRECTORY" >> {log}; touch {bin_dir}/up; exit 0; fi
read cmd; echo "$cmd" >> {log}
[ -e {bin_dir}/up ] || exit 1
[ "$cmd" = quit ] && rm {bin_dir}/up
exit 0
""")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return log


def _node_sh(bin_dir: Path, *args: str, **env: str) -> str:
    import os
    import subprocess

    done = subprocess.run(["bash", str(NODE_SH), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", **env})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("gpu", "mps", "line"), [
    (True, True, "CUDA MPS started (pipe "),
    (True, False, "CUDA MPS not available (no nvidia-cuda-mps-control)"),
    (False, True, "no NVIDIA GPU on this node: CUDA MPS not started"),
])
def test_mps_started_on_gpu_nodes_or_one_line_why_not(tmp_path, gpu, mps, line):
    log = _fake_tools(tmp_path / "bin", gpu, mps)
    pipe = str(tmp_path / "pipe")
    out = _node_sh(tmp_path / "bin", "mps-start", CUDA_MPS_PIPE_DIRECTORY=pipe)
    assert out.strip().splitlines() == [out.strip()] and line in out, out
    calls = log.read_text().splitlines() if log.exists() else []
    assert (f"-d {pipe}" in calls) == (gpu and mps), calls
    if gpu and mps:
        assert "already running" in _node_sh(tmp_path / "bin", "mps-start", CUDA_MPS_PIPE_DIRECTORY=pipe)
        assert "CUDA MPS stopped" in _node_sh(tmp_path / "bin", "mps-stop", CUDA_MPS_PIPE_DIRECTORY=pipe)
        assert log.read_text().splitlines()[-1] == "quit"
        assert _node_sh(tmp_path / "bin", "mps-stop").strip() == ""  # nothing running: nothing to do
    assert "QKGEOM_MPS=0" in _node_sh(tmp_path / "bin", "mps-start", QKGEOM_MPS="0")


def test_mps_before_ray_on_head_and_worker_and_stopped_after_ray_on_slurm():
    sh = NODE_SH.read_text()
    for fn, nxt in (("start_head() {", "start_worker() {"), ("start_worker() {", 'cmd="${1:-}"')):
        body = sh[sh.index(fn):sh.index(nxt)]
        assert body.index("start_mps") < body.index('exec "$ray" start'), fn
    sbatch = (ROOT / "slurm" / "qkgeom.sbatch").read_text()
    stop = sbatch[sbatch.index("stop_ray() {"):sbatch.index("trap 'stop_ray")]
    assert stop.index("kill -KILL") < stop.index('"$node_sh" mps-stop')  # Ray first, then its daemon
    assert 'CUDA_MPS_PIPE_DIRECTORY="$tmp/' in sbatch  # one daemon per job, not per machine
    for path in (CLUSTER_YAML, LOCAL_YAML):  # both launcher files start nodes through ray_node.sh
        raw = _load(path)
        assert any("ray_node.sh head" in c for c in _cmds(raw, "head_start_ray_commands"))
        assert "CUDA MPS" in path.read_text()
