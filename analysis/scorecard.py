"""The reproduction scorecard (SPEC §8): one row per claim of SPEC §9 and the paper's Appendix A.

Pure pandas/numpy/scipy, fed from ``analysis.compute.compute_all`` (one preset's ``Analysis``).
Each claim (``analysis.claims``) gives its statistic per independent unit — per seed (every run
of one seed number within the preset; never the layers of one run), or per checkpoint series —
and each row is that statistic's mean, its 95 % interval, and a verdict from a test on the units
(``analysis.inference``):

* the **counted** claims are tested (one-sample t-test over seeds; an exact binomial test over
  series) against "no effect", two-sided, and Holm's procedure adjusts the p-values over every
  counted claim the store measures: the scorecard calls any no-effect claim decided at most 5 %
  of the time (family-wise), whatever the dependence between claims. A decided claim is
  ``direction reproduced`` or ``direction reversed`` by the side of its estimate; the rest are
  ``undecided``. Below paper scale a verdict is about the direction only;
* at paper scale a second column judges **magnitude**: the paper's value of the same quantity inside
  this run's 95 % interval (or, where the paper gives a mean ± sd, this run's level within it);
* **sanity checks** — directions that follow from the initialisation or a bound of the metric (a
  regime whose initial alignment is 1 or 0) — stand in their own block, untested and uncounted:
  ``sanity: holds`` when every unit shows the direction;
* a level compared with the paper's range (the intervention family's val_loss) is a magnitude row;
* a claim an ``--seeds auto`` experiment decided takes that experiment's decision (its own
  group-sequential design and family-wise error, ``analysis.sequential``), never a fixed-seed test
  on data gathered sequentially.

``bench/verdicts.py`` measures the per-claim and the family-wise rate of false decisions on
simulated stores with no effect, and the power at the paper's effect sizes.

Row shape: ``ScorecardRow`` (``stats.json["scorecard"]`` is a list of them as dicts). The
markdown and terminal renderings read those dicts, so a multi-preset index renders each
preset's scorecard from its stats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from analysis.checks import assumption_check, seeds_needed, worst_case
from analysis.claims import Claim, paper_short, short_label
from analysis.compute import Analysis, sections
from analysis.inference import (
    ALPHA,
    CANNOT,
    DECIDED,
    FAILS,
    FOUND,
    FOUND_NEGATIVE,
    FOUND_POSITIVE,
    HOLDS,
    MAGNITUDE_ONLY,
    NOT_MEASURED,
    REPRODUCED,
    REVERSED,
    SCORECARD_FAMILY,
    TESTS,
    UNDECIDED,
    VERDICTS,
    UnitTest,
    against_test,
    fisher_z,
    holm_tarone,
)
from analysis.losses import arm_losses
from analysis.primitives import to_jsonable
from analysis.section import Result

__all__ = ["LEGEND", "METHOD_NOTE", "SCORECARD", "VERDICTS", "ScorecardRow", "build_scorecard"]

#: Above the table: what each verdict means, and how often it is wrong.
LEGEND = (
    f"Verdicts (counted claims): **{REPRODUCED}** / **{REVERSED}** = the test over independent units "
    "(seeds; checkpoint series for Appendix A) decides the claim's direction, with Holm's adjustment over "
    f"every counted claim of this scorecard: when no claim has an effect, any is called decided at most "
    f"{ALPHA:.0%} of the time (family-wise), provided the per-seed statistics are independent and normal; "
    f"**{UNDECIDED}** = the data do not decide (the estimate's side is shown, not judged; the seeds that "
    f"would decide it at this effect are estimated); **{CANNOT}** = no outcome of this many units could "
    "reach the claim's level (Tarone: it leaves Holm's multiplier, the row says why); "
    f"**{NOT_MEASURED}** = this store lacks what the claim needs (the note says why). "
    f"A claim that predicts no direction (expected ≠: Appendix A across the seeds of a checkpoint set) "
    f"reads **{FOUND_POSITIVE}** / **{FOUND_NEGATIVE}** when its two-sided test decides it; such claims "
    "count in a family of their own, adjusted apart and named in the note and the summary. "
    "The adjusted interval is the one the verdict rests on: it excludes the null exactly when the claim is "
    "decided. Beside each decision, *check* says whether an assumption-light test agrees (the exact "
    "sign-flip test over the same seeds, which needs only symmetry) or the decision rests on normality. "
    "A verdict speaks of the direction only; at paper scale the *magnitude* column says whether the "
    "paper's value lies inside this run's 95 % interval (or this run's level inside the paper's ± where "
    "it gives one). Sanity checks — directions fixed by the initialisation or a bound of the metric — "
    "are listed apart and not counted. A claim an `--seeds auto` experiment decided (test: --seeds auto) "
    "takes that experiment's decision, with its own group-sequential design and family-wise error, and "
    "is not in this table's family. Each row names its quantity; both sides are that quantity."
)
#: Below the table: how the interval and the test are computed.
METHOD_NOTE = (
    "Test and interval: each claim's statistic is computed per seed (per series for Appendix A); the row "
    "gives its mean, the 95 % t interval over seeds (unadjusted) and the two-sided one-sample t-test against "
    "the claim's null value (correlations on Fisher's z scale; 0/1 series outcomes: exact binomial test and "
    "Clopper–Pearson interval; a claim against the larger of several inits is bracketed: its predicted side "
    "tested against the larger, a reversal against the smaller). p (Holm) is the p-value adjusted over the "
    f"counted claims of its family (Holm's step-down; Tarone's rule leaves out a claim whose smallest attainable "
    f"p exceeds its level); a claim is decided when it is ≤ {ALPHA:g}. The adjusted interval is the 1 − α/k interval at "
    "the claim's Holm step (k: the multiplier its test faced; for a claim not rejected, that of the step "
    "where the procedure stopped): it agrees with the verdict, and is not a simultaneous interval. The t-test "
    "assumes the per-seed statistics are independent and normal; light tails (uniform) and bimodal laws "
    "inflate its error at few seeds (bench/verdicts.py measures them); *check* shows the exact sign-flip p "
    "(any symmetric law; its smallest value is 2·2⁻ⁿ), Shapiro–Wilk's normality p and a seed that alone "
    "carries the direction. Seeds needed: the seeds at which a fixed t-test at the claim's level has 80 % "
    "power at the observed standardized effect (noncentral t), a planning estimate from this run; an effect "
    "estimated on few seeds is optimistic. Lost runs: per arm, the runs that diverged, did not finish or are "
    "absent; where a decided claim lost any, the worst case gives each affected seed the observed value "
    "least favourable to the verdict. Post-collapse: the same statistic over the epochs after the initial "
    "collapse (SPEC §8), a sensitivity column, not tested for the verdict; its p is shown only when the "
    "window was fixed before the data."
)


#: stats.json's ``scorecard_method``: all of the above.
METHOD_TEXT = f"{LEGEND} {METHOD_NOTE}"


def units(n: int, unit: str) -> str:
    """``1 seed``, ``2 seeds``, ``1 series``, ``3 series`` (``unit`` is the plural)."""
    return f"{n} {unit[:-1] if n == 1 and unit.endswith('s') and unit != 'series' else unit}"


@dataclass
class ScorecardRow:
    """One claim's row (``stats.json["scorecard"]`` holds them as dicts, in this order)."""

    preset: str | None
    id: str
    section: str  # the registered section the claim belongs to
    claim: str
    short: str  # the claim in a few words (console table, figure)
    paper_short: str  # the paper's value or side in a few characters (console table)
    paper: str  # the paper's value of the same quantity (``kind``), with what it is derived from
    kind: str  # what both sides are: "change: final − initial qk_alignment" (``analysis.claims.KINDS``)
    block: str  # "counted", "sanity" or "magnitude" (a level against the paper's range)
    expected: str  # the expected side, e.g. "> 0"
    value: float | None  # the mean over units of the claim's statistic
    ci_low: float | None  # its 95 % interval (unadjusted)
    ci_high: float | None
    n: int  # units
    unit: str  # "seeds" or "series"
    n_runs: int
    test: str | None  # "t, 4 df", "binomial", "--seeds auto" or None
    p: float | None  # two-sided p of "no effect" (None: no test; magnitude rows test nothing)
    p_adj: float | None  # Holm-adjusted over the counted claims (the verdict's)
    level: float | None  # α/k: the level the claim's test faced in the family (SPEC §8)
    ci_adj_low: float | None  # the interval at 1 − level: excludes the null exactly when decided
    ci_adj_high: float | None
    #: the estimate and units that interval is about: ``value`` and ``n`` but for a ``--seeds auto``
    #: decision, whose interval is at its deciding (or last) look's seeds
    adj_value: float | None
    adj_n: int
    effect: float | None  # standardized: (value − null) / sd over units, on the test's scale
    effect_low: float | None  # the adjusted interval on that scale
    effect_high: float | None
    no_spread: bool  # every unit has the same value (no effect size; the sign-flip test stands in)
    verdict: str  # VERDICTS, HOLDS / FAILS (sanity), MAGNITUDE_ONLY
    magnitude: str | None  # paper scale: "consistent" / "inconsistent" with the paper's value; else None
    reason: str | None  # why not measured, or notes on the value
    check: str | None  # decided claims: "agrees" / "rests on normality" (``analysis.checks``)
    check_signflip_p: float | None
    check_normal_p: float | None  # Shapiro–Wilk
    check_driver: int | str | None  # the unit that alone carries the direction
    seeds_needed: int | None  # undecided: seeds for 80 % power at the observed effect (a planning figure)
    seeds_needed_reason: str | None
    lost: dict[str, int] | None  # runs lost per arm
    worst_case_p: float | None  # a decided claim with lost runs: p with the worst values in their place
    worst_case_holds: bool | None
    post_value: float | None  # the statistic over the post-collapse window (slopes, bridge)
    post_ci_low: float | None
    post_ci_high: float | None
    post_p: float | None  # unadjusted, and only for a window fixed before the data: a sensitivity
    paper_spread: str | None
    within_paper_spread: bool | None
    skipped_files: bool  # an unreadable store file belongs to this section's runs
    #: the family whose Holm–Tarone procedure adjusted p (``SCORECARD_FAMILY``, or a family of its own)
    family: str = SCORECARD_FAMILY


