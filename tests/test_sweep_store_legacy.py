"""Stores written before the ``intervention`` column became ``condition`` (SPEC §6): they read,
validate, compact and report as if written today, alone or mixed with files of the new name."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from store_helpers import OLD_NAMES, age, columns_on_disk, fill, layer_rows

from sweep import report
from sweep.store import Store, compact, validate
from sweep.store.schema import RENAMED
from sweep.synthetic import make_synthetic_store, write_store

RUN_TABLES = ("layers", "epochs")


@pytest.fixture
def stores(tmp_path: Path) -> tuple[Store, Store]:
    """(a store of today, the same rows as a store written before the rename)."""
    fill(Store(str(tmp_path / "new")), seeds=2, epochs=3)
    shutil.copytree(tmp_path / "new", tmp_path / "old")
    old = Store(str(tmp_path / "old"))
    assert age(old) == 12
    return Store(str(tmp_path / "new")), old


def test_the_store_knows_the_rename() -> None:
    assert RENAMED == OLD_NAMES


def test_old_store_reads_condition_and_no_intervention(stores: tuple[Store, Store]) -> None:
    new, old = stores
    for table in RUN_TABLES:
        assert columns_on_disk(old, table) >= {"intervention"} and "condition" not in columns_on_disk(old, table)
        df = old.read(table)
        assert "condition" in df and "intervention" not in df
        pd.testing.assert_frame_equal(df, new.read(table))
    run = new.read("layers")["run_id"][0]
    pd.testing.assert_frame_equal(old.read("epochs", run_id=run, columns=["run_id", "condition"]),
                                  new.read("epochs", run_id=run, columns=["run_id", "condition"]))
    assert old.read("layers", sweep="baseline")["condition"].tolist() == ["none"] * 12
    assert old.skipped == []


def test_mixed_store_reads_as_one(stores: tuple[Store, Store]) -> None:
    new, old = stores
    for store in stores:  # a rewritten epoch of an old run, and a new run beside the old ones
        store.write_layers(layer_rows(1, seed=0, value=5.0))
        store.write_layers(layer_rows(0, seed=7))
    assert {"intervention", "condition"} <= columns_on_disk(old, "layers")
    result = old.scan("layers")
    assert result.unreadable == []
    mixed = result.frame
    assert len(mixed) == 14 and mixed["condition"].notna().all() and "intervention" not in mixed
    pd.testing.assert_frame_equal(mixed, new.read("layers"))
    report_ = validate(old)
    assert report_.ok and report_.rows == {"layers": 14, "epochs": 6, "checkpoints": 0, "runs": 0}, str(report_)


def test_validate_passes_on_an_old_store(stores: tuple[Store, Store]) -> None:
    new, old = stores
    got, want = validate(old), validate(new)
    assert got.ok and got.rows == want.rows, str(got)


def test_compact_writes_the_new_name(stores: tuple[Store, Store]) -> None:
    _, old = stores
    before = {t: old.read(t) for t in RUN_TABLES}
    assert compact(old).files_removed == 12
    for table in RUN_TABLES:
        assert "condition" in columns_on_disk(old, table) and "intervention" not in columns_on_disk(old, table)
        pd.testing.assert_frame_equal(old.read(table), before[table])
    assert validate(old).ok


def test_rewrite_over_an_old_compacted_file(stores: tuple[Store, Store]) -> None:
    new, old = stores
    for store in stores:
        compact(store)
    assert age(old) == 4  # now the compacted files themselves are old
    for store in stores:
        store.write_layers(layer_rows(1, seed=0, value=5.0))  # drops epoch 1 from the compacted file
    assert old.scan("layers").unreadable == [] and not validate(old).pending
    pd.testing.assert_frame_equal(old.read("layers"), new.read("layers"))
    assert compact(old).dirs == 4  # the rewritten run, and every compacted file still of the old name
    assert all("intervention" not in columns_on_disk(old, t) for t in RUN_TABLES)
    assert compact(old).dirs == 0
    pd.testing.assert_frame_equal(old.read("layers"), new.read("layers"))


def _stats(store: Path, out: Path) -> dict:
    with contextlib.redirect_stdout(io.StringIO()):
        assert report.main(["--store", str(store), "--out", str(out), "--no-figures"]) == 0
    return json.loads((out / "stats.json").read_text())


def test_report_on_an_old_store_gives_the_same_verdicts(tmp_path: Path) -> None:
    tables = make_synthetic_store(n_seeds=2, depths=(2, 4), epochs=4, iv_epochs=3, checkpoints=False)
    write_store(tables, tmp_path / "new")
    shutil.copytree(tmp_path / "new", tmp_path / "old")
    assert age(Store(str(tmp_path / "old"))) > 0
    new, old = _stats(tmp_path / "new", tmp_path / "out-new"), _stats(tmp_path / "old", tmp_path / "out-old")
    verdicts = {r["id"]: r["verdict"] for r in new["scorecard"]}
    assert {r["id"]: r["verdict"] for r in old["scorecard"]} == verdicts
    assert any(i.startswith("interventions.") for i in verdicts)
    assert old["interventions"] == new["interventions"] and old["provenance"] == new["provenance"]
    assert old["missing"] == new["missing"] and old["skipped_files"] == []
