"""The store's id: written into the store once, on first use, and never rewritten.

``{root}/_store.json`` holds ``{"store_id": "<12 hex digits>", "created": "<UTC time>"}``. Trackers
tag and key their runs by it (``sweep.trackers``), so two stores that use the same sweep name on
one tracking server never touch each other's runs. Readers skip names that start with ``_``.

Created atomically: on a file system the file is written under a temporary name and hard-linked
into place, which fails when another process got there first (its id is then read and used); on
an object store, where a PUT cannot be conditional here, the file is read first and written only
when absent (two writers racing within the same second could each see their own; the later PUT
wins, and a tracker run tagged with the loser's id is then another store's, never deleted).
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime

import pyarrow.fs as pafs

from sweep.store.parquet import READ_ERRORS, Store, StoreError

ID_FILE = "_store.json"


def _read(store: Store, path: str) -> str | None:
    try:
        if store.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with store.fs.open_input_stream(path) as f:
            value = json.loads(f.read().decode())["store_id"]
    except (*READ_ERRORS, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise StoreError(f"store {store.root}: its id file {ID_FILE} cannot be read ({exc})") from exc
    if not isinstance(value, str) or not value:
        raise StoreError(f"store {store.root}: its id file {ID_FILE} holds no store_id")
    return value


def store_id(store: Store, create: bool = True) -> str | None:
    """The store's id; created when it has none and ``create`` (else None)."""
    path = f"{store.base}/{ID_FILE}"
    found = _read(store, path)
    if found is not None or not create:
        return found
    data = json.dumps({"store_id": uuid.uuid4().hex[:12],
                       "created": datetime.now(UTC).isoformat(timespec="seconds")}).encode()
    if store.object_store:
        store.put(path, data)
    else:
        tmp = f"{store.base}/.{ID_FILE}.{os.getpid()}-{uuid.uuid4().hex[:8]}.inprogress"
        store.fs.create_dir(store.base, recursive=True)
        with store.fs.open_output_stream(tmp) as out:
            out.write(data)
        try:
            if isinstance(store.fs, pafs.LocalFileSystem):
                try:
                    os.link(tmp, path)  # fails when it exists: never rewritten
                except FileExistsError:
                    pass
            elif _read(store, path) is None:
                store.fs.move(tmp, path)
        finally:
            try:
                store.fs.delete_file(tmp)
            except (OSError, FileNotFoundError):
                pass
    result = _read(store, path)
    assert result is not None
    return result