def all_claims(an: Analysis, paper_scale: bool) -> list[Claim]:
    """Every registered section's claims, in report order (SPEC §9 and Appendix A for the built-in ones)."""
    return [c for sec in sections() for c in sec.claims(an, paper_scale)]


def unit_test(y: np.ndarray | None, c: Claim, against: np.ndarray | None = None,
              confidence: float = 0.95, shown: np.ndarray | None = None) -> UnitTest | None:
    """The claim's test on per-unit values y (None: nothing to test); correlations on Fisher's z;
    ``against``: the claim's ``y_against`` (``analysis.inference.against_test``); the interval at
    ``confidence``."""
    if y is None:
        return None
    if against is not None:
        return against_test(y, against, c.expect.lo, c.expect.sign, shown, confidence)
    if not c.fisher:
        return TESTS[c.test](y, c.expect.lo, confidence)
    r = TESTS[c.test](fisher_z(y), float(fisher_z(np.array([c.expect.lo]))[0]), confidence)
    back = (lambda v: None if v is None else float(np.tanh(v)))  # noqa: E731
    return UnitTest(back(r.value), back(r.ci_low), back(r.ci_high), r.p, r.n, r.method, r.p_min, r.zero_spread)


def test_scale(c: Claim, side: int) -> tuple[np.ndarray | None, float]:
    """The per-unit values the test uses on ``side`` of the null (+1 above), and the null, on the
    test's scale (Fisher's z for correlations; a bracketed claim's bracket on that side)."""
    y = c.y if c.y_against is None or side == c.expect.sign or side == 0 else c.y_against
    if y is None:
        return None, c.expect.lo
    if c.fisher:
        return fisher_z(y), float(fisher_z(np.array([c.expect.lo]))[0])
    return np.asarray(y, float), c.expect.lo


