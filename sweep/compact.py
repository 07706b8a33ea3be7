"""Store maintenance: ``validate``, ``compact`` and the ``sweep_lock`` that keeps them apart.

Compaction merges the per-epoch files of one directory (a run, or a checkpoint
series) into ``{dir}/compacted.parquet``, then deletes the files it merged.
Why no row is ever lost or shown twice through ``Store.read`` (the reducer's
path), given the reader's precedence rule (a compacted row is shadowed when its
own per-epoch file exists, readable, in the same directory):

1. Compaction reads the directory *with* the rule, so the compacted file holds
   exactly the rows ``Store.read`` saw, one per key, and is published
   atomically before anything is deleted.
2. Crash after publishing, before or between the deletes: every surviving
   per-epoch file shadows its own rows in the compacted file, every deleted
   one is represented there once. Rerunning ``compact`` reads the same rows,
   rewrites the same file and finishes the deletes.
3. An epoch rewritten later: the writer publishes its per-epoch file first
   (which from then on shadows the old rows), then atomically rewrites the
   compacted file without that epoch. A crash in between is again harmless to
   ``Store.read``.
4. A file that changed (size or mtime) between reading and deleting is kept:
   it shadows the rows compaction took from its older version.

Plain ``pandas.read_parquet(f"{root}/{table}")`` does not know the rule: it sees
a row twice only in the windows of (2) and (3), until ``compact`` is rerun.
``validate`` lists such directories under "pending".

Compaction must not race a writer (a delete could hit a file rewritten after it
was read and within the mtime resolution), so ``compact`` refuses while a sweep
lock has a fresh heartbeat or a fresh ``.inprogress`` file exists; older locks
are reported as stale and ignored. ``force=True`` overrides.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import pandas as pd
import pyarrow.fs as pafs

from sweep.schema import EPOCH_METRICS, KEYS, LAYER_GRAD_METRICS, LAYER_METRICS, TABLES
from sweep.store import (
    COMPACTED,
    HEARTBEAT_S,
    READ_ERRORS,
    STALE_AFTER_S,
    DirListing,
    Store,
    StoreError,
    parquet_bytes,
    safe_name,
)


@dataclass(frozen=True)
class LockInfo:
    """A ``sweep_lock`` file as found in the store."""

    path: str
    name: str
    host: str
    pid: int
    heartbeat: float
    token: str = ""

    def age(self) -> float:
        """Seconds since the last heartbeat."""
        return time.time() - self.heartbeat

    def describe(self) -> str:
        return f"lock {self.path} ({self.name!r}, host {self.host}, pid {self.pid}, heartbeat {self.age():.0f} s ago)"


def locks(store: Store) -> list[LockInfo]:
    """The ``sweep_lock`` files now in the store."""
    infos = store.fs.get_file_info(pafs.FileSelector(f"{store.base}/_locks", allow_not_found=True))
    return [_read_lock(store, i) for i in infos
            if i.type == pafs.FileType.File and i.base_name.endswith(".json") and not i.base_name.startswith(".")]


def _read_lock(store: Store, info: pafs.FileInfo) -> LockInfo:
    try:
        with store.fs.open_input_stream(info.path) as f:
            d = json.loads(f.read())
        return LockInfo(info.path, d["name"], d["host"], int(d["pid"]), float(d["heartbeat"]), d.get("token", ""))
    except (*READ_ERRORS, KeyError, TypeError):  # unreadable: date it by its modification time
        return LockInfo(info.path, info.base_name, "?", -1, (info.mtime_ns or 0) / 1e9)


@contextmanager
def sweep_lock(store: Store, name: str, heartbeat_s: float = HEARTBEAT_S,
               clock: Callable[[], float] = time.time) -> Iterator[str]:
    """Mark a sweep as writing (``_locks/{name}.json``, refreshed by a daemon thread) while inside.

    ``clock`` gives the times written (``started``, each ``heartbeat``): tests inject their own.
    """
    path = f"{store.base}/_locks/{safe_name(name)}.json"
    token = uuid.uuid4().hex
    info = {"name": name, "host": socket.gethostname(), "pid": os.getpid(), "token": token, "started": clock()}
    for other in locks(store):
        if other.path == path and other.age() < STALE_AFTER_S:
            warnings.warn(f"{other.describe()} looks live; taking it over", stacklevel=3)
    stop = threading.Event()

    def beat() -> None:
        store.put(path, json.dumps({**info, "heartbeat": clock()}).encode())

    def loop() -> None:
        while not stop.wait(heartbeat_s):
            try:
                beat()
            except READ_ERRORS as exc:  # a transient store error must not kill the sweep
                warnings.warn(f"heartbeat of {path} failed: {exc}", stacklevel=1)

    beat()
    thread = threading.Thread(target=loop, name=f"sweep-lock-{name}", daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join(timeout=60)
        with suppress(*READ_ERRORS):
            if _read_lock(store, store.fs.get_file_info(path)).token == token:
                store.delete_file(path)


#: Float columns that may be NaN at epoch 0 (no training step yet; the trainer leaves
#: ``tokens_per_s`` null there too, as no epoch was timed).
NAN_AT_EPOCH0 = frozenset(LAYER_GRAD_METRICS) | {"train_loss", "grad_norm", "tokens_per_s"}
NEVER_NAN = {"layers": LAYER_METRICS + LAYER_GRAD_METRICS, "epochs": EPOCH_METRICS}


@dataclass
class ValidationReport:
    """Problems found in a store; ``ok`` when there are none (``pending`` is informational)."""

    root: str
    rows: dict[str, int] = field(default_factory=dict)
    duplicates: list[tuple[str, tuple, int]] = field(default_factory=list)  # (table, key, copies)
    gaps: list[tuple[str, str, int | None, list[int]]] = field(default_factory=list)  # (table, run, epoch|None, missing)
    nans: list[tuple[str, str, int]] = field(default_factory=list)  # (table, column, count)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, error)
    pending: list[tuple[str, int]] = field(default_factory=list)  # (directory, compacted rows shadowed)

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.gaps or self.nans or self.unreadable)

    def __str__(self) -> str:
        counts = ", ".join(f"{t} {n}" for t, n in self.rows.items())
        problems = len(self.duplicates) + len(self.gaps) + len(self.nans) + len(self.unreadable)
        lines = [f"store {self.root}: {'OK' if self.ok else f'{problems} problem(s)'} (rows: {counts})"]
        lines += [f"  duplicate {t} {KEYS[t]}={k}: {n} copies" for t, k, n in self.duplicates]
        for t, run, epoch, missing in self.gaps:
            what = f"missing epochs {missing}" if epoch is None else f"epoch {epoch} missing layers {missing}"
            lines.append(f"  gap in {t} run {run}: {what}")
        lines += [f"  NaN in {t}.{c}: {n} rows" for t, c, n in self.nans]
        lines += [f"  unreadable {p}: {e}" for p, e in self.unreadable]
        lines += [f"  pending: {d} has {n} compacted rows shadowed by per-epoch files (rerun compact)"
                  for d, n in self.pending]
        return "\n".join(lines)


def validate(store: Store) -> ValidationReport:
    """Check every table for duplicate keys, epoch/layer gaps, forbidden NaNs and unreadable files."""
    report = ValidationReport(store.root)
    frames: dict[str, pd.DataFrame] = {}
    for table in TABLES:
        result = store.scan(table)
        frames[table] = df = result.frame
        report.rows[table] = len(df)
        report.unreadable += result.unreadable
        report.pending += sorted(result.shadowed.items())
        sizes = df.groupby(list(KEYS[table]), dropna=False).size()
        report.duplicates += [(table, k if isinstance(k, tuple) else (k,), int(n)) for k, n in sizes[sizes > 1].items()]
    for table in ("layers", "epochs"):
        report.gaps += _gaps(table, frames[table])
    epochs = frames["epochs"]
    diverged = set(epochs.loc[epochs["status"] == "diverged", "run_id"])
    for table, columns in NEVER_NAN.items():
        df = frames[table]
        live = ~df["run_id"].isin(diverged)
        for col in columns:
            rows = live & (df["epoch"] > 0) if col in NAN_AT_EPOCH0 else live
            count = int(df.loc[rows, col].isna().sum())
            if count:
                report.nans.append((table, col, count))
    return report


def _gaps(table: str, df: pd.DataFrame) -> list[tuple[str, str, int | None, list[int]]]:
    """Missing epochs 0..max per run; for ``layers`` also missing layers 0..depth-1 per epoch."""
    gaps: list[tuple[str, str, int | None, list[int]]] = []
    for run, epochs in df.groupby("run_id")["epoch"]:
        missing = sorted(set(range(int(epochs.max()) + 1)) - set(epochs.astype(int)))
        if missing:
            gaps.append((table, str(run), None, missing))
    if table == "layers":
        for (run, epoch), group in df.groupby(["run_id", "epoch"]):
            missing = sorted(set(range(int(group["depth"].max()))) - set(group["layer"].astype(int)))
            if missing:
                gaps.append((table, str(run), int(epoch), missing))
    return gaps


@dataclass
class CompactionReport:
    """What ``compact`` did."""

    root: str
    dirs: int = 0
    rows: int = 0
    files_removed: int = 0
    skipped: list[str] = field(default_factory=list)
    stale_locks: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"store {self.root}: compacted {self.dirs} directories ({self.rows} rows), "
                 f"removed {self.files_removed} files"]
        lines += [f"  ignored stale {s}" for s in self.stale_locks]
        lines += [f"  skipped {s}" for s in self.skipped]
        return "\n".join(lines)


def compact(store: Store, table: str | None = None, force: bool = False,
            stale_after: float = STALE_AFTER_S) -> CompactionReport:
    """Merge each directory's per-epoch files into ``compacted.parquet``; refuse while a sweep writes."""
    tables = [table] if table else list(TABLES)
    report = CompactionReport(store.root)
    listings = {t: store.listing(t) for t in tables}
    busy = []
    for lock in locks(store):
        (busy if lock.age() < stale_after else report.stale_locks).append(lock.describe())
    for _, inprogress in listings.values():
        now = time.time()
        busy += [f"file being written: {i.path}" for i in inprogress if now - (i.mtime_ns or 0) / 1e9 < stale_after]
    for stale in report.stale_locks:
        warnings.warn(f"ignoring stale {stale}", stacklevel=2)
    if busy and not force:
        raise StoreError(f"refusing to compact {store.root} while a sweep may be writing: {'; '.join(busy)}. "
                         "Wait for it, or pass --force (force=True) if it is dead.")
    for t, (dirs, _) in listings.items():
        for d in dirs.values():
            if d.small and d.path != store.table_dir(t):  # stray files at the table's top stay
                _compact_dir(store, t, d, report)
    return report


def _compact_dir(store: Store, table: str, d: DirListing, report: CompactionReport) -> None:
    """Compact one directory: publish the merged file, then delete the files it absorbed."""
    name = d.path.rsplit("/", 1)[1]
    result = store.scan(table, subdir=name)
    bad = {p for p, _ in result.unreadable}
    report.skipped += [f"unreadable {p} (kept): {e}" for p, e in result.unreadable]
    if d.compacted is not None and d.compacted.path in bad:
        return  # rewriting it would drop its rows
    store.put(f"{d.path}/{COMPACTED}", parquet_bytes(result.table))
    report.dirs += 1
    report.rows += result.table.num_rows
    now, _ = store.listing(table, name)
    current = now.get(d.path, DirListing(d.path)).small
    for fname, info in d.small.items():
        again = current.get(fname)
        if info.path in bad or again is None or (again.size, again.mtime_ns) != (info.size, info.mtime_ns):
            continue  # unreadable, gone, or rewritten since we read it: it keeps shadowing
        store.delete_file(info.path)
        report.files_removed += 1
