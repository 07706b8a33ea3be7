"""Trackers a lab shares, offline and without Ray: stores exported with ``python -m sweep.store
export`` to one local MLflow store and to W&B offline runs, read back with ``MlflowClient`` and from
W&B's run files.

Two stores under one sweep name keep all their runs; a rerun with another recipe supersedes its
tracker run without deleting it; the ecosystem's variables are honoured (a flag winning); parameters
are typed; each epoch carries the time its row was written; the report reaches one sweep-level run.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from store_helpers import epoch_row, layer_rows

from sweep.store import Store, store_id
from sweep.store import main as store_main
from sweep.trackers import make_trackers
from sweep.trackers.base import RUN_TAG, STORE_TAG, SUPERSEDED_TAG, SUPERSEDES_TAG, RunInfo
from sweep.trackers.wandb_tracker import offline_records, run_wandb_id

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """W&B offline, its files in tmp; none of the variables under test set."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP", "WANDB_DIR",
                 "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def make_store(root: Path, epochs: int = 2, seeds: int = 2, experiment: str = "shared") -> Store:
    """A store as a sweep writes it: runs rows, and each epoch's rows with the time they were written."""
    store = Store(str(root))
    for seed in range(seeds):
        for epoch in range(epochs):
            status = "completed" if epoch == epochs - 1 else "running"
            store.write_layers(layer_rows(epoch, seed))
            store.write_epoch({**epoch_row(epoch, seed, status=status), "strengths": "{}",
                               "time": T0 + timedelta(minutes=10 * seed + epoch)})
        row = {k: v for k, v in layer_rows(0, seed)[0].items() if k in ("sweep", "run_id", "preset", "init", "depth",
                                                                          "seed", "condition")}
        store.write_run({**row, "experiment": experiment, "trial": f"t{seed}", "pack": 1, "member": 0,
                         "model": json.dumps({"d_model": 16}), "strengths": "{}",
                         "train": json.dumps({"epochs": epochs, "lr": 0.001, "seed": seed}, sort_keys=True)})
    return store


def export(store: Path, folder: Path, *extra: str) -> int:
    return store_main(["export", "--store", str(store), "--tracker", "mlflow,wandb", "--tracker-dir", str(folder),
                       *extra])


def mlflow_runs(db: Path, experiment: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id], run_view_type=3)  # 3: all, deleted too


def wandb_dirs(folder: Path) -> list[str]:
    return sorted(p.name.rsplit("-", 1)[1] for p in (folder / "wandb").glob("offline-run-*"))


def test_two_stores_with_one_sweep_name_keep_every_run(offline, tmp_path, capsys):
    a, b = make_store(tmp_path / "a"), make_store(tmp_path / "b", epochs=3)  # the same sweep, other epochs
    shared = tmp_path / "shared"
    assert export(tmp_path / "a", shared) == 0 and export(tmp_path / "b", shared) == 0
    runs = mlflow_runs(shared / "mlflow.db", "shared")
    ours = [r for r in runs if RUN_TAG in r.data.tags]
    assert len(ours) == 4 and {r.info.lifecycle_stage for r in runs} == {"active"}
    assert sorted(r.data.tags[STORE_TAG] for r in ours) == sorted([store_id(a)] * 2 + [store_id(b)] * 2)
    assert store_id(a) != store_id(b)
    ids = wandb_dirs(shared)
    assert len(ids) == len(set(ids)) == 4  # W&B: four runs, none written into another
    assert export(tmp_path / "a", shared) == 0  # again: nothing new, nothing touched
    assert len([r for r in mlflow_runs(shared / "mlflow.db", "shared") if RUN_TAG in r.data.tags]) == 4
    assert wandb_dirs(shared) == ids


