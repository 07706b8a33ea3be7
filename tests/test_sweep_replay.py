"""sweep/replay.py: a Tune trial replayed in the foreground, without Ray, writes the rows the trial
wrote (``--pack 1``, the same device and threads: equal but for the clock columns)."""

from __future__ import annotations

import json

import pytest
from sweep_helpers import dirs

from sweep import baseline, replay
from sweep.store import Store
from sweep.store.schema import CLOCK_COLUMNS

GRID = ["--preset", "smoke", "--inits", "qk_identical", "--depths", "2", "--seed-list", "42", "--epochs", "2",
        "--pack", "1", "--num-cpus", "1"]


def _rows(store: Store, table: str):
    frame = store.read(table)
    keys = ["run_id", "epoch"] + (["layer"] if table == "layers" else [])
    return frame.drop(columns=[c for c in CLOCK_COLUMNS if c in frame]).sort_values(keys).reset_index(drop=True)


@pytest.mark.ray
@pytest.mark.usefixtures("ray_env")
def test_a_replayed_trial_writes_the_rows_the_trial_wrote(tmp_path, capsys) -> None:
    summary = baseline.main([*GRID, *dirs(tmp_path, "one")])
    assert len(summary) == 1
    (params,) = (tmp_path / "ray" / "one").glob("*/params.json")
    assert "spec" in json.loads(params.read_text())
    assert replay.main([str(params.parent), "--store", str(tmp_path / "replayed"), "--device", "cpu"]) == 0
    assert "replayed 1 run: completed" in capsys.readouterr().out
    trial, again = Store(str(tmp_path / "store")), Store(str(tmp_path / "replayed"))
    for table in ("epochs", "layers"):
        a, b = _rows(trial, table), _rows(again, table)
        assert len(a) == len(b) > 0
        assert a.equals(b), (table, a.compare(b))


def test_a_folder_that_is_not_a_trial_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    assert replay.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no params.json here" in err
    (tmp_path / "params.json").write_text("{}")
    assert replay.main([str(tmp_path)]) == 2 and "not a qkgeom trial config" in capsys.readouterr().err


def test_flags_override_the_trials_options() -> None:
    args = replay.parse(["d", "--amp", "off", "--no-graphs"])
    assert (args.amp, args.graphs, args.tf32) == ("off", False, None)  # None: the trial's own
