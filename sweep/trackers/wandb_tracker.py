"""Weights & Biases: one W&B run per store run, grouped by the sweep (``group``), offline unless logged in.

Mode: ``WANDB_MODE`` when set; else ``online`` when W&B has an API key (``WANDB_API_KEY``, or a
``~/.netrc`` entry for its host, as ``wandb login`` writes), else ``offline``: the runs are written
under ``{dir}/wandb/offline-run-*`` and ``wandb sync`` uploads them later. The environment's
conventions hold, a flag winning over them: ``WANDB_PROJECT`` (else ``qkgeom``), ``WANDB_ENTITY``,
``WANDB_RUN_GROUP`` (else the sweep's name; ``--name`` wins), ``WANDB_DIR`` (created; else the
tracker folder; ``--tracker-dir`` wins).

Each W&B run's id is derived from the store's id, the sweep's name, the store run id and a hash of
its parameters (``wandb_id``), and opened with ``resume="allow"``: a resumed sweep or a second
export continues the same run; another store, or the same cell rerun with another recipe, gets
another run and never writes into this one. What an offline run holds already is read from its own
``.wandb`` files (``offline_records``), so nothing is written twice; online, W&B's resumed step
says it. Each epoch is logged with ``_timestamp`` = the time its row was written (W&B keeps it
per history row; the run's own start time and ``_runtime`` are when it was sent: W&B's API sets
those itself).

Tags: ``experiment:<name>``, ``trial:<name>``, ``pack:<M>`` (W&B tags are labels of at most 64
characters); the config holds the typed parameters and the other tags (trial,
``qkgeom.run_id``, ``qkgeom.store_id``); the end is ``summary["status"]`` and the exit code (0 for
``completed``, 1 for ``diverged`` and ``failed``).
"""

from __future__ import annotations

import glob
import hashlib
import json
import netrc
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sweep.trackers.base import Logged, RunInfo, Tracker, TrackerRun

BLOCK = 32 * 1024  # the .wandb file is a LevelDB-style log of 32 KiB blocks of protobuf records


def wandb_id(store_id: str, experiment: str, run_id: str, recipe: str) -> str:
    """A W&B run id for a store run of a sweep, of one store and one recipe (``RunInfo.recipe``): the
    same every time, 20 letters and digits."""
    return "qk" + hashlib.sha256(f"{store_id}/{experiment}/{run_id}/{recipe}".encode()).hexdigest()[:18]


def run_wandb_id(run: RunInfo) -> str:
    return wandb_id(run.store_id, run.experiment, run.run_id, run.recipe())


def logged_in() -> bool:
    """Whether W&B has an API key here (the environment, or ``~/.netrc`` for its host); no network."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host or "") is not None
    except (OSError, netrc.NetrcParseError):
        return False


def log_records(path: str | Path) -> Iterator[bytes]:
    """The protobuf records of one ``.wandb`` file (a 7-byte header, then LevelDB log records:
    crc32c, length, type FULL/FIRST/MIDDLE/LAST, never crossing a 32 KiB block)."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B run file")
    pos, parts = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # the block's zero-filled tail
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            pos += left
            continue
        payload, pos = data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind == 1:
            yield payload
        elif kind == 2:
            parts = payload
        elif kind == 3:
            parts += payload
        elif kind == 4:
            yield parts + payload


def offline_records(folder: Path, wid: str) -> dict[str, Any]:
    """What the offline runs of id ``wid`` under ``folder`` hold: ``history`` (step -> metrics),
    ``config``, ``tags``, ``group``, ``name``, ``project``, ``entity``, ``job_type``, ``status`` (summary) and
    ``exit_code`` (None: not finished)."""
    from wandb.proto import wandb_internal_pb2 as pb

    out: dict[str, Any] = {"history": {}, "config": {}, "tags": [], "group": None, "name": None,
                           "status": None, "exit_code": None}
    for path in sorted(glob.glob(str(folder / "wandb" / f"offline-run-*-{wid}" / f"run-{wid}.wandb"))):
        for payload in log_records(path):
            record = pb.Record()
            record.ParseFromString(payload)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
                out["history"].setdefault(int(items["_step"]), {}).update(
                    {k: v for k, v in items.items() if not k.startswith("_") or k == "_timestamp"})
            elif kind == "run":
                out["config"].update({u.key or "/".join(u.nested_key): json.loads(u.value_json)
                                      for u in record.run.config.update if u.key != "_wandb"})
                out["tags"], out["group"], out["name"] = list(record.run.tags), record.run.run_group, \
                    record.run.display_name
                out["project"], out["entity"], out["job_type"] = record.run.project, record.run.entity, \
                    record.run.job_type
            elif kind == "config":
                out["config"].update({u.key or "/".join(u.nested_key): json.loads(u.value_json)
                                      for u in record.config.update if u.key != "_wandb"})
            elif kind == "summary":
                for u in record.summary.update:
                    if u.key == "status":
                        out["status"] = json.loads(u.value_json)
            elif kind == "exit":
                out["exit_code"] = record.exit.exit_code
    return out


class WandbRun(TrackerRun):
    def __init__(self, run: Any, logged: set[int]) -> None:
        self.run, self.logged = run, logged

    def log(self, epoch: int, metrics: dict[str, float], when: float | None = None) -> None:
        self.run.log(metrics if when is None else {**metrics, "_timestamp": when}, step=epoch)

    def finish(self, status: str) -> None:
        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status == "completed" else 1)

    def close(self) -> None:
        self.run.finish(exit_code=1)  # W&B cannot leave a run open past its process; a rerun resumes it


