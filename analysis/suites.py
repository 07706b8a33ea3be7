"""Appendix A across seeds (SPEC §8 "Sets of seeds"): each seed of a checkpoint set reduced to its
statistics at the revisions every seed has, the claims that test them across seeds, and the spread
across weight seeds beside the spread across data orders.

Pure pandas/numpy/scipy, on the ``checkpoints`` rows that carry a ``group`` (the set) and a ``seed``
(``sweep.extension.seed_sets``, or a manifest's ``group`` / ``seed``):

* **pairing** (``fit_sets``): a seed with fewer than ``MIN_REVISIONS`` ok revisions is left out (the
  reason names its failed revisions); the revisions (by step, else by name) every remaining seed has
  ok are the set's, and a revision some seed lacks (failed, a duplicate, never probed) is left out of
  every seed, with the seeds that lack it: the comparison across seeds stays paired. Progress is
  min–max scaled over those revisions (tokens, else steps, else the stored progress);
* **per seed** (``STATISTICS``): the OLS slopes of layer-mean ``pr_q − pr_k`` and of layer-mean
  ``pr_k`` on progress, and the Pearson r of (``pr_k``, ``qk_erank``) and of (``qk_erank``,
  ``attn_entropy``) over its layers × revisions;
* **claims** (``seed_claims``): for a set with at least ``MIN_SEEDS`` fitted seeds, one claim per
  statistic, a seed being the unit: the scorecard's one-sample t test (r on Fisher's z), two-sided
  (``Expect("≠", 0)``: the paper predicts no direction for one model across seeds), in the family
  ``SEED_FAMILY``; the note says where the set's original series (seed "0") falls among the seeds:
  its rank and the 95 % prediction interval for one more seed from the others;
* **init or data order** (``init_vs_data``): for a set whose seeds vary the weights only beside one
  whose seeds vary the data order only, each statistic's sd across each with its 95 % interval
  (χ²), and their ratio with its interval and a two-sided F test when both have ``MIN_SEEDS``
  seeds (else descriptive). Both assume normal per-seed statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis.claims import SEED_STATISTICS, Claim, Expect
from analysis.frames import minmax_progress
from analysis.inference import fisher_z, holm
from analysis.primitives import OMIT_NONE, num, pearson, to_jsonable
from analysis.reference import PAPER_SERIES
from analysis.section import Analysis, Computed, Figure, Inputs, Result, Section
from metrics.columns import SET_FACTORS

#: A seed's statistics need this many paired ok revisions (as a series' fit, SPEC §8).
MIN_REVISIONS = 3
#: A set's claims need this many fitted seeds; so does the test of a spread ratio.
MIN_SEEDS = 3
#: The family the per-set claims count in (SPEC §8 "Families"): apart from the paper's.
SEED_FAMILY = "checkpoint seeds"
#: Each seed's statistics: name -> (what it is, correlations on Fisher's z).
STATISTICS: dict[str, tuple[str, bool]] = {
    "slope_pr_q_minus_pr_k": ("OLS slope of layer-mean pr_q − pr_k on progress", False),
    "slope_pr_k": ("OLS slope of layer-mean pr_k on progress", False),
    "r_pr_k__qk_erank": ("Pearson r of (pr_k, qk_erank) over layers × revisions", True),
    "r_qk_erank__attn_entropy": ("Pearson r of (qk_erank, attn_entropy) over layers × revisions", True),
}
#: The statistic in a few words (claim text, tables, the scorecard's short label).
SHORT = SEED_STATISTICS
#: The seed label of a set's original series.
ORIGINAL = "0"


@dataclass
class SeedFit:
    """One seed of a set: its series and statistics over the set's paired revisions."""

    seed: str
    series: str
    repo: str | None
    n_revisions: int
    slope_pr_q_minus_pr_k: float | None
    slope_pr_k: float | None
    r_pr_k__qk_erank: float | None
    r_qk_erank__attn_entropy: float | None


@dataclass
class SetFit:
    """One set: what its seeds vary, its fitted seeds, the paired revisions, and what was left out."""

    varies: str
    seeds: list[SeedFit]
    revisions: list[str]  # the paired revisions (step numbers, else names)
    left_out_seeds: dict[str, str] = field(default_factory=dict)  # seed -> why
    left_out_revisions: dict[str, str] = field(default_factory=dict)  # revision -> the seeds that lack it
    original: str | None = None  # the series of seed "0", when fitted
    reason: str | None = field(default=None, metadata=OMIT_NONE)  # why no seed is fitted

    def values(self, stat: str) -> np.ndarray:
        """The fitted seeds' ``stat`` [n] (NaN where undefined)."""
        return np.array([np.nan if getattr(s, stat) is None else getattr(s, stat) for s in self.seeds], float)


