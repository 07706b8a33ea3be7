"""``--resume`` repairs a checkpoint that the experiment state names but Tune's num_to_keep deleted."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest
import s3_server
import torch
from pyarrow import fs as pafs
from ray import tune

from sweep.cli import UsageError
from sweep.driver.resume import repair_checkpoints, replace_missing
from sweep.trial.trainable import STATE_FILE, load_state


class Planted:
    def __reduce__(self):
        return (os.getcwd, ())


def _checkpoint(trial_dir: Path, index: int, content: str) -> Path:
    d = trial_dir / f"checkpoint_{index:06d}"
    d.mkdir(parents=True)
    if content == "state":
        torch.save({"epoch": index, "w": torch.full((3,), float(index))}, d / STATE_FILE)
    elif content == "truncated":  # a kill in the middle of the copy
        torch.save({"epoch": index, "w": torch.zeros(1000)}, d / STATE_FILE)
        data = (d / STATE_FILE).read_bytes()
        (d / STATE_FILE).write_bytes(data[: len(data) // 2])
    elif content == "pickle":  # more than weights: refused by load_state
        (d / STATE_FILE).write_bytes(pickle.dumps(Planted(), protocol=2))
    return d


def _missing(trial_dir: Path, index: int) -> tune.Checkpoint:
    return tune.Checkpoint(str(trial_dir / f"checkpoint_{index:06d}"), filesystem=pafs.LocalFileSystem())


def _trial_dir(tmp_path: Path) -> Path:
    trial_dir = tmp_path / "trial"
    _checkpoint(trial_dir, 0, "state")
    _checkpoint(trial_dir, 2, "state")
    _checkpoint(trial_dir, 3, "truncated")
    _checkpoint(trial_dir, 4, "pickle")
    _checkpoint(trial_dir, 5, "empty")
    (trial_dir / "checkpoint_000009.tmp").mkdir()  # not a checkpoint directory
    return trial_dir


def _assert_moved(fs: pafs.FileSystem, trial_dir: str, local: Path) -> None:
    local.mkdir()
    pafs.copy_files(f"{trial_dir}/checkpoint_000001", str(local), source_filesystem=fs)
    state = load_state(local / STATE_FILE)
    assert state["epoch"] == 2 and torch.equal(state["w"], torch.full((3,), 2.0))
    left = {i.base_name for i in fs.get_file_info(pafs.FileSelector(trial_dir))}
    assert {"checkpoint_000000", "checkpoint_000003"} <= left and "checkpoint_000002" not in left  # moved


def test_the_newest_sibling_that_loads_takes_the_missing_place(tmp_path):
    trial_dir = _trial_dir(tmp_path)
    assert replace_missing(_missing(trial_dir, 1)) == "checkpoint_000002"
    _assert_moved(pafs.LocalFileSystem(), str(trial_dir), tmp_path / "check")


def test_the_same_on_s3(tmp_path, s3_endpoint):
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, region="us-east-1")
    remote = f"{s3_server.create_bucket(s3_endpoint)}/exp/trial"
    pafs.copy_files(str(_trial_dir(tmp_path)), remote, destination_filesystem=fs)
    missing = tune.Checkpoint(f"{remote}/checkpoint_000001", filesystem=fs)
    assert replace_missing(missing) == "checkpoint_000002"
    _assert_moved(fs, remote, tmp_path / "check")


def test_repair_touches_only_trials_to_restore_whose_checkpoint_is_gone(tmp_path):
    ok = _checkpoint(tmp_path / "a", 1, "state")
    _checkpoint(tmp_path / "b", 0, "state")
    _checkpoint(tmp_path / "c", 0, "state")
    trials = [
        SimpleNamespace(status="RUNNING", checkpoint=tune.Checkpoint(str(ok)), name="a"),
        SimpleNamespace(status="ERROR", checkpoint=_missing(tmp_path / "b", 1), name="b"),
        SimpleNamespace(status="TERMINATED", checkpoint=_missing(tmp_path / "c", 1), name="c"),
        SimpleNamespace(status="PENDING", checkpoint=None, name="d"),
    ]
    lines = repair_checkpoints(trials)
    assert len(lines) == 1 and "checkpoint_000001" in lines[0] and "checkpoint_000000" in lines[0]
    assert (tmp_path / "b" / "checkpoint_000001" / STATE_FILE).exists()
    assert not (tmp_path / "c" / "checkpoint_000001").exists()  # finished trials are not restored


def test_no_checkpoint_left_is_one_clear_line(tmp_path):
    _checkpoint(tmp_path / "t", 0, "truncated")
    trial = SimpleNamespace(status="RUNNING", checkpoint=_missing(tmp_path / "t", 1))
    with pytest.raises(UsageError, match="lost its checkpoint .*checkpoint_000001.* no other checkpoint"):
        repair_checkpoints([trial])
