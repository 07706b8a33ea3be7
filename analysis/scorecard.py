"""The reproduction scorecard (SPEC §8): one row per claim of SPEC §9 and the paper's Appendix A.

Pure pandas/numpy/scipy, fed from ``analysis.compute.compute_all`` (one preset's
``Analysis``: its stats dict and frames). Each row carries the paper's value,
this store's value, a 95 % percentile-bootstrap interval over *whole seeds*
(``scipy.stats.bootstrap``), the expected direction and a verdict:

* ``reproduced``      the direction holds and the interval excludes the opposite;
* ``direction only``  the direction holds, the interval does not exclude the opposite;
* ``not reproduced``  the direction does not hold;
* ``not measured``    the store lacks what the claim needs (``reason`` says what).

How a claim is bootstrapped. The unit is the seed: every run of one seed
number within the preset (all inits and depths of the baseline, or all
conditions of the intervention family) is resampled together, never the
layers of one run. Each claim first reduces the store to a per-seed array
``X`` of shape [n_seeds, ...] (e.g. per-seed final alignment per init, or
per-seed OLS slopes per (init, depth, layer) cell); a resample of seed indices
``idx`` [B, n] averages ``X[idx]`` over its seeds and applies the claim's
statistic. For seed-averaged traces this is exact: the OLS slope of a
seed-averaged trace equals the mean of the per-seed slopes when the runs
share their epochs (incomplete runs are excluded upstream). Appendix A has no
seeds; its unit is the checkpoint series.

Small n. With n = 1 unit there is no interval (the verdict is at best
``direction only``). With n = 2 the percentile bootstrap has three distinct
resamples ({a, a}, {a, b}, {b, b}), so the 95 % interval is (up to resampling
noise) the range between the two seeds' own statistics: ``reproduced`` then
means each seed alone shows the direction. It is run anyway and the row says
``n = 2``; read such verdicts as a weak check. BCa is not used: its jackknife
acceleration is degenerate for n < 3 and unstable for a handful of seeds.

Row shape (``stats.json["scorecard"]`` is a list of these)::

    {preset, id, section, claim, paper, expected, value, ci_low, ci_high, n, unit,
     n_runs, verdict, reason, paper_spread, within_paper_spread, skipped_files}
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from analysis import vocabulary as vocab
from analysis.compute import Analysis
from analysis.reference import PAPER_REFERENCE, PAPER_TEXT
from interventions import PAPER_CONDITIONS
from model.qk_init import PAPER_INITS, QK_INITS

# The claims are the paper's, so they are about the paper's regimes and conditions;
# which of them is coupled and what each condition predicts come from the registries.
COUPLED = next(i for i in PAPER_INITS if QK_INITS[i].coupled)
UNCOUPLED = tuple(i for i in PAPER_INITS if not QK_INITS[i].coupled)

N_RESAMPLES = 2000
CONFIDENCE = 0.95
VERDICTS = ("reproduced", "direction only", "not reproduced", "not measured")

METHOD_NOTE = (
    "Interval: 95 % percentile bootstrap over whole seeds (scipy.stats.bootstrap, "
    f"{N_RESAMPLES} resamples, fixed generator); each claim's statistic is computed per seed "
    "first, and seed-averaged traces are re-averaged over the resampled seeds. Appendix A "
    "rows resample checkpoint series (they have no seeds). With 1 unit there is no interval; "
    "with 2 seeds the interval is about the range between the two seeds' own values, so "
    "`reproduced` means each seed alone shows the direction — a weak check. Verdicts: "
    "`reproduced` = direction holds and the interval excludes the opposite; `direction only` "
    "= direction holds, interval does not exclude the opposite; `not reproduced` = direction "
    "does not hold; `not measured` = the store lacks the data (reason given)."
)


@dataclass(frozen=True)
class Expect:
    """Expected direction: value ``>`` / ``<`` ``lo``, or ``in`` [lo, hi]."""

    op: str
    lo: float
    hi: float | None = None

    def text(self) -> str:
        return f"in [{self.lo:g}, {self.hi:g}]" if self.op == "in" else f"{self.op} {self.lo:g}"

    def holds(self, v: float) -> bool:
        if self.op == ">":
            return v > self.lo
        if self.op == "<":
            return v < self.lo
        return self.lo <= v <= (self.hi if self.hi is not None else np.inf)

    def excludes_opposite(self, lo: float, hi: float) -> bool:
        """The whole interval lies on the expected side."""
        return self.holds(lo) and self.holds(hi)


# ----------------------------------------------------------------------------
# the bootstrap
# ----------------------------------------------------------------------------

Reducer = Callable[[np.ndarray], np.ndarray]  # [B, ...] seed-averaged -> [B]


def seed_bootstrap(x: np.ndarray, reduce: Reducer, seed: int = 0) -> tuple[float | None, float | None, float | None]:
    """(value, ci_low, ci_high) of ``reduce(mean over units of x)``, resampling whole units.

    x: [n, ...] one entry per unit (seed or series), NaN where a unit lacks a cell.
    reduce: maps the unit-averaged array [B, ...] to [B]. With n < 2 the interval is None.
    """
    x = np.asarray(x, float)
    n = x.shape[0]

    def stat(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        idx = np.asarray(idx, int)
        flat = idx.reshape(-1, n)  # (B, n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN cells
            avg = np.nanmean(x[flat], axis=1)  # (B, ...)
            out = reduce(avg)
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


def _pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
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


def _frac(sign: int) -> Reducer:
    """Fraction of finite cells whose seed-averaged value has ``sign``: [B, cells] -> [B]."""

    def f(avg: np.ndarray) -> np.ndarray:
        fin = np.isfinite(avg)
        hits = ((np.sign(avg) == sign) & fin).sum(-1)
        return np.where(fin.sum(-1) > 0, hits / np.maximum(fin.sum(-1), 1), np.nan)

    return f


def _col(i: int) -> Reducer:
    return lambda avg: avg[:, i]


# ----------------------------------------------------------------------------
# per-seed arrays
# ----------------------------------------------------------------------------


def _pivot(df: pd.DataFrame, unit: str, cells: list[str], value: str) -> tuple[np.ndarray, list]:
    """[n_units, n_cells] of ``value`` (NaN where missing) and the cell labels."""
    if df.empty:
        return np.empty((0, 0)), []
    p = df.pivot_table(index=unit, columns=cells, values=value, aggfunc="mean", observed=True)
    return p.to_numpy(float), list(p.columns)


def _runs(df: pd.DataFrame) -> int:
    return int(df["run_id"].nunique()) if not df.empty and "run_id" in df else 0


# ----------------------------------------------------------------------------
# the claims
# ----------------------------------------------------------------------------


@dataclass
class Claim:
    """One scorecard row before its verdict."""

    id: str
    section: str
    claim: str
    paper: str
    expect: Expect
    x: np.ndarray | None = None  # [n, ...]
    reduce: Reducer | None = None
    n_runs: int = 0
    unit: str = "seeds"
    reason: str | None = None  # why not measured
    note: str | None = None
    spread: tuple[float, float] | None = None  # the paper's reported spread (paper preset only)
    level: float | None = None  # the value compared with the spread


def _alignment_claims(an: Analysis) -> list[Claim]:
    fin, ini = an.frames.get("alignment_final"), an.frames.get("alignment_initial")
    why = (an.stats.get("missing") or {}).get("alignment", "no alignment data")
    inits = (COUPLED, *UNCOUPLED)
    out: list[Claim] = []
    a = an.stats.get("alignment") or {}
    ref = PAPER_REFERENCE["alignment"]
    ref_final = {i: (v["mean"], v["sd"]) for i, v in ref["final"].items()}
    ref_init = ref["initial"]
    if fin is None or fin.empty:
        specs = [("alignment.initial", "initial alignment: qk_identical above the uncoupled inits",
                  PAPER_TEXT["alignment.initial"], Expect(">", 0))]
        specs += [(f"alignment.final.{i}", f"final alignment {i} moved from its initial value",
                   f"{ref_init[i]:.4f} → {ref_final[i][0]:.4f}", Expect("<" if i == COUPLED else ">", 0))
                  for i in inits]
        specs += [("alignment.contrast", "final alignment: qk_identical above the uncoupled inits",
                   PAPER_TEXT["alignment.contrast"], Expect(">", 0))]
        return [Claim(i, "alignment", c, p, e, reason=why) for i, c, p, e in specs]

    def by_seed_init(frame: pd.DataFrame) -> tuple[np.ndarray, list]:
        return _pivot(frame, "seed", ["init"], "qk_alignment")

    xf, cf = by_seed_init(fin)
    xi, ci = by_seed_init(ini)
    seeds_f = sorted(fin["seed"].unique())
    seeds_i = sorted(ini["seed"].unique())

    def contrast(cols: list) -> Reducer | None:
        if COUPLED not in cols or not any(u in cols for u in UNCOUPLED):
            return None
        c = cols.index(COUPLED)
        u = [cols.index(i) for i in UNCOUPLED if i in cols]
        return lambda avg: avg[:, c] - np.nanmean(avg[:, u], axis=-1)

    need = f"needs {COUPLED} and an uncoupled init in the baseline"
    r = contrast(ci)
    out.append(Claim("alignment.initial", "alignment", "initial alignment: qk_identical above the uncoupled inits",
                     PAPER_TEXT["alignment.initial"], Expect(">", 0), xi, r, _runs(ini), reason=None if r else need))
    for init in inits:
        claim = f"final alignment {init} {'fell' if init == COUPLED else 'rose'} from its initial value"
        paper = f"{ref_init[init]:.4f} → {ref_final[init][0]:.4f} ± {ref_final[init][1]:.4f}"
        e = Expect("<" if init == COUPLED else ">", 0)
        if init not in cf or init not in ci or seeds_f != seeds_i:
            out.append(Claim(f"alignment.final.{init}", "alignment", claim, paper, e,
                             reason=f"no initial and final alignment of {init} for the same seeds"))
            continue
        d = xf[:, [cf.index(init)]] - xi[:, [ci.index(init)]]
        m, s = ref_final[init]
        out.append(Claim(f"alignment.final.{init}", "alignment", claim, paper, e, d, _col(0),
                         _runs(fin[fin["init"] == init]), spread=(m - s, m + s),
                         level=(a.get("final") or {}).get(init, {}).get("mean")))
    r = contrast(cf)
    note = None
    if a.get("welch_p") is not None:
        note = f"Welch p = {a['welch_p']:.2g}, Hedges' g = {a['hedges_g']:.2f}"
    out.append(Claim("alignment.contrast", "alignment", "final alignment: qk_identical above the uncoupled inits",
                     PAPER_TEXT["alignment.contrast"], Expect(">", 0), xf, r,
                     _runs(fin), reason=None if r else need, note=note))
    out += _gap_claims(fin)
    return out


def _gap_claims(fin: pd.DataFrame) -> list[Claim]:
    """Gap = qk_identical − the larger uncoupled mean, per depth, and its growth with depth."""
    x, cols = _pivot(fin, "seed", ["depth", "init"], "qk_alignment")
    depths = sorted({d for d, _ in cols})
    usable = [d for d in depths if (d, COUPLED) in cols and any((d, u) in cols for u in UNCOUPLED)]

    def gap(d: int) -> Reducer:
        c = cols.index((d, COUPLED))
        u = [cols.index((d, i)) for i in UNCOUPLED if (d, i) in cols]
        return lambda avg: avg[:, c] - np.nanmax(avg[:, u], axis=-1)

    out = []
    for d in sorted(set(depths) | {4, 8}):
        claim = f"alignment gap at {d} layers positive"
        if d not in usable:
            out.append(Claim(f"alignment.gap.L{d}", "alignment", claim, PAPER_TEXT.get(f"alignment.gap.L{d}", "—"), Expect(">", 0),
                             reason=f"no {d}-layer runs of both {COUPLED} and an uncoupled init"))
            continue
        out.append(Claim(f"alignment.gap.L{d}", "alignment", claim, PAPER_TEXT.get(f"alignment.gap.L{d}", "—"), Expect(">", 0),
                         x, gap(d), _runs(fin[fin["depth"] == d])))
    claim = "alignment gap grows with depth (deepest − shallowest)"
    if len(usable) < 2:
        out.append(Claim("alignment.gap.growth", "alignment", claim, PAPER_TEXT["alignment.gap.growth"],
                         Expect(">", 0), reason="needs the gap at two depths"))
    else:
        lo, hi = gap(usable[0]), gap(usable[-1])
        out.append(Claim("alignment.gap.growth", "alignment", f"{claim}: {usable[0]} → {usable[-1]}",
                         PAPER_TEXT["alignment.gap.growth"], Expect(">", 0), x,
                         lambda avg: hi(avg) - lo(avg), _runs(fin)))
    return out


def _slope_claims(an: Analysis) -> list[Claim]:
    rs = an.frames.get("run_slopes")
    specs = [("slopes.pr_q_minus_pr_k", "pr_q − pr_k slope positive in most seed-averaged traces",
              PAPER_TEXT["slopes.pr_q_minus_pr_k"], "pr_q_minus_pr_k", +1),
             ("slopes.pr_k", "pr_k slope negative in most seed-averaged traces", PAPER_TEXT["slopes.pr_k"], "pr_k", -1)]
    out = []
    for cid, claim, paper, metric, sign in specs:
        if rs is None or rs.empty:
            why = (an.stats.get("missing") or {}).get("slopes", "no baseline trajectories")
            out.append(Claim(cid, "slopes", claim, paper, Expect(">", 0.5), reason=why))
            continue
        x, _ = _pivot(rs, "seed", ["init", "depth", "layer"], f"{metric}_slope")
        out.append(Claim(cid, "slopes", claim, paper, Expect(">", 0.5), x, _frac(sign), _runs(rs),
                         note="value = fraction of seed-averaged traces"))
    return out


def _category_claims(an: Analysis) -> list[Claim]:
    fl = an.frames.get("final_layers")
    specs = [("categories.late_mid.qk_erank", "late layers' qk_erank above mid layers'", "late", "mid", "qk_erank"),
             ("categories.late_mid.pr_q", "late layers' pr_q above mid layers'", "late", "mid", "pr_q"),
             ("categories.early_mid.attn_entropy", "mid layers are the entropy bottleneck (early − mid > 0)",
              "early", "mid", "attn_entropy"),
             ("categories.early_mid.qk_erank", "mid layers' qk_erank below early layers'",
              "early", "mid", "qk_erank")]
    out = []
    for cid, claim, hi, lo, metric in specs:
        paper = PAPER_TEXT[cid]
        if fl is None or fl.empty or not {hi, lo} <= set(fl["category"]):
            out.append(Claim(cid, "layer_categories", claim, paper, Expect(">", 0),
                             reason=f"no {hi} and {lo} layers at the depths present"))
            continue
        x, cols = _pivot(fl, "seed", ["category"], metric)
        i, j = cols.index(hi), cols.index(lo)
        out.append(Claim(cid, "layer_categories", claim, paper, Expect(">", 0), x,
                         lambda avg, i=i, j=j: avg[:, i] - avg[:, j], _runs(fl)))
    return out


BRIDGE = {  # pair -> (metric a, sign a, metric b, sign b), value = sign * slope / mean
    "key_spec__qk_compression": ("pr_k", -1, "qk_erank", -1),
    "qk_compression__entropy_sharpening": ("qk_erank", -1, "attn_entropy", -1),
    "qk_compression__top1_sharpening": ("qk_erank", -1, "attn_top1", +1),
}


def _bridge_claims(an: Analysis) -> list[Claim]:
    ps = an.frames.get("per_seed")
    out = []
    for pair, (ma, sa, mb, sb) in BRIDGE.items():
        cid, claim = f"bridge.{pair}", f"bridge r({pair.replace('__', ', ')}) > 0 over uncoupled seed-averaged cells"
        paper = PAPER_TEXT[cid]
        if ps is None or ps.empty:
            why = (an.stats.get("missing") or {}).get("bridge", "no uncoupled baseline runs")
            out.append(Claim(cid, "bridge", claim, paper, Expect(">", 0), reason=why))
            continue
        mats = [_pivot(ps, "seed", ["init", "depth", "layer"], f"{m}_{k}")[0]
                for m in (ma, mb) for k in ("slope", "mean")]
        x = np.stack(mats, axis=-1)  # (n, cells, 4)

        def reduce(avg: np.ndarray, sa=sa, sb=sb) -> np.ndarray:
            with np.errstate(invalid="ignore", divide="ignore"):
                qa = sa * avg[..., 0] / avg[..., 1]
                qb = sb * avg[..., 2] / avg[..., 3]
            return _pearson_rows(qa, qb)

        out.append(Claim(cid, "bridge", claim, paper, Expect(">", 0), x, reduce, _runs(ps),
                         note=f"{x.shape[1]} cells"))
    return out


def _intervention_claims(an: Analysis, paper_scale: bool) -> list[Claim]:
    pairs = an.frames.get("intervention_pairs")
    runs = an.frames.get("intervention_runs")
    arrows = {+1: "↑", -1: "↓"}
    out = []
    for cond in PAPER_CONDITIONS:
        pred = vocab.predicted(cond)
        for metric, sign in pred.items():
            cid = f"interventions.{cond}.{metric}"
            claim = f"{cond}: {metric} {arrows[sign]} vs matched none (paired Δ)"
            paper = PAPER_TEXT.get(cid, "confidence 1.00" if cond != "freeze_q" else "softens (↑ entropy)")
            e = Expect(">" if sign > 0 else "<", 0)
            sub = pairs[pairs["intervention"] == cond] if pairs is not None and not pairs.empty else None
            if sub is None or sub.empty or sub[f"d_{metric}"].notna().sum() == 0:
                out.append(Claim(cid, "interventions", claim, paper, e,
                                 reason=f"no {cond} run with a matched none run"))
                continue
            x, _ = _pivot(sub, "seed", ["intervention"], f"d_{metric}")
            out.append(Claim(cid, "interventions", claim, paper, e, x, _col(0), _runs(sub)))
    cid, claim = "interventions.val_loss", "final val_loss of the intervention family in the paper's range"
    lo, hi = PAPER_REFERENCE["interventions"]["val_loss_range"]
    e = Expect("in", lo, hi)
    if not paper_scale:
        out.append(Claim(cid, "interventions", claim, PAPER_TEXT[cid], e,
                         reason="a WikiText-103 loss level: compared at paper scale only"))
    elif runs is None or runs.empty or runs["val_loss"].notna().sum() == 0:
        out.append(Claim(cid, "interventions", claim, PAPER_TEXT[cid], e, reason="no intervention val_loss"))
    else:
        x, _ = _pivot(runs.assign(all="all"), "seed", ["all"], "val_loss")
        out.append(Claim(cid, "interventions", claim, PAPER_TEXT[cid], e, x, _col(0), _runs(runs),
                         spread=(lo, hi), note="value = mean over conditions and seeds"))
    return out


def _checkpoint_claims(an: Analysis) -> list[Claim]:
    c = an.stats.get("checkpoints") or {}
    fitted = {k: v for k, v in (c.get("series") or {}).items() if v.get("slope_pr_q_minus_pr_k") is not None}
    why = (an.stats.get("missing") or {}).get("checkpoints.slopes") or (an.stats.get("missing") or {}).get(
        "checkpoints", "no checkpoint series with >= 3 revisions")
    out = []
    specs = [("checkpoints.positive", "pr_q − pr_k slope on progress positive in a minority of series",
              PAPER_TEXT["checkpoints.positive"], Expect("<", 0.5), lambda s: float(s["slope_pr_q_minus_pr_k"] > 0)),
             ("checkpoints.link", "pr_k → qk_erank → attn_entropy link recurs in most series",
              PAPER_TEXT["checkpoints.link"], Expect(">", 0.5), lambda s: float(bool(s.get("link_recurs"))))]
    for cid, claim, paper, e, f in specs:
        if not fitted:
            out.append(Claim(cid, "checkpoints", claim, paper, e, unit="series", reason=why))
            continue
        x = np.array([[f(s)] for s in fitted.values()])
        out.append(Claim(cid, "checkpoints", claim, paper, e, x, _col(0), unit="series",
                         note=f"value = fraction of {len(fitted)} fitted series; units: series (no seeds)"))
    out.append(Claim("checkpoints.gpt2_burst", "checkpoints", "GPT-2 small: early pr_q − pr_k burst that later decays",
                     PAPER_TEXT["checkpoints.gpt2_burst"], Expect(">", 0), unit="series",
                     reason="a shape claim about one named series; SPEC §8 defines no statistic for it"))
    return out


# ----------------------------------------------------------------------------
# the whole
# ----------------------------------------------------------------------------


def verdict(value: float | None, lo: float | None, hi: float | None, e: Expect) -> str:
    """The verdict of one row (see the module docstring)."""
    if value is None:
        return "not measured"
    if not e.holds(value):
        return "not reproduced"
    if lo is not None and hi is not None and e.excludes_opposite(lo, hi):
        return "reproduced"
    return "direction only"


def build_scorecard(an: Analysis, preset: str | None, paper_scale: bool,
                    touched: set[str] | frozenset[str] = frozenset()) -> list[dict]:
    """Every scorecard row for one preset's analysis.

    paper_scale: the preset is ``paper`` (adds the paper-spread check);
    touched: stats sections that an unreadable store file may have affected.
    """
    claims = (_alignment_claims(an) + _slope_claims(an) + _category_claims(an) + _bridge_claims(an)
              + _intervention_claims(an, paper_scale) + _checkpoint_claims(an))
    rows = []
    for k, c in enumerate(claims):
        value = lo = hi = None
        n = 0
        reason = c.reason
        if reason is None and c.x is not None and c.reduce is not None:
            n = int(c.x.shape[0])
            value, lo, hi = seed_bootstrap(c.x, c.reduce, seed=k)
            if value is None:
                reason = "the statistic is undefined on this store (constant or too few values)"
        notes = [c.note] if c.note else []
        if value is not None and n < 2:
            notes.append(f"{n} {c.unit[:-1] if n == 1 else c.unit}: no interval")
        elif value is not None and n == 2:
            notes.append("2 seeds: interval ≈ range of the two seeds")
        spread = within = None
        if c.spread is not None:
            spread = f"{c.spread[0]:.4g}–{c.spread[1]:.4g}"
            level = c.level if c.level is not None else value
            if paper_scale and level is not None:
                within = bool(c.spread[0] <= level <= c.spread[1])
        rows.append({
            "preset": preset, "id": c.id, "section": c.section, "claim": c.claim, "paper": c.paper,
            "expected": c.expect.text(), "value": value, "ci_low": lo, "ci_high": hi, "n": n,
            "unit": c.unit, "n_runs": c.n_runs, "verdict": verdict(value, lo, hi, c.expect),
            "reason": reason if value is None else ("; ".join(notes) or None),
            "paper_spread": spread, "within_paper_spread": within,
            "skipped_files": c.section in touched,
        })
    return rows


def _num(v: float | None, fmt: str = ".3g") -> str:
    return "—" if v is None else format(v, fmt)


def render_markdown(rows: list[dict], paper_scale: bool) -> list[str]:
    """The scorecard as a Markdown table plus the method note (lines)."""
    head = ["claim", "paper", "this store [95 % CI]", "n", "expected", "verdict"]
    if paper_scale:
        head.append("within paper spread")
    head.append("note")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        val = _num(r["value"])
        if r["ci_low"] is not None:
            val += f" [{_num(r['ci_low'])}, {_num(r['ci_high'])}]"
        verdict_txt = f"**{r['verdict']}**" + (" ⚠" if r["skipped_files"] else "")
        cells = [r["claim"], r["paper"], val, f"{r['n']} {r['unit']}" if r["n"] else "—", r["expected"], verdict_txt]
        if paper_scale:
            w = r["within_paper_spread"]
            cells.append("—" if w is None else f"{'yes' if w else 'no'} ({r['paper_spread']})")
        cells.append((r["reason"] or "").replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", METHOD_NOTE]
    if any(r["skipped_files"] for r in rows):
        lines += ["", "⚠ = a store file that could not be read belongs to this section's runs "
                  "(see *Skipped store files*); the row may lack data."]
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    lines += ["", "Summary: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + "."]
    return lines


def render_text(rows: list[dict]) -> list[str]:
    """A compact plain-text scorecard for the terminal (one line per claim)."""
    out = []
    for r in rows:
        val = _num(r["value"])
        if r["ci_low"] is not None:
            val += f" [{_num(r['ci_low'])}, {_num(r['ci_high'])}]"
        flag = " (unreadable store files)" if r["skipped_files"] else ""
        extra = f" — {r['reason']}" if r["verdict"] == "not measured" and r["reason"] else ""
        out.append(f"{r['verdict']:<15} {r['claim']}: paper {r['paper']}; here {val}{flag}{extra}")
    return out
