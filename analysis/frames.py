"""Frame preparation: which rows count (baseline, interventions, diverged, incomplete), finals,
layer-means, trajectories, OLS slopes per group and layer categories."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from analysis import vocabulary as vocab

RUN_ID_COLS: tuple[str, ...] = (
    "sweep",
    "run_id",
    "preset",
    "init",
    "depth",
    "seed",
    "condition",
)


def baseline(layers: pd.DataFrame) -> pd.DataFrame:
    """Rows of the baseline sweep."""
    return layers[layers["sweep"] == "baseline"]


def intervention_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the intervention sweep."""
    return df[df["sweep"] == "interventions"]


def run_strengths(df: pd.DataFrame) -> pd.Series:
    """Each row's condition strengths as a dict (SPEC §5, §6 ``strengths``): the column's JSON,
    and for a null (a store written before the column) the condition's defaults — ``{}`` for a
    condition no registry knows."""
    if df.empty:
        return pd.Series([], index=df.index, dtype=object)
    col = df["strengths"] if "strengths" in df else pd.Series(None, index=df.index, dtype=object)
    keys = pd.MultiIndex.from_arrays([df["condition"].astype(str), col.astype(object).where(col.notna(), "")])
    cache = {k: (json.loads(k[1]) if k[1] else vocab.default_strengths(k[0])) for k in keys.unique()}
    return pd.Series([cache[k] for k in keys], index=df.index, dtype=object)


