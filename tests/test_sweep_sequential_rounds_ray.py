"""``--seeds auto`` on a real local Ray: the rounds are one experiment (one store, one Tune
folder, an experiment state per round), a rerun trains nothing, and a driver killed in the middle
of a later round is finished by running the same command again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
from sweep_helpers import assert_store_complete, dirs
from test_sweep_driver_runner import _kill_session, files_mtimes

from sweep import interventions
from sweep.presets import INTERVENTION_PRESETS
from sweep.store import Store

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_env")]

ROOT = Path(__file__).resolve().parents[1]
SMOKE = INTERVENTION_PRESETS["smoke"]
#: freeze_q and its none runs; α small enough that 3 smoke seeds decide nothing: two rounds (3, then 4 seeds)
AUTO = ["--preset", "smoke", "--conditions", "none,freeze_q", "--seeds", "auto", "--max-seeds", "4",
        "--alpha", "0.001"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False)
    yield
    ray.shutdown()


def test_rounds_are_one_experiment_and_a_rerun_trains_nothing(local_ray, tmp_path, capsys):
    frame = interventions.main([*AUTO, *dirs(tmp_path, "auto")])
    out = capsys.readouterr().out
    assert "round 2 (look 2 of 2, 4 seeds): seed 1002 for freeze_q and none: 2 runs (2 to train)" in out, out[-3000:]
    assert "a new round of the experiment" in out
    (claim,) = frame.itertuples()
    assert claim.text == "undecided at 4 seeds (look 2 of 2)" and claim.seeds == [7, 1000, 1001, 1002]
    store = Store(str(tmp_path / "store"))
    assert_store_complete(store, runs=8, epochs=SMOKE.train.epochs, layer_rows=8 * (SMOKE.train.epochs + 1) * 2)
    assert set(store.read("epochs")["seed"]) == {7, 1000, 1001, 1002}
    experiment = tmp_path / "ray" / "auto"
    assert len(list(experiment.glob("experiment_state-*.json"))) == 2  # one per round, one folder
    record = json.loads((tmp_path / "store" / "sequential" / "auto.json").read_text())
    assert record["run_epochs_used"] == 8 * SMOKE.train.epochs and record["finished"]
    assert [r["runs"] for r in record["rounds"]] and len(record["rounds"][1]["runs"]) == 2

    ids = set(store.read("epochs")["run_id"])
    before = files_mtimes(tmp_path / "store", ids)
    again = interventions.main([*AUTO, *dirs(tmp_path, "auto")])
    assert again.equals(frame)
    assert files_mtimes(tmp_path / "store", ids) == before
    assert "round 2 (look 2 of 2, 4 seeds): all 2 runs already in the store" in capsys.readouterr().out


def test_a_driver_killed_in_round_two_finishes_on_rerun(local_ray, tmp_path, capsys):
    argv = [*AUTO, "--epochs", "4", "--steps-per-epoch", "150", *dirs(tmp_path, "killed")]
    log = open(tmp_path / "driver.log", "w")  # closed below
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-m", "sweep.interventions", *argv, "--num-cpus", "1"], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env={**env, "RAY_AUTH_MODE": "disabled", "TUNE_GLOBAL_CHECKPOINT_S": "1"})
    store = Store(str(tmp_path / "store"))
    experiment = tmp_path / "ray" / "killed"
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            assert proc.poll() is None, "ended before the kill:\n" + (tmp_path / "driver.log").read_text()[-3000:]
            if len(list(experiment.glob("experiment_state-*.json"))) == 2 and (tmp_path / "store" / "epochs").exists():
                ep = store.read("epochs", columns=["run_id", "seed", "epoch"])
                if (ep["seed"] == 1002).any():  # round 2 is training
                    break
            time.sleep(0.3)
        else:
            pytest.fail("round 2 never started:\n" + (tmp_path / "driver.log").read_text()[-3000:])
    finally:
        _kill_session(proc)
        log.close()
    ep = store.read("epochs")
    round_one = set(ep.loc[ep["seed"] != 1002, "run_id"])
    assert len(round_one) == 6
    assert (ep.loc[ep["seed"] == 1002].groupby("run_id")["epoch"].max() < 4).any(), "round 2 was not cut"
    before = files_mtimes(tmp_path / "store", round_one)

    with pytest.warns(UserWarning, match="looks live"):  # the killed driver's sweep lock
        interventions.main(argv)
    out = capsys.readouterr().out
    assert "round 1 (look 1 of 2, 3 seeds): all 6 runs already in the store" in out
    assert "resuming the experiment" in out, out[-3000:]
    assert files_mtimes(tmp_path / "store", round_one) == before
    assert_store_complete(store, runs=8, epochs=4, layer_rows=8 * 5 * 2)
