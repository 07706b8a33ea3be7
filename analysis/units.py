"""Per-unit arrays for the scorecard: one value per seed (or checkpoint series) of a claim's
statistic, and the row-wise reductions that produce them (SPEC §8).

A claim first pivots the store into ``x`` [n_units, cells] (``pivot``: one row per seed, NaN where
a seed lacks a cell) and reduces each unit's row to its own statistic with a ``Reducer``
([n, ...] -> [n]): a column, a difference of columns, a mean over cells, a correlation over
cells. The tests of ``analysis.inference`` then treat the n values as independent units.
"""


from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats as sps

Reducer = Callable[[np.ndarray], np.ndarray]  # [n, ...] one unit per row -> [n]


def pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson r per row of a, b: [B, m] -> [B], over the columns finite in both."""
    ok = np.isfinite(a) & np.isfinite(b)
    a = np.where(ok, a, np.nan)
    b = np.where(ok, b, np.nan)
    da = a - np.nanmean(a, axis=-1, keepdims=True)
    db = b - np.nanmean(b, axis=-1, keepdims=True)
    num = np.nansum(da * db, axis=-1)
    den = np.sqrt(np.nansum(da * da, axis=-1) * np.nansum(db * db, axis=-1))
    r = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return np.where(ok.sum(-1) >= 3, r, np.nan)


def spearman_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman ρ per row of a, b: [B, m] -> [B], over the columns finite in both: Pearson r of
    their ranks (ties share the average rank, as ``scipy.stats.spearmanr``); NaN with < 3 pairs
    or a constant row."""
    ok = np.isfinite(a) & np.isfinite(b)
    ra = sps.rankdata(np.where(ok, a, np.nan), axis=-1, nan_policy="omit")
    rb = sps.rankdata(np.where(ok, b, np.nan), axis=-1, nan_policy="omit")
    return pearson_rows(ra, rb)


def fraction(sign: int) -> Reducer:
    """Fraction of finite cells whose value has ``sign``: [n, cells] -> [n]."""

    def f(avg: np.ndarray) -> np.ndarray:
        fin = np.isfinite(avg)
        hits = ((np.sign(avg) == sign) & fin).sum(-1)
        return np.where(fin.sum(-1) > 0, hits / np.maximum(fin.sum(-1), 1), np.nan)

    return f


def column(i: int) -> Reducer:
    return lambda avg: avg[:, i]


def cell_mean(avg: np.ndarray) -> np.ndarray:
    """Mean over a unit's finite cells: [n, cells] -> [n] (NaN for a unit with none)."""
    fin = np.isfinite(avg)
    total = np.where(fin, avg, 0.0).sum(-1)
    return np.where(fin.any(-1), total / np.maximum(fin.sum(-1), 1), np.nan)


def pivot_units(df: pd.DataFrame, unit: str, cells: list[str], value: str) -> tuple[np.ndarray, list, tuple]:
    """[n_units, n_cells] of ``value`` (NaN where missing), the cell labels and the units' labels."""
    if df.empty:
        return np.empty((0, 0)), [], ()
    p = df.pivot_table(index=unit, columns=cells, values=value, aggfunc="mean", observed=True)
    return p.to_numpy(float), list(p.columns), tuple(v.item() if hasattr(v, "item") else v for v in p.index)


def pivot_many(df: pd.DataFrame, unit: str, cells: list[str], values: list[str]) -> tuple[dict[str, np.ndarray], tuple]:
    """``pivot_units`` of several columns at once, on the same units and cells: value -> [n_units,
    n_cells] (NaN where missing), and the units' labels (one group-by instead of one per column)."""
    if df.empty:
        return {v: np.empty((0, 0)) for v in values}, ()
    wide = df.groupby([unit, *cells], observed=True)[values].mean().unstack(cells)
    ids = tuple(v.item() if hasattr(v, "item") else v for v in wide.index)
    return {v: wide[v].to_numpy(float) for v in values}, ids


def pivot(df: pd.DataFrame, unit: str, cells: list[str], value: str) -> tuple[np.ndarray, list]:
    """[n_units, n_cells] of ``value`` (NaN where missing) and the cell labels."""
    x, cols, _ = pivot_units(df, unit, cells, value)
    return x, cols


def count_runs(df: pd.DataFrame) -> int:
    return int(df["run_id"].nunique()) if not df.empty and "run_id" in df else 0


def slope_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """OLS slope of y on x per row: [B, m] -> [B], over the columns finite in both; NaN with < 2
    pairs or a constant x."""
    ok = np.isfinite(x) & np.isfinite(y)
    n = ok.sum(-1)
    xm = np.where(ok, x, 0.0).sum(-1) / np.maximum(n, 1)
    ym = np.where(ok, y, 0.0).sum(-1) / np.maximum(n, 1)
    dx = np.where(ok, x - xm[..., None], 0.0)
    dy = np.where(ok, y - ym[..., None], 0.0)
    sxx, sxy = (dx * dx).sum(-1), (dx * dy).sum(-1)
    good = (n >= 2) & (sxx > 0)
    return np.where(good, sxy / np.where(good, sxx, 1.0), np.nan)
