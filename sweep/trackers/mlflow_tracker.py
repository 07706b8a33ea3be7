"""MLflow: one MLflow run per store run, in an experiment named after the sweep.

Where: ``MLFLOW_TRACKING_URI`` when set (a server, ``sqlite:``, ``file:``, Databricks…), else a
local SQLite store, ``{folder}/mlflow.db``, its artifacts under ``{folder}/mlflow-artifacts``.
Experiment: the sweep's name, or ``MLFLOW_EXPERIMENT_NAME`` when set and ``--name`` was not given.

A run is found again by its tags ``qkgeom.run_id`` and ``qkgeom.store_id`` (``find``): a resumed
sweep or a second export continues it; a run of another store (another ``qkgeom.store_id``, or
none) is never touched. A run of this store whose parameters differ (the cell was rerun with
another recipe, and the store's rows replaced) is kept: it gets the tag ``qkgeom.superseded_by``
= its successor's MLflow run id, and the successor ``qkgeom.supersedes``. Nothing is deleted.
Each epoch's metrics are stamped with the time its row was written (the ``epochs`` table's
``time``). The end is the tag ``status`` and the MLflow run state: FINISHED for ``completed``,
FAILED for ``diverged`` and ``failed``.

HTTP requests are bounded unless the environment says otherwise (``HTTP_DEFAULTS``: MLflow's own
are 7 retries and 120 s). The sweep's sending runs off its critical path (``sweep.trackers.live``),
so a hung server delays nothing; the bounds say how soon it is given up.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from pathlib import Path
from typing import Any

from sweep.trackers.base import (
    MARKER,
    RUN_TAG,
    STORE_TAG,
    SUPERSEDED_TAG,
    SUPERSEDES_TAG,
    Logged,
    RunInfo,
    Tracker,
    TrackerRun,
    same_value,
)

#: MLflow's HTTP retry settings used unless the environment sets them.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
#: What ``mlflow ui`` needs beyond mlflow-skinny (its workers die without aiohttp): without them the
#: printed command installs the full mlflow in a venv of its own first.
UI_MODULES = ("aiohttp", "uvicorn", "fastapi", "flask")
#: The tag of a sweep-level run (the parent of a sweep's runs): the sweep's name.
SWEEP_TAG = "qkgeom.sweep_run"
BATCH = 1000  # MLflow's limit of metrics per log_batch
STATE = {"completed": "FINISHED", "diverged": "FAILED", "failed": "FAILED"}


class MlflowRun(TrackerRun):
    def __init__(self, client: Any, run_id: str, logged: set[int]) -> None:
        self.client, self.id, self.logged = client, run_id, logged

    def log(self, epoch: int, metrics: dict[str, float], when: float | None = None) -> None:
        from mlflow.entities import Metric

        stamp = int((time.time() if when is None else when) * 1000)
        points = [Metric(k, v, stamp, epoch) for k, v in metrics.items()]
        for i in range(0, len(points), BATCH):
            self.client.log_batch(self.id, metrics=points[i:i + BATCH])

    def finish(self, status: str) -> None:
        self.client.set_tag(self.id, "status", status)
        self.client.set_terminated(self.id, STATE[status])


class MlflowTracker(Tracker):
    name = "mlflow"
    package = "mlflow"

    def __init__(self, folder: Path, folder_given: bool = False, name_given: bool = False) -> None:
        super().__init__(folder, folder_given, name_given)
        self.experiment_name = None if name_given else (os.environ.get("MLFLOW_EXPERIMENT_NAME") or None)
        self.superseded: dict[str, str] = {}  # store run id -> the MLflow run its new one supersedes
        self.sweep_runs: dict[tuple[str, str, str], str] = {}  # (sweep, experiment, store id) -> MLflow run id
        self.default = not os.environ.get("MLFLOW_TRACKING_URI")
        self.uri = f"sqlite:///{folder.resolve() / 'mlflow.db'}" if self.default else os.environ["MLFLOW_TRACKING_URI"]
        self.client: Any = None
        self.experiments: dict[str, str] = {}
        self.urllib3: logging.Logger | None = None
        self.urllib3_level = logging.NOTSET

    def start(self) -> None:
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage reports from a sweep
        from mlflow import MlflowClient

        for noisy in ("mlflow", "alembic"):  # "Creating initial MLflow database tables…" (set after import:
            logging.getLogger(noisy).setLevel(logging.WARNING)  # importing mlflow sets its own level)
        # urllib3 warns once per retry; a server that cannot be reached is the sender's one line
        self.urllib3 = logging.getLogger("urllib3.connectionpool")
        self.urllib3_level = self.urllib3.level
        self.urllib3.setLevel(logging.ERROR)

        if self.default:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        self.client.search_experiments(max_results=1)  # reach the store or server now

    def _experiment(self, name: str, create: bool = True) -> str | None:
        """The id of the experiment ``name`` (a deleted one is restored); None when there is none and
        not ``create``."""
        if name not in self.experiments:
            found = self.client.get_experiment_by_name(name)
            if found is None and not create:
                return None
            if found is not None and found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            artifacts = (self.folder.resolve() / "mlflow-artifacts" / name).as_uri() if self.default else None
            self.experiments[name] = (found.experiment_id if found is not None
                                      else self.client.create_experiment(name, artifact_location=artifacts))
        return self.experiments[name]

    def experiment(self, run: RunInfo) -> str:
        """The MLflow experiment of ``run``: ``MLFLOW_EXPERIMENT_NAME`` (unless --name), else the sweep's."""
        return self.experiment_name or run.experiment

    def _existing(self, run: RunInfo) -> Any:
        """This store's current MLflow run of this store run, or None. One of this store with other
        parameters (an older recipe) is remembered in ``superseded``, to be marked when its
        successor opens; runs of other stores, and runs superseded already, are left alone."""
        experiment = self._experiment(self.experiment(run), create=False)
        if experiment is None:
            return None
        runs = self.client.search_runs(
            [experiment], filter_string=f"tags.`{RUN_TAG}` = '{run.run_id}' and tags.`{STORE_TAG}` = '{run.store_id}'",
            max_results=50)
        for other in runs:
            if SUPERSEDED_TAG in other.data.tags:
                continue
            have = other.data.params
            if any(k not in have or not same_value(have[k], v) for k, v in run.params.items()):
                self.superseded[run.run_id] = other.info.run_id
            else:
                return other
        return None

    def find(self, run: RunInfo) -> Logged:
        found = self._existing(run)
        if found is None:
            return Logged()
        epochs = {m.step for m in self.client.get_metric_history(found.info.run_id, MARKER)}
        ended = found.data.tags.get("status") if found.info.status != "RUNNING" else None
        return Logged(epochs, ended)

    def open(self, run: RunInfo, found: Logged) -> MlflowRun:
        from mlflow.entities import Param, RunTag

        existing = self._existing(run)
        if existing is None:
            tags = dict(run.tags)
            old = self.superseded.pop(run.run_id, None)
            if old is not None:
                tags[SUPERSEDES_TAG] = old
            parent = self.sweep_run(run.experiment, self.experiment(run), run.store_id)
            if parent is not None:
                tags["mlflow.parentRunId"] = parent
            rid = self.client.create_run(self._experiment(self.experiment(run)), run_name=run.run_id,
                                         tags=tags).info.run_id
            if old is not None:
                self.client.set_tag(old, SUPERSEDED_TAG, rid)
        else:
            rid = existing.info.run_id
            self.client.update_run(rid, status="RUNNING")
        params = [Param(k, str(v)) for k, v in run.params.items()]
        for i in range(0, len(params), 100):  # MLflow's limit of params per log_batch
            self.client.log_batch(rid, params=params[i:i + 100],
                                  tags=[RunTag(k, v) for k, v in run.tags.items()] if i == 0 else ())
        return MlflowRun(self.client, rid, set(found.epochs))

    def sweep_run(self, sweep: str, experiment: str, store_id: str, create: bool = True) -> str | None:
        """The MLflow run id of the sweep-level run (the parent of the sweep's runs: ``sweep.report``
        attaches the report to it), found by its tags; created when missing and ``create``."""
        key = (sweep, experiment, store_id)
        cache = self.sweep_runs
        if key in cache:
            return cache[key]
        exp = self._experiment(experiment, create=create)
        if exp is None:
            return None
        found = self.client.search_runs(
            [exp], filter_string=f"tags.`{SWEEP_TAG}` = '{sweep}' and tags.`{STORE_TAG}` = '{store_id}'",
            max_results=1)
        if found:
            cache[key] = found[0].info.run_id
        elif create:
            cache[key] = self.client.create_run(exp, run_name=sweep, tags={
                SWEEP_TAG: sweep, STORE_TAG: store_id, "experiment": sweep}).info.run_id
            self.client.set_terminated(cache[key], "FINISHED")  # a container: its runs and the report
        else:
            return None
        return cache[key]

    def attach_report(self, sweep: str, runs: list[RunInfo], report_dir: Path,
                      scorecard: list[dict[str, Any]]) -> str:
        """The report folder as artifacts (``report/``), the scorecard as a table (``scorecard.json``) and
        its verdict counts as metrics, on the sweep's parent run; this store's runs of it nested under it."""
        from mlflow.entities import Metric

        store = runs[0].store_id
        experiment = self.experiment(runs[0])
        parent = self.sweep_run(sweep, experiment, store)
        self.client.log_artifacts(parent, str(report_dir), artifact_path="report")
        if scorecard:
            import pandas as pd

            self.client.log_table(parent, pd.DataFrame(scorecard), "scorecard.json")
            counts: dict[str, int] = {}
            for row in scorecard:
                counts[str(row.get("verdict"))] = counts.get(str(row.get("verdict")), 0) + 1
            now = int(time.time() * 1000)
            self.client.log_batch(parent, metrics=[Metric(f"scorecard/{k}", v, now, 0) for k, v in counts.items()])
        mine = self.client.search_runs([self._experiment(experiment)],
                                       filter_string=f"tags.`{STORE_TAG}` = '{store}' and tags.experiment = '{sweep}'",
                                       max_results=5000)
        for run in mine:
            if RUN_TAG in run.data.tags and run.data.tags.get("mlflow.parentRunId") != parent:
                self.client.set_tag(run.info.run_id, "mlflow.parentRunId", parent)
        return f"MLflow run {parent} of experiment {experiment} ({self.where()})"

    def remote(self) -> bool:
        return not self.default and not self.uri.startswith(("sqlite:", "file:", "/"))

    def stop(self) -> None:
        if self.urllib3 is not None:
            self.urllib3.setLevel(self.urllib3_level)

    def where(self) -> str:
        if not self.default:
            return f"MLflow at {self.uri}"
        command = f"mlflow ui --backend-store-uri {self.uri}"
        missing = [m for m in UI_MODULES if importlib.util.find_spec(m) is None]
        if not missing:
            return command
        import mlflow

        # the full package's UI in a venv of its own (it pins pyarrow below the project's): one line that works
        ui = "/tmp/mlflow-ui"
        return (f"python -m venv {ui} && {ui}/bin/pip install -q 'mlflow=={mlflow.__version__}' && "
                f"{ui}/bin/{command}")
