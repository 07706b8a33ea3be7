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

Row shape: ``ScorecardRow`` (``stats.json["scorecard"]`` is a list of them as dicts). The
markdown and terminal renderings read those dicts, so a multi-preset index renders each
preset's scorecard from its stats.
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.bootstrap import N_RESAMPLES, seed_bootstrap
from analysis.claims import VERDICTS, Claim, Expect, verdict  # noqa: F401 (VERDICTS, verdict: re-exported)
from analysis.compute import Analysis, sections
from analysis.primitives import to_jsonable
from analysis.section import Result

#: Above the table: what each verdict means.
LEGEND = (
    "Verdicts: **reproduced** = the expected direction holds and the 95 % interval excludes the "
    "opposite; **direction only** = the direction holds, the interval does not exclude the opposite; "
    "**not reproduced** = the direction does not hold; **not measured** = this store lacks what the "
    "claim needs (the note says why). Each row compares one quantity, named in its *quantity* "
    "column (a level, a difference, a change, a count, a correlation), on both sides in the same units."
)
#: Said once, above the table, when some row rests on two seeds.
TWO_SEEDS = (
    "Rows with n = 2 seeds: the interval is about the range between the two seeds' own values, so "
    "`reproduced` there means each seed alone shows the direction — a weak check."
)
#: Below the table: how the interval is computed.
METHOD_NOTE = (
    "Interval: 95 % percentile bootstrap over whole seeds (scipy.stats.bootstrap, "
    f"{N_RESAMPLES} resamples, fixed generator); each claim's statistic is computed per seed "
    "first, and seed-averaged traces are re-averaged over the resampled seeds. Appendix A "
    "rows resample checkpoint series (they have no seeds). With 1 unit there is no interval."
)


#: stats.json's ``scorecard_method``: all of the above.
METHOD_TEXT = f"{LEGEND} {TWO_SEEDS} {METHOD_NOTE}"


def units(n: int, unit: str) -> str:
    """``1 seed``, ``2 seeds``, ``1 series``, ``3 series`` (``unit`` is the plural)."""
    return f"{n} {unit[:-1] if n == 1 and unit.endswith('s') and unit != 'series' else unit}"


def two_seed_rows(rows: list[dict]) -> bool:
    """Some measured row rests on exactly two seeds (then :data:`TWO_SEEDS` is said, once)."""
    return any(r["n"] == 2 and r["unit"] == "seeds" and r["value"] is not None for r in rows)


@dataclass
class ScorecardRow:
    """One claim's row (``stats.json["scorecard"]`` holds them as dicts, in this order)."""

    preset: str | None
    id: str
    section: str  # the registered section the claim belongs to
    claim: str
    paper: str  # the paper's value of the same quantity (``kind``), with what it is derived from
    kind: str  # what both sides are: "change: final − initial qk_alignment" (``analysis.claims.KINDS``)
    expected: str  # the expected direction, e.g. "> 0"
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int  # units resampled
    unit: str  # "seeds" or "series"
    n_runs: int
    verdict: str  # one of VERDICTS
    reason: str | None  # why not measured, or notes on the value
    paper_spread: str | None
    within_paper_spread: bool | None
    skipped_files: bool  # an unreadable store file belongs to this section's runs


def all_claims(an: Analysis, paper_scale: bool) -> list[Claim]:
    """Every registered section's claims, in report order (SPEC §9 and Appendix A for the built-in ones)."""
    return [c for sec in sections() for c in sec.claims(an, paper_scale)]


