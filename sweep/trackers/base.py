"""What every tracker gets, and the one interface a tracker implements (no Ray, no tracker package).

A store run becomes one tracker run. Its values come from the store's rows alone (SPEC §6), by
the functions here, for the live path (``sweep.trackers.live``) and ``export`` alike:

* ``RunInfo.of(row)``: from the run's ``runs`` row (or, in a store written before that table, an
  ``epochs`` row's identity columns): its name (the run id), experiment, parameters and tags;
* ``epoch_metrics(epoch_row, layer_rows)``: one epoch's metrics, step = epoch: the run-level
  columns by their names, the per-layer ones as ``L{layer}/{column}``, per-head lists as
  ``L{layer}/{column}/h{head}``; a null (not measured) is left out, a NaN is sent as NaN;
* ``final_status``: ``completed`` / ``diverged`` from the run's last row, ``failed`` when its
  trial ended without one.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
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

_IDENTITY = ("init", "depth", "seed", "condition", "strengths", "preset", "sweep")


@dataclass(frozen=True)
class RunInfo:
    """A store run as a tracker sees it once: name, the experiment (group) it belongs to, parameters, tags."""

    run_id: str  # the tracker run's name, and the tag RUN_TAG
    experiment: str  # the sweep's --name: MLflow's experiment, W&B's group
    params: dict[str, Any]  # flat: identity, ``model.<field>``, ``train.<field>``
    tags: dict[str, str] = field(default_factory=dict)  # sweep, trial, pack (and RUN_TAG)

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RunInfo:
        """From a ``runs`` row; from an ``epochs`` row (a store without the ``runs`` table) the
        experiment is the sweep's default name (``baseline-<preset>``) and the model, recipe,
        trial and pack are unknown (not sent)."""
        params = {k: row[k] for k in _IDENTITY}
        if params["strengths"] is None:  # stores written before the column: the defaults
            params["strengths"] = "defaults"
        experiment = row.get("experiment") or f"{row['sweep']}-{row['preset']}"
        tags = {RUN_TAG: row["run_id"], "sweep": experiment}
        if row.get("model") is not None:
            params |= {f"model.{k}": v for k, v in sorted(json.loads(row["model"]).items())}
            params |= {f"train.{k}": v for k, v in sorted(json.loads(row["train"]).items())}
            tags |= {"trial": row["trial"], "pack": str(row["pack"]), "pack_member": str(row["member"])}
        return cls(row["run_id"], experiment, params, tags)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def epoch_metrics(epoch_row: Mapping[str, Any], layer_rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """One epoch's metrics (module docstring): nulls left out, NaN kept."""
    out = {k: v for k in RUN_METRICS if (v := _number(epoch_row.get(k))) is not None}
    for row in sorted(layer_rows, key=lambda r: r["layer"]):
        layer = int(row["layer"])
        out |= {f"L{layer}/{k}": v for k in LAYER_FLOATS if (v := _number(row.get(k))) is not None}
        for k in LAYER_LISTS:
            for h, v in enumerate(row.get(k) or ()):
                if v is not None:
                    out[f"L{layer}/{k}/h{h}"] = float(v)
    return out


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
    def log(self, epoch: int, metrics: dict[str, float]) -> None:
        """Log one epoch's metrics at step ``epoch``."""

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

    def __init__(self, folder: Path) -> None:
        self.folder = folder  # where a local tracker store or offline runs go (the default's home)

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

    def stop(self) -> None:
        """Release what ``start`` took (background processes). Default: nothing."""
        return None
