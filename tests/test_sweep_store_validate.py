"""sweep/store/validate.py: duplicates, gaps and NaNs are found and named."""

from __future__ import annotations

from pathlib import Path

from store_helpers import epoch_row, fill, identity, layer_rows

from sweep.store import Store, validate


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


def test_validate_reports_failed_checkpoint_revisions(tmp_path: Path) -> None:
    """A failed checkpoint revision is a problem (exit 1 from the CLI), named with its reason;
    once a rerun replaces it with ok rows the store is OK again."""
    from sweep.store.cli import main

    store = Store(str(tmp_path))
    ok = [{"series": "s", "revision": "step1", "layer": layer, "pr_q": 1.0, "status": "ok"} for layer in range(2)]
    store.write_checkpoint(ok)
    assert validate(store).ok and main(["validate", "--store", str(tmp_path)]) == 0
    store.write_checkpoint([{"series": "s", "revision": "step2", "status": "failed",
                             "reason": "RevisionError: local path does not exist: /x\nsecond line"}])
    report = validate(store)
    assert not report.ok
    assert report.failed == [("s", "step2", "RevisionError: local path does not exist: /x")]
    assert "failed checkpoint revision s@step2: RevisionError: local path does not exist: /x" in str(report)
    assert "1 problem(s)" in str(report)
    assert main(["validate", "--store", str(tmp_path)]) == 1
    store.write_checkpoint([{**r, "revision": "step2"} for r in ok])  # the rerun succeeded
    assert validate(store).ok
