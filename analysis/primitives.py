"""Generic statistics primitives: JSON-safe values, descriptions, tests and correlations."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps


def num(x) -> float | None:
    """A finite float, or None."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


#: Field metadata of a result dataclass: leave the key out of stats.json when the value is None.
OMIT_NONE = {"omit_none": True}


def fmt(v: float | None, spec: str = ".3f") -> str:
    """A number for a sentence ("n/a" for None)."""
    return "n/a" if v is None else format(v, spec)


def fmt_p(v: float | None) -> str:
    """A p-value for a sentence ("n/a" for None)."""
    return "n/a" if v is None else f"{v:.2g}"


def to_jsonable(obj):
    """Recursively turn results into JSON values: the one NaN -> null conversion of stats.json.

    Dataclasses become dicts in field order (a field with ``OMIT_NONE`` metadata is left
    out while None); numpy/pandas scalars become Python ones (NaN/inf -> None); keys -> str.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.metadata.get("omit_none") and getattr(obj, f.name) is None)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return num(obj)
    if obj is None or isinstance(obj, str):
        return obj
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)


def describe(values: Iterable[float]) -> dict:
    """``{mean, sd, n}`` of the finite values (sd with ddof = 1; None when n < 2)."""
    v = np.asarray(
        list(values) if not isinstance(values, (np.ndarray, pd.Series)) else values, float
    )
    v = v[np.isfinite(v)]
    n = int(v.size)
    return {
        "mean": num(v.mean()) if n else None,
        "sd": num(v.std(ddof=1)) if n >= 2 else None,
        "n": n,
    }


def hedges_g(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Hedges' g of a vs b: pooled-sd Cohen's d times J = 1 − 3/(4(n₁+n₂) − 9)."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    n1, n2 = a.size, b.size
    if n1 < 2 or n2 < 2:
        return None
    sp = math.sqrt(((n1 - 1) * a.var(ddof=1) + (n2 - 1) * b.var(ddof=1)) / (n1 + n2 - 2))
    if sp == 0:
        return None
    d = (a.mean() - b.mean()) / sp
    j = 1.0 - 3.0 / (4.0 * (n1 + n2) - 9.0)
    return num(d * j)


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float | None, float | None]:
    """Welch's t-test of a vs b (scipy, equal_var=False): (t, p), None when undefined."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2 or (a.var() == 0 and b.var() == 0):
        return None, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # near-identical samples
        res = sps.ttest_ind(a, b, equal_var=False)
    return num(res.statistic), num(res.pvalue)


def pearson(x: Sequence[float], y: Sequence[float]) -> dict:
    """``{r, p, n}`` by scipy.stats.pearsonr over pairs where both are finite.

    n < 3 or a constant input gives r = p = None and a ``note`` instead of an error.
    """
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    n = int(ok.sum())
    if n < 3:
        return {"r": None, "p": None, "n": n, "note": f"n = {n} < 3 points"}
    xs, ys = x[ok], y[ok]
    if np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return {"r": None, "p": None, "n": n, "note": "constant input"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's near-constant-input warnings
        res = sps.pearsonr(xs, ys)
    return {"r": num(res.statistic), "p": num(res.pvalue), "n": n}


def count_desc(v: np.ndarray) -> dict:
    """``{mean, sd, n, positive, negative}`` of finite slopes."""
    v = np.asarray(v, float)
    v = v[np.isfinite(v)]
    d = describe(v)
    d["positive"] = int((v > 0).sum())
    d["negative"] = int((v < 0).sum())
    return d


@dataclass
class Summary:
    """Mean, sample sd (ddof = 1; None when n < 2) and count of the finite values."""

    mean: float | None
    sd: float | None
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Summary:
        return cls(**describe(values))


@dataclass
class SlopeCount(Summary):
    """A ``Summary`` of slopes plus how many are positive and negative."""

    positive: int = 0
    negative: int = 0

    @classmethod
    def of(cls, values: Iterable[float]) -> SlopeCount:
        return cls(**count_desc(np.asarray(values, float)))


@dataclass
class Correlation:
    """Pearson ``r``, ``p`` and ``n``; ``note`` says why r is undefined."""

    r: float | None
    p: float | None
    n: int
    note: str | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def of(cls, x: Sequence[float], y: Sequence[float]) -> Correlation:
        return cls(**pearson(x, y))
