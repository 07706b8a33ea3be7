"""``python -m sweep.report … --tracker NAME``: the report of a store in its trackers, one sweep-level run per sweep.

Each sweep (``experiment``) of the store that the report covers gets the whole report folder
(``report.md``, the figures, the tables, ``stats.json``), the scorecard as a table and its verdict
counts as metrics (``scorecard/<verdict>``), on one sweep-level run:

* MLflow: the parent run of the sweep's runs (tag ``qkgeom.sweep_run``; a sweep with ``--tracker``
  made it already, else it is made now and this store's runs of the sweep are nested under it);
* W&B: a run of ``job_type`` ``report`` in the sweep's group, named ``<sweep>-report``; its id
  comes from the store, the sweep and the report's text, so the same report sent twice is one run
  and a new report is a new run (the older one is kept).

A tracker that fails costs one line; the report on disk is not affected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sweep.store import Store, store_id
from sweep.trackers import make_trackers
from sweep.trackers.base import RunInfo
from sweep.trackers.sender import _first_line


def sweeps_of(store: Store, presets: Iterable[str] | None) -> dict[str, list[RunInfo]]:
    """The store's sweeps (experiment name -> its runs), of ``presets`` only when given."""
    sid = store_id(store)
    rows = {r["run_id"]: r for r in store.scan("runs").table.to_pylist()}
    for r in store.scan("epochs", columns=[c for c in ("sweep", "run_id", "preset", "init", "depth", "seed",
                                                       "condition", "strengths")]).table.to_pylist():
        rows.setdefault(r["run_id"], r)  # a store written before the runs table
    wanted = set(presets) if presets is not None else None
    out: dict[str, list[RunInfo]] = {}
    for row in rows.values():
        if wanted is None or row["preset"] in wanted:
            info = RunInfo.of(row, sid)
            out.setdefault(info.experiment, []).append(info)
    return dict(sorted(out.items()))


def scorecard_rows(stats: dict, runs: list[RunInfo]) -> list[dict[str, Any]]:
    """The scorecard rows of the presets of ``runs``, with plain values (numbers, else text)."""
    presets = {r.params["preset"] for r in runs}
    out = []
    for row in stats.get("scorecard") or []:
        if row.get("preset") in presets:
            out.append({k: v if isinstance(v, int | float | str) or v is None else str(v) for k, v in row.items()})
    return out


def attach_report(store_uri: str, report_dir: Path, stats: dict, names: Iterable[str], folder: Path,
                  folder_given: bool = False, presets: Iterable[str] | None = None,
                  say: Callable[[str], None] = print) -> dict[str, str]:
    """Attach the report in ``report_dir`` to each sweep's sweep-level run in each tracker ``names``;
    returns the trackers that failed (name -> error), each said in one line."""
    store = Store(store_uri)
    sweeps = sweeps_of(store, presets)
    failed: dict[str, str] = {}
    for tracker in make_trackers(names, folder, folder_given=folder_given):
        try:
            tracker.start()
            for sweep, runs in sweeps.items():
                where = tracker.attach_report(sweep, runs, report_dir, scorecard_rows(stats, runs))
                say(f"{tracker.name}: report of {sweep} attached to {where}")
        except Exception as exc:  # one line, the report on disk stands
            failed[tracker.name] = _first_line(exc)
            say(f"{tracker.name}: attaching the report failed: {_first_line(exc)}")
        finally:
            try:
                tracker.stop()
            except Exception:  # noqa: BLE001 - stopping is best effort
                pass
    if not sweeps:
        say("trackers: the store holds no run of the reported presets: nothing attached")
    return failed
