"""``compact``: merge a directory's per-epoch files into one, never racing a writing sweep (``sweep_lock``).

Compaction merges the per-epoch files of one directory (a run, or a checkpoint
series) into ``{dir}/compacted.parquet``, then deletes the files it merged. It
writes the current column names, and also rewrites a directory whose compacted
file still holds a column under its name from before a rename (``RENAMED``).
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

import time
import warnings
from dataclasses import dataclass, field

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sweep.store.locks import locks
from sweep.store.parquet import (
    COMPACTED,
    READ_ERRORS,
    STALE_AFTER_S,
    DirListing,
    Store,
    StoreError,
    parquet_bytes,
)
from sweep.store.schema import RENAMED, TABLES


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
            if d.path == store.table_dir(t):
                continue  # stray files at the table's top stay
            if d.small or _old_names(store, d.compacted):
                _compact_dir(store, t, d, report)
    return report


def _old_names(store: Store, info: pafs.FileInfo | None) -> bool:
    """Whether a compacted file holds a column under its name from before a rename (``RENAMED``)."""
    if info is None:
        return False
    try:
        names = pq.read_schema(info.path, filesystem=store.fs).names
    except READ_ERRORS:
        return False  # unreadable: compaction would not rewrite it anyway
    return any(old in names for old in RENAMED.values())


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
