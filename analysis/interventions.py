"""SPEC §8 interventions (Table 5): outcomes per condition and paired differences to the control."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis import claims
from analysis import vocabulary as vocab
from analysis.frames import (
    RUN_ID_COLS,
    at_default_strengths,
    final_rows,
    intervention_rows,
    ordered_inits,
    run_layer_means,
)
from analysis.primitives import OMIT_NONE, Summary, num, to_jsonable
from analysis.section import Analysis, Computed, Inputs, Result, Section

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
    return merged.sort_values(["init", "condition", "seed"]).reset_index(drop=True)


def paired_differences(outcomes: pd.DataFrame) -> pd.DataFrame:
    """Each run's Table 5 metrics minus those of the ``none`` run of the same (preset, init, depth, seed).

    Columns: identity, ``<m>`` (the run's value) and ``d_<m>`` (the difference).
    Runs without a matched ``none`` run are dropped.
    """
    keys = ["preset", "init", "depth", "seed"]
    none = outcomes[outcomes["condition"] == vocab.CONTROL][keys + list(INTERVENTION_METRICS)]
    none = none.drop_duplicates(keys, keep="last")
    m = outcomes.merge(none, on=keys, how="inner", suffixes=("", "__none"))
    for c in INTERVENTION_METRICS:
        m[f"d_{c}"] = m[c].astype(float) - m[f"{c}__none"].astype(float)
    return m.drop(columns=[f"{c}__none" for c in INTERVENTION_METRICS])


@dataclass
class Outcome:
    """One Table 5 metric of a condition: over its runs, and the paired difference from ``none``."""

    mean: float | None
    sd: float | None
    n: int
    delta: float | None
    delta_sd: float | None
    n_pairs: int


@dataclass
class ConditionStats:
    """Table 5 for one condition (``INTERVENTION_METRICS`` are its first five fields)."""

    attn_entropy: Outcome
    logit_std: Outcome
    qk_erank: Outcome
    pr_k: Outcome
    val_loss: Outcome
    n_seeds: int  # runs of the condition (one per seed), not distinct seed numbers
    n_pairs: int
    predicted: dict[str, str] | None  # metric -> "+" / "-"
    confidence: float | None = None  # fraction of pairs where every predicted direction holds
    confidence_by_metric: dict[str, float | None] | None = None
    n_confidence: int | None = field(default=None, metadata=OMIT_NONE)

    def outcome(self, metric: str) -> Outcome:
        return getattr(self, metric)


#: condition -> its statistics
Conditions = dict[str, ConditionStats]


@dataclass
class InterventionsResult(Result):
    """Table 5 for one init (``init``), and per init when the store holds several."""

    conditions: Conditions  # stats.json "interventions"
    init: str  # "interventions_init"
    by_init: dict[str, Conditions] | None  # "interventions_by_init", only with several inits

    def to_json(self) -> dict[str, object]:
        out = {"interventions": to_jsonable(self.conditions), "interventions_init": self.init}
        if self.by_init is not None:
            out["interventions_by_init"] = to_jsonable(self.by_init)
        return out


def _condition_stats(runs: pd.DataFrame, pairs: pd.DataFrame, cond: str) -> ConditionStats:
    r = runs[runs["condition"] == cond]
    p = pairs[pairs["condition"] == cond]
    outcomes = {}
    for mtr in INTERVENTION_METRICS:
        d = Summary.of(r[mtr].astype(float))
        dd = Summary.of(p[f"d_{mtr}"].astype(float)) if not p.empty else Summary.of([])
        outcomes[mtr] = Outcome(d.mean, d.sd, d.n, dd.mean, dd.sd, dd.n)
    pred = vocab.predicted(cond)
    entry = ConditionStats(**outcomes, n_seeds=int(len(r)), n_pairs=int(len(p)),
                           predicted={k: ("+" if v > 0 else "-") for k, v in pred.items()} if pred else None)
    if not pred or p.empty:
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
    entry.confidence = num(all_hold[finite_all].mean()) if finite_all.any() else None
    entry.confidence_by_metric = holds
    entry.n_confidence = int(finite_all.sum())
    return entry


def compute_interventions(layers: pd.DataFrame, epochs: pd.DataFrame) -> Computed[InterventionsResult]:
    """Table 5: per condition mean/sd of the final metrics, paired deltas vs ``none``, confidence.

    Shape: ``interventions -> condition -> {metric: {mean, sd, n, delta, delta_sd, n_pairs},
    n_seeds, n_pairs, predicted, confidence, confidence_by_metric}`` for one init
    (``interventions_init``: independent_xavier when present, else the only /
    first init). With several inits, ``interventions_by_init -> init -> condition -> ...``
    holds all of them.
    """
    runs = intervention_outcomes(layers, epochs)
    if runs.empty:
        return Computed(None, {"interventions": "no intervention runs in the store"})
    pairs = paired_differences(runs)
    missing: dict[str, str] = {}
    if pairs.empty:
        missing["interventions.delta"] = (
            "no intervention run has a matched `none` run (same init, depth, seed); "
            "deltas and confidence scores not computed"
        )
    by_init: dict[str, Conditions] = {}
    inits = ordered_inits(runs["init"])
    for init in inits:
        r = runs[runs["init"] == init]
        p = pairs[pairs["init"] == init] if not pairs.empty else pairs
        conds = [c for c in vocab.conditions() if c in set(r["condition"])]
        conds += sorted(set(r["condition"]) - set(vocab.conditions()))
        by_init[init] = {c: _condition_stats(r, p, c) for c in conds}
    main = vocab.DEFAULT_INIT if vocab.DEFAULT_INIT in by_init else inits[0]
    out = InterventionsResult(by_init[main], main, by_init if len(inits) > 1 else None)
    absent = [c for c in vocab.conditions() if c not in by_init[main]]
    if absent:
        missing["interventions.conditions"] = f"conditions absent for {main}: {', '.join(absent)}"
    return Computed(out, missing, {"intervention_runs": runs, "intervention_pairs": pairs})


def _condition_rows(iv: InterventionsResult, row: Callable[[str, ConditionStats], dict | None]) -> pd.DataFrame | None:
    """One row per (init, condition); the init column only when the store holds more than one
    init's interventions."""
    blocks = iv.by_init or {iv.init: iv.conditions}
    rows = [{"init": init, "condition": cond, "label": vocab.condition_label(cond), **r}
            for init, conds in blocks.items() for cond, e in conds.items()
            if (r := row(cond, e)) is not None]
    if not rows:
        return None
    df = pd.DataFrame(rows)
    return df if len(blocks) > 1 else df.drop(columns="init")


def table5_interventions(iv: InterventionsResult) -> pd.DataFrame | None:
    """Per condition: mean and sd over seeds of the final metrics, and the confidence score."""
    def row(cond: str, e: ConditionStats) -> dict:
        r: dict = {"n_seeds": e.n_seeds}
        for m in INTERVENTION_METRICS:
            r[f"{m}_mean"], r[f"{m}_sd"] = e.outcome(m).mean, e.outcome(m).sd
        return {**r, "confidence": e.confidence}

    return _condition_rows(iv, row)


def table5_deltas(iv: InterventionsResult) -> pd.DataFrame | None:
    """Per condition: paired difference from the control (mean over seeds) and direction fractions."""
    def row(cond: str, e: ConditionStats) -> dict | None:
        if cond == vocab.CONTROL:
            return None
        r: dict = {"n_pairs": e.n_pairs}
        r.update({f"delta_{m}": e.outcome(m).delta for m in INTERVENTION_METRICS})
        r["predicted"] = ", ".join(f"{m} {s}" for m, s in (e.predicted or {}).items()) or None
        by = e.confidence_by_metric or {}
        r.update({f"holds_{m}": by.get(m) for m in ("attn_entropy", "logit_std", "qk_erank")})
        return {**r, "confidence": e.confidence}

    return _condition_rows(iv, row)


def sentence(iv: InterventionsResult) -> str:
    """Per condition: the paired deltas and how often every predicted direction holds."""
    out = []
    for cond, e in iv.conditions.items():
        if cond == vocab.CONTROL:
            continue
        deltas = ", ".join(
            f"Δ{m} {e.outcome(m).delta:+.3g}"
            for m in ("attn_entropy", "logit_std", "qk_erank")
            if e.outcome(m).delta is not None
        )
        if e.confidence is not None:
            n = e.n_confidence if e.n_confidence is not None else e.n_pairs
            k = round(e.confidence * n)
            conf = f"every predicted direction holds in {k} of {n} seeds (confidence {e.confidence:.2f})"
        else:
            conf = "no predicted direction (no confidence score)"
        out.append(f"{vocab.condition_label(cond)}: {deltas or 'no paired deltas'}; {conf}.")
    return (f"Paired differences from the matched `{vocab.CONTROL}` run ({vocab.init_label(iv.init)}): "
            + " ".join(out))


class Interventions(Section[InterventionsResult]):
    """SPEC §8 Table 5."""

    name = "interventions"
    heading = "Table 5 — interventions"
    reads = ("interventions",)
    table_names = ("table5_interventions", "table5_deltas")

    def compute(self, data: Inputs) -> Computed[InterventionsResult]:
        return compute_interventions(data.layers, data.epochs)

    def tables(self, result: InterventionsResult) -> dict[str, pd.DataFrame | None]:
        return {"table5_interventions": table5_interventions(result), "table5_deltas": table5_deltas(result)}

    def prose(self, result: InterventionsResult) -> list[str]:
        return [sentence(result)]

    def claims(self, an: Analysis, paper_scale: bool) -> list[claims.Claim]:
        return claims.intervention_claims(an, paper_scale)


SECTION = Interventions()