def _test_name(t: UnitTest) -> str:
    return f"t, {t.n - 1} df" if t.method == "t" else t.method


#: ``--seeds auto``'s outcomes (analysis.sequential) and the verdicts they give a row
_SEQUENTIAL = {"as predicted": REPRODUCED, "against the prediction": REVERSED}


#: how the note of a row that a ``--seeds auto`` experiment decides begins (the terminal shows these)
SEQUENTIAL_NOTE = "--seeds auto: "


def sequential_note(c: dict) -> str:
    """``--seeds auto: as predicted, decided at n seeds (look k of K) (experiment E, family-wise α a over
    m claims)``: where and under which error a row's verdict was decided."""
    where = [f"experiment {c['experiment']}"] if c.get("experiment") else []
    if c.get("alpha") is not None:
        where.append(f"family-wise α {c['alpha']:g} over {c.get('family_size')} claims")
    return f"{SEQUENTIAL_NOTE}{c.get('text')}" + (f" ({', '.join(where)})" if where else "")


def _sequential_for(c: Claim, sequential: dict) -> dict | None:
    """The ``--seeds auto`` decision of claim ``c``: keyed by claim id, or (condition, metric) for an
    intervention claim (records written before the ids)."""
    if c.id in sequential:
        return sequential[c.id]
    parts = c.id.split(".")
    if len(parts) == 3 and parts[0] == "interventions":
        return sequential.get((parts[1], parts[2]))
    return None


def sequential_interval(d: dict, c: Claim) -> tuple[float | None, float | None]:
    """The interval a ``--seeds auto`` decision rests on: estimate ± |t| boundary · sd / √n at the
    deciding (or last) look, on the test's scale (back from Fisher's z for a correlation)."""
    est, sd, n, bound = (d.get(k) for k in ("estimate", "sd", "n", "bound"))
    if d.get("ci_adj_low") is not None or d.get("ci_adj_high") is not None:
        return d.get("ci_adj_low"), d.get("ci_adj_high")
    if None in (est, sd, n, bound) or not n:
        return None, None
    half = float(bound) * float(sd) / math.sqrt(float(n))
    lo, hi = float(est) - half, float(est) + half
    return (float(np.tanh(lo)), float(np.tanh(hi))) if c.fisher else (lo, hi)


