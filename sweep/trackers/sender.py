"""``Sender``: store rows → tracker runs, for the live path and ``export`` alike, never failing a sweep.

Every call into a tracker goes through ``Sender._call``: the first exception (an unreachable
server, a full disk, a bug) prints one line naming the tracker and the error, and that tracker is
left out for the rest of the sweep; the others, the trials and the store go on.

Sending is idempotent: before a run is opened the tracker says which epochs it holds and how the
run ended (``Tracker.find``), and only what is missing is sent. A sweep that is resumed, or a
store exported twice, adds no run and no point twice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from sweep.trackers.base import (
    RunInfo,
    Tracker,
    TrackerRun,
    epoch_metrics,
    epoch_time,
    final_status,
)

T = TypeVar("T")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Sender:
    """Runs of a store sent to some trackers (``start`` first; ``stop`` at the end)."""

    def __init__(self, trackers: Iterable[Tracker], prefix: str = "",
                 say: Callable[[str], None] | None = None) -> None:
        self.trackers = list(trackers)
        self.prefix = prefix  # e.g. "[baseline-quick] "
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.dead: dict[str, str] = {}  # tracker name -> the error that stopped it
        self.open: dict[tuple[str, str], TrackerRun] = {}  # (tracker, run id) -> open run
        self.done: dict[tuple[str, str], str] = {}  # (tracker, run id) -> the end it holds
        self.sent: dict[str, int] = {}  # tracker name -> runs it received something for
        self.announced: set[str] = set()  # trackers whose trouble was said already: their failure is silent

    # --- guarded calls ---------------------------------------------------------------------------
    def _call(self, tracker: Tracker, fn: Callable[..., T], *args: Any) -> T | None:
        if tracker.name in self.dead:
            return None
        try:
            return fn(*args)
        except Exception as exc:  # any failure of a tracker costs one line, never the sweep
            self.dead[tracker.name] = _first_line(exc)
            self.open = {k: v for k, v in self.open.items() if k[0] != tracker.name}
            if tracker.name not in self.announced:
                self.say(f"{self.prefix}tracker {tracker.name} failed, not logging to it from now on (the runs "
                         f"and the store go on): {_first_line(exc)}")
            return None

    @property
    def live(self) -> list[Tracker]:
        return [t for t in self.trackers if t.name not in self.dead]

    def start(self) -> None:
        for tracker in self.trackers:
            self._call(tracker, tracker.start)

    def stop(self) -> None:
        """Close runs left open (no end recorded: a rerun continues them), then each tracker."""
        for (name, _), run in list(self.open.items()):
            tracker = next(t for t in self.trackers if t.name == name)
            self._call(tracker, run.close)
        self.open.clear()
        for tracker in self.trackers:
            try:
                tracker.stop()
            except Exception as exc:  # as _call, but a stopped tracker stops anyway
                self.say(f"{self.prefix}tracker {tracker.name}: stopping it failed: {_first_line(exc)}")

    def finished(self, run_id: str) -> bool:
        """Whether every live tracker holds ``run_id``'s end."""
        return all((t.name, run_id) in self.done for t in self.live)

    # --- sending -----------------------------------------------------------------------------------
    def send(self, info: RunInfo, epochs: Iterable[Mapping[str, Any]], layers: Iterable[Mapping[str, Any]],
             ended: bool = False) -> None:
        """Send one run's rows (``epochs`` and ``layers`` rows of some of its epochs, in any order) to
        every live tracker: the epochs it lacks, then its end once the last row (or ``ended``: its trial
        is over) gives one."""
        by_epoch = {int(r["epoch"]): r for r in epochs}
        layer_rows: dict[int, list[Mapping[str, Any]]] = {}
        for row in layers:
            layer_rows.setdefault(int(row["epoch"]), []).append(row)
        last = by_epoch[max(by_epoch)]["status"] if by_epoch else None
        status = final_status(last, ended)
        for tracker in self.live:
            key = (tracker.name, info.run_id)
            if key in self.done and (status is None or self.done[key] == status):
                continue
            run = self.open.get(key)
            if run is None:
                found = self._call(tracker, tracker.find, info)
                if found is None:
                    continue
                todo = [e for e in by_epoch if e not in found.epochs]
                if not todo and (status is None or found.status == status):
                    if status is not None:
                        self.done[key] = status
                    continue
                run = self._call(tracker, tracker.open, info, found)
                if run is None:
                    continue
                self.open[key] = run
                self.sent[tracker.name] = self.sent.get(tracker.name, 0) + 1
            for epoch in sorted(e for e in by_epoch if e not in run.logged):
                metrics = epoch_metrics(by_epoch[epoch], layer_rows.get(epoch, ()))
                when = epoch_time(by_epoch[epoch])
                if self._call(tracker, run.log, epoch, metrics, when) is None and tracker.name in self.dead:
                    break
                run.logged.add(epoch)
            if status is not None and tracker.name not in self.dead:
                self._call(tracker, run.finish, status)
                self.open.pop(key, None)
                self.done[key] = status
