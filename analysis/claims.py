"""The scorecard's claims: one per statement of SPEC §9 and the paper's Appendix A, each with its
per-unit statistic, the value it is tested against and its expected side (SPEC §8)."""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from analysis import vocabulary as vocab
from analysis.inference import SCORECARD_FAMILY
from analysis.losses import Arm
from analysis.reference import PAPER_REFERENCE, PAPER_TEXT, PAPER_VALUE
from analysis.units import (
    Reducer,
    cell_mean,
    column,
    count_runs,
    pearson_rows,
    pivot,
    pivot_many,
    pivot_units,
)
from interventions import PAPER_CONDITIONS
from model.qk_init import PAPER_INITS, QK_INITS


class Analysis(Protocol):
    """What the claims read of ``analysis.section.Analysis`` (that module imports this one, not the
    other way round): the sections' results, what could not be computed, and the frames."""

    results: dict[str, Any]
    missing: dict[str, str]
    frames: dict[str, pd.DataFrame]

# The claims are the paper's, so they are about the paper's regimes and conditions;
# which of them is coupled and what each condition predicts come from the registries.
COUPLED = next(i for i in PAPER_INITS if QK_INITS[i].coupled)
UNCOUPLED = tuple(i for i in PAPER_INITS if not QK_INITS[i].coupled)


@dataclass(frozen=True)
class Expect:
    """Expected side: E[statistic] ``>`` / ``<`` ``lo``; ``≠`` ``lo`` (two-sided: no direction predicted,
    a decision names the one found); or a level ``in`` [lo, hi] (a magnitude row)."""

    op: str
    lo: float
    hi: float | None = None

    def text(self) -> str:
        return f"in [{self.lo:g}, {self.hi:g}]" if self.op == "in" else f"{self.op} {self.lo:g}"

    @property
    def sign(self) -> int:
        """+1 for ``>``, −1 for ``<``, 0 for ``≠`` and a range (no predicted direction)."""
        return {">": 1, "<": -1}.get(self.op, 0)

    @property
    def tested(self) -> bool:
        """Whether a test decides it: every side but a range (``in``: a magnitude row)."""
        return self.op != "in"

    def holds(self, v: float) -> bool:
        if self.op == ">":
            return v > self.lo
        if self.op == "<":
            return v < self.lo
        if self.op == "≠":
            return v != self.lo
        return self.lo <= v <= (self.hi if self.hi is not None else np.inf)


@dataclass
class Claim:
    """One scorecard row before its test: the statistic of each independent unit, and what it claims."""

    id: str
    section: str
    claim: str
    paper: str
    expect: Expect
    #: the claim's statistic per independent unit (seed, or checkpoint series) [n]; the row's
    #: value is its mean (``fisher``: tanh of the mean of atanh), tested against ``expect.lo``
    y: np.ndarray | None = None
    n_runs: int = 0
    unit: str = "seeds"
    test: str = "t"  # analysis.inference.TESTS: "t" (one-sample t) or "binomial" (0/1 units)
    fisher: bool = False  # y are correlations: averaged and tested on the Fisher z scale
    reason: str | None = None  # why not measured
    note: str | None = None
    #: the direction follows from the initialisation or from a bound of the metric: shown in the
    #: scorecard's sanity block, not counted and not tested
    sanity: bool = False
    #: the paper's value of the same quantity, where it gives one (the magnitude column at paper scale)
    paper_value: float | None = None
    spread: tuple[float, float] | None = None  # the paper's reported spread of ``level`` (paper scale)
    level: float | None = None  # the value compared with the spread
    #: what both the paper's and this store's value are (one of KINDS, then what of), e.g.
    #: "change: final − initial qk_alignment"; the paper column states the same quantity
    kind: str = ""
    #: the same statistic over the post-collapse window (SPEC §8), per unit: a sensitivity column
    post: np.ndarray | None = None
    #: that window was fixed before the data (the preset's e_c); else chosen on these runs: shown, not tested
    post_fixed: bool = False
    #: for a claim against the larger of several inits (``y`` = x − max over them): x − the smaller,
    #: per unit [n]. A reversal is decided on it, so that "reversed" means below every one of them
    #: (SPEC §8: under no effect x − max has a negative mean and would read as reversed)
    y_against: np.ndarray | None = None
    #: the per-unit quantity the row names, when the test is bracketed (``y`` and ``y_against``) and
    #: neither bracket is it (the gap's growth: the paper's x − max at both depths); default ``y``
    shown: np.ndarray | None = None
    #: the units' labels (seed numbers, series names), in the order of ``y``, where known
    ids: tuple | None = None
    #: the arms whose runs the statistic needs (``analysis.losses``): their lost runs are shown
    arms: tuple[Arm, ...] = ()
    #: the family whose Holm–Tarone procedure adjusts its p (``analysis.inference.SCORECARD_FAMILY``: the
    #: paper's claims); another family is adjusted apart, at its own α (SPEC §8)
    family: str = SCORECARD_FAMILY


