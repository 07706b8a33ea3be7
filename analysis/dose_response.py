"""SPEC §5, §8 dose–response: is a condition's effect monotone in its strength? (The project's
claim, not the paper's: the paper runs each condition at one strength.)

A condition is *swept* when its intervention runs (of one init) hold at least two strength
settings (``--strengths``, the store's ``strengths`` column; null = the defaults). For each
swept condition and each metric it predicts (its class's ``predicted``; the Table 5 layer
metrics, without a direction, for a condition that predicts none):

* Δ(run) = the run's final layer-mean of the metric − that of the matched ``none`` run (same
  preset, init, depth, seed: ``analysis.interventions.paired_differences``'s matching);
* per strength: the mean of Δ over seeds, its sd and the seed band (min–max over seeds);
* ρ = Spearman correlation (``scipy.stats.spearmanr``) of Δ against strength over every
  (strength, seed) pair: descriptive (its pairs share seeds, so its p-value is not a test);
* the test, with the seed as the unit: each seed's OLS slope of Δ on strength (over that seed's
  strengths and depths), their mean, 95 % t interval and one-sample t-test against 0
  (``analysis.inference.t_test``). The scorecard row of each predicted metric carries those
  per-seed slopes, so its verdict is the scorecard's (Holm over the counted claims).

One section module (``SECTION``, registered in ``analysis.compute``): ``compute_dose_response``
returns the typed ``DoseResponse`` (stats.json ``dose_response``), two tables, a sentence per
condition, the figure ``fig_dose_response`` (one row of panels per swept condition, drawn by
``sweep.report.figures.fig_dose_response``) and one scorecard row per (condition, predicted metric).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis import claims
from analysis import vocabulary as vocab
from analysis.frames import intervention_rows, ordered_inits, run_layer_means, run_strengths
from analysis.inference import t_test
from analysis.interventions import INTERVENTION_LAYER_METRICS
from analysis.primitives import fmt, num, to_jsonable
from analysis.section import Analysis, Computed, Figure, Inputs, Result, Section
from analysis.units import slope_rows

#: How report.md and the scorecard name the claim: ours, not the paper's.
CLAIM_OWNER = "project's claim, not the paper's"
KEYS = ["preset", "init", "depth", "seed"]  # a run's matched none run shares these


@dataclass(frozen=True)
class DosePoint:
    """One strength of a swept condition: Δ over its seeds."""

    strength: float
    mean: float | None  # mean of Δ over the (seed, depth) runs at this strength
    sd: float | None  # sample sd (ddof 1); None with one run
    low: float | None  # seed band: min of Δ over the runs
    high: float | None  # max of Δ
    n: int  # runs with a finite Δ


@dataclass(frozen=True)
class DoseMetric:
    """One metric of a swept condition: its points, Spearman ρ, and the per-seed slopes it is tested on."""

    metric: str
    predicted: int | None  # +1 / −1 (SPEC §5), None when the condition predicts nothing for it
    points: tuple[DosePoint, ...]
    rho: float | None  # Spearman ρ of Δ against strength over every finite (strength, seed) pair
    p: float | None  # spearmanr's p-value (descriptive: the pairs share seeds)
    seed_slopes: tuple[float, ...]  # per seed: OLS slope of Δ on strength (the test's units)
    slope: float | None  # their mean
    ci_low: float | None  # its 95 % t interval over seeds
    ci_high: float | None
    p_seeds: float | None  # two-sided one-sample t-test of the per-seed slopes against 0 (unadjusted)
    n_pairs: int
    n_seeds: int
    reason: str | None  # why not measured, or a note

    @property
    def expected(self) -> str | None:
        return None if self.predicted is None else ("> 0" if self.predicted > 0 else "< 0")


@dataclass(frozen=True)
class DoseCondition:
    """One swept condition of one init."""

    condition: str
    field: str  # the strength that varies
    default: float | None  # its default (None for a condition no registry knows)
    init: str
    strengths: tuple[float, ...]  # the strengths present, ascending
    n_runs: int  # runs of the condition at these strengths with a matched none run
    metrics: tuple[DoseMetric, ...]


@dataclass
class DoseResponse(Result):
    """The section's result: one entry per swept condition (the per-run Δ are the frame
    ``dose_response_deltas``)."""

    key = "dose_response"
    conditions: tuple[DoseCondition, ...]

    def to_json(self) -> dict[str, object]:
        """stats.json ``dose_response``: condition -> {field, default, init, strengths, n_runs,
        claim, metrics: {metric: {predicted, expected, rho, p, seed_slopes, slope, ci_low, ci_high,
        p_seeds, n_pairs, n_seeds, reason, points: [{strength, mean, sd, low, high, n}]}}}."""
        return {self.key: to_jsonable({
            c.condition: {
                "field": c.field, "default": c.default, "init": c.init, "strengths": list(c.strengths),
                "n_runs": c.n_runs, "claim": CLAIM_OWNER,
                "metrics": {m.metric: {
                    "predicted": m.predicted, "expected": m.expected, "rho": m.rho, "p": m.p,
                    "seed_slopes": list(m.seed_slopes), "slope": m.slope, "ci_low": m.ci_low,
                    "ci_high": m.ci_high, "p_seeds": m.p_seeds, "n_pairs": m.n_pairs, "n_seeds": m.n_seeds,
                    "reason": m.reason,
                    "points": [vars(p) for p in m.points]} for m in c.metrics},
            } for c in self.conditions})}


def spearman(strength: np.ndarray, delta: np.ndarray) -> tuple[float | None, float | None, int]:
    """(ρ, p, n) of ``scipy.stats.spearmanr`` over the finite pairs; None with < 3 or a constant."""
    ok = np.isfinite(strength) & np.isfinite(delta)
    n = int(ok.sum())
    if n < 3 or np.ptp(strength[ok]) == 0 or np.ptp(delta[ok]) == 0:
        return None, None, n
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sps.spearmanr(strength[ok], delta[ok])
    return num(res.statistic), num(res.pvalue), n


def _per_run(layers: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Final layer-means of the intervention runs, with each run's strengths (a dict)."""
    iv = intervention_rows(layers)
    runs = run_layer_means(iv, metrics, when="final")
    if runs.empty:
        return runs.assign(strengths=[])
    by_run = run_strengths(iv.drop_duplicates("run_id")).set_axis(iv.drop_duplicates("run_id")["run_id"])
    return runs.assign(strengths=runs["run_id"].map(by_run))