def _label(key: str) -> str:
    return f"step {key}" if key.isdigit() else key


def _seed_order(seeds) -> list[str]:
    return sorted(seeds, key=lambda s: (0, int(s), "") if str(s).isdigit() else (1, 0, str(s)))


def set_rows(checkpoints: pd.DataFrame) -> pd.DataFrame:
    """The rows of series in a set (``group`` and ``seed`` set), with a ``key`` per revision."""
    if checkpoints.empty or "group" not in checkpoints or checkpoints["group"].isna().all():
        return pd.DataFrame()
    rows = checkpoints[checkpoints["group"].notna() & checkpoints["seed"].notna()].copy()
    rows["seed"] = rows["seed"].astype(str)
    rows["key"] = [str(int(s)) if pd.notna(s) else str(r) for s, r in zip(rows["step"], rows["revision"], strict=True)]
    return rows


def fit_sets(checkpoints: pd.DataFrame) -> tuple[dict[str, SetFit], pd.DataFrame]:
    """Every set's ``SetFit`` (see the module docstring), and the per (set, seed, revision) layer means
    of ``pr_q − pr_k`` at the paired revisions with their progress (the figure's frame)."""
    rows = set_rows(checkpoints)
    frames, out = [], {}
    if rows.empty:
        return out, pd.DataFrame()
    for group, sub in rows.groupby("group", sort=True):
        fit, frame = _fit_set(sub)
        out[str(group)] = fit
        frames.append(frame.assign(group=str(group)))
    return out, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _fit_set(sub: pd.DataFrame) -> tuple[SetFit, pd.DataFrame]:
    varies = str(sub["varies"].dropna().iloc[0]) if "varies" in sub and sub["varies"].notna().any() else "seed"
    ok = sub[(sub["status"] == "ok") & sub["layer"].notna()]
    seeds = _seed_order(sub["seed"].unique())
    have = {s: set(ok.loc[ok["seed"] == s, "key"]) for s in seeds}
    left: dict[str, str] = {}
    for s in seeds:
        if len(have[s]) < MIN_REVISIONS:
            failed = sub[(sub["seed"] == s) & (sub["status"] == "failed")]["key"].unique()
            why = f"{len(have[s])} ok revision{'s' if len(have[s]) != 1 else ''} (< {MIN_REVISIONS})"
            if len(failed):
                why += f"; failed: {', '.join(_label(k) for k in sorted(failed, key=_sort_key))}"
            left[s] = why
    kept = [s for s in seeds if s not in left]
    every = set.intersection(*(have[s] for s in kept)) if kept else set()
    lacking = {}
    for k in sorted(set().union(*(have[s] for s in kept)) - every if kept else (), key=_sort_key):
        lacking[_label(k)] = ", ".join(f"seed {s}" for s in kept if k not in have[s])
    keys = sorted(every, key=_sort_key)
    series_of = sub.groupby("seed")["series"].first()
    if len(keys) < MIN_REVISIONS:
        why = (f"its {len(kept)} seed(s) with >= {MIN_REVISIONS} ok revisions share {len(keys)} "
               f"(< {MIN_REVISIONS})" if kept else f"no seed has >= {MIN_REVISIONS} ok revisions")
        return SetFit(varies, [], [_label(k) for k in keys], left, lacking, reason=why), pd.DataFrame()
    used = ok[ok["seed"].isin(kept) & ok["key"].isin(keys)]
    means = used.groupby(["seed", "key"], sort=False).agg(
        series=("series", "first"), repo=("repo", "first"), tokens=("tokens", "max"), step=("step", "max"),
        stored=("progress", "max"), pr_q_minus_pr_k=("pr_q_minus_pr_k", "mean"), pr_k=("pr_k", "mean")).reset_index()
    # the same for every seed of a set whose revisions share their steps
    means["progress"] = minmax_progress(means, "seed", ("tokens", "step", "stored"))
    fits = []
    for s in kept:
        m = means[means["seed"] == s].sort_values("progress")
        layer = used[used["seed"] == s]
        fits.append(SeedFit(
            s, str(series_of[s]), m["repo"].iloc[0] if m["repo"].notna().any() else None, len(m),
            _slope(m["progress"], m["pr_q_minus_pr_k"]), _slope(m["progress"], m["pr_k"]),
            pearson(layer["pr_k"], layer["qk_erank"])["r"], pearson(layer["qk_erank"], layer["attn_entropy"])["r"]))
    original = str(series_of[ORIGINAL]) if ORIGINAL in kept else None
    fit = SetFit(varies, fits, [_label(k) for k in keys], left, lacking, original)
    return fit, means[["seed", "series", "key", "progress", "pr_q_minus_pr_k"]]