def baseline_arms(inits, depths=None) -> tuple[Arm, ...]:
    """One arm per init of the baseline (at ``depths``, default all)."""
    where = {"sweep": ("baseline",)} | ({"depth": tuple(depths)} if depths is not None else {})
    return tuple(Arm(i, where | {"init": (i,)}) for i in inits)


def intervention_arms(condition: str, inits) -> tuple[Arm, ...]:
    """The condition's runs and their matched ``none`` runs (the intervention sweep, ``inits``)."""
    where = {"sweep": ("interventions",), "init": tuple(inits)}
    return Arm(condition, where | {"condition": (condition,)}), Arm("matched none", where | {"condition": ("none",)})


#: The kinds of quantity a scorecard row compares (the first word of ``Claim.kind``).
KINDS = ("level", "difference", "change", "count", "correlation", "shape")


def per_unit(x: np.ndarray, reduce: Reducer) -> np.ndarray:
    """Each unit's own statistic: ``reduce`` applied to x [n, ...] row by row -> [n]."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(reduce(np.asarray(x, float)), float)


def at_bound(init: str) -> bool:
    """The regime fixes its initial alignment at a bound of |cos| (0 or 1): its final alignment can
    only move away from it, whatever training does."""
    a = QK_INITS[init].initial_alignment
    return a is not None and a in (0.0, 1.0)


def alignment_claims(an: Analysis) -> list[Claim]:
    fin, ini = an.frames.get("alignment_final"), an.frames.get("alignment_initial")
    why = an.missing.get("alignment", "no alignment data")
    inits = (COUPLED, *UNCOUPLED)
    out: list[Claim] = []
    a = an.results.get("alignment")
    ref = PAPER_REFERENCE["alignment"]
    ref_final = {i: (v["mean"], v["sd"]) for i, v in ref["final"].items()}
    ref_init = ref["initial"]
    initial = ("alignment.initial", "initial alignment: qk_identical above the uncoupled inits (the init itself)")
    if fin is None or fin.empty:
        specs = [(*initial, PAPER_TEXT["alignment.initial"], Expect(">", 0), True)]
        specs += [(f"alignment.final.{i}", f"final alignment {i} moved from its initial value",
                   _paper_change(ref_init[i], *ref_final[i]), Expect("<" if i == COUPLED else ">", 0), at_bound(i))
                  for i in inits]
        specs += [("alignment.contrast", "final alignment: qk_identical above the uncoupled inits",
                   PAPER_TEXT["alignment.contrast"], Expect(">", 0), False)]
        return [Claim(i, "alignment", c, p, e, reason=why, sanity=s,
                      kind=_ALIGN_KIND.get(i.split(".")[1], CHANGE_ALIGN)) for i, c, p, e, s in specs]

    def by_seed_init(frame: pd.DataFrame) -> tuple[np.ndarray, list, tuple]:
        return pivot_units(frame, "seed", ["init"], "qk_alignment")

    xf, cf, ids_f = by_seed_init(fin)
    xi, ci, ids_i = by_seed_init(ini)
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
    out.append(Claim(initial[0], "alignment", initial[1], PAPER_TEXT["alignment.initial"], Expect(">", 0),
                     per_unit(xi, r) if r else None, count_runs(ini), reason=None if r else need, sanity=True,
                     kind=_ALIGN_KIND["initial"], ids=ids_i, arms=baseline_arms(inits)))
    for init in inits:
        claim = f"final alignment {init} {'fell' if init == COUPLED else 'rose'} from its initial value"
        if at_bound(init):
            claim += f" (it starts at {QK_INITS[init].initial_alignment:g}, a bound of |cos|)"
        paper = _paper_change(ref_init[init], *ref_final[init])
        e = Expect("<" if init == COUPLED else ">", 0)
        if init not in cf or init not in ci or seeds_f != seeds_i:
            out.append(Claim(f"alignment.final.{init}", "alignment", claim, paper, e, kind=CHANGE_ALIGN,
                             sanity=at_bound(init), reason=f"no initial and final alignment of {init} for the same seeds"))
            continue
        d = xf[:, cf.index(init)] - xi[:, ci.index(init)]
        m, s = ref_final[init]
        out.append(Claim(f"alignment.final.{init}", "alignment", claim, paper, e, d,
                         count_runs(fin[fin["init"] == init]), spread=(m - s, m + s), sanity=at_bound(init),
                         level=a.final[init].mean if init in a.final else None, kind=CHANGE_ALIGN,
                         paper_value=ref_final[init][0] - ref_init[init], ids=ids_f, arms=baseline_arms([init])))
    r = contrast(cf)
    note = None
    if a.welch_p is not None:
        note = f"Welch p = {a.welch_p:.2g} (runs as units: descriptive), Hedges' g = {a.hedges_g:.2f}"
    out.append(Claim("alignment.contrast", "alignment", "final alignment: qk_identical above the uncoupled inits",
                     PAPER_TEXT["alignment.contrast"], Expect(">", 0), per_unit(xf, r) if r else None,
                     count_runs(fin), reason=None if r else need, note=note, kind=_ALIGN_KIND["contrast"],
                     paper_value=PAPER_VALUE.get("alignment.contrast"), ids=ids_f, arms=baseline_arms(inits)))
    out += gap_claims(fin)
    return out


CHANGE_ALIGN = "change: final − initial qk_alignment"
_ALIGN_KIND = {"initial": "difference: initial qk_alignment, qk_identical − mean of the uncoupled inits",
               "contrast": "difference: final qk_alignment, qk_identical − mean of the uncoupled inits",
               "gap": "difference: final qk_alignment, qk_identical − the larger uncoupled init (per seed)",
               "growth": "change of that difference from the shallowest to the deepest depth"}


def _paper_change(initial: float, final: float, sd: float) -> str:
    """The paper's final − initial alignment, with the levels it comes from."""
    return f"{final - initial:+.4f} ({initial:.4f} → {final:.4f} ± {sd:.4f})"


