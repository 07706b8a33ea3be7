"""What the report reads: the store's tables, its unreadable files and the names no registry knows."""



from __future__ import annotations

import os

import pandas as pd

from analysis import vocabulary as vocab
from analysis.compute import sections
from sweep.store import Store
from sweep.store.schema import TABLES


def load_tables(
    root: str | os.PathLike, skipped: list[dict] | None = None
) -> dict[str, pd.DataFrame]:
    """The store's tables as DataFrames, each with its schema's columns (empty if absent).

    Reads through ``Store``, not a bare ``pandas.read_parquet``: that skips a
    corrupt file with a warning and does not count rows twice while a compaction
    is half done (SPEC §6). Each skipped file is appended to ``skipped`` as a
    ``skipped_file`` record, so the report can list it.
    """
    store = Store(str(root))
    out = {t: store.read(t) for t in TABLES}
    if skipped is not None:
        skipped.extend(skipped_file(store.base, path, err) for path, err in store.skipped)
    return out


def sections_reading(source: str) -> tuple[str, ...]:
    """The sections that read rows of a sweep ("baseline", "interventions") or of "checkpoints"."""
    return tuple(s.name for s in sections() if source in s.reads)


def skipped_file(base: str, path: str, error: str) -> dict:
    """What an unreadable store file may have held: ``{path, error, table, sweep, preset, sections}``.

    The run directory name is the run id (``sweep.preset.init.L<d>.s<seed>.<condition>``);
    when it does not parse, sweep and preset are None and every section is marked.
    """
    rel = path[len(base) :].lstrip("/") if path.startswith(base) else path
    parts = rel.split("/")
    table = parts[0] if parts and parts[0] in TABLES else None
    sweep = preset = None
    if table == "checkpoints":
        touched = sections_reading("checkpoints")
    else:
        bits = parts[1].split(".") if len(parts) > 2 else []
        if len(bits) >= 6 and bits[0] in ("baseline", "interventions"):
            sweep, preset = bits[0], bits[1]
        touched = sections_reading(sweep) if sweep else tuple(s.name for s in sections())
    return {"path": path, "error": error, "table": table, "sweep": sweep, "preset": preset,
            "sections": list(touched)}


def unknown_names(tables: dict[str, pd.DataFrame]) -> dict[str, list[str]]:
    """Regime and condition names in the store that no registry knows (a plugin not loaded)."""
    runs = [t for t in (tables.get("layers"), tables.get("epochs")) if t is not None and not t.empty]
    seen = {c: [v for t in runs if c in t for v in t[c].unique()] for c in ("init", "condition")}
    return vocab.unknown_names(seen["init"], seen["condition"])