def _needed(c: Claim, t: UnitTest, level: float, side: int):
    """Seeds an undecided claim needs: on the estimate's side, or, for a bracketed claim, on whichever
    of its two statistics shows the larger effect in the direction it is tested in."""
    sides = (c.expect.sign, -c.expect.sign) if c.y_against is not None else (side or c.expect.sign,)
    options = [seeds_needed(*test_scale(c, s), level, t.method, s) for s in sides]
    found = [o for o in options if o.seeds is not None]
    return min(found, key=lambda o: o.seeds) if found else options[0]


def _cannot_reason(t: UnitTest, c: Claim, level: float) -> str:
    if t.method == "binomial":
        return (f"cannot be decided with {units(t.n, c.unit)}: the exact binomial test's smallest p, "
                f"{t.p_min:.3g}, exceeds the level {level:.3g} it faces (Tarone)")
    return (f"cannot be decided with {units(t.n, c.unit)}: every unit has the same value, and the sign-flip "
            f"test's smallest p, 2·2⁻ⁿ = {t.p_min:.3g}, exceeds the level {level:.3g} it faces (Tarone)")


def _standardized(c: Claim, t: UnitTest, lo: float | None, hi: float | None) -> tuple[float | None, ...]:
    """(value − null) / sd over units, and the interval's ends, on the test's scale."""
    if t.value is None or t.n < 2 or t.method != "t" or t.zero_spread:
        return None, None, None  # no sd to scale by: the row says "no spread"
    y, null = test_scale(c, 0)
    v = y[np.isfinite(y)]
    sd = float(v.std(ddof=1)) if v.size > 1 else 0.0
    shown = fisher_z(np.array([t.value]))[0] if c.fisher else t.value
    if sd == 0:
        return (math.copysign(math.inf, shown - null) if shown != null else 0.0), None, None

    def scale(x: float | None) -> float | None:
        if x is None or not math.isfinite(x):
            return None
        return float(((fisher_z(np.array([x]))[0] if c.fisher else x) - null) / sd)

    return float((shown - null) / sd), scale(lo), scale(hi)