def gap_claims(fin: pd.DataFrame) -> list[Claim]:
    """Gap = qk_identical − the larger uncoupled init, per seed and depth, and its growth with depth."""
    x, cols, ids = pivot_units(fin, "seed", ["depth", "init"], "qk_alignment")
    depths = sorted({d for d, _ in cols})
    usable = [d for d in depths if (d, COUPLED) in cols and any((d, u) in cols for u in UNCOUPLED)]

    def gap(d: int, against: bool = False) -> Reducer:
        c = cols.index((d, COUPLED))
        u = [cols.index((d, i)) for i in UNCOUPLED if (d, i) in cols]
        pick = np.nanmin if against else np.nanmax
        return lambda avg: avg[:, c] - pick(avg[:, u], axis=-1)

    out = []
    for d in sorted(set(depths) | {4, 8}):
        cid = f"alignment.gap.L{d}"
        claim = f"alignment gap at {d} layer{'' if d == 1 else 's'} positive"
        paper = PAPER_TEXT.get(cid, "—")
        if d not in usable:
            out.append(Claim(cid, "alignment", claim, paper, Expect(">", 0),
                             reason=f"no {d}-layer runs of both {COUPLED} and an uncoupled init",
                             kind=_ALIGN_KIND["gap"]))
            continue
        out.append(Claim(cid, "alignment", claim, paper, Expect(">", 0), per_unit(x, gap(d)),
                         count_runs(fin[fin["depth"] == d]), kind=_ALIGN_KIND["gap"], paper_value=PAPER_VALUE.get(cid),
                         y_against=per_unit(x, gap(d, against=True)), ids=ids,
                         arms=baseline_arms((COUPLED, *UNCOUPLED), [d])))
    claim = "alignment gap grows with depth (deepest − shallowest)"
    if len(usable) < 2:
        out.append(Claim("alignment.gap.growth", "alignment", claim, PAPER_TEXT["alignment.gap.growth"],
                         Expect(">", 0), reason="needs the gap at two depths", kind=_ALIGN_KIND["growth"]))
    else:
        shallow, deep = usable[0], usable[-1]
        paper_value = PAPER_VALUE["alignment.gap.growth"] if (shallow, deep) == (4, 8) else None
        # bracketed: x − max u is biased down by E[max] when spreads differ by depth (SPEC §8), so the
        # rise is tested on (x_deep − max u_deep) − (x_shallow − min u_shallow), a fall on the reverse
        low = per_unit(x, lambda avg: gap(deep)(avg) - gap(shallow, against=True)(avg))
        high = per_unit(x, lambda avg: gap(deep, against=True)(avg) - gap(shallow)(avg))
        out.append(Claim("alignment.gap.growth", "alignment", f"{claim}: {shallow} → {deep}",
                         PAPER_TEXT["alignment.gap.growth"], Expect(">", 0), low, count_runs(fin),
                         kind=_ALIGN_KIND["growth"], paper_value=paper_value, y_against=high,
                         shown=per_unit(x, lambda avg: gap(deep)(avg) - gap(shallow)(avg)), ids=ids,
                         arms=baseline_arms((COUPLED, *UNCOUPLED), [shallow, deep])))
    return out


