"""Fail fast: a trial whose attempt fails with the same error as its previous attempt is not retried.

Tune retries every failed trial (``FailureConfig(max_failures)``) as if a node had been lost. An
error in the code (a plugin that raises, a shape that does not fit) fails the same way every time:
each retry is a full trial start, for nothing. So:

* the trainable (``sweep.trial.trainable``), when its attempt raises, first reports the error's signature
  (``signature``: type and first line) to Tune as ``{ATTEMPT_ERROR: ...}``, then raises;
* ``FailFast`` (a Tune callback on the driver) remembers each trial's last signature; when an
  attempt reports the same one as the attempt before it, it lowers that trial's ``max_failures``
  to the failures so far, so Tune ends the trial as errored instead of retrying it, and prints
  one line naming the trial and the error.

What fails without a report (a killed worker, a lost node) resets the comparison, and an
unloadable checkpoint (``CheckpointError``) reports nothing: those are retried as before.
``--retry-deterministic`` turns the callback off (every failure retried up to ``--max-failures``).
"""

from __future__ import annotations

import sys
from typing import Any

from ray import tune

#: The result key a failing attempt reports its error's signature under.
ATTEMPT_ERROR = "attempt_error"


def signature(exc: BaseException) -> str:
    """``ValueError: boom``: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class FailFast(tune.Callback):
    """Stops retrying a trial whose last two attempts failed with the same error (module docstring)."""

    def __init__(self, prefix: str = "", enabled: bool = True) -> None:
        self.prefix, self.enabled = prefix, enabled
        self.pending: dict[str, str] = {}  # trial id -> the signature its current attempt reported
        self.last: dict[str, str | None] = {}  # trial id -> the signature of its previous failed attempt
        self.stopped: dict[str, str] = {}  # trial name -> the error it was not retried for

    def __reduce__(self):  # pickled into the experiment state without the per-attempt state
        return (FailFast, (self.prefix, self.enabled))

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        sig = result.get(ATTEMPT_ERROR)
        if not isinstance(sig, str):
            return
        self.pending[trial.trial_id] = sig
        if not self.enabled or trial.max_failures == 0 or self.last.get(trial.trial_id) != sig:
            return
        # Tune retries while num_failures <= max_failures; this failure makes num_failures one more
        trial.max_failures = trial.run_metadata.num_failures
        self.stopped[str(trial)] = sig
        print(f"{self.prefix}trial {trial} failed twice with the same error, not retrying it "
              f"(--retry-deterministic would): {sig}", file=sys.stderr, flush=True)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # the failure just handled: what its attempt reported (None: killed, lost, no report)
        self.last[trial.trial_id] = self.pending.pop(trial.trial_id, None)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.pending.pop(trial.trial_id, None)


def report_attempt_error(exc: BaseException) -> None:
    """In a trainable, before re-raising ``exc``: tell the driver's ``FailFast`` what failed (never raises)."""
    try:
        tune.report({ATTEMPT_ERROR: signature(exc)})
    except Exception:  # noqa: BLE001 - the original error is the one to raise
        pass