def at_default_strengths(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of runs at their condition's default strengths (the paper's single point, Table 5):
    ``strengths`` null or equal to the registry's defaults; for a condition no registry knows, a
    run id without a strength suffix (SPEC §6: such an id ends in the condition's name)."""
    if df.empty or "strengths" not in df or df["strengths"].isna().all():
        return df
    given = run_strengths(df)
    known = df["condition"].map(lambda c: c in vocab.conditions())
    default = df["condition"].map(vocab.default_strengths)
    same = pd.Series([g == d for g, d in zip(given, default, strict=True)], index=df.index, dtype=bool)
    plain = pd.Series([r.endswith(f".{c}") for r, c in zip(df["run_id"], df["condition"], strict=True)],
                      index=df.index, dtype=bool)
    return df[df["strengths"].isna() | (known & same) | (~known & plain)]


def diverged_runs(epochs: pd.DataFrame) -> list[str]:
    """run_ids with any epoch whose status is ``diverged``."""
    if epochs.empty or "status" not in epochs:
        return []
    return sorted(epochs.loc[epochs["status"] == "diverged", "run_id"].unique().tolist())


def incomplete_runs(layers: pd.DataFrame, epochs: pd.DataFrame) -> dict[str, str]:
    """Runs whose last logged epoch differs from their preset's, with the reason.

    A preset's final epoch (per sweep, since baseline and interventions of one
    preset train for different epochs) is the largest last epoch among its runs
    in ``layers`` (``epochs`` when a run has no layer rows). A run that stops
    earlier (unfinished, or a file of its last epoch unreadable) would mix an
    earlier epoch into the "final" values, so it is listed instead.
    """
    frames = [df for df in (layers, epochs) if not df.empty and "run_id" in df]
    if not frames:
        return {}
    cols = ["sweep", "preset", "run_id", "epoch"]
    both = pd.concat([df[cols] for df in frames], ignore_index=True)
    last_layer = layers.groupby("run_id")["epoch"].max() if not layers.empty else pd.Series(dtype=int)
    last = both.groupby(["sweep", "preset", "run_id"], observed=True)["epoch"].max().reset_index()
    last["epoch"] = last["run_id"].map(last_layer).fillna(last["epoch"])
    want = last.groupby(["sweep", "preset"], observed=True)["epoch"].transform("max")
    short = last[last["epoch"] != want]
    return {
        r: f"last epoch {int(e)}, its preset's ({p}, {sw}) runs end at {int(w)}"
        for r, e, w, p, sw in zip(
            short["run_id"], short["epoch"], want[short.index], short["preset"], short["sweep"], strict=True
        )
    }


def final_rows(df: pd.DataFrame, key: str = "run_id", when: str = "final") -> pd.DataFrame:
    """Rows at each run's last (``when="final"``) or first (``"initial"``) epoch."""
    if df.empty:
        return df
    agg = "max" if when == "final" else "min"
    ep = df.groupby(key, sort=False)["epoch"].transform(agg)
    return df[df["epoch"] == ep]


def run_layer_means(
    layers: pd.DataFrame, metrics: Sequence[str], when: str = "final"
) -> pd.DataFrame:
    """One row per run: identity, ``epoch`` used and the layer-mean of ``metrics``."""
    rows = final_rows(layers, when=when)
    cols = [c for c in RUN_ID_COLS if c in rows.columns]
    if rows.empty:
        return pd.DataFrame(columns=[*cols, "epoch", *metrics])
    out = rows.groupby(cols + ["epoch"], sort=True, observed=True)[list(metrics)].mean()
    return out.reset_index()


def layer_mean_trajectories(layers: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Per (run, epoch): identity and the layer-mean of ``metrics``."""
    cols = [c for c in RUN_ID_COLS if c in layers.columns]
    if layers.empty:
        return pd.DataFrame(columns=[*cols, "epoch", *metrics])
    return (
        layers.groupby(cols + ["epoch"], sort=True, observed=True)[list(metrics)]
        .mean()
        .reset_index()
    )


def minmax_progress(df: pd.DataFrame, by: str, columns: Sequence[str]) -> pd.Series:
    """Training progress in [0, 1] per row: the first of ``columns`` (e.g. tokens, steps, the stored
    progress) present on every row of the row's ``by`` group, min–max scaled within that group; a
    group whose values are all equal gets 1, one with none of the columns complete NaN (SPEC §8)."""
    out = pd.Series(np.nan, index=df.index)
    for col in columns:
        g = df.groupby(by)[col]
        lo, hi, complete = g.transform("min"), g.transform("max"), g.transform(lambda v: v.notna().all())
        with np.errstate(invalid="ignore", divide="ignore"):
            scaled = ((df[col] - lo) / (hi - lo)).where(hi > lo, 1.0)
        out = out.where(~(out.isna() & complete.astype(bool)), scaled)
    return out


def group_slopes(
    df: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str], x: str = "epoch"
) -> pd.DataFrame:
    """OLS slope of each metric on ``x`` within every group of ``keys``, all groups at once.

    Returns one row per group with the key columns, ``n_points`` and for each
    metric ``<m>_slope`` (NaN with < 2 finite points or constant x) and
    ``<m>_mean`` (mean of the finite values). Rows where x or the metric is
    not finite are left out of that metric's fit only.
    """
    keys = list(keys)
    cols = [*keys, "n_points"] + [f"{m}_{s}" for m in metrics for s in ("slope", "mean")]
    if df.empty:
        return pd.DataFrame(columns=cols)
    g = df.groupby(keys, sort=True, observed=True, dropna=False)
    codes = g.ngroup().to_numpy()
    out = g.size().rename("n_points").reset_index()
    ng = len(out)
    xv = df[x].to_numpy(dtype=float, na_value=np.nan)
    new = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for m in metrics:
            y = df[m].to_numpy(dtype=float, na_value=np.nan)
            ok = np.isfinite(xv) & np.isfinite(y)
            w = ok.astype(float)
            n = np.bincount(codes, weights=w, minlength=ng)
            xm = np.bincount(codes, weights=np.where(ok, xv, 0.0), minlength=ng) / n
            ym = np.bincount(codes, weights=np.where(ok, y, 0.0), minlength=ng) / n
            dx = np.where(ok, xv - xm[codes], 0.0)
            dy = np.where(ok, y - ym[codes], 0.0)
            sxx = np.bincount(codes, weights=dx * dx, minlength=ng)
            sxy = np.bincount(codes, weights=dx * dy, minlength=ng)
            # a relative threshold: constant x within a group has sxx ~ 0
            scale = np.bincount(codes, weights=np.where(ok, xv * xv, 0.0), minlength=ng)
            good = (n >= 2) & (sxx > 1e-12 * np.maximum(scale, 1e-300))
            new[f"{m}_slope"] = np.where(good, sxy / np.where(good, sxx, 1.0), np.nan)
            new[f"{m}_mean"] = np.where(n > 0, ym, np.nan)
    return pd.concat([out, pd.DataFrame(new, index=out.index)], axis=1)


#: The collapse ends at the trough of PR_K within this share of the logged epochs (SPEC §8).
COLLAPSE_SEARCH = 0.25


def collapse_end(layers: pd.DataFrame) -> int | None:
    """The epoch the initial collapse ends at (SPEC §8): the trough of the layer- and run-mean
    ``pr_k`` among epochs 1 .. ceil(COLLAPSE_SEARCH · E), E the last logged epoch. One epoch for the
    whole frame (pass one preset's baseline rows), so the window cannot favour a direction in any
    one trajectory. None when fewer than 4 epochs are logged after epoch 0, or no pr_k."""
    if layers.empty or "pr_k" not in layers or layers["epoch"].max() < 4:
        return None
    last = int(layers["epoch"].max())
    early = layers[(layers["epoch"] >= 1) & (layers["epoch"] <= int(np.ceil(COLLAPSE_SEARCH * last)))]
    mean = early.groupby("epoch")["pr_k"].mean().dropna()
    return int(mean.idxmin()) if not mean.empty else None


#: How the report names a post-collapse window chosen on the runs it then describes.
CHOSEN_ON_THESE_RUNS = "chosen on the runs reported (descriptive: no window was fixed before the data)"


def post_collapse_start(base: pd.DataFrame, window) -> tuple[int | None, str, bool]:
    """The post-collapse window's first epoch, where it comes from, and whether it was fixed before
    the data: the preset's ``window`` (``analysis.section.Window``) when given, else ``collapse_end``
    of ``base`` itself — then the window is chosen on the runs it describes, and is not tested."""
    if window is not None:
        return window.start, window.source, True
    return collapse_end(base), CHOSEN_ON_THESE_RUNS, False


def window_slopes(df: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str], start: int | None) -> pd.DataFrame:
    """``group_slopes`` over all logged epochs, with the same fit over epochs >= ``start`` (the
    post-collapse window) beside it as ``<m>_slope_post`` and ``<m>_mean_post`` (NaN when start is None)."""
    out = group_slopes(df, keys, metrics)
    post = group_slopes(df[df["epoch"] >= start] if start is not None else df.iloc[:0], keys, metrics)
    cols = [f"{m}_{s}" for m in metrics for s in ("slope", "mean")]
    post = post[list(keys) + cols].rename(columns={c: f"{c}_post" for c in cols})
    if out.empty:
        return out.assign(**{f"{c}_post": pd.Series(dtype=float) for c in cols})
    return out.merge(post, on=list(keys), how="left")


def seed_averaged_traces(layers: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Mean over seeds per (init, depth, layer, epoch); adds ``n_seeds``.

    Pass baseline rows. A cell whose runs logged different numbers of
    epochs averages fewer seeds at its later epochs (``n_seeds`` says so).
    """
    keys = ["init", "depth", "layer", "epoch"]
    if layers.empty:
        return pd.DataFrame(columns=[*keys, *metrics, "n_seeds"])
    g = layers.groupby(keys, sort=True, observed=True)
    out = g[list(metrics)].mean()
    out["n_seeds"] = g.size()  # runs averaged (one per seed within a preset), not distinct seed numbers
    return out.reset_index()


def layer_category(layer, depth) -> np.ndarray:
    """``early``/``mid``/``late`` for 0-based ``layer`` of a ``depth``-layer model.

    k = round(L/3): the first k layers are early, the last k late, the rest mid.
    """
    layer = np.asarray(layer, dtype=int)
    depth = np.asarray(depth, dtype=int)
    k = np.round(depth / 3.0).astype(int)
    return np.where(layer < k, "early", np.where(layer >= depth - k, "late", "mid"))


def ordered_inits(values: Iterable[str]) -> list[str]:
    present = set(pd.Series(values).dropna().unique().tolist())
    known = vocab.inits()
    return [i for i in known if i in present] + sorted(present - set(known))


def epoch_range(frame: pd.DataFrame) -> dict:
    if frame.empty:
        return {"min": None, "max": None}
    e = frame["epoch"].astype(int)
    return {"min": int(e.min()), "max": int(e.max())}
