"""How a checkpoint row was measured, and a store that must not mix two ways (SPEC §7, "Probe settings").

Every row of the ``checkpoints`` table carries the probe settings that shape its numbers
(``metrics.columns.CHECKPOINT_SETTINGS``): the probe sequences (``--n-seqs``), tokens per sequence
(``--seq-len``), the sha256 of the probe text (``--text``, or the embedded corpus) and the transformers
version that loaded and ran the model. Layer 0's pr_q of one checkpoint is 8.66 at 2×16 tokens and 13.68
at 4×32: rows measured under other settings are other quantities, and one series fitted across both
would show a trend that is the settings'.

``check_store`` therefore refuses, before anything starts, a run whose settings differ from those of
the measured rows (``ok`` or ``duplicate_of``) already in its store, in one line naming the stored
settings; failed rows hold no measurement and do not count, nor do revisions this run redoes
(``--force`` over a manifest that names them). Rows written before the settings were stored have
none: their settings are unknown. They refuse a run that would add measured rows to their series
(a fit would mix them); elsewhere they stay, with one warning line, and the report's Appendix A
names them apart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from metrics.columns import CHECKPOINT_SETTINGS

if TYPE_CHECKING:
    from sweep.extension.revision_probe import ProbeSettings
    from sweep.store import Store

#: Series named in the refusal, per set of settings.
NAMED_SERIES = 3


def transformers_version() -> str:
    """The installed transformers' version, read without importing it."""
    from importlib.metadata import version

    return version("transformers")


def text_sha256(text: str) -> str:
    """sha256 of the probe text's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ProbeRecord:
    """The settings a row was measured under (``CHECKPOINT_SETTINGS``, in order)."""

    n_seqs: int
    seq_len: int
    text_sha256: str
    transformers: str

    @classmethod
    def of(cls, settings: ProbeSettings, text: str) -> ProbeRecord:
        """This process's record of a probe with ``settings`` on ``text``."""
        return cls(settings.n_seqs, settings.seq_len, text_sha256(text), transformers_version())

    def columns(self) -> dict[str, Any]:
        """The row's ``CHECKPOINT_SETTINGS`` columns."""
        return dict(zip(CHECKPOINT_SETTINGS, (self.n_seqs, self.seq_len, self.text_sha256, self.transformers),
                        strict=True))

    def describe(self) -> str:
        """``--n-seqs 16 --seq-len 128, probe text sha256 1a2b3c4d5e6f…, transformers 5.25.0``."""
        return (f"--n-seqs {self.n_seqs} --seq-len {self.seq_len}, probe text sha256 {self.text_sha256[:12]}…, "
                f"transformers {self.transformers}")


def record_of(row: Any) -> ProbeRecord | None:
    """The record of a stored row (a mapping or a namedtuple-like); None when it has none (older stores)."""
    get = row.get if hasattr(row, "get") else lambda c: getattr(row, c, None)
    values = [get(c) for c in CHECKPOINT_SETTINGS]
    if any(v is None or v != v for v in values):  # null, or NaN as pandas reads a missing int
        return None
    return ProbeRecord(int(values[0]), int(values[1]), str(values[2]), str(values[3]))


def stored_records(store: Store) -> dict[tuple[str, str], ProbeRecord | None]:
    """{(series, revision): its record} over the store's measured rows (``ok`` and ``duplicate_of``);
    None for a revision whose rows have none."""
    from sweep.extension.integrity import DUPLICATE_PREFIX

    df = store.read("checkpoints", columns=["series", "revision", "status", *CHECKPOINT_SETTINGS])
    measured = df[(df["status"] == "ok") | df["status"].str.startswith(DUPLICATE_PREFIX)]
    return {(row.series, row.revision): record_of(row) for row in measured.itertuples(index=False)}


def _series(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:NAMED_SERIES])
    return shown + (f" and {len(names) - NAMED_SERIES} more" if len(names) > NAMED_SERIES else "")


def check_store(store: Store, record: ProbeRecord, jobs: Collection[tuple[str, str]] = (),
                force: bool = False) -> list[str]:
    """Refuse (``UsageError``, one line naming the stored settings) a run probing with ``record`` the
    (series, revision) pairs ``jobs`` into ``store`` (see the module docstring); return the warning
    lines to print (rows of unknown settings that the run leaves apart)."""
    from sweep.cli import UsageError

    stored = stored_records(store)
    redo = set(jobs) if force else set()
    kept = {key: rec for key, rec in stored.items() if key not in redo}
    others: dict[ProbeRecord, list[str]] = {}
    for (series, _), rec in kept.items():
        if rec is not None and rec != record and series not in others.setdefault(rec, []):
            others[rec].append(series)
    if others:
        stored_text = "; ".join(f"{rec.describe()} (series {_series(series)})" for rec, series in others.items())
        raise UsageError(f"--store {store.root} holds checkpoint rows probed with {stored_text}; this run would "
                         f"probe with {record.describe()}: rows of other settings are not comparable — rerun with "
                         "the stored settings, write to another --store, or --force every stored revision")
    unknown = sorted({series for (series, _), rec in kept.items() if rec is None})
    written = {series for series, revision in jobs if force or (series, revision) not in stored}
    mixed = [s for s in unknown if s in written]
    if mixed:
        raise UsageError(f"--store {store.root} holds rows of series {_series(mixed)} probed before probe settings "
                         f"were recorded; this run would add rows probed with {record.describe()} to them: --force "
                         "with a manifest naming all their revisions, or write to another --store")
    if unknown:
        return [f"[extension] warning: --store {store.root} holds rows of series {_series(unknown)} probed before "
                "probe settings were recorded: their settings are unknown (the report names them apart)"]
    return []