def _sort_key(k: str) -> tuple:
    return (0, int(k), "") if k.isdigit() else (1, 0, k)


def _slope(x: pd.Series, y: pd.Series) -> float | None:
    xv, yv = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(xv) & np.isfinite(yv)
    if ok.sum() < 2 or np.ptp(xv[ok]) == 0:
        return None
    return num(np.polyfit(xv[ok], yv[ok], 1)[0])


# --- where the original falls ------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where the original series (seed "0") falls among its set's seeds for one statistic."""

    rank: int  # 1 = the largest value among the n seeds
    n: int
    low: float | None  # the 95 % prediction interval for one more seed, from the others
    high: float | None

    def text(self, series: str, value: float) -> str:
        where = f"ranks {self.rank} of {self.n} (1 = largest)"
        if self.low is None:
            return f"{series} {where}; too few other seeds for an interval"
        inside = self.low <= value <= self.high
        return (f"{series} {where}, {'inside' if inside else 'OUTSIDE'} the others' 95 % prediction interval "
                f"[{self.low:.3g}, {self.high:.3g}]")


def placement(y: np.ndarray, i: int, fisher: bool = False) -> Placement | None:
    """Unit ``i`` of y [n] among the others: its rank and the 95 % prediction interval for one more
    draw from the others (mean ± t · sd · √(1 + 1/m), m others; on Fisher's z for correlations)."""
    v = np.asarray(y, float)
    if not np.isfinite(v[i]):
        return None
    fin = v[np.isfinite(v)]
    rank = int((fin > v[i]).sum()) + 1
    others = np.delete(v, i)
    others = others[np.isfinite(others)]
    if others.size < 2:
        return Placement(rank, int(fin.size), None, None)
    z = fisher_z(others) if fisher else others
    m, sd = float(z.mean()), float(z.std(ddof=1))
    half = float(sps.t.ppf(0.975, z.size - 1)) * sd * math.sqrt(1 + 1 / z.size)
    lo, hi = m - half, m + half
    if fisher:
        lo, hi = float(np.tanh(lo)), float(np.tanh(hi))
    return Placement(rank, int(fin.size), lo, hi)


# --- the claims ----------------------------------------------------------------------------------


def seed_claims(sets: dict[str, SetFit] | None) -> list[Claim]:
    """Per set, one claim per statistic across its seeds (module docstring); a set with fewer than
    ``MIN_SEEDS`` fitted seeds gives its claims as not measured, with the reason."""
    out = []
    for name, fit in (sets or {}).items():
        for stat, (what, fisher) in STATISTICS.items():
            cid = f"checkpoints.seeds.{name}.{stat}"
            claim = f"{SHORT[stat]} across the seeds of {name}: which direction"
            paper = "— (the paper probes one series per model; it predicts no direction across seeds)"
            kind = f"{'correlation' if fisher else 'level'}: {what}, per seed at the set's paired revisions"
            common = dict(unit="seeds", test="t", fisher=fisher, kind=kind, family=SEED_FAMILY)
            if len(fit.seeds) < MIN_SEEDS:
                why = fit.reason or f"{len(fit.seeds)} fitted seed(s) (< {MIN_SEEDS})"
                if fit.left_out_seeds:
                    why += "; " + _left_out(fit)
                out.append(Claim(cid, "checkpoints", claim, paper, Expect("≠", 0), reason=why, **common))
                continue
            y = fit.values(stat)
            out.append(Claim(cid, "checkpoints", claim, paper, Expect("≠", 0), y, ids=tuple(s.seed for s in fit.seeds),
                             note=_note(fit, stat, y, fisher), **common))
    return out


def _left_out(fit: SetFit) -> str:
    parts = []
    if fit.left_out_seeds:
        parts.append("seeds left out: " + "; ".join(f"seed {s} ({why})" for s, why in fit.left_out_seeds.items()))
    if fit.left_out_revisions:
        parts.append("revisions left out of every seed: "
                     + "; ".join(f"{k} (lacked by {who})" for k, who in fit.left_out_revisions.items()))
    return "; ".join(parts)


