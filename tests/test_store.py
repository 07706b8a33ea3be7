"""The Parquet store on a local file system: round trips, atomicity, validation, compaction, locks."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweep.store import Store, StoreError, compact, locks, safe_name, sweep_lock, validate
from sweep.store.schema import EPOCH_METRICS, KEYS, LAYER_METRICS, SCHEMA_VERSION, SCHEMAS, run_id

REPO = Path(__file__).resolve().parents[1]


def identity(seed: int = 0, depth: int = 2, sweep: str = "baseline") -> dict:
    return {"sweep": sweep, "preset": "tiny", "init": "xavier", "depth": depth, "seed": seed,
            "intervention": "none", "run_id": run_id(sweep, "tiny", "xavier", depth, seed, "none")}


def layer_rows(epoch: int, seed: int = 0, depth: int = 2, value: float = 1.0) -> list[dict]:
    rows = []
    for layer in range(depth):
        row = {**identity(seed, depth), "epoch": epoch, "layer": layer}
        row.update({m: value + layer + epoch / 10 for m in LAYER_METRICS})
        if epoch > 0:
            row.update(grad_norm_q=0.5, grad_norm_k=0.25)
        rows.append(row)
    return rows


def epoch_row(epoch: int, seed: int = 0, depth: int = 2, status: str = "running", **metrics) -> dict:
    row = {**identity(seed, depth), "epoch": epoch, "tokens_seen": 1000 * epoch, "status": status}
    row.update({m: 2.0 + epoch for m in EPOCH_METRICS  # as the trainer: no step, no throughput at 0
                if epoch > 0 or m not in ("train_loss", "grad_norm", "tokens_per_s")})
    return {**row, **metrics}


def fill(store: Store, seeds: int = 2, epochs: int = 3, depth: int = 2) -> None:
    for seed in range(seeds):
        for epoch in range(epochs):
            store.write_layers(layer_rows(epoch, seed, depth))
            store.write_epoch(epoch_row(epoch, seed, depth))


def data_files(root: Path, table: str) -> list[Path]:
    return sorted(p for p in (root / table).rglob("*.parquet") if not p.name.startswith((".", "_")))


def sorted_frame(df: pd.DataFrame, table: str) -> pd.DataFrame:
    keys = list(KEYS[table])
    return df.sort_values(keys).reset_index(drop=True)[list(SCHEMAS[table].names)]


def plain(root: Path, table: str) -> pd.DataFrame:
    return sorted_frame(pd.read_parquet(root / table), table)


def test_round_trip_values_and_dtypes(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    rows = layer_rows(0) + layer_rows(1)
    store.write_layers(layer_rows(0))
    store.write_layers(layer_rows(1))
    store.write_epoch(epoch_row(0))
    layers, epochs = store.read("layers"), store.read("epochs")
    expected = SCHEMAS["layers"].empty_table().to_pandas().dtypes
    assert layers.dtypes.equals(expected)
    assert str(layers["depth"].dtype) == "int32" and str(layers["seed"].dtype) == "int64"
    assert len(layers) == 4 and (layers["schema_version"] == SCHEMA_VERSION).all()
    assert layers["pr_q"].tolist() == [r["pr_q"] for r in rows]
    assert layers.loc[layers["epoch"] == 0, "grad_norm_q"].isna().all()
    assert layers.loc[layers["epoch"] == 1, "grad_norm_q"].tolist() == [0.5, 0.5]
    assert epochs.dtypes.equals(SCHEMAS["epochs"].empty_table().to_pandas().dtypes)
    assert epochs.loc[0, "val_loss"] == 2.0 and math.isnan(epochs.loc[0, "train_loss"])
    assert store.epochs_written(identity()["run_id"], "layers") == [0, 1]
    assert store.list_runs("layers") == [identity()["run_id"]]
    assert store.read("layers", columns=["epoch", "layer"]).columns.tolist() == ["epoch", "layer"]
    assert len(store.read("layers", sweep="other")) == 0


def test_empty_store_has_schema_columns(tmp_path: Path) -> None:
    df = Store(str(tmp_path / "missing")).read("epochs")
    assert len(df) == 0
    assert df.columns.tolist() == SCHEMAS["epochs"].names
    assert str(df["epoch"].dtype) == "int32" and str(df["val_loss"].dtype) == "float64"


def test_writer_rejects_bad_rows(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    with pytest.raises(ValueError, match="share one epoch"):
        store.write_layers(layer_rows(0) + layer_rows(1))
    with pytest.raises(ValueError, match="no columns"):
        store.write_epoch({**epoch_row(0), "val_los": 1.0})
    with pytest.raises(ValueError, match="status"):
        store.write_epoch({**epoch_row(0), "status": None})
    with pytest.raises(ValueError, match="duplicate"):
        store.write_layers(layer_rows(0) * 2)
    assert not (tmp_path / "layers").exists()


def test_layout_and_safe_names(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    path = store.write_layers(layer_rows(3))
    assert path == f"{tmp_path}/layers/{identity()['run_id']}/epoch-0003.parquet"
    odd = safe_name("a/b=c")
    assert "/" not in odd and "=" not in odd and odd == safe_name("a/b=c") != safe_name("a_b_c")
    assert safe_name("compacted") != "compacted" and not safe_name(".hidden").startswith(".")
    store.write_checkpoint([{"series": "pythia/70m", "revision": "step=1000", "layer": 0, "status": "ok"}])
    (series_dir,) = (tmp_path / "checkpoints").iterdir()
    assert "=" not in series_dir.name and [p.name for p in series_dir.iterdir()] == [f"{safe_name('step=1000')}.parquet"]


def test_rewrite_leaves_one_copy(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    store.write_layers(layer_rows(1, value=1.0))
    store.write_layers(layer_rows(1, value=7.0))
    df = store.read("layers")
    assert len(df) == 2 and df["pr_q"].tolist() == [7.1, 8.1]
    assert len(data_files(tmp_path, "layers")) == 1


def test_inprogress_file_is_invisible(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    store.write_layers(layer_rows(0))
    run_dir = tmp_path / "layers" / identity()["run_id"]
    extra = pa.Table.from_pylist([{**r, "schema_version": 1} for r in layer_rows(5)], schema=SCHEMAS["layers"])
    pq.write_table(extra, run_dir / ".epoch-0005.parquet.123-abc.inprogress")  # readable, would add rows
    assert len(store.read("layers")) == 2
    assert len(pd.read_parquet(tmp_path / "layers")) == 2


def test_truncated_file_is_skipped_and_reported(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    store.write_layers(layer_rows(0))
    bad = Path(store.write_layers(layer_rows(1)))
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    with pytest.warns(UserWarning, match="epoch-0001.parquet"):
        df = store.read("layers")
    assert df["epoch"].tolist() == [0, 0]
    report = validate(store)
    assert not report.ok and [p for p, _ in report.unreadable] == [str(bad)]
    assert "unreadable" in str(report)


def test_file_uri_reads_same_table(tmp_path: Path) -> None:
    fill(Store(str(tmp_path)), seeds=1, epochs=2)
    by_path = Store(str(tmp_path)).read("layers")
    by_uri = Store(tmp_path.as_uri()).read("layers")
    assert len(by_path) == 4
    pd.testing.assert_frame_equal(by_path, by_uri)
    pd.testing.assert_frame_equal(plain(tmp_path, "layers"), by_path)  # plain pandas reads the whole table


def test_concurrent_threads_lose_nothing(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    jobs = [(seed, epoch) for seed in range(8) for epoch in range(4)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda job: store.write_layers(layer_rows(job[1], job[0])), jobs))
    df = store.read("layers")
    assert len(df) == len(jobs) * 2
    assert not validate(store).duplicates


def test_concurrent_processes_lose_nothing(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    jobs = [layer_rows(epoch, seed) for seed in range(6) for epoch in range(3)]
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(store.write_layers, jobs))  # the Store pickles by its root
    df = store.read("layers")
    assert len(df) == 36 and df.groupby("run_id").size().tolist() == [6] * 6


def test_validate_detects_duplicate_gap_nan(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    fill(store, seeds=2, epochs=3)
    store.write_epoch(epoch_row(0, seed=5, status="running"))
    store.write_epoch(epoch_row(1, seed=5, status="diverged", val_loss=float("nan")))  # exempt: diverged
    report = validate(store)
    assert report.ok, str(report)
    run0, run1 = identity(0)["run_id"], identity(1)["run_id"]
    copy = tmp_path / "layers" / run0 / "copy.parquet"
    copy.write_bytes((tmp_path / "layers" / run0 / "epoch-0001.parquet").read_bytes())
    (tmp_path / "epochs" / run1 / "epoch-0001.parquet").unlink()
    store.write_layers(layer_rows(2, seed=1)[:1])  # layer 1 of epoch 2 missing
    store.write_epoch(epoch_row(2, seed=0, val_loss=None))
    report = validate(store)
    assert not report.ok
    assert ("layers", (run0, 1, 0), 2) in report.duplicates and len(report.duplicates) == 2
    assert ("epochs", run1, None, [1]) in report.gaps
    assert ("layers", run1, 2, [1]) in report.gaps
    assert report.nans == [("epochs", "val_loss", 1)]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sweep.store", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_cli_validate_exit_codes(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    fill(store, seeds=1, epochs=2)
    good = run_cli("validate", "--store", str(tmp_path))
    assert good.returncode == 0 and "OK" in good.stdout
    store.write_epoch(epoch_row(1, val_loss=float("nan")))
    bad = run_cli("validate", "--store", tmp_path.as_uri())
    assert bad.returncode == 1 and "NaN in epochs.val_loss" in bad.stdout
    done = run_cli("compact", "--store", str(tmp_path), "--table", "layers")
    assert done.returncode == 0 and "compacted 1 directories" in done.stdout
    assert len(data_files(tmp_path, "layers")) == 1 and len(data_files(tmp_path, "epochs")) == 2


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
    assert len(pd.read_parquet(tmp_path / "checkpoints")) == 6 and validate(store).ok


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
