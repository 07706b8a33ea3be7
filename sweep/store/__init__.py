"""The Parquet store of sweep results (SPEC §6), one module per idea.

* ``schema``   the tables, their columns and keys;
* ``parquet``  ``Store``: atomic writes, reads with the compaction precedence rule;
* ``locks``    ``sweep_lock``: a writing sweep's heartbeat file;
* ``validate`` duplicates, gaps, NaNs, unreadable files;
* ``compact``  merging per-epoch files, never while a sweep lock is fresh;
* ``identity`` ``store_id``: the store's id, written once (trackers key runs by it);
* ``cli``      ``python -m sweep.store validate|compact``.

The names below are the package's API (``from sweep.store import Store``); the
modules above import each other directly, never through this file.
"""

from sweep.store.cli import main
from sweep.store.compact import CompactionReport, compact
from sweep.store.identity import store_id
from sweep.store.locks import LockInfo, locks, sweep_lock
from sweep.store.parquet import DirListing, ScanResult, Store, StoreError, file_name, safe_name
from sweep.store.validate import ValidationReport, validate

__all__ = [
    "CompactionReport", "DirListing", "LockInfo", "ScanResult", "Store", "StoreError", "ValidationReport",
    "compact", "file_name", "locks", "main", "safe_name", "store_id", "sweep_lock", "validate",
]
