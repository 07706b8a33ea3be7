"""Helpers of the sweep tests on Ray (test_sweep_runner.py, test_plugins.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sweep.store import Store, validate


def dirs(tmp: Path, name: str) -> list[str]:
    return ["--store", str(tmp / "store"), "--storage", str(tmp / "ray"), "--name", name]


def assert_store_complete(store: Store, runs: int, epochs: int, layer_rows: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per (run, epoch) and (run, epoch, layer), epochs 0..epochs, every run completed."""
    report = validate(store)
    assert report.ok, str(report)
    ep = store.read("epochs")
    ly = store.read("layers")
    assert ep["run_id"].nunique() == runs
    assert len(ep) == runs * (epochs + 1)
    for run, group in ep.groupby("run_id"):
        assert sorted(group["epoch"]) == list(range(epochs + 1)), run
        last = group.loc[group["epoch"] == epochs, "status"].item()
        assert last == "completed", (run, last)
    assert not ly.duplicated(["run_id", "epoch", "layer"]).any()
    assert len(ly) == layer_rows
    for (run, epoch), group in ly.groupby(["run_id", "epoch"]):
        assert sorted(group["layer"]) == list(range(int(group["depth"].iloc[0]))), (run, epoch)
    return ep, ly
