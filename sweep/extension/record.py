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
(``--force`` over a manifest that names them). Rows written before the settings were stored have none:
their settings are unknown, and they are refused alike.
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


def stored_records(store: Store, redo: Collection[tuple[str, str]] = ()) -> dict[ProbeRecord | None, list[str]]:
    """{record: series} over the store's measured rows (``ok`` and ``duplicate_of``), leaving out the
    (series, revision) pairs in ``redo``; None stands for rows without a record."""
    from sweep.extension.integrity import DUPLICATE_PREFIX

    df = store.read("checkpoints", columns=["series", "revision", "status", *CHECKPOINT_SETTINGS])
    measured = df[(df["status"] == "ok") | df["status"].str.startswith(DUPLICATE_PREFIX)]
    redo = set(redo)
    out: dict[ProbeRecord | None, list[str]] = {}
    for row in measured.itertuples(index=False):
        if (row.series, row.revision) in redo:
            continue
        series = out.setdefault(record_of(row), [])
        if row.series not in series:
            series.append(row.series)
    return out


def check_store(store: Store, record: ProbeRecord, redo: Collection[tuple[str, str]] = ()) -> None:
    """A ``UsageError`` (one line, naming the stored settings) when ``store`` holds measured rows under
    other settings than ``record``'s, besides the revisions in ``redo``."""
    from sweep.cli import UsageError

    others = {r: s for r, s in stored_records(store, redo).items() if r != record}
    if not others:
        return
    parts = []
    for other, series in others.items():
        names = ", ".join(series[:NAMED_SERIES]) + (f" and {len(series) - NAMED_SERIES} more"
                                                    if len(series) > NAMED_SERIES else "")
        what = other.describe() if other is not None else "settings not recorded (written before they were)"
        parts.append(f"{what} (series {names})")
    raise UsageError(f"--store {store.root} holds checkpoint rows probed with {'; '.join(parts)}; this run would "
                     f"probe with {record.describe()}: rows of other settings are not comparable — rerun with the "
                     "stored settings, write to another --store, or --force every stored revision")
