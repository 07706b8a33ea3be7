"""Helpers of the sweep tests (test_sweep_driver_runner.py, test_plugins.py, test_sweep_trial_spec.py)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd

from model.plugins import Plugins
from sweep.store import Store, validate
from sweep.trial.options import TrialOptions


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


def v1_config(cells, options: TrialOptions, plugins: Plugins) -> dict:
    """The Tune config qkgeom wrote before the run spec (``Cell.to_config`` / ``Pack.to_config`` and
    ``TrialOptions.to_config`` of commit 77beb21), built here by hand."""
    preset = cells[0].preset
    shape = {k: v for k, v in asdict(preset).items() if k not in ("depths", "inits", "seeds", "conditions",
                                                                   "strengths")}
    shape["model"] = {k: v for k, v in shape["model"].items() if k not in ("n_layer", "vocab_size")}
    shape["train"] = {k: v for k, v in shape["train"].items() if k not in ("seed", "device", "compile")}
    first = cells[0]
    if len(cells) == 1:
        cell = {"preset": shape, "init": first.init, "depth": first.depth, "seed": first.seed,
                "intervention": first.condition, "strengths": dict(first.strengths)}
    else:
        cell = {"preset": shape, "depth": first.depth, "intervention": first.condition,
                "strengths": dict(first.strengths), "init": ",".join(dict.fromkeys(c.init for c in cells)),
                "seed": ",".join(str(s) for s in dict.fromkeys(c.seed for c in cells)), "pack": len(cells),
                "members": [{"init": c.init, "seed": c.seed} for c in cells]}
    return {"cell": cell, "options": {**asdict(options), "plugins": list(plugins.modules),
                                      "fail_after_epoch": None, "failure_marker_dir": "/tmp/markers"}}