def build_scorecard(an: Analysis, preset: str | None, paper_scale: bool,
                    touched: set[str] | frozenset[str] = frozenset()) -> list[ScorecardRow]:
    """Every scorecard row for one preset's analysis.

    paper_scale: the preset is ``paper`` (adds the paper-spread check);
    touched: stats sections that an unreadable store file may have affected.
    """
    claims = all_claims(an, paper_scale)
    rows = []
    for k, c in enumerate(claims):
        value = lo = hi = None
        n = 0
        reason = c.reason
        if reason is None and c.computed is not None:
            value, lo, hi, n = c.computed
        elif reason is None and c.x is not None and c.reduce is not None:
            n = int(c.x.shape[0])
            value, lo, hi = seed_bootstrap(c.x, c.reduce, seed=k)
            if value is None:
                reason = "the statistic is undefined on this store (constant or too few values)"
        notes = [c.note] if c.note else []
        if value is not None and n < 2:
            notes.append(f"{units(n, c.unit)}: no interval")
        spread = within = None
        if c.spread is not None:
            spread = f"{c.spread[0]:.4g}–{c.spread[1]:.4g}"
            level = c.level if c.level is not None else value
            if paper_scale and level is not None:
                within = bool(c.spread[0] <= level <= c.spread[1])
        rows.append(ScorecardRow(
            preset=preset, id=c.id, section=c.section, claim=c.claim, paper=c.paper, kind=c.kind,
            expected=c.expect.text(), value=value, ci_low=lo, ci_high=hi, n=n,
            unit=c.unit, n_runs=c.n_runs, verdict=verdict(value, lo, hi, c.expect),
            reason=reason if value is None else ("; ".join(notes) or None),
            paper_spread=spread, within_paper_spread=within,
            skipped_files=c.section in touched,
        ))
    return rows


def num(v: float | None, fmt: str = ".3g") -> str:
    return "—" if v is None else format(v, fmt)


def render_markdown(rows: list[dict], paper_scale: bool) -> list[str]:
    """The scorecard (lines, from stats.json's rows): the verdict legend and, when some row has two
    seeds, that caveat once; the table; the method note and the summary."""
    head = ["claim", "quantity", "paper", "this store [95 % CI]", "n", "expected", "verdict"]
    if paper_scale:
        head.append("within paper spread")
    head.append("note")
    lines = [LEGEND, ""] + ([TWO_SEEDS, ""] if two_seed_rows(rows) else [])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        val = num(r["value"])
        if r["ci_low"] is not None:
            val += f" [{num(r['ci_low'])}, {num(r['ci_high'])}]"
        verdict_txt = f"**{r['verdict']}**" + (" ⚠" if r["skipped_files"] else "")
        cells = [r["claim"], r.get("kind") or "—", r["paper"], val, units(r["n"], r["unit"]) if r["n"] else "—",
                 r["expected"], verdict_txt]
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
    """A compact plain-text scorecard for the terminal (one line per claim; :func:`text_notes` go
    above it)."""
    out = []
    for r in rows:
        val = num(r["value"])
        if r["ci_low"] is not None:
            val += f" [{num(r['ci_low'])}, {num(r['ci_high'])}]"
        flag = " (unreadable store files)" if r["skipped_files"] else ""
        extra = f" — {r['reason']}" if r["verdict"] == "not measured" and r["reason"] else ""
        kind = f" [{r['kind']}]" if r.get("kind") else ""
        out.append(f"{r['verdict']:<15} {r['claim']}{kind}: paper {r['paper']}; here {val}{flag}{extra}")
    return out


def text_notes(rows: list[dict]) -> list[str]:
    """The terminal's legend above the rows, and the two-seed caveat once when it applies."""
    out = ["verdicts: reproduced (direction holds, interval excludes the opposite) · direction only · "
           "not reproduced · not measured (reason given); [brackets]: the quantity both sides are"]
    if two_seed_rows(rows):
        out.append("n = 2 seeds: the interval is about the two seeds' range, so `reproduced` is a weak check")
    return out


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
                touched: set[str] | frozenset[str] = frozenset()) -> ScorecardResult:
        return ScorecardResult(build_scorecard(an, preset, paper_scale, touched), paper_scale)

    def markdown(self, rows: list[dict], paper_scale: bool) -> list[str]:
        return render_markdown(rows, paper_scale)


SCORECARD = Scorecard()