def _points(sub: pd.DataFrame, col: str, strengths: list[float]) -> tuple[DosePoint, ...]:
    out = []
    for s in strengths:
        v = sub.loc[sub["strength"] == s, col].to_numpy(float)
        v = v[np.isfinite(v)]
        out.append(DosePoint(float(s), num(v.mean()) if v.size else None,
                             num(v.std(ddof=1)) if v.size >= 2 else None,
                             num(v.min()) if v.size else None, num(v.max()) if v.size else None, int(v.size)))
    return tuple(out)


def _metric(cond: str, metric: str, sign: int | None, sub: pd.DataFrame, strengths: list[float]) -> DoseMetric:
    col = f"d_{metric}"
    s, d = sub["strength"].to_numpy(float), sub[col].to_numpy(float)
    rho, p, n_pairs = spearman(s, d)
    # per seed: its (depth, strength) cells' Δ, the strength of each cell beside it
    wide = sub.pivot_table(index="seed", columns=["depth", "strength"], values=col, aggfunc="mean")
    x = wide.to_numpy(float)
    cell_s = np.broadcast_to(np.array([c[1] for c in wide.columns], float), x.shape)
    slopes = slope_rows(cell_s, x)
    test = t_test(slopes)
    reason = None
    if rho is None:
        reason = (f"ρ undefined: {n_pairs} finite (strength, seed) pairs" if n_pairs < 3
                  else "ρ undefined: Δ or the strength is constant")
    elif test.n < 2:
        reason = f"{test.n} seed with a slope: no test"
    return DoseMetric(metric, sign, _points(sub, col, strengths), rho, p,
                      tuple(float(v) for v in slopes[np.isfinite(slopes)]), test.value, test.ci_low, test.ci_high,
                      test.p, n_pairs, test.n, reason)


