"""The Parquet store of sweep results (SPEC §6), one module per idea.

* ``schema``   the tables, their columns and keys;
* ``ids``      ``run_id`` and the ``strengths`` text (no Arrow: the parsers use them);
* ``parquet``  ``Store``: atomic writes, reads with the compaction precedence rule;
* ``locks``    ``sweep_lock``: a writing sweep's heartbeat file;
* ``validate`` duplicates, gaps, NaNs, unreadable files;
* ``compact``  merging per-epoch files, never while a sweep lock is fresh;
* ``identity`` ``store_id``: the store's id, written once (trackers key runs by it);
* ``cli``      ``python -m sweep.store validate|compact``.

The names below are the package's API (``from sweep.store import Store``), each loaded when first
used; the modules above import each other directly, never through this file.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweep.store.cli import main
    from sweep.store.compact import CompactionReport, compact
    from sweep.store.identity import store_id
    from sweep.store.locks import LockInfo, locks, sweep_lock
    from sweep.store.parquet import DirListing, ScanResult, Store, StoreError, file_name, safe_name
    from sweep.store.validate import ValidationReport, validate

#: each name's module, imported when the name is first used (PEP 562): ``sweep.store.schema`` or the
#: command's parser (``python -m sweep.store --help``) does not import pandas through this file
_WHERE = {
    "main": "cli", "CompactionReport": "compact", "compact": "compact", "store_id": "identity",
    "LockInfo": "locks", "locks": "locks", "sweep_lock": "locks", "DirListing": "parquet",
    "ScanResult": "parquet", "Store": "parquet", "StoreError": "parquet", "file_name": "parquet",
    "safe_name": "parquet", "ValidationReport": "validate", "validate": "validate",
}
__all__ = [
    "CompactionReport", "DirListing", "LockInfo", "ScanResult", "Store", "StoreError", "ValidationReport",
    "compact", "file_name", "locks", "main", "safe_name", "store_id", "sweep_lock", "validate",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'sweep.store' has no attribute {name!r}")
    value = globals()[name] = getattr(importlib.import_module(f"sweep.store.{_WHERE[name]}"), name)
    return value


class _Package(types.ModuleType):
    """``compact``, ``locks`` and ``validate`` name a function and the submodule that holds it. Importing
    the submodule binds its name in the package to the module; with the functions loaded late, that
    would shadow them, so a module is never bound over one of these names (the API is the function)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("compact", "locks", "validate") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