def slope_claims(an: Analysis) -> list[Claim]:
    """Table 4's directions, tested on each seed's mean slope over its layer trajectories; the count of
    seed-averaged traces (the paper's statistic) goes in the note."""
    rs, ts = an.frames.get("run_slopes"), an.frames.get("trace_slopes")
    specs = [("slopes.pr_q_minus_pr_k", "pr_q − pr_k rises over training (mean slope over layer trajectories)",
              PAPER_TEXT["slopes.pr_q_minus_pr_k"], "pr_q_minus_pr_k", +1),
             ("slopes.pr_k", "pr_k falls over training (mean slope over layer trajectories)",
              PAPER_TEXT["slopes.pr_k"], "pr_k", -1)]
    out = []
    for cid, claim, paper, metric, sign in specs:
        kind = f"level: OLS slope of {metric} per epoch, mean over a seed's (init, depth, layer) trajectories"
        e = Expect(">" if sign > 0 else "<", 0)
        if rs is None or rs.empty:
            why = an.missing.get("slopes", "no baseline trajectories")
            out.append(Claim(cid, "slopes", claim, paper, e, reason=why, kind=kind))
            continue
        x, _, ids = pivot_units(rs, "seed", ["init", "depth", "layer"], f"{metric}_slope")
        post = None
        if f"{metric}_slope_post" in rs:
            post = per_unit(pivot(rs, "seed", ["init", "depth", "layer"], f"{metric}_slope_post")[0], cell_mean)
        note = None
        if ts is not None and not ts.empty:
            v = ts[f"{metric}_slope"].to_numpy(float)
            v = v[np.isfinite(v)]
            hits = int((np.sign(v) == sign).sum())
            note = f"seed-averaged traces with slope {'> 0' if sign > 0 else '< 0'}: {hits}/{v.size} (Table 4's count)"
        sl = an.results.get("slopes")
        out.append(Claim(cid, "slopes", claim, paper, e, per_unit(x, cell_mean), count_runs(rs), note=note,
                         kind=kind, post=post, ids=ids, post_fixed=bool(sl and sl.collapse_fixed),
                         arms=baseline_arms(sorted(rs["init"].unique()))))
    return out