def compute_dose_response(layers: pd.DataFrame) -> Computed[DoseResponse]:
    """Every swept condition's dose–response on one preset's ``layers`` (module docstring);
    the result is None, with the reason under ``missing["dose_response"]``, when none was swept."""
    iv = intervention_rows(layers) if not layers.empty else layers
    if iv.empty:
        return Computed(None, {})  # no interventions at all: the section is left out (optional)
    conds = [c for c in vocab.conditions() if c in set(iv["condition"]) and c != vocab.CONTROL]
    conds += sorted(set(iv["condition"]) - set(vocab.conditions()) - {vocab.CONTROL})
    wanted = {c: (vocab.predicted(c) or dict.fromkeys(INTERVENTION_LAYER_METRICS)) for c in conds}
    metrics = sorted({m for ms in wanted.values() for m in ms if m in iv.columns})
    runs = _per_run(iv, metrics)
    missing: dict[str, str] = {}
    none = runs[runs["condition"] == vocab.CONTROL].drop_duplicates(KEYS, keep="last")
    out, frames = [], []
    for cond in conds:
        inits = ordered_inits(runs.loc[runs["condition"] == cond, "init"])
        inits.sort(key=lambda i: i != vocab.DEFAULT_INIT)  # Table 5's init first
        for init in inits:
            r = runs[(runs["condition"] == cond) & (runs["init"] == init)]
            settings = {tuple(sorted(s.items())) for s in r["strengths"]}
            if len(settings) < 2:
                continue  # one strength: Table 5's, not a sweep
            varying = sorted({k for s in settings for k, _ in s if len({dict(t).get(k) for t in settings}) > 1})
            if len(varying) != 1:
                missing[f"dose_response.{cond}"] = (
                    f"{init}: strengths {', '.join(varying)} vary together; a dose–response needs one axis")
                continue
            (fld,) = varying
            r = r.assign(strength=[float(s[fld]) for s in r["strengths"]])
            m = r.merge(none[KEYS + metrics], on=KEYS, how="inner", suffixes=("", "__none"))
            if m.empty:
                missing[f"dose_response.{cond}"] = f"{init}: no {cond} run has a matched none run"
                continue
            for mtr in metrics:
                m[f"d_{mtr}"] = m[mtr].astype(float) - m[f"{mtr}__none"].astype(float)
            strengths = sorted(m["strength"].unique().tolist())
            mets = tuple(_metric(cond, mtr, sign, m, strengths) for mtr, sign in wanted[cond].items()
                         if mtr in metrics)
            default = vocab.default_strengths(cond).get(fld)
            out.append(DoseCondition(cond, fld, default, init, tuple(strengths), len(m), mets))
            frames.append(m.assign(condition=cond, field=fld)[
                ["condition", "field", "strength", "run_id", *KEYS, *[f"d_{x}" for x in metrics]]])
            others = [i for i in inits if i != init]
            if others:
                missing[f"dose_response.{cond}.inits"] = (f"analysed for {init} only; the runs of "
                                                          f"{', '.join(others)} are left out")
            break  # one init per condition (the first with a sweep: independent_xavier when present)
    if not out:  # nothing swept: the section is left out; a sweep that failed says why
        if missing:
            missing["dose_response"] = "; ".join(missing.values())
        return Computed(None, missing)
    deltas = pd.concat(frames, ignore_index=True)
    return Computed(DoseResponse(tuple(out)), missing, {"dose_response_deltas": deltas})


# --- report: tables, sentences, figure, scorecard rows ---------------------------------------

ARROW = {+1: "↑", -1: "↓", None: "—"}


def table_points(d: DoseResponse) -> pd.DataFrame:
    """Per (condition, metric, strength): Δ's seed mean, sd and band (min–max over seeds)."""
    return pd.DataFrame([
        {"condition": c.condition, "field": c.field, "strength": p.strength,
         "default": p.strength == c.default, "metric": m.metric, "predicted": ARROW[m.predicted],
         "n": p.n, "delta_mean": p.mean, "delta_sd": p.sd, "band_low": p.low, "band_high": p.high}
        for c in d.conditions for m in c.metrics for p in m.points])


def table_spearman(d: DoseResponse) -> pd.DataFrame:
    """Per (condition, metric): Spearman ρ of Δ against strength (descriptive), and the per-seed slope
    of Δ on strength with its interval and unadjusted p (the scorecard gives the verdict)."""
    return pd.DataFrame([
        {"condition": c.condition, "field": c.field, "strengths": ", ".join(f"{s:g}" for s in c.strengths),
         "metric": m.metric, "expected": m.expected, "rho": m.rho, "n_pairs": m.n_pairs,
         "slope_per_seed": m.slope, "ci_low": m.ci_low, "ci_high": m.ci_high, "p_seeds": m.p_seeds,
         "n_seeds": m.n_seeds, "note": m.reason}
        for c in d.conditions for m in c.metrics])


