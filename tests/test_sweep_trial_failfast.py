"""sweep/trial/failfast.py: a trial whose attempt fails like the attempt before is not retried again, and a
sweep that ends with an errored trial exits 1 (the other trials' rows in the store).

The callback on fake trials (no Ray), then one interventions smoke sweep in a subprocess, exactly as
a user runs it: ``none`` beside a plugin condition whose ``after_step`` raises.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from sweep.driver.summary import exit_status
from sweep.trial.failfast import ATTEMPT_ERROR, FailFast, signature

ROOT = Path(__file__).resolve().parents[1]


class FakeTrial(SimpleNamespace):
    def __str__(self) -> str:
        return self.name


def _trial(max_failures: int = 3) -> FakeTrial:
    return FakeTrial(trial_id="t1", name="explode-x-L2-s7", max_failures=max_failures,
                     run_metadata=SimpleNamespace(num_failures=0))


def _fail(cb: FailFast, trial: FakeTrial, sig: str | None) -> bool:
    """One failed attempt as Tune runs it: the attempt's report (if any), then the failure; True: retried."""
    if sig is not None:
        cb.on_trial_result(0, [], trial, {ATTEMPT_ERROR: sig})
    trial.run_metadata.num_failures += 1
    retried = trial.run_metadata.num_failures <= trial.max_failures or trial.max_failures < 0  # should_recover
    if retried:
        cb.on_trial_recover(0, [], trial)
    else:
        cb.on_trial_error(0, [], trial)
    return retried


def test_the_same_error_twice_is_not_retried_again(capsys):
    cb, trial = FailFast("[x] "), _trial()
    assert _fail(cb, trial, "ValueError: boom")
    assert not _fail(cb, trial, "ValueError: boom")
    err = capsys.readouterr().err.splitlines()
    assert err == ["[x] trial explode-x-L2-s7 failed twice with the same error, not retrying it "
                   "(--retry-deterministic would): ValueError: boom"]


@pytest.mark.parametrize("max_failures", [-1, 5])
def test_retry_forever_or_many_still_stops_at_two(max_failures):
    cb, trial = FailFast(), _trial(max_failures)
    assert _fail(cb, trial, "E: x") and not _fail(cb, trial, "E: x")


def test_other_errors_and_unreported_failures_are_retried():
    cb, trial = FailFast(), _trial(max_failures=-1)
    assert _fail(cb, trial, "ValueError: a")
    assert _fail(cb, trial, "ValueError: b")  # another message
    assert _fail(cb, trial, None)  # a killed worker: no report
    assert _fail(cb, trial, "ValueError: b")  # its previous attempt was the kill
    assert not _fail(cb, trial, "ValueError: b")


def test_retry_deterministic_retries_as_before():
    cb, trial = FailFast(enabled=False), _trial(max_failures=3)
    assert [_fail(cb, trial, "E: x") for _ in range(4)] == [True, True, True, False]


def test_pickles_without_its_state():
    import pickle

    cb = FailFast("[x] ", enabled=False)
    cb.last["t1"] = "E: x"
    copy = pickle.loads(pickle.dumps(cb))
    assert (copy.prefix, copy.enabled, copy.last) == ("[x] ", False, {})


def test_signature_is_type_and_first_line():
    assert signature(ValueError("boom\nmore")) == "ValueError: boom"
    assert signature(KeyError()) == "KeyError"


def test_exit_status_is_1_when_a_run_errored():
    assert exit_status(pd.DataFrame({"status": ["completed", "error"]})) == 1
    assert exit_status(pd.DataFrame({"status": ["completed", "diverged"]})) == 0
    assert exit_status(pd.DataFrame({"trial": [1]})) == 0  # a dry run's plan


@pytest.mark.ray
def test_a_raising_condition_is_tried_twice_the_rest_finishes_and_the_sweep_exits_1(tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "sweep.interventions", "--preset", "smoke", "--conditions", "none,explode",
           "--plugin", "tests.plugin_explode", "--num-cpus", "2", "--store", str(tmp_path / "store"),
           "--storage", str(tmp_path / "ray"), "--name", "ff"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    errors = list((tmp_path / "ray" / "ff").glob("*/error.txt"))
    assert len(errors) == 1, errors
    attempts = errors[0].read_text().count("Failure #")
    assert attempts == 2, errors[0].read_text()[:2000]
    lines = [ln for ln in done.stderr.splitlines() if "failed twice with the same error" in ln]
    assert len(lines) == 1 and "explode" in lines[0] and "ValueError: explode: after_step always fails" in lines[0]
    assert "status: completed 1, error 1" in done.stdout or "status: error 1, completed 1" in done.stdout
    from sweep.store import Store

    epochs = Store(str(tmp_path / "store")).read("epochs")
    last = epochs.groupby("condition")["status"].last().to_dict()
    assert last == {"none": "completed", "explode": "running"}, last  # explode: its epoch-0 probe only


def test_seeds_auto_exits_1_when_a_round_lost_a_run() -> None:
    """``--seeds auto`` returns its claims, not a run summary: a round that lost a run marks them."""
    import pandas as pd

    from sweep.driver.summary import exit_status

    claims = pd.DataFrame({"condition": ["freeze_k"], "outcome": ["as predicted"]})
    assert exit_status(claims) == 0
    claims.attrs["errored"] = True
    assert exit_status(claims) == 1
    assert exit_status(pd.DataFrame({"status": ["completed", "error"]})) == 1