CATEGORY_CLAIMS = (  # id, claim, the category above, the category below, metric
    ("categories.late_mid.qk_erank", "late layers' qk_erank above mid layers'", "late", "mid", "qk_erank"),
    ("categories.late_mid.pr_q", "late layers' pr_q above mid layers'", "late", "mid", "pr_q"),
    ("categories.early_mid.attn_entropy", "mid layers are the entropy bottleneck (early − mid > 0)",
     "early", "mid", "attn_entropy"),
    ("categories.early_mid.qk_erank", "mid layers' qk_erank below early layers'", "early", "mid", "qk_erank"),
)


def within_model(fl: pd.DataFrame, hi: str, lo: str, metric: str) -> tuple[pd.Series, list[int]]:
    """Each seed's ``hi`` − ``lo`` contrast of ``metric`` inside its models (SPEC §8): in every (init,
    depth) run that has layers of both categories, the mean of its ``hi`` layers − the mean of its
    ``lo`` layers (final epoch); averaged over the inits at each depth, then over the depths with equal
    weight. Returns the per-seed series (index: seed) and the depths that contribute. A depth that
    shifts every layer of its models alike cannot move it."""
    g = fl.groupby(["seed", "init", "depth", "category"], observed=True)[metric].mean().unstack("category")
    if hi not in g or lo not in g:
        return pd.Series(dtype=float), []
    run = (g[hi] - g[lo]).dropna()
    if run.empty:
        return pd.Series(dtype=float), []
    per_depth = run.groupby(level=["seed", "depth"]).mean()
    return per_depth.groupby(level="seed").mean(), sorted(int(d) for d in per_depth.index.unique("depth"))


def category_claims(an: Analysis) -> list[Claim]:
    """The layer-category contrasts, within each model and then over depths (``within_model``): the
    seed stays the unit, and a depth effect cannot read as an effect of a layer's position (pooling
    the (run, layer) rows of every depth would weigh each depth by its layers in each category)."""
    fl = an.frames.get("final_layers")
    out = []
    for cid, claim, hi, lo, metric in CATEGORY_CLAIMS:
        paper = PAPER_TEXT[cid]
        kind = f"difference: final {metric}, {hi} − {lo} layers within each model, averaged over depths"
        y, depths = within_model(fl, hi, lo, metric) if fl is not None and not fl.empty else (pd.Series(dtype=float), [])
        if not depths:
            out.append(Claim(cid, "layer_categories", claim, paper, Expect(">", 0),
                             reason=f"no model with both {hi} and {lo} layers at the depths present "
                                    "(k = round(L/3) early and late layers: both need L >= 3)", kind=kind))
            continue
        used = fl[fl["depth"].isin(depths)]
        note = (f"within-model contrast at depth{'s' if len(depths) > 1 else ''} "
                f"{', '.join(map(str, depths))} (models with {hi} and {lo} layers), depths weighted equally")
        out.append(Claim(cid, "layer_categories", claim, paper, Expect(">", 0), y.to_numpy(float),
                         count_runs(used), kind=kind, note=note, paper_value=PAPER_VALUE.get(cid),
                         ids=tuple(int(v) for v in y.index), arms=baseline_arms(sorted(used["init"].unique()), depths)))
    return out


