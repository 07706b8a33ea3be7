"""MLflow: one MLflow run per store run, in an experiment named after the sweep.

Where: ``MLFLOW_TRACKING_URI`` when set (a server, ``sqlite:``, ``file:``, Databricks…), else a
local SQLite store, ``{folder}/mlflow.db``, its artifacts under ``{folder}/mlflow-artifacts``
(nothing is logged there). A run is found again by its tag ``qkgeom.run_id`` (``find``), so a
resumed sweep or a second export continues it; a run of that id whose parameters differ (the
cell was rerun with another recipe, and the store's rows replaced) is deleted (MLflow keeps it,
restorable, as ``deleted``) and started afresh. The end is the tag ``status`` and the MLflow run
state: FINISHED for ``completed``, FAILED for ``diverged`` and ``failed``.

HTTP requests are bounded unless the environment says otherwise (2 retries, 20 s), so an
unreachable server costs seconds, once (``Sender``), not MLflow's default minutes.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from sweep.trackers.base import MARKER, RUN_TAG, Logged, RunInfo, Tracker, TrackerRun, same_value

#: MLflow's HTTP retry settings used unless the environment sets them.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
BATCH = 1000  # MLflow's limit of metrics per log_batch
STATE = {"completed": "FINISHED", "diverged": "FAILED", "failed": "FAILED"}


class MlflowRun(TrackerRun):
    def __init__(self, client: Any, run_id: str, logged: set[int]) -> None:
        self.client, self.id, self.logged = client, run_id, logged

    def log(self, epoch: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        points = [Metric(k, v, now, epoch) for k, v in metrics.items()]
        for i in range(0, len(points), BATCH):
            self.client.log_batch(self.id, metrics=points[i:i + BATCH])

    def finish(self, status: str) -> None:
        self.client.set_tag(self.id, "status", status)
        self.client.set_terminated(self.id, STATE[status])


class MlflowTracker(Tracker):
    name = "mlflow"
    package = "mlflow"

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
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

    def _existing(self, run: RunInfo) -> Any:
        """The active MLflow run of this store run, or None; one with other parameters is deleted."""
        experiment = self._experiment(run.experiment, create=False)
        if experiment is None:
            return None
        runs = self.client.search_runs([experiment], filter_string=f"tags.`{RUN_TAG}` = '{run.run_id}'",
                                       max_results=10)
        for other in runs:
            have = other.data.params
            if any(k in have and not same_value(have[k], v) for k, v in run.params.items()):
                self.client.delete_run(other.info.run_id)
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
            rid = self.client.create_run(self._experiment(run.experiment), run_name=run.run_id,
                                         tags=run.tags).info.run_id
        else:
            rid = existing.info.run_id
            self.client.update_run(rid, status="RUNNING")
        params = [Param(k, str(v)) for k, v in run.params.items()]
        for i in range(0, len(params), 100):  # MLflow's limit of params per log_batch
            self.client.log_batch(rid, params=params[i:i + 100],
                                  tags=[RunTag(k, v) for k, v in run.tags.items()] if i == 0 else ())
        return MlflowRun(self.client, rid, set(found.epochs))

    def stop(self) -> None:
        if self.urllib3 is not None:
            self.urllib3.setLevel(self.urllib3_level)

    def where(self) -> str:
        if self.default:
            return f"mlflow ui --backend-store-uri {self.uri}"
        return f"MLflow at {self.uri}"
