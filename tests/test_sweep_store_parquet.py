"""sweep/store/parquet.py: the Parquet ``Store`` on a local file system: round trips, layout, atomic rewrites, concurrent writers."""

from __future__ import annotations

import math
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_helpers import data_files, epoch_row, fill, identity, layer_rows, plain

from sweep.store import Store, safe_name, validate
from sweep.store.schema import SCHEMA_VERSION, SCHEMAS


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
    on_disk = plain(tmp_path, "layers")  # the same rows through plain pandas
    assert sorted(set(on_disk["epoch"])) == [0, 1]
    assert on_disk["run_id"].unique().tolist() == [identity()["run_id"]]
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


def _run_row(seed: int = 0, trial: str = "t0") -> dict:
    return {**identity(seed), "experiment": "baseline-demo", "trial": trial, "pack": 2, "member": seed,
            "model": '{"n_layer": 2}', "train": '{"epochs": 3}', "strengths": "{}"}


def test_runs_table_one_file_per_run_rewritten_in_place_compacted_and_validated(tmp_path: Path) -> None:
    from sweep.store import compact

    store = Store(str(tmp_path))
    path = store.write_run(_run_row(0))
    assert path.endswith(f"/runs/{safe_name(identity(0)['run_id'])}/run.parquet")
    store.write_run(_run_row(1))
    store.write_run(_run_row(0, trial="t1"))  # a resumed sweep rewrites its rows
    runs = store.read("runs")
    assert runs["run_id"].tolist() == sorted([identity(0)["run_id"], identity(1)["run_id"]])
    assert runs.set_index("member")["trial"].to_dict() == {0: "t1", 1: "t0"}
    assert compact(store, "runs").dirs == 2 and store.read("runs").equals(runs)
    store.write_run(_run_row(1, trial="t2"))  # its own file shadows the compacted row
    assert store.read("runs").set_index("member")["trial"].to_dict() == {0: "t1", 1: "t2"}
    report = validate(store)
    assert report.ok and report.rows["runs"] == 2, str(report)


def test_epoch_rows_reads_only_those_epochs_keeping_null_apart_from_nan(tmp_path: Path) -> None:
    from sweep.store import compact

    store = Store(str(tmp_path))
    fill(store, seeds=1, epochs=3)
    rid = identity(0)["run_id"]
    store.write_epoch(epoch_row(3, train_loss=float("nan")))
    rows = store.epoch_rows("epochs", rid, [0, 3])
    assert [r["epoch"] for r in rows] == [0, 3]
    assert rows[0]["train_loss"] is None and math.isnan(rows[1]["train_loss"])  # not measured vs undefined
    layers = store.epoch_rows("layers", rid, [2])
    assert [(r["epoch"], r["layer"]) for r in layers] == [(2, 0), (2, 1)]
    assert store.epoch_rows("layers", rid, []) == []
    compact(store)  # no per-epoch files left: read through the compacted file
    assert [r["epoch"] for r in store.epoch_rows("epochs", rid, [1, 3])] == [1, 3]
    assert store.epoch_rows("epochs", rid, [9]) == []


def test_read_json_files_reads_each_parseable_file_of_a_folder_by_name(tmp_path):
    store = Store(str(tmp_path / "store"))
    assert store.read_json_files("sequential") == {}  # no folder yet
    folder = tmp_path / "store" / "sequential"
    folder.mkdir(parents=True)
    (folder / "b.json").write_text('{"x": 2}')
    (folder / "a.json").write_text('{"x": 1}')
    (folder / "broken.json").write_text("{not json")
    (folder / "notes.txt").write_text("not a record")
    (folder / "sub").mkdir()
    got = store.read_json_files("sequential")
    assert got == {"a": {"x": 1}, "b": {"x": 2}} and list(got) == ["a", "b"]
