"""sweep/driver/runner.py with packed trials on one local Ray with 2 CPUs and a logical GPU.

The logical GPU makes ``--pack auto`` pack (Ray's cluster resources decide; CPU torch trains
on the CPU). The dry runs check the paper plan; one tiny demo-shape grid (1 depth, 2 inits,
2 seeds, 2 epochs of 3 steps) runs unpacked (``--pack 1``: 4 trials) and packed (``auto``:
one trial of 4, killed once after epoch 1's rows), and the stores, browse and the report's
scorecard are compared.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import ray
from sweep_helpers import assert_store_complete, dirs

from sweep import baseline, browse, demo, interventions
from sweep.hooks.faults import FAILURE_MARKER
from sweep.report import write_report
from sweep.store import Store
from sweep.store.schema import CLOCK_COLUMNS

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_env")]  # ray_env: tests/conftest.py

GRID = ["--preset", "demo", "--depths", "1", "--inits", "independent_xavier,qk_identical",
        "--seed-list", "37,42", "--epochs", "2", "--steps-per-epoch", "3"]
#: columns that measure time, not training: they differ between any two runs


@pytest.fixture(scope="module")
def gpu_ray():
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False)
    yield
    ray.shutdown()


def _nothing_written(tmp: Path) -> None:
    assert not (tmp / "store").exists() and not (tmp / "ray").exists()


def test_dry_run_packs_the_paper_baseline_into_three_packs_of_twelve(gpu_ray, tmp_path, capsys):
    plan = baseline.main(["--preset", "paper", "--dry-run", *dirs(tmp_path, "plan")])
    out = capsys.readouterr().out
    assert plan.groupby("trial").size().tolist() == [12, 12, 12]
    assert plan.groupby("trial")["depth"].nunique().tolist() == [1, 1, 1]
    assert "36 runs in 3 trials, packs of 12 (auto: the Ray cluster has 1 GPUs)" in out
    assert "resources per trial: 1 CPU, 1 GPU" in out and "run steps in all" in out  # a whole GPU each
    assert "dry run: nothing trained" in out
    _nothing_written(tmp_path)


def test_a_local_dry_run_plans_for_this_machine_without_starting_ray(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    started = []
    monkeypatch.setattr(ray, "init", lambda *a, **k: started.append(1))
    plan = baseline.main(["--preset", "paper", "--dry-run", "--num-gpus", "1", *dirs(tmp_path, "plan")])
    assert plan.groupby("trial").size().tolist() == [12, 12, 12] and not started
    assert "resources per trial: 1 CPU, 1 GPU" in capsys.readouterr().out
    plan = baseline.main(["--preset", "paper", "--dry-run", "--num-gpus", "0", *dirs(tmp_path, "plan")])
    assert plan["trial"].nunique() == 36 and not started
    assert "resources per trial: 1 CPU, 0 GPU" in capsys.readouterr().out
    _nothing_written(tmp_path)


def test_dry_run_packs_the_paper_interventions_into_six_packs_of_five(gpu_ray, tmp_path, capsys):
    plan = interventions.main(["--preset", "paper", "--dry-run", "--gpus-per-trial", "0.5",
                               *dirs(tmp_path, "plan")])
    out = capsys.readouterr().out
    assert plan.groupby("trial").size().tolist() == [5] * 6
    assert plan.groupby("trial")["condition"].nunique().tolist() == [1] * 6
    assert "30 runs in 6 trials, packs of 5" in out and "0.5 GPU" in out
    assert baseline.main(["--preset", "paper", "--dry-run", "--pack", "1", *dirs(tmp_path, "p")])["trial"].nunique() == 36
    _nothing_written(tmp_path)


def test_dry_run_runs_a_condition_that_is_not_pack_aware_unpacked(gpu_ray, registries, tmp_path, capsys):
    plan = interventions.main(["--preset", "paper", "--dry-run", "--plugin", "tests.plugin_toy",
                               "--conditions", "none,plugin_freeze_v", *dirs(tmp_path, "plan")])
    out = capsys.readouterr().out
    assert plan.groupby("condition")["trial"].nunique().to_dict() == {"none": 1, "plugin_freeze_v": 5}
    note = "condition plugin_freeze_v is not pack-aware: its runs train unpacked, one per trial"
    assert out.count(note) == 1, out
    _nothing_written(tmp_path)


@pytest.fixture(scope="module")
def stores(gpu_ray, tmp_path_factory):
    """The grid unpacked (--pack 1) and packed (auto: one trial), the packed trial killed once."""
    tmp = tmp_path_factory.mktemp("packed")
    unpacked = baseline.main([*GRID, "--pack", "1", *dirs(tmp / "unpacked", "unpacked")])
    markers = tmp / "markers"
    packed = baseline.main([*GRID, *dirs(tmp / "packed", "packed"), "--fail-after-epoch", "1",
                            "--failure-marker-dir", str(markers)])
    return tmp, unpacked, packed, markers


def _rows(store: Store, table: str) -> pd.DataFrame:
    keys = ["run_id", "epoch"] + (["layer"] if table == "layers" else [])
    return store.read(table).drop(columns=list(CLOCK_COLUMNS), errors="ignore").sort_values(keys, ignore_index=True)


def test_packed_sweep_writes_the_unpacked_rows_and_survives_a_kill(stores):
    tmp, unpacked, packed, markers = stores
    assert list(markers.glob(f"*{FAILURE_MARKER}")), "the injected failure did not happen"
    for summary in (unpacked, packed):
        assert len(summary) == 4 and (summary["status"] == "completed").all(), summary
        assert (summary["epoch"] == 2).all()
    results = ray.tune.ExperimentAnalysis(str(tmp / "packed" / "ray" / "packed")).dataframe()
    assert len(results) == 1 and results["config/spec/cell/pack"].item() == 4  # one trial trained all four

    a, b = Store(str(tmp / "unpacked" / "store")), Store(str(tmp / "packed" / "store"))
    for store in (a, b):  # no row lost or duplicated, although the packed trial replayed epoch 1
        assert_store_complete(store, runs=4, epochs=2, layer_rows=4 * 3 * 1)
    for table in ("epochs", "layers"):
        x, y = _rows(a, table), _rows(b, table)
        assert list(x.columns) == list(y.columns) and len(x) == len(y)
        assert a.read(table).dtypes.to_dict() == b.read(table).dtypes.to_dict()
        numeric = [c for c in x.columns if pd.api.types.is_float_dtype(x[c])]
        other = [c for c in x.columns if c not in numeric]
        pd.testing.assert_frame_equal(x[other], y[other])  # identity, epochs, layers, statuses
        np.testing.assert_allclose(y[numeric].to_numpy(float), x[numeric].to_numpy(float),
                                   rtol=1e-4, atol=1e-6, equal_nan=True, err_msg=table)


def test_browse_shows_the_packs_members(stores, capsys):
    tmp = stores[0]
    experiment = str(tmp / "packed" / "ray" / "packed")
    browse.main([experiment])
    listing = capsys.readouterr().out
    assert "1 trials" in listing and "independent_xavier,qk_identical" in listing and "37,42" in listing
    (trial_id,) = ray.tune.ExperimentAnalysis(experiment).results_df.index
    browse.main([experiment, "--trial", trial_id])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    header = next(r for r in rows if "epoch" in r and "init" in r)
    members = {(r[0], r[1]) for r in rows[rows.index(header) + 1:] if len(r) == len(header)}
    assert members == {(i, s) for i in ("independent_xavier", "qk_identical") for s in ("37", "42")}


def test_report_scorecard_verdicts_agree(stores, capsys):
    tmp = stores[0]
    cards = []
    for kind in ("unpacked", "packed"):
        s = write_report(str(tmp / kind / "store"), str(tmp / kind / "report"), figures=False)
        cards.append([(r["preset"], r.get("claim") or r.get("id") or r.get("section"), r["verdict"])
                      for r in s["scorecard"]])
    capsys.readouterr()
    assert cards[0] and cards[0] == cards[1]


def test_demo_dry_run_plans_both_sweeps(gpu_ray, tmp_path, capsys):
    """The demo plans both sweeps on the Ray that runs (and leaves it running)."""
    demo.main(["--dry-run", "--store", str(tmp_path / "store"), "--storage", str(tmp_path / "ray"),
               "--out", str(tmp_path / "report")])
    out = capsys.readouterr().out
    assert "54 runs in 3 trials, packs of 18" in out  # 3 depths × (3 inits × 6 confirmatory seeds)
    assert "36 runs in 6 trials, packs of 6" in out  # 6 conditions × 6 seeds
    assert "not run (dry run)" in out
    for made in ("store", "ray", "report"):
        assert not (tmp_path / made).exists(), made
    assert ray.is_initialized()