class WandbTracker(Tracker):
    name = "wandb"
    package = "wandb"

    def __init__(self, folder: Path, folder_given: bool = False, name_given: bool = False) -> None:
        if os.environ.get("WANDB_DIR") and not folder_given:
            folder = Path(os.environ["WANDB_DIR"]).expanduser()
        super().__init__(folder, folder_given, name_given)
        self.mode = os.environ.get("WANDB_MODE") or ("online" if logged_in() else "offline")
        self.project = os.environ.get("WANDB_PROJECT") or "qkgeom"
        self.entity = os.environ.get("WANDB_ENTITY") or None
        self.group_name = None if name_given else (os.environ.get("WANDB_RUN_GROUP") or None)
        self.wandb: Any = None
        self.ours = False  # whether W&B's service was started for us (and so is ours to stop)

    def start(self) -> None:
        os.environ.setdefault("WANDB_SILENT", "true")  # no banner per run on the sweep's console
        import wandb

        self.wandb = wandb
        self.ours = wandb.run is None
        self.folder.mkdir(parents=True, exist_ok=True)

    def _settings(self) -> Any:
        return self.wandb.Settings(console="off", silent=True, quiet=True, disable_git=True, save_code=False,
                                   x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True)

    def find(self, run: RunInfo) -> Logged:
        if self.mode not in ("offline", "dryrun"):
            return Logged()  # online: the resumed step (``open``) says it
        held = offline_records(self.folder, run_wandb_id(run))
        return Logged(set(held["history"]), held["status"] if held["exit_code"] is not None else None)

    def group(self, run: RunInfo) -> str:
        """The W&B group of ``run``: ``WANDB_RUN_GROUP`` (unless --name), else the sweep's name."""
        return self.group_name or run.experiment

    def open(self, run: RunInfo, found: Logged) -> WandbRun:
        tags = [f"{k}:{v}"[:64] for k, v in run.tags.items() if k in ("experiment", "trial")]
        if "pack" in run.params:
            tags.append(f"pack:{run.params['pack']}")
        # the parameters, and the tags but the sweep's name (the group)
        config = {**run.params, **{k: v for k, v in run.tags.items() if k != "experiment"}}
        handle = self.wandb.init(
            project=self.project, entity=self.entity, group=self.group(run), name=run.run_id,
            id=run_wandb_id(run), resume="allow", mode=self.mode, dir=str(self.folder), reinit="create_new",
            tags=tags, job_type=str(run.params["sweep"]), config=config, settings=self._settings())
        handle.config.update(config, allow_val_change=True)  # a resumed run's too
        logged = set(found.epochs)
        if self.mode == "online" and handle.resumed:
            logged |= set(range(handle.step))
        return WandbRun(handle, logged)

    def attach_report(self, sweep: str, runs: list[RunInfo], report_dir: Path,
                      scorecard: list[dict[str, Any]]) -> str:
        """A run of ``job_type`` ``report`` in the sweep's group: the report folder as an artifact, the
        figures as images, the scorecard as a table and its verdict counts in the summary."""
        wandb = self.wandb
        text = (report_dir / "report.md").read_bytes() if (report_dir / "report.md").is_file() else b""
        wid = "qk" + hashlib.sha256(b"%s/%s/report/" % (runs[0].store_id.encode(), sweep.encode())
                                    + hashlib.sha256(text).digest()).hexdigest()[:18]
        if self.mode in ("offline", "dryrun") and offline_records(self.folder, wid)["exit_code"] is not None:
            return f"W&B run {wid} (sent before: the same report)"
        handle = wandb.init(
            project=self.project, entity=self.entity, group=self.group(runs[0]), name=f"{sweep}-report", id=wid,
            resume="allow", mode=self.mode, dir=str(self.folder), reinit="create_new", job_type="report",
            tags=[f"experiment:{sweep}"[:64]], config={"experiment": sweep, "qkgeom.store_id": runs[0].store_id,
                                                       "runs": len(runs)}, settings=self._settings())
        if scorecard:
            columns = list(dict.fromkeys(k for row in scorecard for k in row))
            handle.log({"scorecard": wandb.Table(columns=columns, data=[[r.get(c) for c in columns]
                                                                          for r in scorecard])})
            for verdict in dict.fromkeys(str(r.get("verdict")) for r in scorecard):
                handle.summary[f"scorecard/{verdict}"] = sum(str(r.get("verdict")) == verdict for r in scorecard)
        figures = sorted(report_dir.rglob("*.png"))
        if figures:
            handle.log({f"figures/{p.relative_to(report_dir).with_suffix('').as_posix()}": wandb.Image(str(p))
                        for p in figures})
        artifact = wandb.Artifact(f"report-{sweep}", type="report")
        artifact.add_dir(str(report_dir))
        handle.log_artifact(artifact)
        handle.finish()
        return f"W&B run {wid}, group {self.group(runs[0])} ({self.where()})"

    def remote(self) -> bool:
        return self.mode == "online"

    def where(self) -> str:
        if self.mode in ("offline", "dryrun"):
            return f"wandb sync {self.folder.resolve() / 'wandb'}/offline-run-*"
        if self.mode == "disabled":
            return "W&B is disabled (WANDB_MODE=disabled): nothing was logged"
        return f"W&B project {self.project} (online)"

    def stop(self) -> None:
        if self.wandb is not None and self.ours:
            self.wandb.teardown()  # W&B's service process ends with the sweep