def test_a_rerun_with_another_recipe_supersedes_its_tracker_run_and_keeps_it(offline, tmp_path):
    folder = tmp_path / "trackers"
    make_store(tmp_path / "s")
    assert export(tmp_path / "s", folder) == 0
    before = wandb_dirs(folder)
    make_store(tmp_path / "s", epochs=3)  # the same cells rerun with 3 epochs: the store's rows replaced
    assert export(tmp_path / "s", folder) == 0
    runs = [r for r in mlflow_runs(folder / "mlflow.db", "shared") if RUN_TAG in r.data.tags]
    assert len(runs) == 4 and {r.info.lifecycle_stage for r in runs} == {"active"}
    by_id = {r.info.run_id: r for r in runs}
    old = [r for r in runs if SUPERSEDED_TAG in r.data.tags]
    assert len(old) == 2 and all(r.data.params["train.epochs"] == "2" for r in old)
    for r in old:
        new = by_id[r.data.tags[SUPERSEDED_TAG]]
        assert new.data.tags[SUPERSEDES_TAG] == r.info.run_id and new.data.params["train.epochs"] == "3"
        assert new.data.tags[RUN_TAG] == r.data.tags[RUN_TAG]
    after = wandb_dirs(folder)
    assert set(before) < set(after) and len(after) == 4  # W&B: new runs, the old ones kept


def test_the_ecosystems_variables_are_honoured(offline, tmp_path):
    make_store(tmp_path / "store")
    offline.setenv("MLFLOW_EXPERIMENT_NAME", "lab-exp")
    offline.setenv("WANDB_RUN_GROUP", "lab-group")
    offline.setenv("WANDB_PROJECT", "lab-project")
    offline.setenv("WANDB_ENTITY", "lab-entity")
    offline.setenv("WANDB_DIR", str(tmp_path / "wandb-dir" / "new"))  # not there yet: created
    assert store_main(["export", "--store", str(tmp_path / "store"), "--tracker", "mlflow,wandb"]) == 0
    assert len(mlflow_runs(tmp_path / "trackers" / "mlflow.db", "lab-exp")) == 3  # 2 runs + the sweep-level one
    assert mlflow_runs(tmp_path / "trackers" / "mlflow.db", "shared") == []
    wdir = tmp_path / "wandb-dir" / "new"
    ids = wandb_dirs(wdir)
    assert len(ids) == 2 and not (tmp_path / "trackers" / "wandb").exists()
    held = offline_records(wdir, ids[0])
    assert (held["group"], held["project"], held["entity"]) == ("lab-group", "lab-project", "lab-entity")


def test_a_flag_wins_over_the_variables(offline, tmp_path):
    offline.setenv("MLFLOW_EXPERIMENT_NAME", "lab-exp")
    offline.setenv("WANDB_RUN_GROUP", "lab-group")
    offline.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    info = RunInfo("r", "sweep-name", {"sweep": "baseline"})
    mlflow, wandb = make_trackers(("mlflow", "wandb"), tmp_path / "given", folder_given=True, name_given=True)
    assert mlflow.experiment(info) == "sweep-name" and wandb.group(info) == "sweep-name"
    assert wandb.folder == tmp_path / "given"
    mlflow, wandb = make_trackers(("mlflow", "wandb"), tmp_path / "default")
    assert mlflow.experiment(info) == "lab-exp" and wandb.group(info) == "lab-group"
    assert wandb.folder == tmp_path / "wandb-dir"


def test_parameters_are_typed_and_each_name_has_one_meaning():
    row = {"sweep": "interventions", "run_id": "r", "preset": "demo", "init": "x", "depth": 2, "seed": 7,
           "condition": "forced_k_contraction", "experiment": "exp", "trial": "t", "pack": 4, "member": 1,
           "model": '{"d_model": 64}', "train": '{"lr": 0.001}', "strengths": '{"lam": 0.2}'}
    info = RunInfo.of(row, "sid")
    assert info.params["strength.lam"] == 0.2 and info.params["pack"] == 4 and info.params["pack_member"] == 1
    assert "strengths" not in info.params and info.params["model.d_model"] == 64
    assert info.params["sweep"] == "interventions" and info.tags["experiment"] == "exp" and "sweep" not in info.tags
    assert info.tags[STORE_TAG] == "sid" and info.tags["trial"] == "t"
    # a store written before the strengths column: the condition's defaults, as numbers
    assert RunInfo.of({**row, "strengths": None}, "sid").params["strength.lam"] == 0.05