def sentences(d: DoseResponse) -> list[str]:
    out = [f"*This section is the {CLAIM_OWNER}:* the paper runs each condition at one strength; "
           "here a condition swept with `--strengths` is tested for an effect monotone in its strength "
           "(Spearman ρ of Δ = condition − matched `none` run against strength, over every "
           "(strength, seed) pair, descriptive; tested with the seed as the unit: each seed's OLS slope of Δ "
           "on strength, 95 % t interval; the verdicts are the scorecard's)."]
    for c in d.conditions:
        parts = []
        for m in c.metrics:
            ci = f" [{fmt(m.ci_low, '.3g')}, {fmt(m.ci_high, '.3g')}]" if m.ci_low is not None else ""
            tail = f" (expected {m.expected})" if m.expected else ""
            parts.append(f"Δ{m.metric} {ARROW[m.predicted]} ρ = {fmt(m.rho, '.2f')}; slope per seed "
                         f"{fmt(m.slope, '.3g')}{ci}{tail}")
        default = f"; default {c.default:g}" if c.default is not None else ""
        out.append(f"{vocab.condition_label(c.condition)} ({vocab.init_label(c.init)}), {c.field} ∈ "
                   f"{{{', '.join(f'{s:g}' for s in c.strengths)}}}{default}, {c.n_runs} runs with a matched "
                   f"`{vocab.CONTROL}` run: " + "; ".join(parts) + ".")
    return out


#: both sides of a dose–response row (the paper has none)
_KIND = "level: OLS slope of the Δ vs matched none on the strength, mean over seeds"


def dose_claims(an: Analysis) -> list[claims.Claim]:
    """One scorecard row per swept condition and predicted metric: its units are the seeds' slopes of
    Δ on strength (ρ, over pairs that share seeds, is the note)."""
    d = an.results.get("dose_response")
    out = []
    for c in (d.conditions if d is not None else ()):
        for m in c.metrics:
            if m.predicted is None:
                continue
            text = (f"{c.condition}: Δ{m.metric} grows in the predicted direction with {c.field} "
                    f"({', '.join(f'{s:g}' for s in c.strengths)}) — {CLAIM_OWNER}")
            expect = claims.Expect(">" if m.predicted > 0 else "<", 0)
            cid = f"dose_response.{c.condition}.{m.metric}"
            if m.rho is None or not m.seed_slopes:
                out.append(claims.Claim(cid, "dose_response", text, "— (not in the paper)", expect,
                                        n_runs=c.n_runs, reason=m.reason or "no seed with a slope", kind=_KIND))
                continue
            out.append(claims.Claim(cid, "dose_response", text, "— (not in the paper)", expect,
                                    np.array(m.seed_slopes), c.n_runs, kind=_KIND,
                                    note=f"Spearman ρ {m.rho:.2f} over {m.n_pairs} (strength, seed) pairs",
                                    arms=claims.intervention_arms(c.condition, [c.init])))
    return out


class DoseResponseSection(Section[DoseResponse]):
    """SPEC §5, §8 dose–response (the project's claim)."""

    name = "dose_response"
    heading = "Dose–response (the project's claim, not the paper's)"
    reads = ("interventions",)
    optional = True  # only a store with a strength sweep (--strengths) has one
    table_names = ("dose_response", "dose_response_points")
    figures = (Figure("fig_dose_response", "Dose–response — each predicted metric's Δ against the matched "
                      "none run vs strength, one row per swept condition (line: seed mean; band: min–max "
                      "over seeds; dots: seeds)", "sweep.report.figures:fig_dose_response"),)

    def compute(self, data: Inputs) -> Computed[DoseResponse]:
        return compute_dose_response(data.layers)

    def tables(self, result: DoseResponse) -> dict[str, pd.DataFrame | None]:
        return {"dose_response": table_spearman(result), "dose_response_points": table_points(result)}

    def prose(self, result: DoseResponse) -> list[str]:
        return sentences(result)

    def claims(self, an: Analysis, paper_scale: bool) -> list[claims.Claim]:
        return dose_claims(an)


SECTION = DoseResponseSection()
