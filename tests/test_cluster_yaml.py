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
    assert "ray start --head" in head_cmds
    assert "0.0.0.0" not in head_cmds
    assert "--dashboard-host=127.0.0.1" in head_cmds or "--dashboard-host" not in head_cmds


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