def test_each_epoch_carries_the_time_its_row_was_written(offline, tmp_path):
    store = make_store(tmp_path / "store")
    folder = tmp_path / "trackers"
    assert export(tmp_path / "store", folder) == 0
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    rows = {(r["run_id"], r["epoch"]): r["time"] for r in store.scan("epochs").table.to_pylist()}
    runs = {r["run_id"]: r for r in store.scan("runs").table.to_pylist()}
    for run in mlflow_runs(folder / "mlflow.db", "shared"):
        if RUN_TAG not in run.data.tags:
            continue
        rid = run.data.tags[RUN_TAG]
        for key in ("val_loss", "pr_q/L1"):
            for m in client.get_metric_history(run.info.run_id, key):
                assert m.timestamp == int(rows[(rid, m.step)].timestamp() * 1000), (rid, key, m.step)
        history = offline_records(folder, run_wandb_id(RunInfo.of(runs[rid], store_id(store))))["history"]
        assert {e: h["_timestamp"] for e, h in history.items()} == {
            e: t.timestamp() for (r, e), t in rows.items() if r == rid}


def test_the_report_reaches_one_sweep_level_run(offline, tmp_path):
    from mlflow import MlflowClient

    from sweep.trackers.report import attach_report

    make_store(tmp_path / "store")
    report = tmp_path / "report"
    (report / "figures").mkdir(parents=True)
    (report / "report.md").write_text("# report\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.figure(figsize=(1, 1))
    plt.savefig(report / "figures" / "fig.png")
    plt.close("all")
    stats = {"scorecard": [{"preset": "tiny", "claim": "c1", "verdict": "reproduced", "n": 2},
                           {"preset": "tiny", "claim": "c2", "verdict": "not measured", "n": 0},
                           {"preset": "other", "claim": "c3", "verdict": "reproduced", "n": 2}]}
    folder = tmp_path / "trackers"
    assert export(tmp_path / "store", folder) == 0
    lines: list[str] = []
    assert attach_report(str(tmp_path / "store"), report, stats, ("mlflow", "wandb"), folder, say=lines.append) == {}
    runs = mlflow_runs(folder / "mlflow.db", "shared")
    parents = [r for r in runs if r.data.tags.get("qkgeom.sweep_run") == "shared"]
    assert len(parents) == 1 and len(runs) == 3
    parent = parents[0]
    assert parent.data.metrics == {"scorecard/reproduced": 1.0, "scorecard/not measured": 1.0}
    assert {r.data.tags.get("mlflow.parentRunId") for r in runs if r is not parent} == {parent.info.run_id}
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    names = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.md", "report/figures"} <= names
    assert "scorecard.json" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    (wid,) = set(wandb_dirs(folder)) - {run_wandb_id(RunInfo.of(r, parent.data.tags[STORE_TAG]))
                                         for r in Store(str(tmp_path / "store")).scan("runs").table.to_pylist()}
    held = offline_records(folder, wid)
    assert (held["job_type"], held["group"], held["name"]) == ("report", "shared", "shared-report")
    assert len(lines) == 2 and all("attached" in ln for ln in lines), lines


def test_the_printed_mlflow_ui_command_works_as_printed_or_installs_what_it_needs(monkeypatch, tmp_path):
    import importlib.util

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (mlflow,) = make_trackers(("mlflow",), tmp_path)
    real = importlib.util.find_spec
    uri = f"sqlite:///{(tmp_path / 'mlflow.db').resolve()}"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "aiohttp" else real(name, *a))
    if all(real(m) is not None for m in ("uvicorn", "fastapi", "flask")):
        assert mlflow.where() == f"mlflow ui --backend-store-uri {uri}"  # the full package: as is
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "aiohttp" else real(name, *a))
    import mlflow as package

    assert mlflow.where() == (f"python -m venv /tmp/mlflow-ui && /tmp/mlflow-ui/bin/pip install -q "
                              f"'mlflow=={package.__version__}' && /tmp/mlflow-ui/bin/mlflow ui --backend-store-uri {uri}")
