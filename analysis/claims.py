"""The scorecard's claims: one per statement of SPEC §9 and the paper's Appendix A, each with its
per-seed array, statistic and expected direction."""


from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pandas as pd

from analysis import vocabulary as vocab
from analysis.bootstrap import Reducer, column, count_runs, fraction, pearson_rows, pivot
from analysis.reference import PAPER_REFERENCE, PAPER_TEXT
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


VERDICTS = ("reproduced", "direction only", "not reproduced", "not measured")


def verdict(value: float | None, lo: float | None, hi: float | None, e: Expect) -> str:
    """The verdict of one scorecard row (the four verdicts: ``analysis.scorecard``'s docstring)."""
    if value is None:
        return "not measured"
    if not e.holds(value):
        return "not reproduced"
    if lo is not None and hi is not None and e.excludes_opposite(lo, hi):
        return "reproduced"
    return "direction only"


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
    #: (value, ci_low, ci_high, units) when the section computes the statistic and its interval
    #: itself, for a statistic that is not ``reduce`` of the mean over units (the dose–response's ρ)
    computed: tuple[float | None, float | None, float | None, int] | None = None
    #: what both the paper's and this store's value are (one of KINDS, then what of), e.g.
    #: "change: final − initial qk_alignment"; the paper column states the same quantity
    kind: str = ""


#: The kinds of quantity a scorecard row compares (the first word of ``Claim.kind``).
KINDS = ("level", "difference", "change", "count", "correlation", "shape")


def alignment_claims(an: Analysis) -> list[Claim]:
    fin, ini = an.frames.get("alignment_final"), an.frames.get("alignment_initial")
    why = an.missing.get("alignment", "no alignment data")
    inits = (COUPLED, *UNCOUPLED)
    out: list[Claim] = []
    a = an.results.get("alignment")
    ref = PAPER_REFERENCE["alignment"]
    ref_final = {i: (v["mean"], v["sd"]) for i, v in ref["final"].items()}
    ref_init = ref["initial"]
    if fin is None or fin.empty:
        specs = [("alignment.initial", "initial alignment: qk_identical above the uncoupled inits",
                  PAPER_TEXT["alignment.initial"], Expect(">", 0))]
        specs += [(f"alignment.final.{i}", f"final alignment {i} moved from its initial value",
                   _paper_change(ref_init[i], *ref_final[i]), Expect("<" if i == COUPLED else ">", 0))
                  for i in inits]
        specs += [("alignment.contrast", "final alignment: qk_identical above the uncoupled inits",
                   PAPER_TEXT["alignment.contrast"], Expect(">", 0))]
        return [Claim(i, "alignment", c, p, e, reason=why, kind=_ALIGN_KIND.get(i.split(".")[1], CHANGE_ALIGN))
                for i, c, p, e in specs]

    def by_seed_init(frame: pd.DataFrame) -> tuple[np.ndarray, list]:
        return pivot(frame, "seed", ["init"], "qk_alignment")

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
                     PAPER_TEXT["alignment.initial"], Expect(">", 0), xi, r, count_runs(ini), reason=None if r else need,
                     kind=_ALIGN_KIND["initial"]))
    for init in inits:
        claim = f"final alignment {init} {'fell' if init == COUPLED else 'rose'} from its initial value"
        paper = _paper_change(ref_init[init], *ref_final[init])
        e = Expect("<" if init == COUPLED else ">", 0)
        if init not in cf or init not in ci or seeds_f != seeds_i:
            out.append(Claim(f"alignment.final.{init}", "alignment", claim, paper, e, kind=CHANGE_ALIGN,
                             reason=f"no initial and final alignment of {init} for the same seeds"))
            continue
        d = xf[:, [cf.index(init)]] - xi[:, [ci.index(init)]]
        m, s = ref_final[init]
        out.append(Claim(f"alignment.final.{init}", "alignment", claim, paper, e, d, column(0),
                         count_runs(fin[fin["init"] == init]), spread=(m - s, m + s),
                         level=a.final[init].mean if init in a.final else None, kind=CHANGE_ALIGN))
    r = contrast(cf)
    note = None
    if a.welch_p is not None:
        note = f"Welch p = {a.welch_p:.2g}, Hedges' g = {a.hedges_g:.2f}"
    out.append(Claim("alignment.contrast", "alignment", "final alignment: qk_identical above the uncoupled inits",
                     PAPER_TEXT["alignment.contrast"], Expect(">", 0), xf, r,
                     count_runs(fin), reason=None if r else need, note=note, kind=_ALIGN_KIND["contrast"]))
    out += gap_claims(fin)
    return out


