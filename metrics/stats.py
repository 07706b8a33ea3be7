"""Statistics of the study (SPEC §8): pure functions of the store's tables.

Every function here takes pandas DataFrames with the columns of
``sweep.schema`` (``layers``, ``epochs``, ``checkpoints``) and returns plain
numbers, dicts or DataFrames: no I/O and no plotting. ``compute_all`` runs
every section and returns the JSON-ready ``stats`` dict that
``sweep.report`` writes to ``stats.json``.

Conventions
-----------
* Baseline sections use rows with ``sweep == "baseline"``, intervention
  sections rows with ``sweep == "interventions"``.
* "Final" is each run's last epoch present in ``layers`` (the epoch used is
  recorded under ``provenance``); "initial" is each run's first epoch
  (epoch 0 = at initialisation when the run logged it).
* "Layer-mean" is the mean over a run's layers at one epoch.
* Standard deviations are sample standard deviations (ddof = 1); with one
  observation the sd is ``None``.
* Slopes are closed-form OLS slopes computed for all groups at once with
  ``np.bincount`` (no Python loop per trajectory).
* Runs whose ``epochs`` status is ``diverged``, and runs whose last epoch
  differs from their preset's (``incomplete_runs``), are dropped before any
  statistic and listed with the reason under ``provenance.excluded_runs``.
* Counts of seeds count runs (one per seed within a preset), not distinct
  seed numbers. ``compute_all`` is meant for one preset at a time
  (``sweep.report`` never pools presets).
* Every value in the returned dict is a JSON scalar (NaN/inf become ``None``);
  dict keys are strings (depths are written ``"4"``, ``"6"``, ...).

Shape of ``compute_all(...).stats`` (= stats.json; a section without data is ``None``
and its reason is under ``missing``)::

    provenance      {sweeps: {sweep: {presets, n_runs, inits, depths, seeds, interventions,
                     final_epoch: {min, max}, n_layer_rows}}, presets, n_runs, paper_scale,
                     checkpoint_series, checkpoint_revisions, excluded_runs}
    alignment       {initial|final: {init: {mean, sd, n}}, initial_epoch, final_epoch,
                     welch_t, welch_p, hedges_g, n_coupled, n_uncoupled,
                     gap_by_depth: {depth: gap}, final_by_depth: {depth: {init: mean}},
                     final_by_head: {init: [mean per head]}}
    slopes          {uncoupled|coupled|pooled: {pr_q|pr_k|pr_q_minus_pr_k:
                     {mean, sd, n, positive, negative}}}      over seed-averaged traces
    slopes_per_run  the same over every per-run layer trajectory
    layer_categories {early|mid|late: {attn_entropy, attn_top1, qk_erank, pr_q, n}}
    layer_categories_by_depth {depth: {k, early|mid|late: {...}}}
    bridge          {seed_averaged|per_seed: {key_spec__qk_compression|
                     qk_compression__entropy_sharpening|qk_compression__top1_sharpening:
                     {r, p, n[, note]}}}
    interventions   {condition: {attn_entropy|logit_std|qk_erank|pr_k|val_loss:
                     {mean, sd, n, delta, delta_sd, n_pairs}, n_seeds, n_pairs, predicted,
                     confidence, confidence_by_metric[, n_confidence]}}
    interventions_init      the init ``interventions`` describes
    interventions_by_init   {init: {condition: ...}}   only when several inits are present
    checkpoints     {series: {name: {n_revisions, slope_pr_q_minus_pr_k, link_recurs,
                     r_pr_k__qk_erank, r_qk_erank__attn_entropy, n_rows}},
                     positive_series, n_fitted_series, link_recurs_series[, failed_revisions]}
    missing         {section[.part]: reason}
    notes           [str]
    reference       PAPER_REFERENCE (SPEC §9 and the paper's Appendix A)
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from metrics import vocabulary as vocab

# ----------------------------------------------------------------------------
# vocabulary
# ----------------------------------------------------------------------------

# Regimes, conditions, their groups and predicted directions come from the registries
# (``metrics.vocabulary``): no regime or condition is named in this module.
SLOPE_METRICS: tuple[str, ...] = ("pr_q", "pr_k", "pr_q_minus_pr_k")
CATEGORY_METRICS: tuple[str, ...] = ("attn_entropy", "attn_top1", "qk_erank", "pr_q")
CATEGORIES: tuple[str, ...] = ("early", "mid", "late")

#: Mechanism-bridge quantities: name -> (metric, sign); value = sign * slope / mean.
BRIDGE_QUANTITIES: dict[str, tuple[str, float]] = {
    "key_spec": ("pr_k", -1.0),
    "qk_compression": ("qk_erank", -1.0),
    "entropy_sharpening": ("attn_entropy", -1.0),
    "top1_sharpening": ("attn_top1", +1.0),
}
BRIDGE_PAIRS: tuple[tuple[str, str], ...] = (
    ("key_spec", "qk_compression"),
    ("qk_compression", "entropy_sharpening"),
    ("qk_compression", "top1_sharpening"),
)

#: Table 5 metrics; the first four are final layer-means from ``layers``, val_loss from ``epochs``.
INTERVENTION_LAYER_METRICS: tuple[str, ...] = ("attn_entropy", "logit_std", "qk_erank", "pr_k")
INTERVENTION_METRICS: tuple[str, ...] = INTERVENTION_LAYER_METRICS + ("val_loss",)
RUN_ID_COLS: tuple[str, ...] = (
    "sweep",
    "run_id",
    "preset",
    "init",
    "depth",
    "seed",
    "intervention",
)

#: SPEC §9 (and Appendix A of the paper): reference values at paper scale, WikiText-103.
PAPER_REFERENCE: dict = {
    "alignment": {
        "initial": {
            "qk_identical": 1.0,
            "disjoint_support_xavier": 0.0,
            "independent_xavier": 0.0498,
        },
        "final": {
            "qk_identical": {"mean": 0.4530, "sd": 0.0950},
            "disjoint_support_xavier": {"mean": 0.1991, "sd": 0.0151},
            "independent_xavier": {"mean": 0.1895, "sd": 0.0227},
        },
        "welch_p": 1.06e-6,
        "hedges_g": 4.489,
        "gap_by_depth": {"4": 0.143, "8": 0.314},
    },
    "layer_categories": {
        "mid": {"attn_entropy": 1.532, "attn_top1": 0.514, "qk_erank": 6.26, "pr_q": 10.52},
        "late": {"qk_erank": 16.34, "pr_q": 24.41},
    },
    "slopes": {
        "pooled": {
            "pr_k": {"negative": 50, "n": 54},
            "pr_q_minus_pr_k": {"positive": 54, "n": 54},
        }
    },
    "bridge": {
        "seed_averaged": {
            "key_spec__qk_compression": {"r": 0.840, "p": 1.5e-10, "n": 36},
            "qk_compression__entropy_sharpening": {"r": 0.769, "p": 4.3e-8, "n": 36},
            "qk_compression__top1_sharpening": {"r": 0.637, "p": 3.0e-5, "n": 36},
        },
        "per_seed": {
            "key_spec__qk_compression": {"r": 0.781, "p": 8.32e-31, "n": 144},
            "qk_compression__entropy_sharpening": {"r": 0.614, "p": 2.73e-16, "n": 144},
            "qk_compression__top1_sharpening": {"r": 0.488, "p": 5.43e-10, "n": 144},
        },
    },
    "interventions": {
        "forced_k_contraction": {
            "attn_entropy": 2.0809,
            "logit_std": 5.4071,
            "qk_erank": 6.03,
            "confidence": 1.0,
        },
        "freeze_k": {"attn_entropy": 2.6002, "logit_std": 3.2136, "confidence": 1.0},
        "k_spectrum_clamp": {"confidence": 1.0},
        "val_loss_range": [1.2066, 1.2270],
    },
    "checkpoints": {"positive_series": 1, "n_fitted_series": 6, "link_recurs_series": 4},
}


# ----------------------------------------------------------------------------
# small helpers
# ----------------------------------------------------------------------------


def _num(x) -> float | None:
    """A finite float, or None."""
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def to_jsonable(obj):
    """Recursively turn numpy/pandas scalars into JSON values (NaN/inf -> None, keys -> str)."""
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
        return _num(obj)
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
        "mean": _num(v.mean()) if n else None,
        "sd": _num(v.std(ddof=1)) if n >= 2 else None,
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
    return _num(d * j)


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
    return _num(res.statistic), _num(res.pvalue)


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
    return {"r": _num(res.statistic), "p": _num(res.pvalue), "n": n}


def _count_desc(v: np.ndarray) -> dict:
    """``{mean, sd, n, positive, negative}`` of finite slopes."""
    v = np.asarray(v, float)
    v = v[np.isfinite(v)]
    d = describe(v)
    d["positive"] = int((v > 0).sum())
    d["negative"] = int((v < 0).sum())
    return d


# ----------------------------------------------------------------------------
# table preparation
# ----------------------------------------------------------------------------


def baseline(layers: pd.DataFrame) -> pd.DataFrame:
    """Rows of the baseline sweep."""
    return layers[layers["sweep"] == "baseline"]


def intervention_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the intervention sweep."""
    return df[df["sweep"] == "interventions"]


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


