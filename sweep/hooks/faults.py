"""Fault injection for the crash tests: not an option of any sweep (SPEC §5.1, recovery).

``--fail-after-epoch K`` (hidden from ``--help``) makes every trial of a sweep SIGKILL its own
worker once, after epoch K's rows are written and before that epoch's checkpoint is reported, so
that Tune's retry replays epoch K from the previous checkpoint. A marker file per trial under
``--failure-marker-dir`` (default ``runs/markers/<experiment>``, a local folder even when the
storage is remote) makes it happen once. It travels beside the run spec as the ``fault`` trial hook
(``sweep.hooks.config``: the Tune config's ``hooks``), and only when asked for.
"""

from __future__ import annotations

import argparse
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sweep.hooks.base import TrialHook

FAILURE_MARKER = ".injected_failure_done"


@dataclass(frozen=True)
class FaultInjection(TrialHook):
    """Kill each trial's worker once, after epoch ``after_epoch``'s rows: the ``fault`` trial hook
    (``sweep.hooks.base``)."""

    after_epoch: int
    marker_dir: str  # where each trial remembers that its one failure happened

    def to_config(self) -> dict[str, Any]:
        return asdict(self)

    def before_report(self, epoch: int) -> dict[str, Any]:
        from ray import tune

        self.maybe_fail(epoch, tune.get_context().get_trial_id())
        return {}

    def maybe_fail(self, epoch: int, trial_id: str) -> None:
        """SIGKILL this process the first time a trial reaches ``after_epoch``."""
        if epoch != self.after_epoch:
            return
        marker = Path(self.marker_dir) / f"{trial_id}{FAILURE_MARKER}"
        if marker.exists():
            return
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)


def fault_from_args(args: argparse.Namespace, experiment: str) -> FaultInjection | None:
    if args.fail_after_epoch is None:
        return None
    marker_dir = args.failure_marker_dir or str(Path("runs/markers").resolve() / experiment)
    return FaultInjection(args.fail_after_epoch, marker_dir)


def fault_from_config(config: dict[str, Any]) -> FaultInjection | None:
    """The trial's fault injection: the ``fault`` key, or a version 1 config's options."""
    if config.get("fault"):
        return FaultInjection(**config["fault"])
    old = config.get("options", {})
    if old.get("fail_after_epoch") is not None:
        return FaultInjection(old["fail_after_epoch"], old["failure_marker_dir"])
    return None