def build_scorecard(an: Analysis, preset: str | None, paper_scale: bool,
                    touched: set[str] | frozenset[str] = frozenset(),
                    sequential: dict | None = None) -> list[ScorecardRow]:
    """Every scorecard row for one preset's analysis (module docstring).

    paper_scale: the preset is ``paper`` (adds the magnitude column); touched: stats sections that
    an unreadable store file may have affected; sequential: claim id (or, for intervention claims,
    (condition, metric)) -> the decision of an ``--seeds auto`` experiment of this preset
    (``sweep.report.sequential.decisions``).
    """
    claims = all_claims(an, paper_scale)
    tests = [unit_test(c.y, c, c.y_against, shown=c.shown) if c.reason is None else None for c in claims]
    seq = {i: _sequential_for(c, sequential or {}) for i, c in enumerate(claims)}
    seq = {i: d for i, d in seq.items() if d is not None and claims[i].reason is None}
    counted = [i for i, c in enumerate(claims)
               if not c.sanity and c.expect.tested and i not in seq and tests[i] is not None]
    families: dict[str, list[int]] = {}
    for i in counted:  # each family adjusted apart, at its own α (SPEC §8)
        families.setdefault(claims[i].family, []).append(i)
    at: dict[int, tuple] = {}
    for members in families.values():
        result = holm_tarone([tests[i].p for i in members], [tests[i].p_min for i in members])
        at |= {i: (result, k) for k, i in enumerate(members)}
    lost_frame = an.frames.get("lost_runs")
    rows = []
    for i, c in enumerate(claims):
        t = tests[i]
        value = t.value if t is not None else None
        reason = c.reason
        if reason is None and value is None:
            reason = "the statistic is undefined on this store (constant or too few values)"
        block = "sanity" if c.sanity else "magnitude" if not c.expect.tested else "counted"
        fam, k = at.get(i, (None, None))
        p_adj = fam.p_adj[k] if k is not None else None
        level = fam.level[k] if k is not None else None
        notes = [c.note] if c.note else []
        if c.family != SCORECARD_FAMILY and block == "counted":
            notes.append(f"family: {c.family}, adjusted apart from the scorecard's claims "
                         f"(Holm–Tarone at α {ALPHA:g} over its {len(families.get(c.family, ()))} tested claims)")
        if value is None:
            verdict = NOT_MEASURED
        elif block == "sanity":
            y = np.asarray(c.y, float)
            verdict = HOLDS if all(c.expect.holds(v) for v in y[np.isfinite(y)]) else FAILS
        elif block == "magnitude":
            verdict = MAGNITUDE_ONLY
        elif i in seq:
            verdict = _SEQUENTIAL.get(seq[i].get("outcome"), UNDECIDED)
        elif k is not None and fam.cannot[k]:
            verdict = CANNOT
            notes.insert(0, _cannot_reason(t, c, level))
        elif k is not None and fam.rejected[k] and c.expect.sign == 0:  # two-sided: the direction found
            verdict = FOUND_POSITIVE if value > c.expect.lo else FOUND_NEGATIVE
        elif k is not None and fam.rejected[k]:
            verdict = REPRODUCED if np.sign(value - c.expect.lo) == c.expect.sign else REVERSED
        else:
            verdict = UNDECIDED
        if value is not None and t.n < 2:
            notes.append(f"{units(t.n, c.unit)}: no interval, no test")
        adj_lo = adj_hi = None
        if i in seq:  # the verdict is that experiment's (its own design and error: the legend)
            notes.append(sequential_note(seq[i]))
            adj_lo, adj_hi = sequential_interval(seq[i], c)
            level = seq[i].get("level")
        elif level is not None and t is not None and t.p is not None:
            adj = unit_test(c.y, c, c.y_against, confidence=1.0 - level, shown=c.shown)
            adj_lo, adj_hi = adj.ci_low, adj.ci_high
        side = int(np.sign(value - c.expect.lo)) if value is not None else 0
        check = needed = None
        if verdict in DECIDED and i not in seq and t.method == "t" and level is not None:
            y_side, null = test_scale(c, side)
            check = assumption_check(y_side, null, level, c.ids)
        if verdict in (UNDECIDED, CANNOT) and t is not None and t.p is not None:
            if i not in seq:
                needed = _needed(c, t, level, side)
            elif seq[i].get("alpha") and seq[i].get("family_size"):  # plan a new experiment from its start
                needed = _needed(c, t, seq[i]["alpha"] / seq[i]["family_size"], side)
                if needed.seeds is not None:
                    needed = replace(needed, note="a new --seeds auto experiment: --max-seeds at least that")
        lost = worst_p = holds = None
        if c.arms and block == "counted" and value is not None:
            lost, affected = arm_losses(lost_frame, c.arms)
            if affected and verdict in DECIDED and level is not None:
                y_side, null = test_scale(c, side)
                worst_p, holds = worst_case(y_side, c.ids, affected, null, side, level)
        post = None
        if c.post is not None and value is not None:
            post = unit_test(c.post, c)
            if not c.post_fixed:
                notes.append("post-collapse window chosen on these runs: descriptive, not tested")
        spread = within = None
        if c.spread is not None:
            spread = f"{c.spread[0]:.4g}–{c.spread[1]:.4g}"
            level_ = c.level if c.level is not None else value
            if paper_scale and level_ is not None:
                within = bool(c.spread[0] <= level_ <= c.spread[1])
        eff = _standardized(c, t, adj_lo, adj_hi) if t is not None and block == "counted" else (None, None, None)
        rows.append(ScorecardRow(
            preset=preset, id=c.id, section=c.section, claim=c.claim, short=short_label(c), paper_short=paper_short(c),
            paper=c.paper,
            kind=c.kind, block=block, expected=c.expect.text(), value=value, ci_low=t.ci_low if t else None,
            ci_high=t.ci_high if t else None, n=t.n if t else 0, unit=c.unit, n_runs=c.n_runs,
            test=("--seeds auto" if i in seq else _test_name(t)) if t is not None and value is not None else None,
            p=t.p if t is not None and block != "magnitude" else None, p_adj=p_adj, level=level,
            ci_adj_low=adj_lo, ci_adj_high=adj_hi,
            # a bracketed claim's record holds its predicted side's statistic: show the row's own quantity
            adj_value=seq[i].get("estimate", value) if i in seq and c.y_against is None else value,
            adj_n=int(seq[i].get("n") or 0) if i in seq else (t.n if t else 0), effect=eff[0], effect_low=eff[1], effect_high=eff[2],
            no_spread=bool(t is not None and t.zero_spread),
            verdict=verdict, magnitude=_magnitude(c, t, within) if paper_scale and value is not None else None,
            reason=reason if value is None else ("; ".join(notes) or None),
            check=check.verdict if check else None, check_signflip_p=check.signflip_p if check else None,
            check_normal_p=check.normal_p if check else None, check_driver=check.driver if check else None,
            seeds_needed=needed.seeds if needed else None, seeds_needed_reason=needed.text() if needed else None,
            lost=lost, worst_case_p=worst_p, worst_case_holds=holds,
            post_value=post.value if post else None, post_ci_low=post.ci_low if post else None,
            post_ci_high=post.ci_high if post else None,
            post_p=post.p if post is not None and c.post_fixed else None,
            paper_spread=spread, within_paper_spread=within, skipped_files=c.section in touched, family=c.family,
        ))
    return rows


