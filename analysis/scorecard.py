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

from dataclasses import dataclass

import numpy as np

from analysis.claims import Claim
from analysis.compute import Analysis, sections
from analysis.inference import (
    ALPHA,
    FAILS,
    HOLDS,
    MAGNITUDE_ONLY,
    NOT_MEASURED,
    REPRODUCED,
    REVERSED,
    TESTS,
    UNDECIDED,
    VERDICTS,
    UnitTest,
    against_test,
    direction,
    fisher_z,
    holm,
)
from analysis.primitives import to_jsonable
from analysis.section import Result

__all__ = ["LEGEND", "METHOD_NOTE", "SCORECARD", "VERDICTS", "ScorecardRow", "build_scorecard"]

#: Above the table: what each verdict means, and how often it is wrong.
LEGEND = (
    f"Verdicts (counted claims): **{REPRODUCED}** / **{REVERSED}** = the test over independent units "
    "(seeds; checkpoint series for Appendix A) decides the claim's direction, with Holm's adjustment over "
    f"every counted claim of this scorecard: when no claim has an effect, any is called decided at most "
    f"{ALPHA:.0%} of the time (family-wise); **{UNDECIDED}** = the data do not decide (the estimate's side is "
    f"shown, not judged); **{NOT_MEASURED}** = this store lacks what the claim needs (the note says why). "
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
    "gives its mean, the 95 % t interval over seeds and the two-sided one-sample t-test against the "
    "claim's null value (correlations on Fisher's z scale; 0/1 series outcomes: exact binomial test and "
    "Clopper–Pearson interval). p (Holm) is the p-value adjusted over the counted claims; a claim is "
    f"decided when it is ≤ {ALPHA:g}. The t-test assumes the per-seed statistics are independent and "
    "normal (symmetric): bench/verdicts.py measures its error rates under normal, heavy-tailed and skewed "
    "no-effect stores. Post-collapse: the same statistic over the epochs after the initial collapse "
    "(SPEC §8), a sensitivity column, not tested for the verdict."
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
    paper: str  # the paper's value of the same quantity (``kind``), with what it is derived from
    kind: str  # what both sides are: "change: final − initial qk_alignment" (``analysis.claims.KINDS``)
    block: str  # "counted", "sanity" or "magnitude" (a level against the paper's range)
    expected: str  # the expected side, e.g. "> 0"
    value: float | None  # the mean over units of the claim's statistic
    ci_low: float | None  # its 95 % interval
    ci_high: float | None
    n: int  # units
    unit: str  # "seeds" or "series"
    n_runs: int
    test: str | None  # "t, 4 df", "binomial", "--seeds auto" or None
    p: float | None  # two-sided p of "no effect"
    p_adj: float | None  # Holm-adjusted over the counted claims (the verdict's)
    verdict: str  # VERDICTS, HOLDS / FAILS (sanity), MAGNITUDE_ONLY
    magnitude: str | None  # paper scale: "consistent" / "inconsistent" with the paper's value; else None
    reason: str | None  # why not measured, or notes on the value
    post_value: float | None  # the statistic over the post-collapse window (slopes, bridge)
    post_ci_low: float | None
    post_ci_high: float | None
    post_p: float | None  # unadjusted: a sensitivity, not a verdict
    paper_spread: str | None
    within_paper_spread: bool | None
    skipped_files: bool  # an unreadable store file belongs to this section's runs


def all_claims(an: Analysis, paper_scale: bool) -> list[Claim]:
    """Every registered section's claims, in report order (SPEC §9 and Appendix A for the built-in ones)."""
    return [c for sec in sections() for c in sec.claims(an, paper_scale)]


def unit_test(y: np.ndarray | None, c: Claim, against: np.ndarray | None = None) -> UnitTest | None:
    """The claim's test on per-unit values y (None: nothing to test); correlations on Fisher's z;
    ``against``: the claim's ``y_against`` (``analysis.inference.against_test``)."""
    if y is None:
        return None
    if against is not None:
        return against_test(y, against, c.expect.lo, c.expect.sign)
    if not c.fisher:
        return TESTS[c.test](y, c.expect.lo)
    r = TESTS[c.test](fisher_z(y), float(fisher_z(np.array([c.expect.lo]))[0]))
    back = (lambda v: None if v is None else float(np.tanh(v)))  # noqa: E731
    return UnitTest(back(r.value), back(r.ci_low), back(r.ci_high), r.p, r.n, r.method)


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


def build_scorecard(an: Analysis, preset: str | None, paper_scale: bool,
                    touched: set[str] | frozenset[str] = frozenset(),
                    sequential: dict[str, dict] | None = None) -> list[ScorecardRow]:
    """Every scorecard row for one preset's analysis (module docstring).

    paper_scale: the preset is ``paper`` (adds the magnitude column); touched: stats sections that
    an unreadable store file may have affected; sequential: claim id -> the decision of an
    ``--seeds auto`` experiment of this preset (``sweep.report.sequential.decisions``).
    """
    claims = all_claims(an, paper_scale)
    tests = [unit_test(c.y, c, c.y_against) if c.reason is None else None for c in claims]
    seq = {i: (sequential or {}).get(c.id) for i, c in enumerate(claims)}
    seq = {i: d for i, d in seq.items() if d is not None and claims[i].reason is None}
    counted = [i for i, c in enumerate(claims) if not c.sanity and c.expect.sign != 0 and i not in seq]
    family = holm([tests[i].p if tests[i] is not None else None for i in counted])
    p_adj = dict(zip(counted, family, strict=True))
    rows = []
    for i, c in enumerate(claims):
        t = tests[i]
        value = t.value if t is not None else None
        reason = c.reason
        if reason is None and value is None:
            reason = "the statistic is undefined on this store (constant or too few values)"
        block = "sanity" if c.sanity else "magnitude" if c.expect.sign == 0 else "counted"
        if value is None:
            verdict = NOT_MEASURED
        elif block == "sanity":
            y = np.asarray(c.y, float)
            verdict = HOLDS if all(c.expect.holds(v) for v in y[np.isfinite(y)]) else FAILS
        elif block == "magnitude":
            verdict = MAGNITUDE_ONLY
        elif i in seq:
            verdict = _SEQUENTIAL.get(seq[i].get("outcome"), UNDECIDED)
        else:
            verdict = direction(t, c.expect.lo, c.expect.sign, p_adj.get(i))
        notes = [c.note] if c.note else []
        if value is not None and t.n < 2:
            notes.append(f"{units(t.n, c.unit)}: no interval, no test")
        if i in seq:  # the verdict is that experiment's (its own design and error: the legend)
            notes.append(sequential_note(seq[i]))
        post = unit_test(c.post, c) if c.post is not None and value is not None else None
        spread = within = None
        if c.spread is not None:
            spread = f"{c.spread[0]:.4g}–{c.spread[1]:.4g}"
            level = c.level if c.level is not None else value
            if paper_scale and level is not None:
                within = bool(c.spread[0] <= level <= c.spread[1])
        rows.append(ScorecardRow(
            preset=preset, id=c.id, section=c.section, claim=c.claim, paper=c.paper, kind=c.kind, block=block,
            expected=c.expect.text(), value=value, ci_low=t.ci_low if t else None,
            ci_high=t.ci_high if t else None, n=t.n if t else 0, unit=c.unit, n_runs=c.n_runs,
            test=("--seeds auto" if i in seq else _test_name(t)) if t is not None and value is not None else None,
            p=t.p if t else None, p_adj=p_adj.get(i), verdict=verdict,
            magnitude=_magnitude(c, t, within) if paper_scale and value is not None else None,
            reason=reason if value is None else ("; ".join(notes) or None),
            post_value=post.value if post else None, post_ci_low=post.ci_low if post else None,
            post_ci_high=post.ci_high if post else None, post_p=post.p if post else None,
            paper_spread=spread, within_paper_spread=within, skipped_files=c.section in touched,
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
    """Verdict counts of the counted and magnitude rows, then the sanity checks'."""
    main = [r for r in rows if r["block"] != "sanity"]
    out = {v: sum(r["verdict"] == v for r in main) for v in VERDICTS}
    sanity = [r for r in rows if r["block"] == "sanity"]
    out.update({v: sum(r["verdict"] == v for r in sanity) for v in (HOLDS, FAILS)})
    return out


def summary(rows: list[dict]) -> str:
    """``direction reproduced 12, undecided 9, direction reversed 1, not measured 6; sanity checks 3 of 3 hold``."""
    c = counts(rows)
    sanity = c[HOLDS] + c[FAILS]
    text = ", ".join(f"{v} {c[v]}" for v in VERDICTS)
    family = sum(r["block"] == "counted" and r["p_adj"] is not None for r in rows)
    text += f" (family of {family} tested claims, Holm at {ALPHA:.0%})"
    if sanity:
        text += f"; sanity checks {c[HOLDS]} of {sanity} hold"
    return text


def num(v: float | None, fmt: str = ".3g") -> str:
    return "—" if v is None else format(v, fmt)


def _pval(v: float | None) -> str:
    return "—" if v is None else (f"{v:.2g}" if v >= 1e-3 else f"{v:.1e}")


def _value(r: dict) -> str:
    val = num(r["value"])
    if r["ci_low"] is not None and r["ci_low"] != r["ci_high"]:
        val += f" [{num(r['ci_low'])}, {num(r['ci_high'])}]"
    return val


def _post(r: dict) -> str:
    if r.get("post_value") is None:
        return "—"
    ci = f" [{num(r['post_ci_low'])}, {num(r['post_ci_high'])}]" if r["post_ci_low"] is not None else ""
    return f"{num(r['post_value'])}{ci}"


def render_markdown(rows: list[dict], paper_scale: bool) -> list[str]:
    """The scorecard (lines, from stats.json's rows): the legend, the counted claims, the sanity
    block, the method note and the summary."""
    head = ["claim", "quantity", "paper", "this store [95 % CI]", "n", "expected", "p (Holm)", "direction"]
    if paper_scale:
        head.append("magnitude")
    head += ["post-collapse", "note"]
    lines = [LEGEND, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["block"] == "sanity":
            continue
        verdict_txt = f"**{r['verdict']}**" + (" ⚠" if r["skipped_files"] else "")
        p = _pval(r["p_adj"]) if r["p_adj"] is not None else (r["test"] or "—")
        cells = [r["claim"], r.get("kind") or "—", r["paper"], _value(r), units(r["n"], r["unit"]) if r["n"] else "—",
                 r["expected"], p, verdict_txt]
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


def render_text(rows: list[dict]) -> list[str]:
    """A compact plain-text scorecard for the terminal, one line per row of ``ordered(rows)``
    (:func:`text_notes` go above it)."""
    out = []
    for r in ordered(rows):
        flag = " (unreadable store files)" if r["skipped_files"] else ""
        extra = f" — {r['reason']}" if r["verdict"] == NOT_MEASURED and r["reason"] else ""
        kind = f" [{r['kind']}]" if r.get("kind") else ""
        p = f", p (Holm) {_pval(r['p_adj'])}" if r["p_adj"] is not None else ""
        mag = f"; magnitude {r['magnitude']}" if r.get("magnitude") else ""
        post = f"; post-collapse {_post(r)}" if r.get("post_value") is not None else ""
        n = f" ({units(r['n'], r['unit'])}{p})" if r["n"] else ""
        out.append(f"{r['verdict']:<20} {r['claim']}{kind}: paper {r['paper']}; here {_value(r)}{n}{mag}{post}"
                   f"{flag}{extra}")
    return out


def text_notes(rows: list[dict]) -> list[str]:
    """The terminal's legend above the rows."""
    return [f"verdicts: {REPRODUCED} / {REVERSED} = the test over seeds decides the direction (Holm over the "
            f"counted claims: a no-effect claim is called decided at most {ALPHA:.0%} of the time, family-wise); "
            f"{UNDECIDED} = not decided; {NOT_MEASURED} (reason given); sanity checks last, not counted; "
            "[brackets]: the quantity both sides are"]


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
                sequential: dict[str, dict] | None = None) -> ScorecardResult:
        return ScorecardResult(build_scorecard(an, preset, paper_scale, touched, sequential), paper_scale)

    def markdown(self, rows: list[dict], paper_scale: bool) -> list[str]:
        return render_markdown(rows, paper_scale)


SCORECARD = Scorecard()