BRIDGE = {  # pair -> (metric a, sign a, metric b, sign b), value = sign * slope / mean
    "key_spec__qk_compression": ("pr_k", -1, "qk_erank", -1),
    "qk_compression__entropy_sharpening": ("qk_erank", -1, "attn_entropy", -1),
    "qk_compression__top1_sharpening": ("qk_erank", -1, "attn_top1", +1),
}


def _bridge_r(wide: dict[str, np.ndarray], a: str, sa: int, b: str, sb: int, suffix: str = "") -> np.ndarray:
    """Each seed's Pearson r of the two bridge quantities over its uncoupled layer trajectories [n];
    ``wide``: the per-seed table's columns pivoted to [seed, (init, depth, layer)] (``pivot_many``)."""
    sl_a, m_a, sl_b, m_b = (wide[f"{m}_{k}{suffix}"] for m in (a, b) for k in ("slope", "mean"))
    with np.errstate(invalid="ignore", divide="ignore"):
        return pearson_rows(sa * sl_a / m_a, sb * sl_b / m_b)


def bridge_claims(an: Analysis) -> list[Claim]:
    ps = an.frames.get("per_seed")
    out = []
    wide = ids = None
    for pair, (ma, sa, mb, sb) in BRIDGE.items():
        cid = f"bridge.{pair}"
        claim = f"bridge r({pair.replace('__', ', ')}) > 0 within each seed's uncoupled layer trajectories"
        paper = PAPER_TEXT[cid]
        kind = "correlation: Pearson r over a seed's uncoupled (init, depth, layer) trajectories, averaged over seeds"
        if ps is None or ps.empty:
            why = an.missing.get("bridge", "no uncoupled baseline runs")
            out.append(Claim(cid, "bridge", claim, paper, Expect(">", 0), reason=why, kind=kind, fisher=True))
            continue
        cols = [c for c in ps.columns if c.endswith(("_slope", "_mean", "_slope_post", "_mean_post"))]
        if wide is None:
            wide, ids = pivot_many(ps, "seed", ["init", "depth", "layer"], cols)
        post = _bridge_r(wide, ma, sa, mb, sb, "_post") if f"{ma}_slope_post" in ps else None
        cells = ps.groupby("seed").size()
        out.append(Claim(cid, "bridge", claim, paper, Expect(">", 0), _bridge_r(wide, ma, sa, mb, sb), count_runs(ps),
                         note=f"{int(cells.min())}–{int(cells.max())} trajectories per seed", kind=kind,
                         fisher=True, post=post, ids=ids,
                         post_fixed=bool(an.results.get("bridge") and an.results["bridge"].collapse_fixed),
                         arms=baseline_arms(sorted(ps["init"].unique()))))
    return out