# ----------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------


@dataclass
class Section:
    """A section's JSON-ready result plus the reasons for anything it could not compute."""

    stats: dict
    missing: dict[str, str] = field(default_factory=dict)
    frames: dict[str, pd.DataFrame] = field(default_factory=dict)


def alignment_section(layers: pd.DataFrame) -> Section:
    """Table 3: initial/final layer-mean alignment per init, Welch test, Hedges' g, gap by depth."""
    base = baseline(layers)
    missing: dict[str, str] = {}
    if base.empty or base["qk_alignment"].notna().sum() == 0:
        return Section({}, {"alignment": "no baseline runs with qk_alignment in the store"})
    init_rows = run_layer_means(base, ["qk_alignment"], when="initial")
    fin_rows = run_layer_means(base, ["qk_alignment"], when="final")
    out: dict = {"initial": {}, "final": {}}
    for name, frame in (("initial", init_rows), ("final", fin_rows)):
        for init in ordered_inits(frame["init"]):
            out[name][init] = describe(frame.loc[frame["init"] == init, "qk_alignment"])
    out["initial_epoch"] = _epoch_range(init_rows)
    out["final_epoch"] = _epoch_range(fin_rows)

    cpl, uncpl = vocab.coupled_inits(), vocab.uncoupled_inits()
    coupled = fin_rows.loc[fin_rows["init"].isin(cpl), "qk_alignment"].to_numpy(float)
    unc = fin_rows.loc[fin_rows["init"].isin(uncpl), "qk_alignment"].to_numpy(float)
    t, p = welch(coupled, unc)
    out["welch_t"], out["welch_p"] = t, p
    out["hedges_g"] = hedges_g(coupled, unc)
    out["n_coupled"], out["n_uncoupled"] = (
        int(np.isfinite(coupled).sum()),
        int(np.isfinite(unc).sum()),
    )
    if t is None:
        missing["alignment.welch"] = (
            f"Welch test needs >= 2 final runs of {', '.join(cpl)} and >= 2 of the uncoupled inits "
            f"(have {out['n_coupled']} and {out['n_uncoupled']})"
        )

    gaps: dict[str, float | None] = {}
    by_depth_mean = fin_rows.groupby(["depth", "init"], observed=True)["qk_alignment"].mean()
    for depth in sorted(fin_rows["depth"].unique()):
        m = by_depth_mean.loc[depth]
        unc_means = [m[i] for i in uncpl if i in m.index and np.isfinite(m[i])]
        cpl_means = [m[i] for i in cpl if i in m.index]
        if cpl_means and unc_means:
            gaps[str(int(depth))] = _num(max(cpl_means) - max(unc_means))
    out["gap_by_depth"] = gaps
    out["final_by_depth"] = {
        str(int(d)): {i: _num(v) for i, v in by_depth_mean.loc[d].items()}
        for d in sorted(fin_rows["depth"].unique())
    }
    if not gaps:
        missing["alignment.gap_by_depth"] = f"no depth has both {', '.join(cpl)} and an uncoupled init"
    out["final_by_head"] = final_alignment_by_head(base)
    if not out["final_by_head"]:
        missing["alignment.per_head"] = "no qk_alignment_head values in the store (older schema)"
    return Section(
        {"alignment": out}, missing, {"alignment_initial": init_rows, "alignment_final": fin_rows}
    )


