"""sweep/hooks/config.py: the trial hooks a test or benchmark names in the Tune config (a trial that uses
them end to end: test_sweep_driver_runner.py's crash, placement and node-loss tests)."""

from __future__ import annotations

import argparse

import pytest

from sweep.cli import UsageError
from sweep.hooks.base import HOOKS, Placement, StartClock, TrialHook
from sweep.hooks.config import add_fault_flags, hooks_from_args, hooks_of
from sweep.hooks.faults import FaultInjection, fault_from_args


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_fault_flags(p)
    return p.parse_args(argv)


def test_no_hook_unless_named():
    assert hooks_of({"spec": {}}) == []
    assert hooks_from_args(_args([])) == {}


def test_flags_to_settings_to_hooks():
    args = _args(["--trial-hook", "placement", "--trial-hook", "start_clock", "--fail-after-epoch", "2",
                  "--failure-marker-dir", "/tmp/m"])
    settings = hooks_from_args(args, fault_from_args(args, "exp"))
    assert settings == {"placement": {}, "start_clock": {}, "fault": {"after_epoch": 2, "marker_dir": "/tmp/m"}}
    hooks = hooks_of({"spec": {}, "hooks": settings})
    assert [type(h) for h in hooks] == [Placement, StartClock, FaultInjection]
    assert hooks[-1] == FaultInjection(2, "/tmp/m")


def test_an_experiment_started_before_hooks_keeps_its_fault():
    """Its Tune config carries the fault under ``fault`` (or a version 1 config's options)."""
    assert hooks_of({"spec": {}, "fault": {"after_epoch": 1, "marker_dir": "d"}}) == [FaultInjection(1, "d")]
    assert hooks_of({"options": {"fail_after_epoch": 3, "failure_marker_dir": "e"}}) == [FaultInjection(3, "e")]


def test_an_unknown_hook_is_refused_naming_the_valid_ones():
    with pytest.raises(UsageError, match="--trial-hook nope: unknown; valid: placement, start_clock"):
        hooks_from_args(_args(["--trial-hook", "nope"]))


def test_start_clock_marks_epoch_zero_only():
    clock = StartClock()
    clock.built()
    first = clock.before_report(0)["start"]
    assert list(first) == ["process", "trainable", "built", "epoch0"]
    assert first["process"] <= first["trainable"] <= first["built"] <= first["epoch0"]
    assert clock.before_report(1) == {}


def test_a_fault_fires_once_per_trial_at_its_epoch(tmp_path, monkeypatch):
    killed = []
    monkeypatch.setattr("sweep.hooks.faults.os.kill", lambda pid, sig: killed.append(sig))
    fault = FaultInjection(2, str(tmp_path))
    for epoch in (1, 2, 2, 3):
        fault.maybe_fail(epoch, "trial_a")
    assert len(killed) == 1 and isinstance(fault, TrialHook) and "fault" not in HOOKS
