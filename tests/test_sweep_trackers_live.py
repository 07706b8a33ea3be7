"""sweep/trackers/live.py (and export.py on the same store): a packed smoke sweep with ``--tracker mlflow
--tracker wandb`` on one local Ray, read back with ``MlflowClient`` and from W&B's offline run files.

Offline: MLflow logs to a SQLite store under the sweep's folder, W&B runs in offline mode
(``WANDB_MODE=offline``, its config and cache folders in tmp). One sweep (1 depth, 2 inits packed
into one trial, 2 epochs of 3 steps) serves the live checks and the export's; a second, with
``MLFLOW_TRACKING_URI`` at a closed port, checks that an unreachable server costs one line.
"""

from __future__ import annotations

import io
import json
import math
import os
import socket
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from sweep_helpers import assert_store_complete, dirs

from sweep import baseline
from sweep.store import Store
from sweep.store import main as store_main
from sweep.trackers.base import LAYER_FLOATS, LAYER_LISTS, RUN_METRICS, RUN_TAG
from sweep.trackers.wandb_tracker import offline_records, wandb_id

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_env")]  # ray_env: tests/conftest.py

GRID = ["--preset", "demo", "--depths", "1", "--inits", "independent_xavier,qk_identical", "--seed-list", "37",
        "--epochs", "2", "--steps-per-epoch", "3", "--num-cpus", "2"]


@pytest.fixture(scope="module")
def offline(ray_env, tmp_path_factory):
    """W&B and MLflow with no network and nothing written outside tmp (restored after the module)."""
    home = tmp_path_factory.mktemp("wandb-home")
    ray_env.setenv("WANDB_MODE", "offline")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        ray_env.setenv(name, str(home / name.lower()))
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "MLFLOW_TRACKING_URI"):
        ray_env.delenv(name, raising=False)
    return ray_env


def _run(argv: list[str]) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        baseline.main(argv)
    return out.getvalue(), err.getvalue()


def _wandb_children() -> list[str]:
    """W&B service processes started by this process and still running."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and "wandb" in cmd:
            found.append(cmd)
    return found


@pytest.fixture(scope="module")
def live(offline, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live")
    out, err = _run([*GRID, "--pack", "2", *dirs(tmp, "live"), "--tracker", "mlflow", "--tracker", "wandb"])
    return tmp, out, err


def _store(tmp: Path) -> tuple[list[dict], list[dict], list[dict]]:
    store = Store(str(tmp / "store"))
    return tuple(store.scan(t).table.to_pylist() for t in ("runs", "epochs", "layers"))


def _expected_params(row: dict) -> dict[str, str]:
    """A store run's parameters as text, computed here from its ``runs`` row (not by sweep.trackers)."""
    out = {k: str(row[k]) for k in ("init", "depth", "seed", "condition", "strengths", "preset", "sweep")}
    out |= {f"model.{k}": str(v) for k, v in json.loads(row["model"]).items()}
    out |= {f"train.{k}": str(v) for k, v in json.loads(row["train"]).items()}
    return out


def _expected_metrics(epoch_row: dict, layer_rows: list[dict]) -> dict[str, float]:
    out = {k: float(epoch_row[k]) for k in RUN_METRICS if epoch_row[k] is not None}
    for r in layer_rows:
        out |= {f"L{r['layer']}/{k}": float(r[k]) for k in LAYER_FLOATS if r[k] is not None}
        out |= {f"L{r['layer']}/{k}/h{h}": float(v) for k in LAYER_LISTS for h, v in enumerate(r[k] or ())}
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _mlflow_runs(db: Path, experiment: str) -> dict:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    out = {}
    for r in runs:
        history: dict[int, dict[str, float]] = {}
        for key in r.data.metrics:
            points = client.get_metric_history(r.info.run_id, key)
            assert len({m.step for m in points}) == len(points), key  # no epoch logged twice
            for m in points:
                history.setdefault(m.step, {})[key] = m.value
        out[r.data.tags[RUN_TAG]] = (r, history)
    return out


def test_the_sweep_completes_with_every_row_and_prints_where_its_tracker_runs_are(live):
    tmp, out, err = live
    assert_store_complete(Store(str(tmp / "store")), runs=2, epochs=2, layer_rows=2 * 3 * 1)
    assert "2 runs in 1 trials" in out  # packed: one trial, two tracker runs
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp / 'trackers' / 'mlflow.db'}" in out
    assert f"wandb sync {tmp / 'trackers' / 'wandb'}/offline-run-*" in out
    assert "failed" not in err and "mlflow.store" not in err, err  # no tracker failed; MLflow's INFO lines quiet
    assert _wandb_children() == []  # W&B's service stopped with the sweep


