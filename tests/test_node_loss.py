"""A worker node lost mid-sweep (spot preemption): its trials restart on the surviving
node from their last checkpoints and the store ends with exactly one row per key."""

from __future__ import annotations

import threading
import time

import pytest
from ray import tune
from sweep_helpers import assert_store_complete, dirs

from sweep import baseline
from sweep.store import Store

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_env")]  # ray_env: tests/conftest.py

EPOCHS = 10


@pytest.fixture
def two_nodes(worker_cluster):
    # detect the lost node within seconds rather than the default ~30 s
    fast_health_check = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
    with worker_cluster(2, fast_health_check, num_cpus=2) as nodes:
        yield nodes


def test_worker_node_removed_mid_sweep(two_nodes, tmp_path):
    cluster, workers = two_nodes
    lost, survivor = workers[1].node_id, workers[0].node_id
    store = Store(str(tmp_path / "store"))
    argv = ["--preset", "smoke", "--inits", "independent_xavier,qk_identical", "--depths", "2",
            "--seed-list", "1,2", "--epochs", str(EPOCHS), "--steps-per-epoch", "20",
            "--cpus-per-trial", "1", "--max-failures", "3", *dirs(tmp_path, "nodeloss")]
    out: dict = {}
    driver = threading.Thread(target=lambda: out.update(summary=baseline.main(argv)), daemon=True)
    driver.start()
    # Wait until every trial has checkpointed past epoch 1, then lose the second worker.
    deadline = time.time() + 240
    while time.time() < deadline:
        ep = store.read("epochs")
        if len(ep) and ep["run_id"].nunique() == 4 and ep.groupby("run_id")["epoch"].max().min() >= 2:
            break
        time.sleep(0.2)
    else:
        pytest.fail("trials did not get going")
    cluster.remove_node(workers[1])
    driver.join(timeout=300)
    assert not driver.is_alive(), "the sweep did not finish after the node was lost"
    summary = out["summary"]
    assert (summary["status"] == "completed").all(), summary

    # Each trial's results in order: a trial that was on the lost node either had already
    # finished there or went on on the survivor from a checkpoint (its first result there is
    # past epoch 1; a restart from scratch would report epochs 0 and 1 again).
    histories = tune.ExperimentAnalysis(str(tmp_path / "ray" / "nodeloss")).trial_dataframes.values()
    moved = 0
    for h in histories:
        nodes = list(h["node_id"])
        assert set(nodes) <= {lost, survivor}, nodes
        if nodes[-1] == lost:
            assert h["epoch"].iloc[-1] == EPOCHS, "a trial ended on the lost node before finishing"
        elif lost in nodes:
            moved += 1
            first_on_survivor = h["epoch"][h["node_id"] == survivor].iloc[0]
            assert first_on_survivor > 1, f"restarted from scratch: {list(h['epoch'])}"
    assert moved >= 1, "no trial was running on the lost node when it went"
    assert_store_complete(store, runs=4, epochs=EPOCHS, layer_rows=4 * (EPOCHS + 1) * 2)
