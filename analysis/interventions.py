"""SPEC §8 interventions (Table 5): outcomes per condition and paired differences to the control."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import vocabulary as vocab
from analysis.frames import (
    RUN_ID_COLS,
    at_default_strengths,
    final_rows,
    intervention_rows,
    ordered_inits,
    run_layer_means,
)
from analysis.primitives import Section, describe, num

#: Table 5 metrics; the first four are final layer-means from ``layers``, val_loss from ``epochs``.
INTERVENTION_LAYER_METRICS: tuple[str, ...] = ("attn_entropy", "logit_std", "qk_erank", "pr_k")
INTERVENTION_METRICS: tuple[str, ...] = INTERVENTION_LAYER_METRICS + ("val_loss",)


def intervention_outcomes(layers: pd.DataFrame, epochs: pd.DataFrame) -> pd.DataFrame:
    """One row per intervention run at its condition's default strengths (the paper's one point;
    a strength sweep's other cells are the dose–response's, SPEC §5): identity, final epoch and
    the Table 5 metrics."""
    layers, epochs = at_default_strengths(layers), at_default_strengths(epochs)
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
        holds[mtr] = num(h[fin].mean()) if fin.any() else None
        finite_all &= fin
        all_hold &= h
    entry["confidence"] = num(all_hold[finite_all].mean()) if finite_all.any() else None
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