def _magnitude(c: Claim, t: UnitTest, within: bool | None) -> str | None:
    """Paper scale: the paper's ± where it gives one, else its value inside this run's interval."""
    if within is not None:
        return "consistent" if within else "inconsistent"
    if c.paper_value is None or t.ci_low is None:
        return None
    return "consistent" if t.ci_low <= c.paper_value <= t.ci_high else "inconsistent"


def counts(rows: list[dict]) -> dict[str, int]:
    """Verdict counts of the counted and magnitude rows, then the sanity checks' (the two-sided
    verdicts only where a row has one)."""
    main = [r for r in rows if r["block"] != "sanity"]
    out = {v: sum(r["verdict"] == v for r in main) for v in VERDICTS}
    out.update({v: n for v in FOUND if (n := sum(r["verdict"] == v for r in main))})
    sanity = [r for r in rows if r["block"] == "sanity"]
    out.update({v: sum(r["verdict"] == v for r in sanity) for v in (HOLDS, FAILS)})
    return out


def family_of(r: dict) -> str:
    """A row's family (rows written before families: the scorecard's)."""
    return r.get("family") or SCORECARD_FAMILY


def summary(rows: list[dict]) -> str:
    """``direction reproduced 12, undecided 9, direction reversed 1, cannot be decided 0, not measured 6
    (family of 22 tested claims, Holm at 5%); sanity checks 3 of 3 hold``, then, per family of its
    own (``other_families``), ``; checkpoint seeds, a family of its own: direction found: positive 2,
    undecided 6 (family of 8 tested claims, Holm at 5%)``."""
    own = [r for r in rows if family_of(r) == SCORECARD_FAMILY]
    c = counts(own)
    sanity = c[HOLDS] + c[FAILS]
    text = ", ".join(f"{v} {c[v]}" for v in (*VERDICTS, *[v for v in FOUND if v in c]))
    family = sum(r["block"] == "counted" and r["p_adj"] is not None for r in own)
    auto = sum(r["block"] == "counted" and r["test"] == "--seeds auto" for r in own)
    parts = [f"family of {family} tested claims, Holm at {ALPHA:.0%}"] if family or not auto else []
    if auto:
        parts.append(f"{auto} claims decided by --seeds auto, in its own family")
    text += f" ({'; '.join(parts)})"
    if sanity:
        text += f"; sanity checks {c[HOLDS]} of {sanity} hold"
    return "; ".join([text, *other_families(rows)])


def other_families(rows: list[dict]) -> list[str]:
    """One clause per family other than the scorecard's: its verdict counts and its size."""
    out = []
    for name in dict.fromkeys(family_of(r) for r in rows if family_of(r) != SCORECARD_FAMILY):
        mine = [r for r in rows if family_of(r) == name]
        found = counts(mine)
        said = ", ".join(f"{v} {found[v]}" for v in (*FOUND, *VERDICTS) if found.get(v))
        tested = sum(r["block"] == "counted" and r["p_adj"] is not None for r in mine)
        out.append(f"{name}, a family of its own: {said} (family of {tested} tested claims, Holm at {ALPHA:.0%})")
    return out


def num(v: float | None, fmt: str = ".3g") -> str:
    return "—" if v is None else format(v, fmt)


def _pval(v: float | None) -> str:
    return "—" if v is None else (f"{v:.2g}" if v >= 1e-3 else f"{v:.1e}")


def _interval(lo: float | None, hi: float | None) -> str:
    return f"[{num(lo)}, {num(hi)}]"


def _value(r: dict) -> str:
    val = num(r["value"])
    if r["ci_low"] is not None and r["ci_low"] != r["ci_high"]:
        val += f" {_interval(r['ci_low'], r['ci_high'])}"
    elif r["ci_low"] is None and r["n"] >= 2 and r["test"] and r["test"].startswith("t"):
        val += " [unbounded]"
    return val


def _adjusted(r: dict) -> str:
    """The value with the interval its verdict rests on (``—`` when there is none)."""
    val = num(r.get("adj_value", r["value"]))
    if r.get("ci_adj_low") is not None or r.get("ci_adj_high") is not None:
        if r["ci_adj_low"] == r["ci_adj_high"]:
            return val
        return f"{val} {_interval(r['ci_adj_low'], r['ci_adj_high'])}"
    if r.get("level") is not None and r["value"] is not None:
        return f"{val} [unbounded]"
    return val


