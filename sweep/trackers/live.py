"""The live path: while a sweep runs, each trial's newly stored rows go to the trackers.

The store is the one source of values. A trial writes each epoch's rows before it reports the
epoch to Tune (a pack: every member's rows first), so when the driver hears of epoch e, the rows
of epochs ≤ e of each of the trial's runs are in the store. ``StoreFollower`` (a Tune callback on
the driver) then reads those it has not sent yet, only their own files, and hands them to the
``Sender`` — the same rows and code ``export`` sends, so the live tracker runs and the exported
ones are the same. When a trial ends (completed, or failed for good) its runs are closed with
their status; ``Follower.finish`` then sends whatever a callback missed (trials finished before a
resume, a read that failed), so at the end every run of the sweep is complete in each tracker.

Off the sweep's critical path: each tracker has its own ``Channel``, a daemon thread with a queue.
The callback only queues (the store reads and the tracker calls run on the thread), so a slow or
hung server delays no trial and no other tracker. ``Live.started`` waits at most
``START_WAIT_S`` for the trackers to be reached (a remote one not reached by then costs one
line, and the sweep starts); ``Live.finish`` waits for what is queued while each channel makes
progress, and gives up on one whose call has hung ``STALL_S`` (at once on one that has not answered
since the start): the closing summary names it with
the ``python -m sweep.store export`` command that sends what it missed.

Tune pickles its callbacks into the experiment state. ``StoreFollower`` pickles without its state
and finds the follower of the sweep running in this process (``following``), so a resumed sweep
logs to the trackers of the command that resumed it, and a sweep without ``--tracker`` sends nothing.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ray import tune

from sweep.store import Store
from sweep.trackers.base import RunInfo, Tracker
from sweep.trackers.sender import Sender, _first_line
from sweep.trial.spec import RunIdentity, runs_of

_FOLLOWING: list[Live] = []  # the sweep running in this process (``following``), if any
#: How long the sweep waits for its trackers to be reached before its first trial.
START_WAIT_S = 3.0
#: At the end, a channel whose current call has run this long is given up (the export command sends the rest).
STALL_S = 10.0


class Follower:
    """Sends a sweep's stored rows to its trackers as trials report (no Ray here)."""

    def __init__(self, store: Store, sender: Sender, store_id: str) -> None:
        self.store, self.sender, self.store_id = store, sender, store_id
        self.infos: dict[str, RunInfo] = {}
        self.read_to: dict[str, int] = {}  # run id -> last epoch read from the store
        self.failed_reads = 0

    def _info(self, run: RunIdentity) -> RunInfo:
        if run.run_id not in self.infos:
            rows = self.store.scan("runs", run_id=run.run_id).table.to_pylist()
            row = rows[-1] if rows else {**run.row(), "experiment": None}
            self.infos[run.run_id] = RunInfo.of(row, self.store_id)
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


class Channel:
    """One tracker's ``Sender`` and ``Follower``, driven by a daemon thread through a queue."""

    def __init__(self, store: Store, tracker: Tracker, store_id: str, prefix: str,
                 say: Callable[[str], None] | None = None) -> None:
        self.tracker = tracker
        self.sender = Sender([tracker], prefix=prefix, say=say)
        self.follower = Follower(store, self.sender, store_id)
        self.jobs: queue.Queue = queue.Queue()
        self.busy_since: float | None = None  # monotonic start of the call running now
        self.stalled = False  # given up at the end (``Live.finish``)
        self.reached = threading.Event()  # the tracker's start returned (reached, or failed)
        self.thread = threading.Thread(target=self._loop, name=f"tracker-{tracker.name}", daemon=True)
        self.thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if not self.stalled:
            self.jobs.put((fn, args))

    def _loop(self) -> None:
        while True:
            fn, args = self.jobs.get()
            self.busy_since = time.monotonic()
            try:
                fn(*args)
            except Exception as exc:  # the Sender catches the tracker's errors; this is the rest
                self.sender.say(f"{self.sender.prefix}trackers: {self.tracker.name}: {_first_line(exc)}")
            finally:
                self.busy_since = None
                self.jobs.task_done()

    def wait(self, timeout: float | None = None, stall_s: float | None = None) -> bool:
        """Wait until every queued job is done: True; False at ``timeout``, or once the job running
        has run ``stall_s``."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.jobs.unfinished_tasks:
            now = time.monotonic()
            if end is not None and now >= end:
                return False
            busy = self.busy_since
            if stall_s is not None and busy is not None and now - busy >= stall_s:
                return False
            time.sleep(0.02)
        return True


class Live:
    """A sweep's trackers, live: one ``Channel`` each; what ``StoreFollower`` calls (no Ray here)."""

    def __init__(self, store: Store, trackers: Iterable[Tracker], store_id: str, prefix: str = "",
                 say: Callable[[str], None] | None = None) -> None:
        self.prefix = prefix
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.channels = [Channel(store, t, store_id, prefix, self.say) for t in trackers]
        self.finishing = False  # ``finish`` or ``close`` ran: the trackers are being closed
        for c in self.channels:
            c.submit(self._start, c)

    @staticmethod
    def _start(c: Channel) -> None:
        try:
            c.sender.start()
        finally:
            c.reached.set()

    def started(self, wait_s: float = START_WAIT_S) -> None:
        """Give the trackers up to ``wait_s`` (together) to be reached; a remote one not reached yet
        costs one line (and no later one: the closing summary names it if it never answers)."""
        end = time.monotonic() + wait_s
        for c in self.channels:
            if c.wait(max(0.0, end - time.monotonic())) or not c.tracker.remote():
                continue
            c.sender.announced.add(c.tracker.name)
            self.say(f"{self.prefix}tracker {c.tracker.name}: no answer from {c.tracker.where()} within "
                     f"{wait_s:g} s; the sweep starts without it (its runs follow if it answers; else the "
                     "closing summary says how to send them)")

    def result(self, config: Mapping[str, Any], epoch: Any) -> None:
        for c in self.channels:
            c.submit(c.follower.result, config, epoch)

    def ended(self, config: Mapping[str, Any]) -> None:
        for c in self.channels:
            c.submit(c.follower.ended, config)

    def finish(self, configs: Iterable[Mapping[str, Any]], stall_s: float = STALL_S) -> None:
        """Send what is missing, close the trackers, and wait while each makes progress."""
        configs = list(configs)
        self.finishing = True
        for c in self.channels:
            c.submit(c.follower.finish, configs)
            c.submit(c.sender.stop)
        for c in self.channels:
            if c.tracker.name in c.sender.announced and not c.reached.is_set():
                c.stalled = True  # no answer since the start, a whole sweep ago: not waited for again
            elif not c.wait(stall_s=stall_s):
                c.stalled = True

    def close(self, stall_s: float = 5.0) -> None:
        """On the way out of a sweep that did not reach ``finish`` (an error, an interrupt): close the
        trackers (W&B's service process), waiting at most ``stall_s`` on each."""
        if self.finishing:
            return
        self.finishing = True
        for c in self.channels:
            if c.reached.is_set():
                c.submit(c.sender.stop)
                c.wait(timeout=stall_s)

    def failed(self) -> dict[str, str]:
        """Tracker name -> why it missed runs (an error, or no answer)."""
        out = {}
        for c in self.channels:
            name = c.tracker.name
            if name in c.sender.dead:
                out[name] = c.sender.dead[name]
            elif c.stalled:
                out[name] = f"no answer from {c.tracker.where()}"
        return out

    @property
    def trackers(self) -> list[Tracker]:
        return [c.tracker for c in self.channels]


@contextmanager
def following(follower: Live | None) -> Iterator[None]:
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
