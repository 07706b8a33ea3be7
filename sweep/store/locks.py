"""``sweep_lock``: a file per writing sweep, with a heartbeat, that keeps ``compact`` from racing it."""

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
from dataclasses import dataclass

import pyarrow.fs as pafs

from sweep.store.parquet import (
    HEARTBEAT_S,
    READ_ERRORS,
    STALE_AFTER_S,
    Store,
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