def final_alignment_by_head(base: pd.DataFrame) -> dict[str, list[float | None]]:
    """Per init: final alignment of each head h, the mean over the final (run, layer) rows.

    Reads the list column ``qk_alignment_head`` ([n_head] per row); rows without it
    are skipped, and an init whose rows disagree on n_head is left out.
    """
    if "qk_alignment_head" not in base:
        return {}
    fin = final_rows(base)
    fin = fin[fin["qk_alignment_head"].map(lambda v: v is not None and len(v) > 0)]
    out: dict[str, list[float | None]] = {}
    for init in ordered_inits(fin["init"]):
        vals = fin.loc[fin["init"] == init, "qk_alignment_head"]
        if vals.map(len).nunique() != 1:
            continue
        arr = np.array([np.asarray(v, float) for v in vals])  # (rows, n_head)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN head
            out[init] = [_num(x) for x in np.nanmean(arr, axis=0)]
    return out


def trace_slopes(layers: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Slopes (and means) of the seed-averaged traces of baseline rows, one row per (init, depth, layer)."""
    traces = seed_averaged_traces(baseline(layers), metrics)
    out = group_slopes(traces, ["init", "depth", "layer"], metrics)
    if not traces.empty:
        out["n_seeds"] = (
            traces.groupby(["init", "depth", "layer"], sort=True)["n_seeds"].max().to_numpy()
        )
    return out


def run_slopes(layers: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Slopes (and means) of every per-run layer trajectory, one row per (run, layer)."""
    keys = [c for c in RUN_ID_COLS if c in layers.columns] + ["layer"]
    return group_slopes(layers, keys, metrics)


def _slope_groups(slopes: pd.DataFrame, metrics: Sequence[str]) -> tuple[dict, dict[str, str]]:
    out: dict = {}
    missing: dict[str, str] = {}
    groups = vocab.slope_groups()
    for group, members in groups.items():
        sub = slopes[slopes["init"].isin(members)] if not slopes.empty else slopes
        out[group] = {
            m: _count_desc(sub[f"{m}_slope"].to_numpy(float) if not sub.empty else np.array([]))
            for m in metrics
        }
        if all(out[group][m]["n"] == 0 for m in metrics):
            missing[group] = f"no trajectories of {', '.join(members)} with >= 2 logged epochs"
    return out, missing


def slopes_section(layers: pd.DataFrame) -> Section:
    """Table 4: slopes of pr_q, pr_k, pr_q − pr_k over seed-averaged traces, per group.

    ``slopes`` is over seed-averaged traces (the paper's unit); ``slopes_per_run``
    repeats the counts over every per-run layer trajectory.
    """
    base = baseline(layers)
    if base.empty:
        return Section({}, {"slopes": "no baseline runs in the store"})
    ts = trace_slopes(base, SLOPE_METRICS)
    rs = run_slopes(base, SLOPE_METRICS)
    groups, miss = _slope_groups(ts, SLOPE_METRICS)
    groups_run, _ = _slope_groups(rs, SLOPE_METRICS)
    missing = {f"slopes.{g}": r for g, r in miss.items()}
    if len(miss) == len(groups):
        missing = {"slopes": "no baseline trajectory has >= 2 logged epochs"}
    return Section(
        {"slopes": groups, "slopes_per_run": groups_run},
        missing,
        {"trace_slopes": ts, "run_slopes": rs},
    )


def layer_categories_section(layers: pd.DataFrame) -> Section:
    """Mean final attn_entropy, attn_top1, qk_erank, pr_q per layer category (baseline runs).

    The mean is over all final (run, layer) rows of the category; ``by_depth``
    repeats it per depth, with the k used.
    """
    fin = final_rows(baseline(layers))
    if fin.empty:
        return Section({}, {"layer_categories": "no baseline runs in the store"})
    fin = fin.assign(category=layer_category(fin["layer"], fin["depth"]))
    g = fin.groupby("category")[list(CATEGORY_METRICS)]
    means, counts = g.mean(), g.size()
    overall = {}
    for c in CATEGORIES:
        if c in means.index:
            overall[c] = {m: _num(means.loc[c, m]) for m in CATEGORY_METRICS}
            overall[c]["n"] = int(counts.loc[c])
    gd = fin.groupby(["depth", "category"])[list(CATEGORY_METRICS)]
    dmeans, dcounts = gd.mean(), gd.size()
    by_depth: dict = {}
    for d in sorted(fin["depth"].unique()):
        entry: dict = {"k": int(round(int(d) / 3))}
        for c in CATEGORIES:
            if (d, c) in dmeans.index:
                entry[c] = {m: _num(dmeans.loc[(d, c), m]) for m in CATEGORY_METRICS}
                entry[c]["n"] = int(dcounts.loc[(d, c)])
        by_depth[str(int(d))] = entry
    missing = {}
    absent = [c for c in CATEGORIES if c not in overall]
    if absent:
        missing["layer_categories." + "/".join(absent)] = (
            "no layers fall in this category at the depths present"
        )
    return Section(
        {"layer_categories": overall, "layer_categories_by_depth": by_depth},
        missing,
        {"final_layers": fin},
    )


def bridge_quantities(slopes: pd.DataFrame) -> pd.DataFrame:
    """Add the four bridge columns (sign · slope / mean) to a slopes frame."""
    out = slopes.copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, (metric, sign) in BRIDGE_QUANTITIES.items():
            v = sign * out[f"{metric}_slope"].astype(float) / out[f"{metric}_mean"].astype(float)
            out[name] = v.where(np.isfinite(v))
    return out


def bridge_points(layers: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The bridge quantities per uncoupled seed-averaged cell and per uncoupled run trajectory."""
    metrics = [m for m, _ in BRIDGE_QUANTITIES.values()]
    base = baseline(layers)
    unc = base[base["init"].isin(vocab.uncoupled_inits())]
    return {
        "seed_averaged": bridge_quantities(trace_slopes(unc, metrics)),
        "per_seed": bridge_quantities(run_slopes(unc, metrics)),
    }


def bridge_section(layers: pd.DataFrame) -> Section:
    """Figure 3: Pearson r, p, n of the three bridge pairs, seed-averaged and per seed."""
    base = baseline(layers)
    if base.empty or not base["init"].isin(vocab.uncoupled_inits()).any():
        return Section({}, {"bridge": "no uncoupled baseline runs in the store"})
    pts = bridge_points(layers)
    out: dict = {}
    missing: dict[str, str] = {}
    for level, frame in pts.items():
        out[level] = {}
        for a, b in BRIDGE_PAIRS:
            key = f"{a}__{b}"
            if frame.empty:
                out[level][key] = {"r": None, "p": None, "n": 0, "note": "no trajectories"}
            else:
                out[level][key] = pearson(frame[a], frame[b])
            if out[level][key]["r"] is None:
                missing[f"bridge.{level}.{key}"] = out[level][key].get("note", "undefined")
    return Section({"bridge": out}, missing, pts)


def intervention_outcomes(layers: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """One row per intervention run: identity, final epoch and the Table 5 metrics."""
    iv = intervention_rows(layers)
    per_run = run_layer_means(iv, INTERVENTION_LAYER_METRICS, when="final")
    ep = intervention_rows(epochs) if not epochs.empty else epochs
    id_cols = [c for c in RUN_ID_COLS]
    if not ep.empty:
        ep = ep[ep["val_loss"].notna()] if "val_loss" in ep else ep
        vl = final_rows(ep)[[*id_cols, "epoch", "val_loss"]].rename(columns={"epoch": "val_epoch"})
        vl = vl.drop_duplicates("run_id", keep="last")
    else:
        vl = pd.DataFrame(columns=[*id_cols, "val_epoch", "val_loss"])
    if per_run.empty and vl.empty:
        return pd.DataFrame(columns=[*id_cols, "epoch", *INTERVENTION_METRICS])
    if vl.empty:
        merged = per_run.assign(val_epoch=np.nan, val_loss=np.nan)
    elif per_run.empty:
        merged = vl.assign(epoch=np.nan, **{m: np.nan for m in INTERVENTION_LAYER_METRICS})
    else:
        merged = per_run.merge(vl, on=id_cols, how="outer")
    return merged.sort_values(["init", "intervention", "seed"]).reset_index(drop=True)


def paired_differences(outcomes: pd.DataFrame) -> pd.DataFrame:
    """Each run's Table 5 metrics minus those of the ``none`` run of the same (preset, init, depth, seed).

    Columns: identity, ``<m>`` (the run's value) and ``d_<m>`` (the difference).
    Runs without a matched ``none`` run are dropped.
    """
    keys = ["preset", "init", "depth", "seed"]
    none = outcomes[outcomes["intervention"] == vocab.CONTROL][keys + list(INTERVENTION_METRICS)]
    none = none.drop_duplicates(keys, keep="last")
    m = outcomes.merge(none, on=keys, how="inner", suffixes=("", "__none"))
    for c in INTERVENTION_METRICS:
        m[f"d_{c}"] = m[c].astype(float) - m[f"{c}__none"].astype(float)
    return m.drop(columns=[f"{c}__none" for c in INTERVENTION_METRICS])


def _condition_stats(runs: pd.DataFrame, pairs: pd.DataFrame, cond: str) -> dict:
    entry: dict = {}
    r = runs[runs["intervention"] == cond]
    p = pairs[pairs["intervention"] == cond]
    for mtr in INTERVENTION_METRICS:
        d = describe(r[mtr].astype(float))
        dd = describe(p[f"d_{mtr}"].astype(float)) if not p.empty else describe([])
        entry[mtr] = {
            "mean": d["mean"],
            "sd": d["sd"],
            "n": d["n"],
            "delta": dd["mean"],
            "delta_sd": dd["sd"],
            "n_pairs": dd["n"],
        }
    entry["n_seeds"] = int(len(r))  # runs of the condition (one per seed), not distinct seed numbers
    entry["n_pairs"] = int(len(p))
    pred = vocab.predicted(cond)
    entry["predicted"] = {k: ("+" if v > 0 else "-") for k, v in pred.items()} if pred else None
    if not pred or p.empty:
        entry["confidence"] = None
        entry["confidence_by_metric"] = None
        return entry
    holds = {}
    finite_all = np.ones(len(p), bool)
    all_hold = np.ones(len(p), bool)
    for mtr, sign in pred.items():
        d = p[f"d_{mtr}"].to_numpy(float)
        fin = np.isfinite(d)
        h = (np.sign(d) == sign) & fin
        holds[mtr] = _num(h[fin].mean()) if fin.any() else None
        finite_all &= fin
        all_hold &= h
    entry["confidence"] = _num(all_hold[finite_all].mean()) if finite_all.any() else None
    entry["confidence_by_metric"] = holds
    entry["n_confidence"] = int(finite_all.sum())
    return entry


def interventions_section(layers: pd.DataFrame, epochs: pd.DataFrame) -> Section:
    """Table 5: per condition mean/sd of the final metrics, paired deltas vs ``none``, confidence.

    Shape: ``interventions -> condition -> {metric: {mean, sd, n, delta, delta_sd, n_pairs},
    n_seeds, n_pairs, predicted, confidence, confidence_by_metric}`` for one init
    (``interventions_init``: independent_xavier when present, else the only /
    first init). With several inits, ``interventions_by_init -> init -> condition -> ...``
    holds all of them.
    """
    runs = intervention_outcomes(layers, epochs)
    if runs.empty:
        return Section({}, {"interventions": "no intervention runs in the store"})
    pairs = paired_differences(runs)
    missing: dict[str, str] = {}
    if pairs.empty:
        missing["interventions.delta"] = (
            "no intervention run has a matched `none` run (same init, depth, seed); "
            "deltas and confidence scores not computed"
        )
    by_init: dict = {}
    inits = ordered_inits(runs["init"])
    for init in inits:
        r = runs[runs["init"] == init]
        p = pairs[pairs["init"] == init] if not pairs.empty else pairs
        conds = [c for c in vocab.conditions() if c in set(r["intervention"])]
        conds += sorted(set(r["intervention"]) - set(vocab.conditions()))
        by_init[init] = {c: _condition_stats(r, p, c) for c in conds}
    main = vocab.DEFAULT_INIT if vocab.DEFAULT_INIT in by_init else inits[0]
    out: dict = {"interventions": by_init[main], "interventions_init": main}
    if len(inits) > 1:
        out["interventions_by_init"] = by_init
    absent = [c for c in vocab.conditions() if c not in by_init[main]]
    if absent:
        missing["interventions.conditions"] = f"conditions absent for {main}: {', '.join(absent)}"
    return Section(out, missing, {"intervention_runs": runs, "intervention_pairs": pairs})


def checkpoint_revision_means(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """Layer-means per (series, revision) of ok rows with ``progress`` in [0, 1].

    Progress is training tokens min–max scaled to [0, 1] within the series
    (SPEC §8): (tokens − min) / (max − min) over the series' ok revisions. A
    series without tokens on every revision uses steps the same way, and one
    with neither min–max scales the stored ``progress``. A series whose values
    are all equal (one revision) gets progress 1.
    """
    cols = ["series", "revision", "progress", "n_layers", "pr_q", "pr_k", "pr_q_minus_pr_k"]
    if checkpoints.empty:
        return pd.DataFrame(columns=cols)
    ck = checkpoints[(checkpoints["status"] == "ok") & checkpoints["layer"].notna()].copy()
    if ck.empty:
        return pd.DataFrame(columns=cols)
    diff = ck["pr_q"].astype(float) - ck["pr_k"].astype(float)
    ck["pr_q_minus_pr_k"] = ck["pr_q_minus_pr_k"].astype(float).fillna(diff)
    g = ck.groupby(["series", "revision"], sort=True)
    out = g[["pr_q", "pr_k", "pr_q_minus_pr_k"]].mean()
    out["n_layers"] = g.size()
    for c in ("progress", "tokens", "step"):
        out[c] = g[c].max().astype(float)
    out = out.reset_index()
    scaled = pd.Series(np.nan, index=out.index)
    for c in ("tokens", "step", "progress"):
        g = out.groupby("series")[c]
        lo, hi, complete = g.transform("min"), g.transform("max"), g.transform(lambda v: v.notna().all())
        use = scaled.isna() & complete.astype(bool)
        with np.errstate(invalid="ignore", divide="ignore"):
            mm = ((out[c] - lo) / (hi - lo)).where(hi > lo, 1.0)
        scaled = scaled.where(~use, mm)
    out["progress"] = scaled
    return out.sort_values(["series", "progress"]).reset_index(drop=True)


def checkpoints_section(checkpoints: pd.DataFrame) -> Section:
    """Appendix A: per series slope of layer-mean pr_q − pr_k on progress and the link check.

    ``checkpoints -> {series: {name: {n_revisions, slope_pr_q_minus_pr_k, link_recurs,
    r_pr_k__qk_erank, r_qk_erank__attn_entropy}}, positive_series, n_fitted_series,
    link_recurs_series}``; slopes need >= 3 ok revisions (else null), and the two
    counts are over fitted series only. link_recurs: Pearson r > 0 for both
    (pr_k, qk_erank) and (qk_erank, attn_entropy) across layers x revisions.
    """
    revs = checkpoint_revision_means(checkpoints)
    if revs.empty:
        return Section({}, {"checkpoints": "no ok checkpoint rows in the store"})
    sl = group_slopes(revs, ["series"], ["pr_q_minus_pr_k"], x="progress").set_index("series")
    ck = checkpoints[(checkpoints["status"] == "ok") & checkpoints["layer"].notna()]
    series: dict = {}
    for name, sub in ck.groupby("series", sort=True):
        n_rev = int(sub["revision"].nunique())
        slope = _num(sl.loc[name, "pr_q_minus_pr_k_slope"]) if n_rev >= 3 else None
        r1 = pearson(sub["pr_k"], sub["qk_erank"])
        r2 = pearson(sub["qk_erank"], sub["attn_entropy"])
        link = None
        if r1["r"] is not None and r2["r"] is not None:
            link = bool(r1["r"] > 0 and r2["r"] > 0)
        series[str(name)] = {
            "n_revisions": n_rev,
            "slope_pr_q_minus_pr_k": slope,
            "link_recurs": link,
            "r_pr_k__qk_erank": r1["r"],
            "r_qk_erank__attn_entropy": r2["r"],
            "n_rows": int(len(sub)),
        }
    fitted = [s for s in series.values() if s["slope_pr_q_minus_pr_k"] is not None]
    out = {
        "series": series,
        "positive_series": sum(s["slope_pr_q_minus_pr_k"] > 0 for s in fitted),
        "n_fitted_series": len(fitted),
        "link_recurs_series": sum(bool(s["link_recurs"]) for s in fitted),
    }
    failed = checkpoints[checkpoints["status"] == "failed"]
    if not failed.empty:
        out["failed_revisions"] = int(failed[["series", "revision"]].drop_duplicates().shape[0])
    dup = checkpoints[checkpoints["status"].astype(str).str.startswith("duplicate_of:")]
    if not dup.empty:  # same weights as another revision (sweep.integrity): not in the fits
        dup = dup.drop_duplicates(["series", "revision"])
        out["duplicate_revisions"] = {f"{r.series}@{r.revision}": r.status.split(":", 1)[1]
                                      for r in dup.itertuples()}
    missing = {}
    if not fitted:
        missing["checkpoints.slopes"] = "no checkpoint series has >= 3 ok revisions"
    return Section({"checkpoints": out}, missing, {"checkpoint_revisions": revs})


# ----------------------------------------------------------------------------
# provenance and the whole
# ----------------------------------------------------------------------------


def ordered_inits(values: Iterable[str]) -> list[str]:
    present = set(pd.Series(values).dropna().unique().tolist())
    known = vocab.inits()
    return [i for i in known if i in present] + sorted(present - set(known))


def _epoch_range(frame: pd.DataFrame) -> dict:
    if frame.empty:
        return {"min": None, "max": None}
    e = frame["epoch"].astype(int)
    return {"min": int(e.min()), "max": int(e.max())}


def provenance(layers: pd.DataFrame, epochs: pd.DataFrame, checkpoints: pd.DataFrame) -> dict:
    """Which sweeps/presets the data came from, run counts and the epochs used."""
    out: dict = {"sweeps": {}}
    ids = pd.concat(
        [df[list(RUN_ID_COLS)] for df in (layers, epochs) if not df.empty and "run_id" in df]
        or [pd.DataFrame(columns=list(RUN_ID_COLS))]
    ).drop_duplicates("run_id")
    for sweep in sorted(ids["sweep"].unique().tolist()):
        ri = ids[ids["sweep"] == sweep]
        lr = layers[layers["sweep"] == sweep] if not layers.empty else layers
        last = lr.groupby("run_id")["epoch"].max() if not lr.empty else pd.Series(dtype=int)
        out["sweeps"][sweep] = {
            "presets": sorted(ri["preset"].unique().tolist()),
            "n_runs": int(len(ri)),
            "inits": ordered_inits(ri["init"]),
            "depths": sorted(int(d) for d in ri["depth"].unique()),
            "seeds": sorted(int(s) for s in ri["seed"].unique()),
            "interventions": sorted(ri["intervention"].unique().tolist()),
            "final_epoch": {
                "min": int(last.min()) if len(last) else None,
                "max": int(last.max()) if len(last) else None,
            },
            "n_layer_rows": int(len(lr)),
        }
    out["presets"] = sorted(ids["preset"].unique().tolist())
    out["n_runs"] = int(len(ids))
    out["paper_scale"] = out["presets"] == ["paper"]
    if not checkpoints.empty:
        ok = checkpoints[checkpoints["status"] == "ok"]
        out["checkpoint_series"] = sorted(ok["series"].unique().tolist())
        out["checkpoint_revisions"] = int(ok[["series", "revision"]].drop_duplicates().shape[0])
    else:
        out["checkpoint_series"] = []
        out["checkpoint_revisions"] = 0
    return out


@dataclass
class Analysis:
    """Result of ``compute_all``: the JSON-ready stats plus the frames figures and tables use."""

    stats: dict
    frames: dict[str, pd.DataFrame]
    layers: pd.DataFrame
    epochs: pd.DataFrame
    checkpoints: pd.DataFrame


def _dedupe(df: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    if df.empty or not set(keys) <= set(df.columns):
        return df
    return df.drop_duplicates(list(keys), keep="last")


def compute_all(tables: dict[str, pd.DataFrame], preset: str | None = None) -> Analysis:
    """Every §8 section on whatever the tables hold; never raises on a partial store.

    ``preset`` keeps only the runs of that preset (checkpoints are kept whole).
    """
    layers = tables.get("layers", pd.DataFrame())
    epochs = tables.get("epochs", pd.DataFrame())
    checkpoints = tables.get("checkpoints", pd.DataFrame())
    layers = _dedupe(layers, ("run_id", "epoch", "layer"))
    epochs = _dedupe(epochs, ("run_id", "epoch"))
    checkpoints = _dedupe(checkpoints, ("series", "revision", "layer"))
    if layers.empty:
        layers = pd.DataFrame(columns=[*RUN_ID_COLS, "epoch", "layer"])
    if epochs.empty:
        epochs = pd.DataFrame(columns=[*RUN_ID_COLS, "epoch", "val_loss", "status"])
    if checkpoints.empty:
        checkpoints = pd.DataFrame(columns=["series", "revision", "layer", "status"])
    notes: list[str] = []
    if preset is not None:
        layers = layers[layers["preset"] == preset]
        epochs = epochs[epochs["preset"] == preset]
        notes.append(f"restricted to preset {preset!r}")
    bad = diverged_runs(epochs)
    if bad:
        layers = layers[~layers["run_id"].isin(bad)]
        epochs = epochs[~epochs["run_id"].isin(bad)]
        notes.append(f"{len(bad)} diverged run(s) excluded")
    short = incomplete_runs(layers, epochs)
    if short:
        layers = layers[~layers["run_id"].isin(short)]
        epochs = epochs[~epochs["run_id"].isin(short)]
        notes.append(
            f"{len(short)} run(s) whose last epoch differs from their preset's left out of every "
            "statistic (listed under provenance.excluded_runs)"
        )
    if not epochs.empty:
        running = epochs.sort_values("epoch").groupby("run_id")["status"].last()
        n_running = int((running == "running").sum())
        if n_running:
            notes.append(
                f"{n_running} run(s) still running: their last logged epoch is used as final"
            )

    stats: dict = {"provenance": provenance(layers, epochs, checkpoints)}
    stats["provenance"]["excluded_runs"] = {r: "diverged" for r in bad} | short
    if len(stats["provenance"]["presets"]) > 1:
        notes.append(
            "the store mixes presets "
            + ", ".join(stats["provenance"]["presets"])
            + "; pass a preset to keep one"
        )
    missing: dict[str, str] = {}
    frames: dict[str, pd.DataFrame] = {}
    sections = [
        alignment_section(layers),
        slopes_section(layers),
        layer_categories_section(layers),
        bridge_section(layers),
        interventions_section(layers, epochs),
        checkpoints_section(checkpoints),
    ]
    for sec in sections:
        stats.update(sec.stats)
        missing.update(sec.missing)
        frames.update(sec.frames)
    base = baseline(layers)
    if not base.empty:
        absent = [i for i in vocab.inits() if i not in set(base["init"])]
        if absent:
            missing["baseline.inits"] = (
                f"init(s) absent from the baseline: {', '.join(absent)}; groups pool only the inits present"
            )
    for key in (
        "alignment",
        "slopes",
        "layer_categories",
        "bridge",
        "interventions",
        "checkpoints",
    ):
        stats.setdefault(key, None)
    stats["missing"] = missing
    stats["notes"] = notes
    stats["reference"] = PAPER_REFERENCE
    return Analysis(to_jsonable(stats), frames, layers, epochs, checkpoints)
