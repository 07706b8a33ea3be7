"""sweep/store/locks.py: the sweep lock's heartbeat (an injected clock), and compaction honouring fresh locks but not stale ones."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from store_helpers import epoch_row, fill, identity

from sweep.store import Store, StoreError, compact, locks, sweep_lock


class StepClock:
    """An injected clock: each call returns the next whole second after ``start``; ``calls``
    is set once it has been read ``n`` times (so a test waits for beats, not for wall time)."""

    def __init__(self, start: float, n: int) -> None:
        self.start, self.n, self.k = start, n, 0
        self.calls = threading.Event()

    def __call__(self) -> float:
        self.k += 1
        if self.k >= self.n:
            self.calls.set()
        return self.start + self.k


def test_compact_refuses_while_sweep_is_locked(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    fill(store, seeds=1, epochs=2)
    # reads: 1 ``started``, 2 the first beat, 3 the daemon's first beat, 4 its second (so 3 is written)
    clock = StepClock(time.time(), n=4)
    with sweep_lock(store, "baseline", heartbeat_s=0.01, clock=clock):
        (lock,) = locks(store)
        assert lock.heartbeat - clock.start in (2, 3)  # the injected clock's time, not the wall's
        with pytest.raises(StoreError, match=r"baseline.*pid.*--force"):
            compact(store)
        assert clock.calls.wait(timeout=30), "the daemon thread did not beat"
        assert locks(store)[0].heartbeat >= clock.start + 3  # the daemon thread beats
        assert compact(store, force=True).dirs == 2
    assert locks(store) == [] and not (tmp_path / "_locks" / "baseline.json").exists()
    store.write_epoch(epoch_row(2))
    assert compact(store).dirs == 1


def test_compact_ignores_stale_lock_but_not_fresh_inprogress(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    fill(store, seeds=1, epochs=2)
    stale = {"name": "old", "host": "h", "pid": 1, "heartbeat": time.time() - 3600}
    store.put(f"{store.base}/_locks/old.json", json.dumps(stale).encode())
    with pytest.warns(UserWarning, match="stale"):
        report = compact(store, "layers")
    assert report.dirs == 1 and "old.json" in report.stale_locks[0]
    store.write_epoch(epoch_row(2))
    (tmp_path / "epochs" / identity()["run_id"] / ".epoch-0003.parquet.9-x.inprogress").write_bytes(b"")
    with pytest.raises(StoreError, match="being written"), pytest.warns(UserWarning, match="stale"):
        compact(store, "epochs")
