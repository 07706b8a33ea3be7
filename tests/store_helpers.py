"""Rows and files of the store tests (test_sweep_store_*.py): a tiny run's identity, layer and
epoch rows as the trainer writes them, a store filled with them, its data files and sorted frames,
and ``age``, which turns a store's files into those of a store written before a column rename."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sweep.store import Store
from sweep.store.parquet import parquet_bytes
from sweep.store.schema import EPOCH_METRICS, KEYS, LAYER_METRICS, SCHEMAS, TABLES, run_id

#: Columns of the current schema under the name stores written before their rename gave them (a
#: hand copy of the history, not ``sweep.store.schema.RENAMED``, which the tests check).
OLD_NAMES = {"condition": "intervention"}


def identity(seed: int = 0, depth: int = 2, sweep: str = "baseline") -> dict:
    return {"sweep": sweep, "preset": "tiny", "init": "xavier", "depth": depth, "seed": seed,
            "condition": "none", "run_id": run_id(sweep, "tiny", "xavier", depth, seed, "none")}


def layer_rows(epoch: int, seed: int = 0, depth: int = 2, value: float = 1.0) -> list[dict]:
    rows = []
    for layer in range(depth):
        row = {**identity(seed, depth), "epoch": epoch, "layer": layer}
        row.update({m: value + layer + epoch / 10 for m in LAYER_METRICS})
        if epoch > 0:
            row.update(grad_norm_q=0.5, grad_norm_k=0.25)
        rows.append(row)
    return rows


def epoch_row(epoch: int, seed: int = 0, depth: int = 2, status: str = "running", **metrics) -> dict:
    row = {**identity(seed, depth), "epoch": epoch, "tokens_seen": 1000 * epoch, "status": status}
    row.update({m: 2.0 + epoch for m in EPOCH_METRICS  # as the trainer: no step, no throughput at 0
                if epoch > 0 or m not in ("train_loss", "grad_norm", "tokens_per_s")})
    return {**row, **metrics}


def fill(store: Store, seeds: int = 2, epochs: int = 3, depth: int = 2) -> None:
    for seed in range(seeds):
        for epoch in range(epochs):
            store.write_layers(layer_rows(epoch, seed, depth))
            store.write_epoch(epoch_row(epoch, seed, depth))


def data_files(root: Path, table: str) -> list[Path]:
    return sorted(p for p in (root / table).rglob("*.parquet") if not p.name.startswith((".", "_")))


def sorted_frame(df: pd.DataFrame, table: str) -> pd.DataFrame:
    keys = list(KEYS[table])
    return df.sort_values(keys).reset_index(drop=True)[list(SCHEMAS[table].names)]


def plain(root: Path, table: str) -> pd.DataFrame:
    return sorted_frame(pd.read_parquet(root / table), table)


def _files(store: Store, table: str) -> list[pafs.FileInfo]:
    """``FileInfo`` of every data file of ``table``, compacted ones included."""
    dirs = store.listing(table)[0].values()
    return [i for d in dirs for i in d.small.values()] + [d.compacted for d in dirs if d.compacted]


def age(store: Store) -> int:
    """Rewrite every data file of ``store`` in place as an older store wrote it: each column of
    ``OLD_NAMES`` under its old name, same layout. Returns the number of files rewritten."""
    n = 0
    for info in (i for table in TABLES for i in _files(store, table)):
        data = pq.read_table(info.path, filesystem=store.fs)
        if OLD_NAMES.keys() & set(data.column_names):
            renamed = data.rename_columns([OLD_NAMES.get(c, c) for c in data.column_names])
            store.put(info.path, parquet_bytes(renamed))
            n += 1
    return n


def columns_on_disk(store: Store, table: str) -> set[str]:
    """Column names in any data file of ``table`` (what a plain Parquet reader sees)."""
    return {c for i in _files(store, table) for c in pq.read_schema(i.path, filesystem=store.fs).names}