CHANGE_ALIGN = "change: final − initial qk_alignment"
_ALIGN_KIND = {"initial": "difference: initial qk_alignment, qk_identical − mean of the uncoupled inits",
               "contrast": "difference: final qk_alignment, qk_identical − mean of the uncoupled inits",
               "gap": "difference: final qk_alignment, qk_identical − the larger uncoupled init",
               "growth": "change of that difference from the shallowest to the deepest depth"}


def _paper_change(initial: float, final: float, sd: float) -> str:
    """The paper's final − initial alignment, with the levels it comes from."""
    return f"{final - initial:+.4f} ({initial:.4f} → {final:.4f} ± {sd:.4f})"


def gap_claims(fin: pd.DataFrame) -> list[Claim]:
    """Gap = qk_identical − the larger uncoupled mean, per depth, and its growth with depth."""
    x, cols = pivot(fin, "seed", ["depth", "init"], "qk_alignment")
    depths = sorted({d for d, _ in cols})
    usable = [d for d in depths if (d, COUPLED) in cols and any((d, u) in cols for u in UNCOUPLED)]

    def gap(d: int) -> Reducer:
        c = cols.index((d, COUPLED))
        u = [cols.index((d, i)) for i in UNCOUPLED if (d, i) in cols]
        return lambda avg: avg[:, c] - np.nanmax(avg[:, u], axis=-1)

    out = []
    for d in sorted(set(depths) | {4, 8}):
        claim = f"alignment gap at {d} layer{'' if d == 1 else 's'} positive"
        if d not in usable:
            out.append(Claim(f"alignment.gap.L{d}", "alignment", claim, PAPER_TEXT.get(f"alignment.gap.L{d}", "—"), Expect(">", 0),
                             reason=f"no {d}-layer runs of both {COUPLED} and an uncoupled init",
                             kind=_ALIGN_KIND["gap"]))
            continue
        out.append(Claim(f"alignment.gap.L{d}", "alignment", claim, PAPER_TEXT.get(f"alignment.gap.L{d}", "—"), Expect(">", 0),
                         x, gap(d), count_runs(fin[fin["depth"] == d]), kind=_ALIGN_KIND["gap"]))
    claim = "alignment gap grows with depth (deepest − shallowest)"
    if len(usable) < 2:
        out.append(Claim("alignment.gap.growth", "alignment", claim, PAPER_TEXT["alignment.gap.growth"],
                         Expect(">", 0), reason="needs the gap at two depths", kind=_ALIGN_KIND["growth"]))
    else:
        lo, hi = gap(usable[0]), gap(usable[-1])
        out.append(Claim("alignment.gap.growth", "alignment", f"{claim}: {usable[0]} → {usable[-1]}",
                         PAPER_TEXT["alignment.gap.growth"], Expect(">", 0), x,
                         lambda avg: hi(avg) - lo(avg), count_runs(fin), kind=_ALIGN_KIND["growth"]))
    return out


def slope_claims(an: Analysis) -> list[Claim]:
    rs = an.frames.get("run_slopes")
    specs = [("slopes.pr_q_minus_pr_k", "pr_q − pr_k slope positive in most seed-averaged traces",
              PAPER_TEXT["slopes.pr_q_minus_pr_k"], "pr_q_minus_pr_k", +1),
             ("slopes.pr_k", "pr_k slope negative in most seed-averaged traces", PAPER_TEXT["slopes.pr_k"], "pr_k", -1)]
    out = []
    for cid, claim, paper, metric, sign in specs:
        kind = f"count: fraction of seed-averaged traces whose {metric} slope is {'> 0' if sign > 0 else '< 0'}"
        if rs is None or rs.empty:
            why = an.missing.get("slopes", "no baseline trajectories")
            out.append(Claim(cid, "slopes", claim, paper, Expect(">", 0.5), reason=why, kind=kind))
            continue
        x, _ = pivot(rs, "seed", ["init", "depth", "layer"], f"{metric}_slope")
        out.append(Claim(cid, "slopes", claim, paper, Expect(">", 0.5), x, fraction(sign), count_runs(rs),
                         kind=kind))
    return out


