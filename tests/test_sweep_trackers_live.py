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
from sweep.trackers.base import LAYER_FLOATS, LAYER_LISTS, RUN_METRICS, RUN_TAG, STORE_TAG
from sweep.trackers.wandb_tracker import offline_records

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
    out = {k: str(row[k]) for k in ("init", "depth", "seed", "condition", "preset", "sweep")}
    out |= {f"strength.{k}": str(float(v)) for k, v in json.loads(row["strengths"]).items()}
    out |= {"pack": str(row["pack"]), "pack_member": str(row["member"])}
    out |= {f"model.{k}": str(v) for k, v in json.loads(row["model"]).items()}
    out |= {f"train.{k}": str(v) for k, v in json.loads(row["train"]).items()}
    return out


def _expected_metrics(epoch_row: dict, layer_rows: list[dict]) -> dict[str, float]:
    out = {k: float(epoch_row[k]) for k in RUN_METRICS if epoch_row[k] is not None}
    for r in layer_rows:
        out |= {f"{k}/L{r['layer']}": float(r[k]) for k in LAYER_FLOATS if r[k] is not None}
        out |= {f"{k}/L{r['layer']}/h{h}": float(v) for k in LAYER_LISTS for h, v in enumerate(r[k] or ())}
    return out


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _mlflow_runs(db: Path, experiment: str, stamps: dict | None = None) -> dict:
    """The store runs' MLflow runs of ``experiment`` (not the sweep-level run): run id -> (run, history);
    ``stamps`` gets (run id, step) -> the epoch's timestamps (ms)."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    out = {}
    for r in runs:
        if RUN_TAG not in r.data.tags:
            continue
        history: dict[int, dict[str, float]] = {}
        for key in r.data.metrics:
            points = client.get_metric_history(r.info.run_id, key)
            assert len({m.step for m in points}) == len(points), key  # no epoch logged twice
            for m in points:
                history.setdefault(m.step, {})[key] = m.value
                if stamps is not None:
                    stamps.setdefault((r.data.tags[RUN_TAG], m.step), set()).add(m.timestamp)
        out[r.data.tags[RUN_TAG]] = (r, history)
    return out


def _wandb_ids(store: Path) -> dict[str, str]:
    """Store run id -> its W&B run id (from the store's runs rows and id)."""
    from sweep.store import store_id
    from sweep.trackers.base import RunInfo
    from sweep.trackers.wandb_tracker import run_wandb_id

    st = Store(str(store))
    sid = store_id(st, create=False)
    return {r["run_id"]: run_wandb_id(RunInfo.of(r, sid)) for r in st.scan("runs").table.to_pylist()}


def test_the_sweep_completes_with_every_row_and_prints_where_its_tracker_runs_are(live):
    tmp, out, err = live
    assert_store_complete(Store(str(tmp / "store")), runs=2, epochs=2, layer_rows=2 * 3 * 1)
    assert "2 runs in 1 trials" in out  # packed: one trial, two tracker runs
    assert f"mlflow ui --backend-store-uri sqlite:///{tmp / 'trackers' / 'mlflow.db'}" in out
    assert f"wandb sync {tmp / 'trackers' / 'wandb'}/offline-run-*" in out
    assert "failed" not in err and "FAILED" not in out and "mlflow.store" not in err, err  # no tracker failed
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
        assert run.data.params["pack"] == "2" and run.data.params["sweep"] == "baseline"  # one meaning per name
        assert {k: run.data.tags[k] for k in ("experiment", "trial")} == {"experiment": "live", "trial": row["trial"]}
        assert run.data.tags["status"] == "completed" and run.info.status == "FINISHED"
        own = [e for e in epochs if e["run_id"] == row["run_id"]]
        assert sorted(history) == sorted(e["epoch"] for e in own) == [0, 1, 2]
        for e in own:
            want = _expected_metrics(e, [r for r in layers if r["run_id"] == row["run_id"]
                                         and r["epoch"] == e["epoch"]])
            got = history[e["epoch"]]
            assert sorted(got) == sorted(want), e["epoch"]
            assert all(_same(got[k], want[k]) for k in want), e["epoch"]
    assert "pr_q/L0" in history[1] and "qk_alignment_head/L0/h3" in history[1]  # grouped per metric
    assert "grad_norm_q/L0" not in history[0] and "train_loss" not in history[0]  # null at epoch 0: not sent


def test_each_epoch_carries_the_time_its_row_was_written(live):
    tmp = live[0]
    _, epochs, _ = _store(tmp)
    stamps: dict = {}
    _mlflow_runs(tmp / "trackers" / "mlflow.db", "live", stamps)
    ids = _wandb_ids(tmp / "store")
    for e in epochs:
        ms = int(e["time"].timestamp() * 1000)
        assert stamps[(e["run_id"], e["epoch"])] == {ms}, e["epoch"]
        wb = offline_records(tmp / "trackers", ids[e["run_id"]])["history"][e["epoch"]]
        assert wb["_timestamp"] == e["time"].timestamp(), e["epoch"]


def test_mlflow_nests_the_runs_under_one_sweep_level_run(live):
    from mlflow import MlflowClient

    tmp = live[0]
    client = MlflowClient(f"sqlite:///{tmp / 'trackers' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("live")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("qkgeom.sweep_run") == "live"]
    assert len(parents) == 1 and len(runs) == 3
    assert {r.data.tags.get("mlflow.parentRunId") for r in runs if r not in parents} == {parents[0].info.run_id}


def test_wandb_offline_runs_hold_one_run_per_store_run_with_the_stores_values(live):
    tmp = live[0]
    runs, epochs, layers = _store(tmp)
    folder = tmp / "trackers"
    ids = {p.name.rsplit("-", 1)[1] for p in (folder / "wandb").glob("offline-run-*")}
    wids = _wandb_ids(tmp / "store")
    assert ids == set(wids.values()) and len(ids) == 2
    for row in runs:
        held = offline_records(folder, wids[row["run_id"]])
        assert held["name"] == row["run_id"] and held["group"] == "live"
        assert held["tags"] == ["experiment:live", f"trial:{row['trial']}", "pack:2"]
        assert {k: str(held["config"][k]) for k in _expected_params(row)} == _expected_params(row)
        assert held["config"]["pack"] == 2 and held["config"]["depth"] == 1  # typed, not text
        assert held["status"] == "completed" and held["exit_code"] == 0
        own = [e for e in epochs if e["run_id"] == row["run_id"]]
        assert sorted(held["history"]) == [0, 1, 2]
        for e in own:
            want = _expected_metrics(e, [r for r in layers if r["run_id"] == row["run_id"]
                                         and r["epoch"] == e["epoch"]])
            got = {k: v for k, v in held["history"][e["epoch"]].items() if k != "_timestamp"}
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
        assert {k: other.data.tags[k] for k in ("experiment", "trial", "status", STORE_TAG)} == {
            k: run.data.tags[k] for k in ("experiment", "trial", "status", STORE_TAG)}
        assert other_history == history
        wid = _wandb_ids(tmp / "store")[run_id]
        assert offline_records(again, wid)["history"] == offline_records(tmp / "trackers", wid)["history"]
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
    lines = [ln for ln in err.splitlines() if f":{port}" in ln or "tracker mlflow" in ln]
    assert len(lines) == 1 and "[down] tracker mlflow" in lines[0] and f":{port}" in lines[0], lines
    _closing_line_names_it(out, tmp_path)
    assert not [r for r in caplog.records if f"port={port}" in r.getMessage()]  # urllib3's retries: quiet
    assert "mlflow ui" not in out  # nothing to open
    assert "1 trials in" in out and "status: completed 1" in out


def _closing_line_names_it(out: str, tmp: Path) -> None:
    closing = [ln for ln in out.splitlines() if ln.startswith("mlflow:")]
    assert len(closing) == 1 and "FAILED" in closing[0], out[-2000:]
    assert closing[0].endswith(f"python -m sweep.store export --store {tmp / 'store'} --tracker mlflow"), closing


def test_a_hung_mlflow_server_delays_no_trial_and_costs_one_line(offline, tmp_path):
    """A loopback socket that accepts and never answers: the sweep runs and ends while the tracker's
    first request still waits (so nothing of the sweep waited for it), with one line during the sweep
    and the closing line naming the tracker and the export command."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    port = server.getsockname()[1]
    held: list[socket.socket] = []
    answered = threading.Event()  # never set: nothing is ever sent back

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    offline.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    offline.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "600")  # the request outlives the sweep: it never returns
    try:
        out, err = _run([*GRID[:5], "qk_identical", *GRID[6:], "--pack", "1", *dirs(tmp_path, "hung"),
                         "--tracker", "mlflow"])
        assert held, "the tracker never connected"
        assert not answered.is_set()
    finally:
        offline.delenv("MLFLOW_TRACKING_URI")
        offline.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT")
        server.close()
        for conn in held:
            conn.close()
    assert_store_complete(Store(str(tmp_path / "store")), runs=1, epochs=2, layer_rows=3)
    lines = [ln for ln in err.splitlines() if f":{port}" in ln or "tracker mlflow" in ln]
    assert len(lines) == 1 and lines[0].startswith("[hung] tracker mlflow: no answer from MLflow at "
                                                   f"http://127.0.0.1:{port} within 3 s"), lines
    _closing_line_names_it(out, tmp_path)
    assert "1 trials in" in out and "status: completed 1" in out
