"""The sweep's progress on the console: by default one line per report (trials by status,
elapsed and remaining time); ``--progress-tables`` brings back Tune's full status table above it;
Tune's warning about trials that never started (no result file to read) is kept off it
(``quiet_never_started``).

The estimate counts epochs: every trial of a sweep has the same schedule, so
``done / total`` epochs over the elapsed time gives the rate. Epoch 0 (the
probe at initialisation) costs almost nothing and is not counted.
"""

from __future__ import annotations

import logging
import time

from ray import tune

#: Where Tune warns about trials whose metrics it cannot read (``ExperimentAnalysis``).
ANALYSIS_LOGGER = "ray.tune.analysis.experiment_analysis"


def format_duration(seconds: float) -> str:
    """``75`` → ``1 min 15 s``; ``3725`` → ``1 h 02 min``."""
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h} h {m:02d} min"
    return f"{m} min {s:02d} s" if m else f"{s} s"


def eta_line(epochs_done: int, epochs_total: int, elapsed: float, epochs_at_start: int = 0) -> str:
    """``elapsed 2 min 10 s · 120/720 epochs · about 10 min 50 s left``.

    The rate counts only epochs trained since ``elapsed`` began (a resumed
    sweep starts with ``epochs_at_start`` already done); no estimate before one.
    """
    head = f"elapsed {format_duration(elapsed)} · {epochs_done}/{epochs_total} epochs"
    new = epochs_done - epochs_at_start
    if new <= 0 or elapsed <= 0:
        return f"{head} · remaining time: after the first epoch"
    left = elapsed * (epochs_total - epochs_done) / new
    return f"{head} · about {format_duration(left)} left"


def status_counts(statuses: list[str]) -> str:
    """``2 running · 5 done · 11 pending`` (Tune's statuses, in that order; zero counts left out)."""
    names = {"RUNNING": "running", "TERMINATED": "done", "PENDING": "pending", "PAUSED": "paused",
             "ERROR": "failed"}
    counts = {label: sum(s == status for s in statuses) for status, label in names.items()}
    other = len(statuses) - sum(counts.values())
    if other:
        counts["other"] = other
    return " · ".join(f"{n} {label}" for label, n in counts.items() if n)


def progress_line(statuses: list[str], eta: str) -> str:
    """``trials 2 running · 5 done · 11 pending of 18 · elapsed … · 40/360 epochs · about 3 min left``."""
    return f"trials {status_counts(statuses)} of {len(statuses)} · {eta}"


class EtaReporter(tune.CLIReporter):
    """A ``CLIReporter`` that prints :func:`progress_line` per report: one line by default,
    below Tune's status table with ``tables=True`` (``--progress-tables``)."""

    def __init__(self, *args, epochs_per_trial: int, n_trials: int, tables: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._tables = tables
        self._epochs_total = epochs_per_trial * n_trials
        self._epochs_per_trial = epochs_per_trial
        self._t0 = time.monotonic()
        self._at_start: int | None = None

    def report(self, trials, done: bool, *sys_info: str) -> None:
        if self._tables:
            super().report(trials, done, *sys_info)
        finished = ("TERMINATED",)
        epochs = sum(self._epochs_per_trial if t.status in finished
                     else int((t.last_result or {}).get("epoch") or 0) for t in trials)
        epochs = min(epochs, self._epochs_total)
        if self._at_start is None:
            self._at_start = epochs
        eta = eta_line(epochs, self._epochs_total, time.monotonic() - self._t0, self._at_start)
        self._print(eta if self._tables else progress_line([t.status for t in trials], eta))


class NeverStartedFilter(logging.Filter):
    """Tune's "Failed to fetch metrics for N trial(s)" warning, less the trials that have no result
    file at all (``FileNotFoundError('Could not fetch metrics for …')``: trials that never started,
    e.g. those a stopped or resumed experiment never ran); dropped when no other failure is left.
    Every other failure, and every other message, passes unchanged."""

    HEAD = "Failed to fetch metrics for "

    @staticmethod
    def never_started(line: str) -> bool:
        return "FileNotFoundError(" in line and "Could not fetch metrics for " in line

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.HEAD):
            return True
        failures = message.split("\n")[1:]
        kept = [line for line in failures if not self.never_started(line)]
        if not kept:
            return False
        if len(kept) < len(failures):
            record.msg, record.args = f"{self.HEAD}{len(kept)} trial(s):\n" + "\n".join(kept), ()
        return True


def quiet_never_started() -> None:
    """Install ``NeverStartedFilter`` on Tune's analysis logger (once)."""
    logger = logging.getLogger(ANALYSIS_LOGGER)
    if not any(isinstance(f, NeverStartedFilter) for f in logger.filters):
        logger.addFilter(NeverStartedFilter())
