"""The seed bootstrap of the scorecard: per-seed arrays, reducers and percentile intervals (see scorecard)."""


from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats as sps

N_RESAMPLES = 2000
CONFIDENCE = 0.95


Reducer = Callable[[np.ndarray], np.ndarray]  # [B, ...] seed-averaged -> [B]


def seed_bootstrap(x: np.ndarray, reduce: Reducer, seed: int = 0) -> tuple[float | None, float | None, float | None]:
    """(value, ci_low, ci_high) of ``reduce(mean over units of x)``, resampling whole units.

    x: [n, ...] one entry per unit (seed or series), NaN where a unit lacks a cell.
    reduce: maps the unit-averaged array [B, ...] to [B]. With n < 2 the interval is None.
    """

    def statistic(units: np.ndarray) -> np.ndarray:  # [B, n, ...] -> [B]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells
            return reduce(np.nanmean(units, axis=1))

    return unit_bootstrap(x, statistic, seed)


def unit_bootstrap(x: np.ndarray, statistic: Callable[[np.ndarray], np.ndarray], seed: int = 0
                   ) -> tuple[float | None, float | None, float | None]:
    """(value, ci_low, ci_high) of ``statistic`` on the units of x, resampling whole units.

    The general form of ``seed_bootstrap``, for a statistic that needs the units themselves
    rather than their mean (the dose–response's Spearman ρ over every (strength, seed) pair):
    x: [n, ...] one entry per unit; statistic: maps resampled units [B, n, ...] to [B]; the value
    is ``statistic(x[None])``. The same 95 % percentile bootstrap (``N_RESAMPLES``, a generator
    seeded with ``seed``); with n < 2 the interval is None.
    """
    x = np.asarray(x, float)
    n = x.shape[0]

    def stat(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        idx = np.asarray(idx, int)
        flat = idx.reshape(-1, n)  # (B, n)
        out = statistic(x[flat])
        return out.reshape(idx.shape[:-1])

    if n == 0:
        return None, None, None
    value = float(stat(np.arange(n)[None])[0])
    if not np.isfinite(value):
        return None, None, None
    if n < 2:
        return value, None, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate (all-equal) resamples
        res = sps.bootstrap((np.arange(n),), stat, vectorized=True, axis=-1, method="percentile",
                            n_resamples=N_RESAMPLES, confidence_level=CONFIDENCE,
                            rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return value, None, None
    return value, lo, hi


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
    """Fraction of finite cells whose seed-averaged value has ``sign``: [B, cells] -> [B]."""

    def f(avg: np.ndarray) -> np.ndarray:
        fin = np.isfinite(avg)
        hits = ((np.sign(avg) == sign) & fin).sum(-1)
        return np.where(fin.sum(-1) > 0, hits / np.maximum(fin.sum(-1), 1), np.nan)

    return f


def column(i: int) -> Reducer:
    return lambda avg: avg[:, i]


# ----------------------------------------------------------------------------
# per-seed arrays
# ----------------------------------------------------------------------------


def pivot(df: pd.DataFrame, unit: str, cells: list[str], value: str) -> tuple[np.ndarray, list]:
    """[n_units, n_cells] of ``value`` (NaN where missing) and the cell labels."""
    if df.empty:
        return np.empty((0, 0)), []
    p = df.pivot_table(index=unit, columns=cells, values=value, aggfunc="mean", observed=True)
    return p.to_numpy(float), list(p.columns)


def count_runs(df: pd.DataFrame) -> int:
    return int(df["run_id"].nunique()) if not df.empty and "run_id" in df else 0