def _post(r: dict) -> str:
    if r.get("post_value") is None:
        return "—"
    ci = f" [{num(r['post_ci_low'])}, {num(r['post_ci_high'])}]" if r["post_ci_low"] is not None else ""
    return f"{num(r['post_value'])}{ci}"


def _lost(r: dict) -> str:
    lost = r.get("lost") or {}
    if not any(lost.values()):
        return "—"
    text = ", ".join(f"{arm} {k}" for arm, k in lost.items())
    if r.get("worst_case_holds") is not None:
        text += ("; holds in the worst case" if r["worst_case_holds"]
                 else f"; not in the worst case (p {_pval(r['worst_case_p'])})")
    return text


def _check(r: dict) -> str:
    if r.get("check") is None:
        return "—"
    parts = [f"sign-flip p {_pval(r['check_signflip_p'])}" if r.get("check_signflip_p") is not None else ""]
    if r.get("check_normal_p") is not None and r["check_normal_p"] < 0.05:
        parts.append(f"Shapiro–Wilk p {_pval(r['check_normal_p'])}")
    if r.get("check_driver") is not None:
        parts.append(f"{r['unit'].rstrip('s')} {r['check_driver']} alone carries the direction")
    return f"{r['check']} ({'; '.join(p for p in parts if p)})"


def row_notes(r: dict) -> list[str]:
    """What the console prints under a row: the check or the worst case of a decision, the seeds an
    undecided claim needs, why a claim cannot be decided or is not measured, a ``--seeds auto`` note."""
    out = []
    if r["verdict"] == NOT_MEASURED or r["verdict"] == CANNOT:
        out.append((r["reason"] or "").split("; ")[0])
    if r.get("check"):
        out.append(f"check: {_check(r)}")
    if r.get("worst_case_holds") is not None:
        out.append(f"lost runs: {_lost(r)}")
    if r["verdict"] == UNDECIDED and r.get("seeds_needed_reason"):
        out.append(r["seeds_needed_reason"])
    out += [part for part in (r["reason"] or "").split("; ") if part.startswith(SEQUENTIAL_NOTE)]
    return [n for n in out if n]


