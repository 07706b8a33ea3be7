"""``python -m sweep.store export --tracker NAME``: send a whole store to trackers, as the live path does.

The same rows through the same ``Sender``: the same tracker runs, names and values as a sweep run
with ``--tracker`` logs. Idempotent: a run the tracker holds is continued, never duplicated, and
only the epochs it lacks are sent (exporting twice sends nothing the second time). A run whose
last row is still ``running`` is sent as ``failed`` (its trial stopped before its last epoch), so
``export`` refuses while a sweep is writing the store (a fresh sweep lock), unless forced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sweep.store.identity import store_id
from sweep.store.locks import locks
from sweep.store.parquet import STALE_AFTER_S, Store, StoreError
from sweep.trackers import make_trackers
from sweep.trackers.base import RunInfo
from sweep.trackers.sender import Sender


def _by_run(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["run_id"], []).append(row)
    return out


def export(store: Store, names: Iterable[str], folder: Path, force: bool = False,
           say: Callable[[str], None] = print, folder_given: bool = False) -> Sender:
    """Send every run of ``store`` to the trackers ``names`` (checked); returns the sender (``dead``
    names the trackers that failed)."""
    busy = [lock.describe() for lock in locks(store) if lock.age() < STALE_AFTER_S]
    if busy and not force:
        raise StoreError(f"refusing to export {store.root} while a sweep may be writing it: {'; '.join(busy)}. "
                         "Wait for it (a sweep with --tracker logs live), or pass --force if it is dead.")
    runs = {r["run_id"]: r for r in store.scan("runs").table.to_pylist()}
    epochs = _by_run(store.scan("epochs").table.to_pylist())
    layers = _by_run(store.scan("layers").table.to_pylist())
    sid = store_id(store)  # created on the first export of a store no tracked sweep wrote
    sender = Sender(make_trackers(names, folder, folder_given=folder_given), say=say)
    sender.start()
    old = [rid for rid in epochs if rid not in runs]
    if old:
        say(f"{len(old)} of {len(epochs)} runs have no row in the store's runs table (written before it): "
            "sent without their model, recipe, trial and pack, under their sweep's default name")
    try:
        for rid in sorted(epochs):
            if not sender.live:
                break
            info = RunInfo.of(runs.get(rid) or epochs[rid][0], sid)
            sender.send(info, epochs[rid], layers.get(rid, ()), ended=True)
    finally:
        sender.stop()
    for tracker in sender.trackers:
        if tracker.name in sender.dead:
            continue
        sent = sender.sent.get(tracker.name, 0)
        say(f"{tracker.name}: {len(epochs)} runs ({sent} sent now, {len(epochs) - sent} already there); "
            f"{tracker.where()}")
    return sender