def intervention_claims(an: Analysis, paper_scale: bool) -> list[Claim]:
    pairs = an.frames.get("intervention_pairs")
    runs = an.frames.get("intervention_runs")
    arrows = {+1: "↑", -1: "↓"}
    out = []
    for cond in PAPER_CONDITIONS:
        pred = vocab.predicted(cond)
        for metric, sign in pred.items():
            cid = f"interventions.{cond}.{metric}"
            claim = f"{cond}: {metric} {arrows[sign]} vs matched none (paired Δ)"
            paper = PAPER_TEXT.get(cid) or _paper_delta(cond, metric, sign)
            kind = f"change: final layer-mean {metric}, {cond} − matched none (Δ)"
            e = Expect(">" if sign > 0 else "<", 0)
            sub = pairs[pairs["condition"] == cond] if pairs is not None and not pairs.empty else None
            if sub is None or sub.empty or sub[f"d_{metric}"].notna().sum() == 0:
                out.append(Claim(cid, "interventions", claim, paper, e,
                                 reason=f"no {cond} run with a matched none run", kind=kind))
                continue
            x, _, ids = pivot_units(sub, "seed", ["condition"], f"d_{metric}")
            out.append(Claim(cid, "interventions", claim, paper, e, per_unit(x, column(0)), count_runs(sub),
                             kind=kind, ids=ids, arms=intervention_arms(cond, sorted(sub["init"].unique()))))
    cid, claim = "interventions.val_loss", "final val_loss of the intervention family in the paper's range"
    lo, hi = PAPER_REFERENCE["interventions"]["val_loss_range"]
    e = Expect("in", lo, hi)
    kind = "level: final val_loss (nats per token), mean over conditions and seeds"
    if not paper_scale:
        out.append(Claim(cid, "interventions", claim, PAPER_TEXT[cid], e, kind=kind,
                         reason="a WikiText-103 loss level: compared at paper scale only"))
    elif runs is None or runs.empty or runs["val_loss"].notna().sum() == 0:
        out.append(Claim(cid, "interventions", claim, PAPER_TEXT[cid], e, reason="no intervention val_loss",
                         kind=kind))
    else:
        x, _ = pivot(runs.assign(all="all"), "seed", ["all"], "val_loss")
        out.append(Claim(cid, "interventions", claim, PAPER_TEXT[cid], e, per_unit(x, column(0)), count_runs(runs),
                         spread=(lo, hi), kind=kind))
    return out


def _paper_delta(cond: str, metric: str, sign: int) -> str:
    """The paper's side of an intervention row: it reports the sign (its confidence score: the
    fraction of its seeds in the predicted direction) and, for some metrics, the level under the
    condition, never the Δ itself. Its count is not a confidence: 5 of 5 seeds in one direction
    happen by chance 1 time in 32 per metric."""
    ref = PAPER_REFERENCE["interventions"].get(cond, {})
    n = PAPER_REFERENCE["interventions"]["n_seeds"]
    hits = round(ref.get("confidence", 1.0) * n)
    text = f"Δ {'>' if sign > 0 else '<'} 0, sign only (the paper: {hits} of {n} seeds in this direction)"
    if metric in ref:
        text += f"; the paper gives the level under {cond}, {ref[metric]:g}, not the Δ"
    return text


def checkpoint_claims(an: Analysis) -> list[Claim]:
    """Appendix A's claims are about the paper's *public* checkpoint series: only series probed from
    the Hugging Face Hub (every ok revision has a ``repo``) count; local checkpoints (the demo's
    tiny series, a ``path`` in the manifest) are reported in the appendix but measure no claim.
    Each series is one unit with a 0/1 outcome: an exact binomial test against one half. A set of seeds
    (SPEC §7 "Sets") counts once, by its original series: its other seeds are the same model again, and
    are tested across seeds by ``analysis.suites``' per-set claims."""
    c = an.results.get("checkpoints")
    fitted = {k: v for k, v in (c.series if c else {}).items() if v.slope_pr_q_minus_pr_k is not None}
    seeds = sorted(k for k, v in fitted.items() if v.public and not v.counted)
    public = {k: v for k, v in fitted.items() if v.public and v.counted}
    local = sorted(k for k, v in fitted.items() if not v.public)
    why = an.missing.get("checkpoints.slopes") or an.missing.get(
        "checkpoints", "no checkpoint series with >= 3 revisions")
    if fitted and not public:
        why = (f"the probed series ({', '.join(local)}) are local checkpoints, not the paper's public "
               "series; probe Hub revisions (sweep.extension --series) to measure this")
    out = []
    specs = [("checkpoints.positive", "pr_q − pr_k slope on progress positive in a minority of series",
              PAPER_TEXT["checkpoints.positive"], Expect("<", 0.5), lambda s: float(s.slope_pr_q_minus_pr_k > 0),
              "count: fraction of fitted public series whose pr_q − pr_k slope on progress is > 0"),
             ("checkpoints.link", "pr_k → qk_erank → attn_entropy link recurs in most series",
              PAPER_TEXT["checkpoints.link"], Expect(">", 0.5), lambda s: float(bool(s.link_recurs)),
              "count: fraction of fitted public series where both correlations are > 0")]
    for cid, claim, paper, e, f, kind in specs:
        if not public:
            out.append(Claim(cid, "checkpoints", claim, paper, e, unit="series", reason=why, kind=kind,
                             test="binomial"))
            continue
        y = np.array([f(s) for s in public.values()])
        note = f"{len(public)} fitted public series; units: series (no seeds)"
        if local:
            note += f"; local series left out: {', '.join(local)}"
        if seeds:
            note += (f"; {len(seeds)} further seed(s) of sets left out (a set counts once, by its original; "
                     "its seeds are tested in the per-set rows)")
        out.append(Claim(cid, "checkpoints", claim, paper, e, y, unit="series", note=note, kind=kind,
                         test="binomial", paper_value=PAPER_VALUE.get(cid)))
    out.append(Claim("checkpoints.gpt2_burst", "checkpoints", "GPT-2 small: early pr_q − pr_k burst that later decays",
                     PAPER_TEXT["checkpoints.gpt2_burst"], Expect(">", 0), unit="series", kind="shape",
                     reason="a shape claim about one named series; SPEC §8 defines no statistic for it"))
    return out