def _note(fit: SetFit, stat: str, y: np.ndarray, fisher: bool) -> str:
    parts = [f"{len(fit.seeds)} seeds ({', '.join(s.seed for s in fit.seeds)}) varying {SET_FACTORS.get(fit.varies, fit.varies)}, "
             f"paired at {len(fit.revisions)} revisions"]
    if fit.left_out_seeds or fit.left_out_revisions:
        parts.append(_left_out(fit))
    seeds = [s.seed for s in fit.seeds]
    if ORIGINAL in seeds and fit.original is not None:
        i = seeds.index(ORIGINAL)
        where = placement(y, i, fisher)
        if where is not None:
            whose = " (the paper's series)" if fit.original in PAPER_SERIES else ""
            parts.append(f"the original{whose}: {where.text(fit.original, float(y[i]))}")
    return "; ".join(parts)


# --- init or data order ----------------------------------------------------------------------------


@dataclass
class Spread:
    """One statistic's spread across the seeds of a weights-only set and of a data-order-only set."""

    weights_set: str
    data_set: str
    statistic: str
    scale: str  # "value" or "Fisher z"
    n_weights: int
    sd_weights: float | None
    sd_weights_low: float | None
    sd_weights_high: float | None
    n_data: int
    sd_data: float | None
    sd_data_low: float | None
    sd_data_high: float | None
    ratio: float | None  # sd across weight seeds / sd across data orders
    ratio_low: float | None
    ratio_high: float | None
    p: float | None  # two-sided F test of equal variances (None: descriptive)
    p_holm: float | None  # Holm over the pair's statistics
    tested: bool


def _sd_interval(v: np.ndarray) -> tuple[float | None, float | None, float | None]:
    if v.size < 2:
        return None, None, None
    sd, df = float(v.std(ddof=1)), v.size - 1
    return sd, sd * math.sqrt(df / sps.chi2.ppf(0.975, df)), sd * math.sqrt(df / sps.chi2.ppf(0.025, df))


def init_vs_data(sets: dict[str, SetFit] | None) -> list[Spread]:
    """Each (weights-only set, data-order-only set) pair: per statistic, the two spreads with their
    intervals and their ratio (module docstring)."""
    sets = sets or {}
    out: list[Spread] = []
    weights = [n for n, f in sets.items() if f.varies == "weights"]
    data = [n for n, f in sets.items() if f.varies == "data order"]
    for w in weights:
        for d in data:
            pair = []
            for stat, (_, fisher) in STATISTICS.items():
                vw, vd = (sets[x].values(stat) for x in (w, d))
                vw, vd = vw[np.isfinite(vw)], vd[np.isfinite(vd)]
                if fisher:
                    vw, vd = fisher_z(vw), fisher_z(vd)
                sw, sd_ = _sd_interval(vw), _sd_interval(vd)
                ratio = lo = hi = p = None
                tested = vw.size >= MIN_SEEDS and vd.size >= MIN_SEEDS
                if sw[0] is not None and sd_[0] is not None and sd_[0] > 0:
                    r2 = (sw[0] / sd_[0]) ** 2
                    df1, df2 = vw.size - 1, vd.size - 1
                    ratio = math.sqrt(r2)
                    lo = math.sqrt(r2 / sps.f.ppf(0.975, df1, df2))
                    hi = math.sqrt(r2 / sps.f.ppf(0.025, df1, df2))
                    if tested:
                        p = min(1.0, 2 * min(sps.f.cdf(r2, df1, df2), sps.f.sf(r2, df1, df2)))
                pair.append(Spread(w, d, stat, "Fisher z" if fisher else "value", int(vw.size), *sw, int(vd.size),
                                   *sd_, ratio, lo, hi, p, None, tested and p is not None))
            adjusted = holm([s.p for s in pair])
            for s, a in zip(pair, adjusted, strict=True):
                s.p_holm = a
            out += pair
    return out


# --- the section ---------------------------------------------------------------------------------


@dataclass
class SeedSetsResult(Result):
    """Appendix A across seeds: each set's fit, and the init-or-data-order spreads."""

    key = "checkpoint_sets"
    sets: dict[str, SetFit]
    init_vs_data: list[Spread] | None = field(default=None, metadata=OMIT_NONE)


#: Why the init-or-data-order table is absent from a store with sets.
NO_PAIR = "no set whose seeds vary the weights only beside one whose seeds vary the data order only (SPEC §8)"


