"""``validate``: duplicates, gaps, NaNs, unreadable files, failed checkpoint revisions and pending
compactions of a store."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from sweep.store.parquet import (
    Store,
)
from sweep.store.schema import EPOCH_METRICS, KEYS, LAYER_GRAD_METRICS, LAYER_METRICS, TABLES

#: Float columns that may be NaN at epoch 0 (no training step yet; the trainer leaves
#: ``tokens_per_s`` null there too, as no epoch was timed).
NAN_AT_EPOCH0 = frozenset(LAYER_GRAD_METRICS) | {"train_loss", "grad_norm", "tokens_per_s"}
NEVER_NAN = {"layers": LAYER_METRICS + LAYER_GRAD_METRICS, "epochs": EPOCH_METRICS}


@dataclass
class ValidationReport:
    """Problems found in a store; ``ok`` when there are none (``pending`` is informational)."""

    root: str
    rows: dict[str, int] = field(default_factory=dict)
    duplicates: list[tuple[str, tuple, int]] = field(default_factory=list)  # (table, key, copies)
    gaps: list[tuple[str, str, int | None, list[int]]] = field(default_factory=list)  # (table, run, epoch|None, missing)
    nans: list[tuple[str, str, int]] = field(default_factory=list)  # (table, column, count)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, error)
    pending: list[tuple[str, int]] = field(default_factory=list)  # (directory, compacted rows shadowed)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (series, revision, reason) of checkpoints

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.gaps or self.nans or self.unreadable or self.failed)

    def __str__(self) -> str:
        counts = ", ".join(f"{t} {n}" for t, n in self.rows.items())
        problems = len(self.duplicates) + len(self.gaps) + len(self.nans) + len(self.unreadable) + len(self.failed)
        lines = [f"store {self.root}: {'OK' if self.ok else f'{problems} problem(s)'} (rows: {counts})"]
        lines += [f"  duplicate {t} {KEYS[t]}={k}: {n} copies" for t, k, n in self.duplicates]
        for t, run, epoch, missing in self.gaps:
            what = f"missing epochs {missing}" if epoch is None else f"epoch {epoch} missing layers {missing}"
            lines.append(f"  gap in {t} run {run}: {what}")
        lines += [f"  NaN in {t}.{c}: {n} rows" for t, c, n in self.nans]
        lines += [f"  unreadable {p}: {e}" for p, e in self.unreadable]
        lines += [f"  failed checkpoint revision {s}@{r}: {reason} (rerun python -m sweep.extension to retry it)"
                  for s, r, reason in self.failed]
        lines += [f"  pending: {d} has {n} compacted rows shadowed by per-epoch files (rerun compact)"
                  for d, n in self.pending]
        return "\n".join(lines)


def validate(store: Store) -> ValidationReport:
    """Check every table for duplicate keys, epoch/layer gaps, forbidden NaNs and unreadable files,
    and the checkpoints table for revisions whose status is ``failed`` (a rerun retries them)."""
    report = ValidationReport(store.root)
    frames: dict[str, pd.DataFrame] = {}
    for table in TABLES:
        result = store.scan(table)
        frames[table] = df = result.frame
        report.rows[table] = len(df)
        report.unreadable += result.unreadable
        report.pending += sorted(result.shadowed.items())
        sizes = df.groupby(list(KEYS[table]), dropna=False).size()
        report.duplicates += [(table, k if isinstance(k, tuple) else (k,), int(n)) for k, n in sizes[sizes > 1].items()]
    for table in ("layers", "epochs"):
        report.gaps += _gaps(table, frames[table])
    report.failed = _failed_revisions(frames["checkpoints"])
    epochs = frames["epochs"]
    diverged = set(epochs.loc[epochs["status"] == "diverged", "run_id"])
    for table, columns in NEVER_NAN.items():
        df = frames[table]
        live = ~df["run_id"].isin(diverged)
        for col in columns:
            rows = live & (df["epoch"] > 0) if col in NAN_AT_EPOCH0 else live
            count = int(df.loc[rows, col].isna().sum())
            if count:
                report.nans.append((table, col, count))
    return report


def _failed_revisions(df: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(series, revision, first line of the reason) of each checkpoint revision with status ``failed``."""
    failed = df[df["status"] == "failed"].drop_duplicates(["series", "revision"]).sort_values(["series", "revision"])
    return [(str(s), str(r), _first_line(reason))
            for s, r, reason in zip(failed["series"], failed["revision"], failed["reason"], strict=True)]


def _first_line(reason: object, width: int = 200) -> str:
    text = str(reason).strip().splitlines() if isinstance(reason, str) and reason.strip() else ["no reason recorded"]
    return text[0] if len(text[0]) <= width else text[0][: width - 1] + "…"


def _gaps(table: str, df: pd.DataFrame) -> list[tuple[str, str, int | None, list[int]]]:
    """Missing epochs 0..max per run; for ``layers`` also missing layers 0..depth-1 per epoch."""
    gaps: list[tuple[str, str, int | None, list[int]]] = []
    for run, epochs in df.groupby("run_id")["epoch"]:
        missing = sorted(set(range(int(epochs.max()) + 1)) - set(epochs.astype(int)))
        if missing:
            gaps.append((table, str(run), None, missing))
    if table == "layers":
        for (run, epoch), group in df.groupby(["run_id", "epoch"]):
            missing = sorted(set(range(int(group["depth"].max()))) - set(group["layer"].astype(int)))
            if missing:
                gaps.append((table, str(run), int(epoch), missing))
    return gaps