def category_claims(an: Analysis) -> list[Claim]:
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
        kind = f"difference: final {metric}, {hi} − {lo} layers"
        if fl is None or fl.empty or not {hi, lo} <= set(fl["category"]):
            out.append(Claim(cid, "layer_categories", claim, paper, Expect(">", 0),
                             reason=f"no {hi} and {lo} layers at the depths present", kind=kind))
            continue
        x, cols = pivot(fl, "seed", ["category"], metric)
        i, j = cols.index(hi), cols.index(lo)
        out.append(Claim(cid, "layer_categories", claim, paper, Expect(">", 0), x,
                         lambda avg, i=i, j=j: avg[:, i] - avg[:, j], count_runs(fl), kind=kind))
    return out


BRIDGE = {  # pair -> (metric a, sign a, metric b, sign b), value = sign * slope / mean
    "key_spec__qk_compression": ("pr_k", -1, "qk_erank", -1),
    "qk_compression__entropy_sharpening": ("qk_erank", -1, "attn_entropy", -1),
    "qk_compression__top1_sharpening": ("qk_erank", -1, "attn_top1", +1),
}


def bridge_claims(an: Analysis) -> list[Claim]:
    ps = an.frames.get("per_seed")
    out = []
    for pair, (ma, sa, mb, sb) in BRIDGE.items():
        cid, claim = f"bridge.{pair}", f"bridge r({pair.replace('__', ', ')}) > 0 over uncoupled seed-averaged cells"
        paper = PAPER_TEXT[cid]
        kind = "correlation: Pearson r over seed-averaged (init, depth, layer) cells"
        if ps is None or ps.empty:
            why = an.missing.get("bridge", "no uncoupled baseline runs")
            out.append(Claim(cid, "bridge", claim, paper, Expect(">", 0), reason=why, kind=kind))
            continue
        mats = [pivot(ps, "seed", ["init", "depth", "layer"], f"{m}_{k}")[0]
                for m in (ma, mb) for k in ("slope", "mean")]
        x = np.stack(mats, axis=-1)  # (n, cells, 4)

        def reduce(avg: np.ndarray, sa=sa, sb=sb) -> np.ndarray:
            with np.errstate(invalid="ignore", divide="ignore"):
                qa = sa * avg[..., 0] / avg[..., 1]
                qb = sb * avg[..., 2] / avg[..., 3]
            return pearson_rows(qa, qb)

        out.append(Claim(cid, "bridge", claim, paper, Expect(">", 0), x, reduce, count_runs(ps),
                         note=f"{x.shape[1]} cells", kind=kind))
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
            x, _ = pivot(sub, "seed", ["condition"], f"d_{metric}")
            out.append(Claim(cid, "interventions", claim, paper, e, x, column(0), count_runs(sub), kind=kind))
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
        out.append(Claim(cid, "interventions", claim, PAPER_TEXT[cid], e, x, column(0), count_runs(runs),
                         spread=(lo, hi), kind=kind))
    return out


def _paper_delta(cond: str, metric: str, sign: int) -> str:
    """The paper's side of an intervention row: it reports the sign (its confidence) and, for some
    metrics, the level under the condition, never the Δ itself."""
    ref = PAPER_REFERENCE["interventions"].get(cond, {})
    text = f"Δ {'>' if sign > 0 else '<'} 0, sign only (confidence {ref.get('confidence', 1.0):.2f})"
    if metric in ref:
        text += f"; the paper gives the level under {cond}, {ref[metric]:g}, not the Δ"
    return text


def checkpoint_claims(an: Analysis) -> list[Claim]:
    """Appendix A's claims are about the paper's *public* checkpoint series: only series probed from
    the Hugging Face Hub (every ok revision has a ``repo``) count; local checkpoints (the demo's
    tiny series, a ``path`` in the manifest) are reported in the appendix but measure no claim."""
    c = an.results.get("checkpoints")
    fitted = {k: v for k, v in (c.series if c else {}).items() if v.slope_pr_q_minus_pr_k is not None}
    public = {k: v for k, v in fitted.items() if v.public}
    local = sorted(set(fitted) - set(public))
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
            out.append(Claim(cid, "checkpoints", claim, paper, e, unit="series", reason=why, kind=kind))
            continue
        x = np.array([[f(s)] for s in public.values()])
        note = f"{len(public)} fitted public series; units: series (no seeds)"
        if local:
            note += f"; local series left out: {', '.join(local)}"
        out.append(Claim(cid, "checkpoints", claim, paper, e, x, column(0), unit="series", note=note, kind=kind))
    out.append(Claim("checkpoints.gpt2_burst", "checkpoints", "GPT-2 small: early pr_q − pr_k burst that later decays",
                     PAPER_TEXT["checkpoints.gpt2_burst"], Expect(">", 0), unit="series", kind="shape",
                     reason="a shape claim about one named series; SPEC §8 defines no statistic for it"))
    return out
