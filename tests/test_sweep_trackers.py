"""sweep/trackers/__init__.py: the --tracker flags and their checks (before Ray starts, nothing created).

The unknown-name cases of every CLI are in test_sweep_cli.py's table; here the missing package
(``importlib.util.find_spec`` answers None for it, as when it is not installed) and the helpers.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest
import ray

from sweep import baseline, demo, interventions, report, store
from sweep.cli import UsageError
from sweep.trackers import add_tracker_flags, check_trackers, tracker_folder, trackers_from_args

SWEEP = ["--preset", "smoke", "--store", "{tmp}/store", "--storage", "{tmp}/ray"]
CASES = [
    (baseline, "sweep.baseline", [*SWEEP, "--tracker", "wandb"]),
    (interventions, "sweep.interventions", [*SWEEP, "--tracker", "mlflow", "--tracker", "wandb"]),
    (demo, "sweep.demo", ["--store", "{tmp}/store", "--storage", "{tmp}/ray", "--tracker", "wandb"]),
    (store, "sweep.store", ["export", "--store", "{tmp}/store", "--tracker", "wandb"]),
    (report, "sweep.report", ["--store", "{tmp}/store", "--out", "{tmp}/out", "--tracker", "wandb"]),
]


@pytest.fixture
def no_wandb(monkeypatch):
    """``wandb`` looks uninstalled to the check; ``ray.init`` fails the test."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args, **kwargs: None if name == "wandb" else real(name, *args, **kwargs))

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init called for a bad input")

    monkeypatch.setattr(ray, "init", refuse)


@pytest.mark.parametrize(("module", "name", "argv"), CASES, ids=[c[1] for c in CASES])
def test_a_tracker_whose_package_is_missing_is_one_line_and_exit_2(no_wandb, tmp_path, capsys, module, name, argv):
    if module is store:
        (tmp_path / "store").mkdir()  # a store there: the tracker is what is wrong
    with pytest.raises(SystemExit) as exc:
        module.main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert exc.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (f"python -m {name}: error: --tracker wandb: the wandb package is not installed; "
                        "pip install 'qkgeom[wandb]'"), lines[0]
    assert not (tmp_path / "ray").exists() and not (tmp_path / "trackers").exists()
    assert not (tmp_path / "out").exists()
    assert module is store or not (tmp_path / "store").exists()


def test_flags_take_repeats_and_comma_lists_each_once_in_order():
    p = argparse.ArgumentParser()
    add_tracker_flags(p)
    args = p.parse_args(["--tracker", "wandb,mlflow", "--tracker", "wandb"])
    assert trackers_from_args(args) == ("wandb", "mlflow")
    assert trackers_from_args(p.parse_args([])) == ()


def test_check_names_the_flag_the_value_and_the_choices():
    check_trackers("--tracker", ("mlflow", "wandb"))  # both installed in the test venv
    with pytest.raises(UsageError, match=r"^--tracker tensorboard: choose from mlflow, wandb$"):
        check_trackers("--tracker", ("mlflow", "tensorboard"))


def test_tracker_folder_sits_beside_a_local_store():
    assert tracker_folder(None, "/data/qk/store") == Path("/data/qk/trackers")
    assert tracker_folder(None, "file:///data/qk/store/") == Path("/data/qk/trackers")
    assert tracker_folder(None, "s3://bucket/qk/store") == Path("runs/trackers")
    assert tracker_folder("elsewhere", "/data/qk/store") == Path("elsewhere")