def test_mlflow_holds_one_run_per_store_run_with_the_stores_parameters_metrics_and_status(live):
    tmp = live[0]
    runs, epochs, layers = _store(tmp)
    tracked = _mlflow_runs(tmp / "trackers" / "mlflow.db", "live")
    assert sorted(tracked) == sorted(r["run_id"] for r in runs) and len(runs) == 2
    for row in runs:
        run, history = tracked[row["run_id"]]
        assert run.info.run_name == row["run_id"]
        assert run.data.params == _expected_params(row)
        assert {k: run.data.tags[k] for k in ("sweep", "trial", "pack")} == {
            "sweep": "live", "trial": row["trial"], "pack": "2"}
        assert run.data.tags["status"] == "completed" and run.info.status == "FINISHED"
        own = [e for e in epochs if e["run_id"] == row["run_id"]]
        assert sorted(history) == sorted(e["epoch"] for e in own) == [0, 1, 2]
        for e in own:
            want = _expected_metrics(e, [r for r in layers if r["run_id"] == row["run_id"]
                                         and r["epoch"] == e["epoch"]])
            got = history[e["epoch"]]
            assert sorted(got) == sorted(want), e["epoch"]
            assert all(_same(got[k], want[k]) for k in want), e["epoch"]
    assert "L0/pr_q" in history[1] and "L0/qk_alignment_head/h3" in history[1]  # grouped per layer
    assert "L0/grad_norm_q" not in history[0] and "train_loss" not in history[0]  # null at epoch 0: not sent


def test_wandb_offline_runs_hold_one_run_per_store_run_with_the_stores_values(live):
    tmp = live[0]
    runs, epochs, layers = _store(tmp)
    folder = tmp / "trackers"
    ids = {p.name.rsplit("-", 1)[1] for p in (folder / "wandb").glob("offline-run-*")}
    assert ids == {wandb_id("live", r["run_id"]) for r in runs}
    for row in runs:
        held = offline_records(folder, wandb_id("live", row["run_id"]))
        assert held["name"] == row["run_id"] and held["group"] == "live"
        assert held["tags"] == ["sweep:live", f"trial:{row['trial']}", "pack:2"]
        assert {k: str(held["config"][k]) for k in _expected_params(row)} == _expected_params(row)
        assert held["status"] == "completed" and held["exit_code"] == 0
        own = [e for e in epochs if e["run_id"] == row["run_id"]]
        assert sorted(held["history"]) == [0, 1, 2]
        for e in own:
            want = _expected_metrics(e, [r for r in layers if r["run_id"] == row["run_id"]
                                         and r["epoch"] == e["epoch"]])
            got = held["history"][e["epoch"]]
            assert sorted(got) == sorted(want) and all(_same(got[k], want[k]) for k in want)


def test_export_sends_the_live_runs_again_identically_and_twice_adds_nothing(live, capsys):
    tmp = live[0]
    again = tmp / "exported"
    argv = ["export", "--store", str(tmp / "store"), "--tracker", "mlflow,wandb", "--tracker-dir", str(again)]
    assert store_main(argv) == 0
    first = capsys.readouterr().out
    assert "mlflow: 2 runs (2 sent now, 0 already there)" in first
    exported = _mlflow_runs(again / "mlflow.db", "live")
    for run_id, (run, history) in _mlflow_runs(tmp / "trackers" / "mlflow.db", "live").items():
        other, other_history = exported[run_id]
        assert (other.info.run_name, other.data.params, other.info.status) == (run.info.run_name, run.data.params,
                                                                               run.info.status)
        assert {k: other.data.tags[k] for k in ("sweep", "trial", "pack", "status")} == {
            k: run.data.tags[k] for k in ("sweep", "trial", "pack", "status")}
        assert other_history == history
        live_wb = offline_records(tmp / "trackers", wandb_id("live", run_id))
        assert offline_records(again, wandb_id("live", run_id))["history"] == live_wb["history"]
    dirs_before = sorted((again / "wandb").glob("offline-run-*"))
    assert store_main(argv) == 0  # twice: the same runs, nothing sent
    assert "mlflow: 2 runs (0 sent now, 2 already there)" in capsys.readouterr().out
    assert len(_mlflow_runs(again / "mlflow.db", "live")) == 2
    assert sorted((again / "wandb").glob("offline-run-*")) == dirs_before
    assert store_main([*argv[:-1], str(tmp / "trackers")]) == 0  # into the live sweep's own: nothing new
    assert "wandb: 2 runs (0 sent now, 2 already there)" in capsys.readouterr().out


def test_an_unreachable_mlflow_server_costs_one_line_and_no_run_or_row(offline, tmp_path, caplog):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    offline.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    try:
        out, err = _run([*GRID[:5], "qk_identical", *GRID[6:], "--pack", "1", *dirs(tmp_path, "down"),
                         "--tracker", "mlflow"])
    finally:
        offline.delenv("MLFLOW_TRACKING_URI")
    assert_store_complete(Store(str(tmp_path / "store")), runs=1, epochs=2, layer_rows=3)
    lines = [ln for ln in (out + err).splitlines() if f":{port}" in ln or "tracker mlflow" in ln]
    assert len(lines) == 1 and "[down] tracker mlflow failed" in lines[0] and f":{port}" in lines[0], lines
    assert not [r for r in caplog.records if f"port={port}" in r.getMessage()]  # urllib3's retries: quiet
    assert "mlflow ui" not in out  # nothing to open    assert "1 trials in" in out and "status: completed 1" in out
