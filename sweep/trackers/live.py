"""The live path: while a sweep runs, each trial's newly stored rows go to the trackers.

The store is the one source of values. A trial writes each epoch's rows before it reports the
epoch to Tune (a pack: every member's rows first), so when the driver hears of epoch e, the rows
of epochs ≤ e of each of the trial's runs are in the store. ``StoreFollower`` (a Tune callback on
the driver) then reads those it has not sent yet, only their own files, and hands them to the
``Sender`` — the same rows and code ``export`` sends, so the live tracker runs and the exported
ones are the same. When a trial ends (completed, or failed for good) its runs are closed with
their status; ``Follower.finish`` then sends whatever a callback missed (trials finished before a
resume, a read that failed), so at the end every run of the sweep is complete in each tracker.

Tune pickles its callbacks into the experiment state. ``StoreFollower`` pickles without its state
and finds the follower of the sweep running in this process (``following``), so a resumed sweep
logs to the trackers of the command that resumed it, and a sweep without ``--tracker`` sends nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ray import tune

from sweep.spec import RunIdentity, runs_of
from sweep.store import Store
from sweep.trackers.base import RunInfo
from sweep.trackers.sender import Sender, _first_line

_FOLLOWING: list[Follower] = []  # the sweep running in this process (``following``), if any


class Follower:
    """Sends a sweep's stored rows to its trackers as trials report (no Ray here)."""

    def __init__(self, store: Store, sender: Sender) -> None:
        self.store, self.sender = store, sender
        self.infos: dict[str, RunInfo] = {}
        self.read_to: dict[str, int] = {}  # run id -> last epoch read from the store
        self.failed_reads = 0

    def _info(self, run: RunIdentity) -> RunInfo:
        if run.run_id not in self.infos:
            rows = self.store.scan("runs", run_id=run.run_id).table.to_pylist()
            row = rows[-1] if rows else {**run.row(), "experiment": None}
            self.infos[run.run_id] = RunInfo.of(row)
        return self.infos[run.run_id]

    def _send(self, run: RunIdentity, upto: int | None, ended: bool) -> None:
        """Read ``run``'s rows after the last read, up to ``upto`` (None: all there are), and send them."""
        start = self.read_to.get(run.run_id, -1) + 1
        if upto is None:
            epochs = [r for r in self.store.scan("epochs", run_id=run.run_id).table.to_pylist() if r["epoch"] >= start]
            wanted = sorted(int(r["epoch"]) for r in epochs)
            layers = self.store.epoch_rows("layers", run.run_id, wanted)
        else:
            wanted = list(range(start, upto + 1))
            epochs = self.store.epoch_rows("epochs", run.run_id, wanted)
            layers = self.store.epoch_rows("layers", run.run_id, wanted)
        self.sender.send(self._info(run), epochs, layers, ended=ended)
        if epochs:
            self.read_to[run.run_id] = max(int(r["epoch"]) for r in epochs)

    def _each(self, config: Mapping[str, Any], upto: int | None, ended: bool) -> None:
        if not self.sender.live:
            return
        for run in runs_of(config):
            if self.sender.finished(run.run_id):
                continue
            try:
                self._send(run, upto, ended)
            except Exception as exc:  # a failed read is retried at the end (``finish``)
                self.failed_reads += 1
                if self.failed_reads == 1:
                    self.sender.say(f"{self.sender.prefix}trackers: reading {run.run_id}'s rows from the store "
                                    f"failed ({_first_line(exc)}); sent at the end of the sweep instead")

    def result(self, config: Mapping[str, Any], epoch: Any) -> None:
        """A trial reported ``epoch``: its runs' rows up to it are in the store."""
        if isinstance(epoch, int):
            self._each(config, epoch, ended=False)

    def ended(self, config: Mapping[str, Any]) -> None:
        """A trial is over (completed, or failed for good): send the rest and each run's end."""
        self._each(config, None, ended=True)

    def finish(self, configs: Iterable[Mapping[str, Any]]) -> None:
        """At the end of the sweep: every run of its trials complete in each tracker, with its end."""
        self.read_to.clear()  # re-read from the start what a callback missed: the sender skips what is there
        for config in configs:
            self._each(config, None, ended=True)


@contextmanager
def following(follower: Follower | None) -> Iterator[None]:
    """Make ``follower`` the one ``StoreFollower`` callbacks use while inside (None: they do nothing)."""
    if follower is None:
        yield
        return
    _FOLLOWING.append(follower)
    try:
        yield
    finally:
        _FOLLOWING.remove(follower)


class StoreFollower(tune.Callback):
    """Tune callback on the driver: each trial result, completion or final error goes to the follower of
    the sweep running in this process (none: nothing happens). Never raises into Tune."""

    def __reduce__(self):  # pickled into the experiment state without any state
        return (StoreFollower, ())

    def _call(self, method: str, *args: Any) -> None:
        if not _FOLLOWING:
            return
        try:
            getattr(_FOLLOWING[-1], method)(*args)
        except Exception as exc:  # logging must never stop the sweep
            print(f"trackers: {_first_line(exc)}", file=sys.stderr, flush=True)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self._call("result", trial.config, result.get("epoch"))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._call("ended", trial.config)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._call("ended", trial.config)
