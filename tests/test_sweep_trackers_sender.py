"""sweep/trackers/sender.py with in-memory trackers: only what a tracker lacks is sent, an end once,
and a tracker that raises costs one line and is left out while the others go on."""

from __future__ import annotations

from pathlib import Path

from sweep.trackers.base import Logged, RunInfo, Tracker, TrackerRun
from sweep.trackers.sender import Sender


class MemoryRun(TrackerRun):
    def __init__(self, held: dict, logged: set[int]) -> None:
        self.held, self.logged = held, logged

    def log(self, epoch, metrics, when=None):
        assert epoch not in self.held["history"], f"epoch {epoch} sent twice"
        self.held["history"][epoch] = metrics
        self.held.setdefault("when", {})[epoch] = when

    def finish(self, status):
        self.held["status"] = status


class Memory(Tracker):
    name = "memory"
    package = "json"

    def __init__(self, folder: Path = Path("."), fail_on: str | None = None) -> None:
        super().__init__(folder)
        self.runs: dict[str, dict] = {}
        self.opened = 0
        self.fail_on = fail_on

    def start(self):
        if self.fail_on == "start":
            raise ConnectionError("refused\nsecond line")

    def find(self, run):
        held = self.runs.get(run.run_id)
        return Logged(set(held["history"]), held["status"]) if held else Logged()

    def open(self, run, found):
        self.opened += 1
        held = self.runs.setdefault(run.run_id, {"history": {}, "status": None, "params": run.params})
        if self.fail_on == "open":
            raise OSError("disk full")
        return MemoryRun(held, set(found.epochs))

    def where(self):
        return "memory"


class Other(Memory):
    name = "other"


def _rows(run_id: str, statuses: list[str]) -> tuple[list[dict], list[dict]]:
    epochs = [{"run_id": run_id, "epoch": e, "status": s, "val_loss": 1.0 / (e + 1), "tokens_seen": 10 * e,
               "train_loss": None if e == 0 else float("nan")} for e, s in enumerate(statuses)]
    layers = [{"run_id": run_id, "epoch": e, "layer": 0, "pr_q": float(e), "qk_alignment_head": [0.5, None]}
              for e in range(len(statuses))]
    return epochs, layers


INFO = RunInfo("r1", "exp", {"depth": 1})


def test_sends_only_what_is_missing_and_each_end_once():
    mem = Memory()
    sender = Sender([mem], say=lambda line: None)
    sender.start()
    epochs, layers = _rows("r1", ["running", "running", "completed"])
    sender.send(INFO, epochs[:2], layers[:2])  # live: epochs 0 and 1, no end yet
    assert sorted(mem.runs["r1"]["history"]) == [0, 1] and mem.runs["r1"]["status"] is None
    sender.send(INFO, epochs, layers)  # epoch 2 ends it
    assert sorted(mem.runs["r1"]["history"]) == [0, 1, 2] and mem.runs["r1"]["status"] == "completed"
    assert sender.finished("r1") and mem.opened == 1
    again = Sender([mem], say=lambda line: None)  # a second export: found complete, nothing opened
    again.send(INFO, epochs, layers, ended=True)
    assert mem.opened == 1 and again.sent == {}
    h = mem.runs["r1"]["history"]
    assert "train_loss" not in h[0] and h[1]["train_loss"] != h[1]["train_loss"]  # null left out, NaN kept
    # the metric first: one metric's layers share a key prefix (a section, a chart in W&B and MLflow)
    assert h[2]["pr_q/L0"] == 2.0 and h[2]["qk_alignment_head/L0/h0"] == 0.5 and "qk_alignment_head/L0/h1" not in h[2]
    # each epoch stamped with its row's time (none in these rows: a store before the column)
    assert mem.runs["r1"]["when"] == {0: None, 1: None, 2: None}


def test_each_epoch_is_stamped_with_its_row_time():
    from datetime import UTC, datetime

    mem = Memory()
    sender = Sender([mem], say=lambda line: None)
    epochs, layers = _rows("r1", ["running", "completed"])
    times = [datetime(2026, 1, 2, 3, 4, e, tzinfo=UTC) for e in range(2)]
    sender.send(INFO, [{**r, "time": t} for r, t in zip(epochs, times, strict=True)], layers)
    assert mem.runs["r1"]["when"] == {e: t.timestamp() for e, t in enumerate(times)}


def test_a_trial_that_ended_without_a_final_row_is_failed():
    mem = Memory()
    sender = Sender([mem], say=lambda line: None)
    epochs, layers = _rows("r1", ["running", "running"])
    sender.send(INFO, epochs, layers, ended=True)
    assert mem.runs["r1"]["status"] == "failed"


def test_a_failing_tracker_costs_one_line_and_the_others_go_on():
    lines: list[str] = []
    bad, good = Memory(fail_on="open"), Other()
    sender = Sender([bad, good], prefix="[s] ", say=lines.append)
    sender.start()
    for run_id in ("r1", "r2"):
        epochs, layers = _rows(run_id, ["running", "completed"])
        sender.send(RunInfo(run_id, "exp", {}), epochs, layers)
    assert lines == ["[s] tracker memory failed, not logging to it from now on (the runs and the store go on): "
                     "OSError: disk full"]
    assert bad.opened == 1 and set(good.runs) == {"r1", "r2"} and sender.dead == {"memory": "OSError: disk full"}
    down = Sender([Memory(fail_on="start")], say=lines.append)
    down.start()
    down.send(INFO, *_rows("r1", ["completed"]))
    assert lines[-1].endswith("ConnectionError: refused") and not down.live
    quiet = Sender([Memory(fail_on="start")], say=lines.append)
    quiet.announced.add("memory")  # its trouble was said already (no answer at the start): no second line
    quiet.start()
    assert len(lines) == 2 and quiet.dead == {"memory": "ConnectionError: refused"}