#: The per-seed statistics of Appendix A across seeds (``analysis.suites``), in a few words.
SEED_STATISTICS = {"slope_pr_q_minus_pr_k": "pr_q − pr_k slope", "slope_pr_k": "pr_k slope",
                   "r_pr_k__qk_erank": "r(pr_k, qk_erank)", "r_qk_erank__attn_entropy": "r(qk_erank, attn_entropy)"}


def short_label(c: Claim) -> str:
    """The claim in a few words, for the console table and the scorecard figure."""
    parts = c.id.split(".")
    head, rest = parts[0], parts[1:]
    arrow = {1: "↑", -1: "↓"}.get(c.expect.sign, "")
    if head == "alignment":
        if rest[0] == "gap":
            if rest[1] == "growth":
                return "alignment gap growth with depth"
            return f"alignment gap at {rest[1][1:]} layer{'' if rest[1] == 'L1' else 's'}"
        if rest[0] == "final":
            return f"alignment change, {rest[1]}"
        return f"alignment {rest[0]}: qk_identical − uncoupled"
    if head == "slopes":
        return f"slope of {rest[0].replace('_minus_', ' − ')} {arrow}"
    if head == "categories":
        hi, lo = rest[0].split("_")
        return f"{rest[1]}: {hi} − {lo} layers"
    if head == "bridge":
        a, b = rest[0].split("__")
        return f"bridge r({a}, {b})"
    if c.id == "interventions.val_loss":
        return "val_loss in the paper's range"
    if head == "interventions" and len(rest) == 2:
        return f"{rest[0]}: {rest[1]} {arrow}"
    if head == "dose_response" and len(rest) == 2:
        return f"dose–response {rest[0]}: {rest[1]} {arrow}"
    if head == "checkpoints" and rest[0] == "seeds" and len(rest) >= 3:  # analysis.suites' per-set rows
        return f"{'.'.join(rest[1:-1])}: {SEED_STATISTICS.get(rest[-1], rest[-1])} ≠ 0"
    if head == "checkpoints":
        return {"positive": "checkpoints: pr_q − pr_k slope > 0", "link": "checkpoints: link recurs",
                "gpt2_burst": "checkpoints: GPT-2 burst"}.get(rest[0], c.id)
    return c.id


def paper_short(c: Claim) -> str:
    """The paper's side in a few characters: its value of the row's quantity, or the side it states."""
    if c.paper_value is not None:
        return f"{c.paper_value:.3g}"
    if "sign only" in c.paper or c.paper.startswith(("> 0", "< 0", "Δ")):
        return f"{c.expect.text()} (sign)"
    head = c.paper.split(" (")[0]
    return head if len(head) <= 14 else "see report.md"