def sets_table(c: SeedSetsResult) -> pd.DataFrame | None:
    """Per set and seed: its series, paired revisions and statistics (SPEC §8 "Sets of seeds")."""
    if not c.sets:
        return None
    rows = [{"set": name, "varies": fit.varies, "seed": s.seed, "series": s.series, "original": s.seed == ORIGINAL,
             "n_revisions": s.n_revisions, **{k: getattr(s, k) for k in STATISTICS}}
            for name, fit in c.sets.items() for s in fit.seeds]
    cols = ["set", "varies", "seed", "series", "original", "n_revisions", *STATISTICS]
    return pd.DataFrame(rows, columns=cols)


def spread_table(c: SeedSetsResult) -> pd.DataFrame | None:
    """The spread across weight seeds beside the spread across data orders, per statistic."""
    if not c.init_vs_data:
        return None
    return pd.DataFrame([to_jsonable(s) for s in c.init_vs_data])


def sets_sentences(c: SeedSetsResult) -> list[str]:
    """What each set is, what it left out, and the init-or-data-order comparison in words."""
    out = []
    for name, fit in c.sets.items():
        text = (f"Set {name} (seeds vary {SET_FACTORS.get(fit.varies, fit.varies)}): {len(fit.seeds)} seed(s) "
                f"fitted at {len(fit.revisions)} paired revisions")
        if fit.reason:
            text += f", none fitted: {fit.reason}"
        if fit.left_out_seeds:
            text += "; left out: " + "; ".join(f"seed {s} ({why})" for s, why in fit.left_out_seeds.items())
        if fit.left_out_revisions:
            text += "; revisions left out of every seed (pairing): " + "; ".join(
                f"{k} (lacked by {who})" for k, who in fit.left_out_revisions.items())
        if len(fit.seeds) >= MIN_SEEDS:
            out.append(text + ". The scorecard tests each statistic across these seeds (family: checkpoint seeds).")
        else:
            out.append(text + f". Too few fitted seeds for the scorecard's test across seeds (it needs {MIN_SEEDS}).")
    if c.init_vs_data:
        parts = []
        for s in c.init_vs_data:
            sd = lambda v, lo, hi: "—" if v is None else f"{v:.3g} [{lo:.3g}, {hi:.3g}]"  # noqa: E731
            ratio = "—" if s.ratio is None else f"{s.ratio:.3g} [{s.ratio_low:.3g}, {s.ratio_high:.3g}]"
            test = (f"F test p {s.p:.2g} (Holm over the four: {s.p_holm:.2g})" if s.tested
                    else f"descriptive: fewer than 3 seeds in a set ({s.n_weights} and {s.n_data})")
            parts.append(f"{SHORT[s.statistic]} ({s.scale}): sd across weight seeds {sd(s.sd_weights, s.sd_weights_low, s.sd_weights_high)} "
                         f"vs across data orders {sd(s.sd_data, s.sd_data_low, s.sd_data_high)}, ratio {ratio}, {test}")
        pairs = sorted({(s.weights_set, s.data_set) for s in c.init_vs_data})
        out.append(f"Init or data order ({'; '.join(f'{w} vs {d}' for w, d in pairs)}; 95 % intervals, normal "
                   f"per-seed statistics assumed): " + "; ".join(parts) + ".")
    return out


class SeedSets(Section[SeedSetsResult]):
    """Appendix A across the seeds of each checkpoint set (SPEC §8); left out of a store without sets."""

    name = "checkpoint_sets"
    heading = "Appendix A — across seeds (sets of checkpoint series)"
    reads = ("checkpoints",)
    table_names = ("appendixA_sets", "appendixA_init_vs_data")
    figures = (Figure("figA_sets", "Figure A2 — per set of seeds, each seed's layer-mean PR_Q − PR_K against "
                      "progress at the set's paired revisions, the original series drawn apart",
                      "sweep.report.figures:figA_sets"),)
    optional = True  # only a store whose checkpoint rows carry a set

    def compute(self, data: Inputs) -> Computed[SeedSetsResult]:
        sets, frame = fit_sets(data.checkpoints)
        if not sets:
            return Computed(None, {})
        spreads = init_vs_data(sets) or None
        missing = {} if spreads else {"tables.appendixA_init_vs_data": NO_PAIR}
        return Computed(SeedSetsResult(sets, spreads), missing, {"checkpoint_set_revisions": frame})

    def tables(self, result: SeedSetsResult) -> dict[str, pd.DataFrame | None]:
        return {"appendixA_sets": sets_table(result), "appendixA_init_vs_data": spread_table(result)}

    def prose(self, result: SeedSetsResult) -> list[str]:
        return sets_sentences(result)

    def claims(self, an: Analysis, paper_scale: bool) -> list[Claim]:
        r = an.results.get(self.name)
        return seed_claims(r.sets if r else None)


SECTION = SeedSets()
