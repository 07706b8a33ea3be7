"""Weights & Biases: one W&B run per store run, grouped by the sweep (``group``), offline unless logged in.

Mode: ``WANDB_MODE`` when set; else ``online`` when W&B has an API key (``WANDB_API_KEY``, or a
``~/.netrc`` entry for its host, as ``wandb login`` writes), else ``offline``: the runs are written
under ``{folder}/wandb/offline-run-*`` and ``wandb sync`` uploads them later. Project:
``WANDB_PROJECT``, else ``qkgeom``. Each W&B run's id is derived from the sweep's name and the store
run id (``wandb_id``) and opened with ``resume="allow"``, so a resumed sweep or a second export
continues the same run; what an offline run holds already is read from its own ``.wandb`` files
(``offline_records``), so nothing is written twice; online, W&B's resumed step says it.

Tags: ``sweep:<name>``, ``trial:<name>``, ``pack:<K>`` (W&B tags are labels of at most 64
characters); the config holds the parameters and the other tags (trial, pack, pack_member,
``qkgeom.run_id``); the end is ``summary["status"]`` and
the exit code (0 for ``completed``, 1 for ``diverged`` and ``failed``).
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


def wandb_id(experiment: str, run_id: str) -> str:
    """A W&B run id for a store run of a sweep: the same every time, 20 letters and digits."""
    return "qk" + hashlib.sha256(f"{experiment}/{run_id}".encode()).hexdigest()[:18]


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
    ``config``, ``tags``, ``group``, ``name``, ``status`` (summary) and ``exit_code`` (None: not finished)."""
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
                    {k: v for k, v in items.items() if not k.startswith("_")})
            elif kind == "run":
                out["config"].update({u.key or "/".join(u.nested_key): json.loads(u.value_json)
                                      for u in record.run.config.update if u.key != "_wandb"})
                out["tags"], out["group"], out["name"] = list(record.run.tags), record.run.run_group, \
                    record.run.display_name
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

    def log(self, epoch: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=epoch)

    def finish(self, status: str) -> None:
        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status == "completed" else 1)

    def close(self) -> None:
        self.run.finish(exit_code=1)  # W&B cannot leave a run open past its process; a rerun resumes it


class WandbTracker(Tracker):
    name = "wandb"
    package = "wandb"

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.mode = os.environ.get("WANDB_MODE") or ("online" if logged_in() else "offline")
        self.project = os.environ.get("WANDB_PROJECT") or "qkgeom"
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
        held = offline_records(self.folder, wandb_id(run.experiment, run.run_id))
        return Logged(set(held["history"]), held["status"] if held["exit_code"] is not None else None)

    def open(self, run: RunInfo, found: Logged) -> WandbRun:
        tags = [f"{k}:{v}"[:64] for k, v in run.tags.items() if k in ("sweep", "trial", "pack")]
        # the parameters, and the tags but the sweep's name (the group; ``sweep`` is the store's column)
        config = {**run.params, **{k: v for k, v in run.tags.items() if k != "sweep"}}
        handle = self.wandb.init(
            project=self.project, group=run.experiment, name=run.run_id, id=wandb_id(run.experiment, run.run_id),
            resume="allow", mode=self.mode, dir=str(self.folder), reinit="create_new", tags=tags,
            job_type=str(run.params["sweep"]), config=config, settings=self._settings())
        handle.config.update(config, allow_val_change=True)  # a resumed run's too
        logged = set(found.epochs)
        if self.mode == "online" and handle.resumed:
            logged |= set(range(handle.step))
        return WandbRun(handle, logged)

    def where(self) -> str:
        if self.mode in ("offline", "dryrun"):
            return f"wandb sync {self.folder.resolve() / 'wandb'}/offline-run-*"
        if self.mode == "disabled":
            return "W&B is disabled (WANDB_MODE=disabled): nothing was logged"
        return f"W&B project {self.project} (online)"

    def stop(self) -> None:
        if self.wandb is not None and self.ours:
            self.wandb.teardown()  # W&B's service process ends with the sweep