def render_markdown(rows: list[dict], paper_scale: bool) -> list[str]:
    """The scorecard (lines, from stats.json's rows): the legend, the counted claims, the sanity
    block, the method note and the summary."""
    head = ["claim", "quantity", "paper", "this store [95 % CI, unadjusted]", "adjusted interval (the verdict's)",
            "n", "expected", "p (Holm)", "verdict", "check", "seeds needed", "lost runs"]
    if paper_scale:
        head.append("magnitude")
    head += ["post-collapse", "note"]
    lines = [LEGEND, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["block"] == "sanity":
            continue
        verdict_txt = f"**{r['verdict']}**" + (" ⚠" if r["skipped_files"] else "")
        p = _pval(r["p_adj"]) if r["p_adj"] is not None else (r["test"] or "—")
        needed = "—"
        if r.get("seeds_needed") is not None:
            needed = f"≈ {r['seeds_needed']}"
        elif r.get("seeds_needed_reason"):
            needed = r["seeds_needed_reason"].removeprefix("seeds needed: ")
        cells = [r["claim"], r.get("kind") or "—", r["paper"], _value(r),
                 _adjusted(r) if r["block"] == "counted" else "—",
                 units(r["n"], r["unit"]) if r["n"] else "—", r["expected"], p, verdict_txt, _check(r), needed,
                 _lost(r)]
        if paper_scale:
            w = r["magnitude"]
            cells.append("—" if w is None else w + (f" ({r['paper_spread']})" if r["paper_spread"] else ""))
        cells += [_post(r), (r["reason"] or "").replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    sanity = [r for r in rows if r["block"] == "sanity"]
    if sanity:
        lines += ["", "Sanity checks (not counted: the direction follows from the initialisation or a bound of "
                  "the metric; a failure means something is broken, a pass is not evidence):", "",
                  "| check | quantity | this store [95 % CI] | n | expected | result | note |",
                  "|---|---|---|---|---|---|---|"]
        for r in sanity:
            lines.append(f"| {r['claim']} | {r.get('kind') or '—'} | {_value(r)} | "
                         f"{units(r['n'], r['unit']) if r['n'] else '—'} | {r['expected']} | **{r['verdict']}** | "
                         f"{(r['reason'] or '').replace('|', '/')} |")
    lines += ["", METHOD_NOTE]
    if any(r["skipped_files"] for r in rows):
        lines += ["", "⚠ = a store file that could not be read belongs to this section's runs "
                  "(see *Skipped store files*); the row may lack data."]
    lines += ["", f"Summary: {summary(rows)}."]
    return lines


def ordered(rows: list[dict]) -> list[dict]:
    """The rows as the terminal lists them: the counted and magnitude rows, then the sanity checks."""
    return [*[r for r in rows if r["block"] != "sanity"], *[r for r in rows if r["block"] == "sanity"]]


#: The console's widest line (the scorecard is read at a glance in a terminal).
WIDTH = 160
#: Column widths of the console table: claim, paper, here [adjusted interval], n, verdict.
COLUMNS = (40, 14, 40, 10, 25)  # the verdict: "direction found: negative" whole
HEADER = ("claim", "paper", "here [adjusted interval]", "n", "verdict")


def _cell(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_text(rows: list[dict]) -> list[str]:
    """The console scorecard: a header, then per row of ``ordered(rows)`` a table line (claim · paper ·
    here [adjusted interval] · n · verdict) and its notes indented below; every line at most ``WIDTH``
    characters. Definitions and the paper's prose are in report.md."""
    import textwrap

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(_cell(c, w).ljust(w) for c, w in zip(cells, COLUMNS, strict=True)).rstrip()

    out = [line(HEADER)]
    for r in ordered(rows):  # the caller indents each line by 2
        here = _adjusted(r) if r["block"] == "counted" else _value(r)
        n_ = r.get("adj_n") or r["n"] if r["block"] == "counted" else r["n"]
        n = units(n_, r["unit"]) if n_ else "—"
        verdict = r["verdict"] + (" ⚠" if r["skipped_files"] else "")
        out.append(line((r.get("short") or r["claim"], r.get("paper_short") or r["paper"], here, n, verdict)))
        for note in row_notes(r):
            out += textwrap.wrap(note, WIDTH - 2, initial_indent="  ↳ ", subsequent_indent="    ")
    return out


def console(rows: list[dict], preset: str | None, notes: list[str] = ()) -> list[str]:
    """What the console prints of one preset's scorecard: the summary, the notes (the preset's, then
    the legend's), the table; every line at most ``WIDTH`` characters."""
    import textwrap

    out = [f"reproduction scorecard, preset {preset}:"]
    others = other_families(rows)
    own = summary(rows).removesuffix("; ".join(["", *others]) if others else "")
    counts_, _, rest = own.partition(" (")
    # the counts, then the family and the sanity checks, then each family of its own
    for part in (counts_, "(" + rest if rest else "", *others):
        out += textwrap.wrap(part, WIDTH - 2, initial_indent="  ", subsequent_indent="  ")
    for note in [*notes, *text_notes(rows)]:
        out += textwrap.wrap(note, WIDTH, initial_indent="  note: ", subsequent_indent="        ")
    return out + ["  " + line for line in render_text(rows)]


def text_notes(rows: list[dict]) -> list[str]:
    """The terminal's legend above the table (each line at most ``WIDTH`` characters with its prefix)."""
    return [f"{REPRODUCED} / {REVERSED}: the test over seeds decides the direction; a no-effect claim is decided "
            f"at most {ALPHA:.0%} of the time (Holm, normal per-seed values)",
            "here: the mean over seeds [the interval the verdict rests on, adjusted for the family: it excludes the "
            "null exactly when decided]",
            f"{UNDECIDED}: not decided (↳ seeds that would decide it); {CANNOT}: no outcome of these units could; "
            "sanity checks last; definitions: report.md"]


@dataclass
class ScorecardResult(Result):
    """The scorecard of one preset: its rows (see the module docstring), and whether it is at paper scale."""

    rows: list[ScorecardRow]
    paper_scale: bool

    def to_json(self) -> dict[str, object]:
        return {"scorecard": to_jsonable(self.rows), "scorecard_method": METHOD_TEXT}


class Scorecard:
    """The report's first section: one row per claim of every registered section (``Section.claims``).

    Not in the section registry: it runs after the others (their results are its input) and
    reads which store files could not be read.
    """

    name = "scorecard"
    heading = "Reproduction scorecard"

    def compute(self, an: Analysis, preset: str | None, paper_scale: bool,
                touched: set[str] | frozenset[str] = frozenset(),
                sequential: dict[tuple[str, str], dict] | None = None) -> ScorecardResult:
        return ScorecardResult(build_scorecard(an, preset, paper_scale, touched, sequential), paper_scale)

    def markdown(self, rows: list[dict], paper_scale: bool) -> list[str]:
        return render_markdown(rows, paper_scale)


SCORECARD = Scorecard()
