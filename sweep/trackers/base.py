"""What every tracker gets, and the one interface a tracker implements (no Ray, no tracker package).

A store run becomes one tracker run. Its values come from the store's rows alone (SPEC §6), by
the functions here, for the live path (``sweep.trackers.live``) and ``export`` alike:

* ``RunInfo.of(row, store_id)``: from the run's ``runs`` row (or, in a store written before that
  table, an ``epochs`` row's identity columns): its name (the run id), experiment, typed
  parameters (each strength its own number, ``strength.<field>``; ``pack`` an integer) and tags,
  among them the store's id (``STORE_TAG``): a tracker run belongs to one store;
* ``epoch_metrics(epoch_row, layer_rows)``: one epoch's metrics, step = epoch: the run-level
  columns by their names, the per-layer ones as ``{column}/L{layer}``, per-head lists as
  ``{column}/L{layer}/h{head}`` (the metric first: trackers group keys by their first part, so
  one metric's layers share a section and a chart); a null (not measured) is left out, a NaN is
  sent as NaN; ``epoch_time`` is when the epoch's row was written (its ``time`` column);
* ``final_status``: ``completed`` / ``diverged`` from the run's last row, ``failed`` when its
  trial ended without one.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from metrics.columns import EPOCH_METRICS, FLOAT, LAYER_COLUMNS, LAYER_GRAD_METRICS, PER_HEAD

#: Run-level columns sent each epoch (the ``epochs`` table's numbers).
RUN_METRICS: tuple[str, ...] = (*EPOCH_METRICS, "tokens_seen")
#: Per-layer columns sent each epoch, one value per layer.
LAYER_FLOATS: tuple[str, ...] = (*(m.name for m in LAYER_COLUMNS if m.kind == FLOAT), *LAYER_GRAD_METRICS)
#: Per-layer columns that hold one value per head.
LAYER_LISTS: tuple[str, ...] = tuple(m.name for m in LAYER_COLUMNS if m.kind == PER_HEAD)
#: The metric every epoch has (non-null ``tokens_seen``): which epochs a tracker run holds already.
MARKER = "tokens_seen"
#: A run's end as the tracker records it.
FINAL = ("completed", "diverged", "failed")
#: The tag that names the store run a tracker run is (``export`` finds it again by this).
RUN_TAG = "qkgeom.run_id"
#: The tag that names the store a tracker run belongs to (``sweep.store.store_id``).
STORE_TAG = "qkgeom.store_id"
#: On a tracker run whose store run was rerun with another recipe: the tracker id of its successor.
SUPERSEDED_TAG = "qkgeom.superseded_by"
#: On that successor: the tracker id of the run it supersedes.
SUPERSEDES_TAG = "qkgeom.supersedes"

_IDENTITY = ("init", "depth", "seed", "condition", "preset", "sweep")


def strength_params(condition: str, strengths: str | None) -> dict[str, float]:
    """``{"strength.lam": 0.05}``: each strength of the run in effect, defaults included (a null column:
    the condition's defaults, from the registry; a condition this process does not know: none)."""
    if strengths is not None:
        values = json.loads(strengths)
    else:
        from interventions import (  # torch: only for stores before the column
            REGISTRY,
            default_strengths,
        )

        values = default_strengths(condition) if condition in REGISTRY else {}
    return {f"strength.{k}": float(v) for k, v in sorted(values.items())}


@dataclass(frozen=True)
class RunInfo:
    """A store run as a tracker sees it once: name, the experiment (group) it belongs to, parameters, tags."""

    run_id: str  # the tracker run's name, and the tag RUN_TAG
    experiment: str  # the sweep's --name: MLflow's experiment, W&B's group (unless the environment says)
    params: dict[str, Any]  # flat, typed: identity, ``strength.<f>``, pack, ``model.<f>``, ``train.<f>``
    tags: dict[str, str] = field(default_factory=dict)  # experiment, trial, RUN_TAG, STORE_TAG
    store_id: str = ""  # the store's id (``sweep.store.store_id``)

    @classmethod
    def of(cls, row: Mapping[str, Any], store_id: str) -> RunInfo:
        """From a ``runs`` row; from an ``epochs`` row (a store without the ``runs`` table) the
        experiment is the sweep's default name (``baseline-<preset>``) and the model, recipe,
        trial and pack are unknown (not sent)."""
        params: dict[str, Any] = {k: row[k] for k in _IDENTITY}
        params |= strength_params(row["condition"], row.get("strengths"))
        experiment = row.get("experiment") or f"{row['sweep']}-{row['preset']}"
        tags = {"experiment": experiment, RUN_TAG: row["run_id"], STORE_TAG: store_id}
        if row.get("model") is not None:
            params |= {"pack": int(row["pack"]), "pack_member": int(row["member"])}
            params |= {f"model.{k}": v for k, v in sorted(json.loads(row["model"]).items())}
            params |= {f"train.{k}": v for k, v in sorted(json.loads(row["train"]).items())}
            tags["trial"] = row["trial"]
        return cls(row["run_id"], experiment, params, tags, store_id)

    def recipe(self) -> str:
        """A short hash of the parameters: another recipe of the same store run is another tracker run."""
        import hashlib

        text = json.dumps(self.params, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:8]


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def epoch_metrics(epoch_row: Mapping[str, Any], layer_rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """One epoch's metrics (module docstring): nulls left out, NaN kept."""
    out = {k: v for k in RUN_METRICS if (v := _number(epoch_row.get(k))) is not None}
    for row in sorted(layer_rows, key=lambda r: r["layer"]):
        layer = int(row["layer"])
        out |= {f"{k}/L{layer}": v for k in LAYER_FLOATS if (v := _number(row.get(k))) is not None}
        for k in LAYER_LISTS:
            for h, v in enumerate(row.get(k) or ()):
                if v is not None:
                    out[f"{k}/L{layer}/h{h}"] = float(v)
    return out


def epoch_time(epoch_row: Mapping[str, Any]) -> float | None:
    """When the epoch's rows were written (unix seconds), from its ``time`` column; None in stores
    written before the column."""
    value = epoch_row.get("time")
    if value is None:
        return None
    return value.timestamp() if isinstance(value, datetime) else float(value)


def final_status(last: str | None, ended: bool) -> str | None:
    """The run's end from its last stored ``status``: completed or diverged; ``failed`` when its trial
    has ``ended`` without one (an error, or an interrupted sweep); None while it is still running."""
    if last in ("completed", "diverged"):
        return last
    return "failed" if ended else None


def same_value(a: Any, b: Any) -> bool:
    """Equal as a tracker stores them (numbers by value, NaN equal to NaN; else as text)."""
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)
    return x == y or (math.isnan(x) and math.isnan(y))


@dataclass
class Logged:
    """What a tracker already holds of one run: the epochs logged and its recorded end (None: open)."""

    epochs: set[int] = field(default_factory=set)
    status: str | None = None


class TrackerRun(ABC):
    """One open tracker run."""

    logged: set[int]  # epochs it holds (what ``open`` found, plus what was logged since)

    @abstractmethod
    def log(self, epoch: int, metrics: dict[str, float], when: float | None = None) -> None:
        """Log one epoch's metrics at step ``epoch``, stamped ``when`` (unix seconds; None: now)."""

    @abstractmethod
    def finish(self, status: str) -> None:
        """Record the run's end (one of FINAL) and close it."""

    def close(self) -> None:
        """Close it without an end (the sweep stopped early; a rerun continues it). Default: nothing."""
        return None


class Tracker(ABC):
    """One experiment tracker: one subclass per tracker, registered in ``sweep.trackers.TRACKERS``."""

    name: ClassVar[str]  # the --tracker value
    package: ClassVar[str]  # what must be importable (checked before Ray starts)

    def __init__(self, folder: Path, folder_given: bool = False, name_given: bool = False) -> None:
        self.folder = folder  # where a local tracker store or offline runs go (the default's home)
        self.folder_given = folder_given  # --tracker-dir was given: it wins over WANDB_DIR
        self.name_given = name_given  # --name was given: it wins over MLFLOW_EXPERIMENT_NAME, WANDB_RUN_GROUP

    @abstractmethod
    def start(self) -> None:
        """Import the package and reach the tracker; raises when it cannot (the sender says so once)."""

    @abstractmethod
    def find(self, run: RunInfo) -> Logged:
        """What the tracker holds of ``run`` already, without creating anything."""

    @abstractmethod
    def open(self, run: RunInfo, found: Logged) -> TrackerRun:
        """Start ``run``'s tracker run, or continue the one ``find`` found; parameters and tags set."""

    @abstractmethod
    def where(self) -> str:
        """The one command (or address) that opens or syncs what was logged."""

    def attach_report(self, sweep: str, runs: list[RunInfo], report_dir: Path,
                      scorecard: list[dict[str, Any]]) -> str:
        """Attach a report folder and its scorecard to ``sweep``'s sweep-level run (``sweep.trackers.report``);
        returns where it is."""
        raise NotImplementedError(f"{self.name}: no sweep-level run")

    def remote(self) -> bool:
        """Whether it logs to a server (not a local file): one that may not answer. Default: no."""
        return False

    def stop(self) -> None:
        """Release what ``start`` took (background processes). Default: nothing."""
        return None
