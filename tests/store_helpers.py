"""Rows and files of the store tests (test_sweep_store_*.py): a tiny run's identity, layer and
epoch rows as the trainer writes them, a store filled with them, its data files and sorted frames."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sweep.store import Store
from sweep.store.schema import EPOCH_METRICS, KEYS, LAYER_METRICS, SCHEMAS, run_id


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
