"""Checkpoint integrity: a content hash per revision, and revisions that repeat another's weights.

Public series do serve wrong weights (EleutherAI/pythia#205: 86 of 154 pythia-2.8b
step branches serve final-era weights). ``weights_sha256`` hashes a revision's
weight files (names and bytes, sorted), so two revisions holding the same
weights get the same digest whatever folder or cache they sit in.
``mark_duplicates`` then gives every revision of a series whose digest another
revision of it already has the status ``duplicate_of:<revision>``, pointing at
the revision with the highest step (progress) of the group — the one whose
weights those are in the pythia case — and the reducer leaves it out of
Appendix A's fits.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from sweep.store import Store

DUPLICATE_PREFIX = "duplicate_of:"
_CHUNK = 1 << 22


def weights_sha256(files: Iterable[str | Path]) -> str:
    """sha256 over (file name, bytes) of the weight files, in name order."""
    digest = hashlib.sha256()
    for path in sorted(map(Path, files), key=lambda p: p.name):
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def duplicate_status(revisions: pd.DataFrame) -> dict[str, str]:
    """{revision: "duplicate_of:<rev>"} for one series' revisions (columns revision, step,
    progress, weights_sha256, status ``ok`` or already a duplicate)."""
    live = revisions[revisions["weights_sha256"].notna()]
    live = live.assign(_order=live["progress"].fillna(live["step"]).fillna(-1.0))
    out: dict[str, str] = {}
    for _, group in live.groupby("weights_sha256"):
        if group["revision"].nunique() < 2:
            continue
        keep = group.sort_values(["_order", "revision"]).iloc[-1]["revision"]
        for rev in group["revision"].unique():
            if rev != keep:
                out[str(rev)] = f"{DUPLICATE_PREFIX}{keep}"
    return out


def mark_duplicates(store: Store, series: Iterable[str]) -> dict[tuple[str, str], str]:
    """Rewrite the rows of repeated revisions of ``series`` with ``duplicate_of:<revision>``
    (and earlier duplicates that no longer repeat back to ``ok``); return {(series, revision): status}."""
    names = set(series)
    by_rev: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in store.scan("checkpoints").table.to_pylist():
        if row["series"] in names and (row["status"] == "ok" or row["status"].startswith(DUPLICATE_PREFIX)):
            by_rev[(row["series"], row["revision"])].append(row)
    changed: dict[tuple[str, str], str] = {}
    for name in names:
        revs = {rev: rows for (s, rev), rows in by_rev.items() if s == name}
        if not revs:
            continue
        frame = pd.DataFrame([{k: rows[0][k] for k in ("revision", "step", "progress", "weights_sha256")}
                              for rows in revs.values()], dtype=object)
        frame[["step", "progress"]] = frame[["step", "progress"]].astype(float)
        wanted = duplicate_status(frame)
        for rev, rows in revs.items():
            status = wanted.get(rev, "ok")
            if any(r["status"] != status for r in rows):
                store.write_checkpoint([{**r, "status": status} for r in rows])
                changed[(name, rev)] = status
    return changed
