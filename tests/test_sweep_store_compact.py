"""sweep/store/compact.py: compaction keeps every row, reduces files, and survives a crash midway."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from store_helpers import data_files, fill, identity, layer_rows, plain

from sweep.store import Store, compact, validate


def test_compact_preserves_rows_and_reduces_files(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    fill(store, seeds=3, epochs=4)
    before = {t: store.read(t) for t in ("layers", "epochs")}
    plain_before = plain(tmp_path, "layers")
    report = compact(store)
    assert report.dirs == 6 and report.files_removed == 24
    for table, df in before.items():
        pd.testing.assert_frame_equal(store.read(table), df)
        assert len(data_files(tmp_path, table)) == 3
    pd.testing.assert_frame_equal(plain(tmp_path, "layers"), plain_before)
    assert compact(store).dirs == 0  # nothing left to do
    assert validate(store).ok


def test_rewrite_after_compaction_leaves_one_copy(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    fill(store, seeds=1, epochs=3)
    compact(store)
    store.write_layers(layer_rows(1, value=9.0))
    df = store.read("layers")
    assert len(df) == 6 and df.loc[df["epoch"] == 1, "pr_q"].tolist() == [9.1, 10.1]
    assert len(pd.read_parquet(tmp_path / "layers")) == 6
    compacted = pq.read_table(tmp_path / "layers" / identity()["run_id"] / "compacted.parquet")
    assert sorted(set(compacted["epoch"].to_pylist())) == [0, 2]
    compact(store)
    pd.testing.assert_frame_equal(store.read("layers"), df)


def test_checkpoints_compact_and_rewrite(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    for rev in ("main", "step=1000", "compacted"):
        store.write_checkpoint([{"series": "pythia/70m", "revision": rev, "layer": layer, "pr_q": 1.0, "status": "ok"}
                                for layer in range(2)])
    store.write_checkpoint([{"series": "pythia/70m", "revision": "bad", "status": "failed", "reason": "oom"}])
    before = store.read("checkpoints")
    assert len(before) == 7 and compact(store, "checkpoints").files_removed == 4
    pd.testing.assert_frame_equal(store.read("checkpoints"), before)
    store.write_checkpoint([{"series": "pythia/70m", "revision": "step=1000", "layer": 0, "pr_q": 3.0, "status": "ok"}])
    after = store.read("checkpoints")
    assert len(after) == 6 and after.loc[after["revision"] == "step=1000", "pr_q"].tolist() == [3.0]
    report = validate(store)
    assert len(pd.read_parquet(tmp_path / "checkpoints")) == 6 and not report.duplicates
    assert report.failed == [("pythia/70m", "bad", "oom")]  # the failed revision is the only problem


def test_compaction_crash_midway_is_recoverable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(str(tmp_path))
    fill(store, seeds=2, epochs=3)
    before, plain_before = store.read("layers"), plain(tmp_path, "layers")
    deleted = []

    def flaky_delete(self: Store, path: str) -> None:
        if len(deleted) == 2:
            raise OSError("simulated crash")
        os.remove(path)
        deleted.append(path)

    monkeypatch.setattr(Store, "delete_file", flaky_delete)
    with pytest.raises(OSError, match="simulated crash"):
        compact(store, "layers")
    monkeypatch.undo()
    pd.testing.assert_frame_equal(store.read("layers"), before)
    report = validate(store)
    assert report.ok and report.pending, str(report)
    assert len(pd.read_parquet(tmp_path / "layers")) > len(before)  # the documented window
    compact(store, "layers")
    pd.testing.assert_frame_equal(store.read("layers"), before)
    pd.testing.assert_frame_equal(plain(tmp_path, "layers"), plain_before)
    assert len(data_files(tmp_path, "layers")) == 2 and not validate(store).pending
