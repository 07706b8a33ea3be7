"""``--seeds auto``'s experiment as a function of what the store holds: the family of claims, the
seed sequence, each round's plan and each look's decisions (SPEC §8). No Ray: ``sweep.sequential``
runs the rounds.

A *unit* is a set of runs per seed that some claims share; a seed of a unit is *complete* when
every one of its runs reached its final epoch with finite metrics, *lost* when any of them is
recorded lost (ended in error, diverged, or non-finite), else *open*. Three kinds:

* ``PairUnit`` (condition, strength cell, init, depth): the run and the matched ``none`` run; its
  claims' per-seed statistic is the paired difference Δ of one predicted metric;
* ``DoseUnit`` (condition, swept strength, init): every strength cell of the condition at every
  depth and their ``none`` runs; its claims' per-seed statistic is the OLS slope of Δ on strength
  over the seed's (depth, strength) cells (``analysis.dose_response``'s unit);
* ``GridUnit`` (a baseline preset): every (init, depth) run of the seed; its claims are the
  scorecard's counted baseline claims, their per-seed statistics the scorecard's own
  (``sweep.sequential_baseline``).

Round r aims each open unit at ``n_t``, t = min(r, K) (the looks ``n_1 < … < n_K``): walking the
seed sequence in order, it counts complete and open seeds and skips lost ones until it has ``n_t``
(``walk``); the open ones are trained. So a lost seed is replaced by the next seed of the
sequence in the next round, and a claim's look k always uses its unit's first n_k complete seeds.
A unit that has lost more than ``lost_limit(max_seeds)`` seeds takes no more (its claims end
undecided and the command exits 1); the sequence holds ``max_seeds + lost_limit`` seeds.

Planning round r counts as lost only the runs lost in rounds before r, and a look at round r uses
only the seeds its walk reached by then: a rerun re-derives the same rounds and decisions from
the store and the record of lost runs, whatever later rounds added.

*One family over two experiments* (``Joint``): ``sweep.demo --seeds auto`` decides the baseline's
and the interventions' claims as one Holm-type family of m = m_b + m_i claims. The baseline runs
first with the intervention claims open and without data; the interventions then start from the
baseline's decisions and its claims' stored t paths, so that a decision on either side hands its
α to every open claim of both (SPEC §8).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from analysis import vocabulary as vocab
from analysis.sequential import (
    AGAINST,
    AS_PREDICTED,
    FIRST_LOOK,
    Design,
    LookStat,
    against_reach,
    crossing_level,
    holm_levels,
    look_stat,
)
from analysis.units import slope_rows
from interventions import CONTROL
from model.qk_init import DEFAULT_INIT
from sweep.presets import Cell, Preset

#: The first seed of the fixed sequence that extends a preset's seeds (documented in docs/seeds.md).
EXTRA_SEED_BASE = 1000

Strengths = tuple[tuple[str, float], ...]


class PairUnit(NamedTuple):
    """A condition's strength cell at one (init, depth), with its matched ``none`` runs."""

    condition: str
    strengths: Strengths
    init: str
    depth: int


class DoseUnit(NamedTuple):
    """Every strength cell of a condition swept in one strength, at every depth of one init."""

    condition: str
    field: str
    init: str


class GridUnit(NamedTuple):
    """Every (init, depth) run of a baseline preset."""

    preset: str


Unit = PairUnit | DoseUnit | GridUnit

#: A claim's kind (the record's ``kind``).
PAIRED, DOSE, BASELINE = "paired", "dose", "baseline"


def lost_limit(max_seeds: int) -> int:
    """Seeds a unit may lose and still be given replacements: half its maximum, at least the first look's."""
    return max(FIRST_LOOK, max_seeds // 2)


def seed_sequence(preset_seeds: tuple[int, ...], n: int, skip: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The first ``n`` seeds: the preset's (but those in ``skip``), then 1000, 1001, … (none repeated)."""
    out = [s for s in preset_seeds if s not in skip][:n]
    extra = EXTRA_SEED_BASE
    while len(out) < n:
        if extra not in preset_seeds and extra not in skip:
            out.append(extra)
        extra += 1
    return tuple(out)


def is_control_cell(strengths: Strengths) -> bool:
    """A strength cell whose every strength is 0 is the ``none`` run itself (SPEC §5): nothing to decide."""
    return bool(strengths) and all(v == 0 for _, v in strengths)


def unit_label(unit: Unit) -> str:
    if isinstance(unit, GridUnit):
        return f"baseline {unit.preset}"
    if isinstance(unit, DoseUnit):
        return f"{unit.condition} dose–response in {unit.field} ({unit.init}, every depth)"
    cond, strengths, init, depth = unit
    return f"{cond}{''.join(f' {k}={v:g}' for k, v in strengths)} ({init}, {depth} layers)"


@dataclass(frozen=True)
class Claim:
    """One predicted direction of one unit: ``metric`` (a Table 5 metric, or the scorecard claim id
    of a baseline claim), tested against ``null`` (``fisher``: on Fisher's z); ``against``: tested on
    two statistics per seed (``analysis.inference.against_test``); ``id``: its scorecard row (None:
    none shows it, e.g. a strength cell other than the default)."""

    unit: Unit
    metric: str
    predicted: int  # +1 or -1
    id: str | None = None
    against: bool = False
    fisher: bool = False
    null: float = 0.0

    @property
    def kind(self) -> str:
        return BASELINE if isinstance(self.unit, GridUnit) else DOSE if isinstance(self.unit, DoseUnit) else PAIRED

    def key(self) -> tuple:
        """What makes two experiments' claims the same claim (the overlap check, ``sweep.sequential_record``)."""
        return tuple(json.loads(json.dumps(self.row()))[k] for k in KEY_FIELDS)

    def row(self) -> dict:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "condition": None, "strengths": None, "init": None,
                               "depth": None, "field": None, "metric": self.metric,
                               "predicted": "+" if self.predicted > 0 else "-", "against": self.against,
                               "fisher": self.fisher, "null": self.null}
        if isinstance(self.unit, PairUnit):
            cond, strengths, init, depth = self.unit
            out.update(condition=cond, strengths=json.dumps(dict(strengths), sort_keys=True), init=init, depth=depth)
        elif isinstance(self.unit, DoseUnit):
            out.update(condition=self.unit.condition, init=self.unit.init, field=self.unit.field)
        return out


#: The fields of ``Claim.row`` that identify a claim across experiments of one preset.
KEY_FIELDS = ("kind", "condition", "strengths", "init", "depth", "field", "metric")


def row_key(row: dict) -> tuple:
    """``Claim.key`` of a stored claim row (a record before ``kind`` existed: a paired claim)."""
    full = {"kind": PAIRED, "field": None, **row}
    return tuple(full.get(k) for k in KEY_FIELDS)


def _scorecard_init(inits: tuple[str, ...]) -> str:
    """The init the report's intervention and dose–response rows use: ``DEFAULT_INIT`` when present
    (Table 5's), else the first in the registry's order (``analysis.frames.ordered_inits``)."""
    if DEFAULT_INIT in inits:
        return DEFAULT_INIT
    known = [i for i in vocab.inits() if i in inits]
    return (known or sorted(inits))[0]


def swept_field(preset: Preset, condition: str) -> str | None:
    """The one strength ``--strengths`` sweeps for ``condition`` over two or more values (None: none,
    or several at once, which a dose–response does not decide: SPEC §5)."""
    fields = {f for c, f, values in preset.strengths if c == condition and len(set(values)) >= 2}
    return next(iter(fields)) if len(fields) == 1 else None


def family(preset: Preset) -> tuple[Claim, ...]:
    """Every claim an intervention experiment decides: each predicted metric of each paired unit
    (cell order), then each predicted metric of each swept condition's dose–response."""
    seen: dict[PairUnit, None] = {}
    for c in preset.cells():
        if c.condition != CONTROL and vocab.predicted(c.condition) and not is_control_cell(c.strengths):
            seen.setdefault(PairUnit(c.condition, c.strengths, c.init, c.depth), None)
    init = _scorecard_init(preset.inits)
    depth = preset.depths[0]
    claims = [Claim(u, m, int(np.sign(p)),
                    f"interventions.{u.condition}.{m}" if (u.strengths, u.init, u.depth) == ((), init, depth) else None)
              for u in seen for m, p in vocab.predicted(u.condition).items()]
    for cond in preset.conditions:
        fld = swept_field(preset, cond) if cond != CONTROL else None
        if fld is None or not vocab.predicted(cond):
            continue
        unit = DoseUnit(cond, fld, init)
        claims += [Claim(unit, m, int(np.sign(p)), f"dose_response.{cond}.{m}") for m, p in vocab.predicted(cond).items()]
    return tuple(claims)


@dataclass(frozen=True)
class JointClaim:
    """A claim of the other experiment of a joint family (``Joint``): its stored row and, once that
    experiment ran, its look statistics (each look's ``LookStat``; ``against``: the reversal's too)."""

    row: dict
    stats: tuple[LookStat, ...] = ()
    against_stats: tuple[LookStat, ...] | None = None
    level: int = 0  # j of the level α/j that rejected it there (0: open)


@dataclass(frozen=True)
class Joint:
    """The other experiment of one family: its name, its claims, and whether it runs after this one."""

    experiment: str
    claims: tuple[JointClaim, ...]
    later: bool  # True: it has not run yet (its claims are open, without data)

    def design(self) -> dict:
        """What a rerun must share (``sweep.sequential_record.design_of``)."""
        return {"experiment": self.experiment,
                "family": [{k: c.row.get(k) for k in ("id", *KEY_FIELDS, "predicted")} for c in self.claims],
                "order": "this first" if self.later else "this second"}


@dataclass(frozen=True)
class Experiment:
    """The preset, the design, the seed sequence and the family: everything fixed at the start.
    ``joint``: the other experiment of a family of both sweeps (its claims are the design's last)."""

    preset: Preset
    design: Design
    seeds: tuple[int, ...]
    claims: tuple[Claim, ...]
    joint: Joint | None = None

    @property
    def units(self) -> tuple[Unit, ...]:
        return tuple(dict.fromkeys(c.unit for c in self.claims))

    @property
    def lost_limit(self) -> int:
        return lost_limit(self.design.max_seeds)

    @property
    def family_size(self) -> int:
        """m: this experiment's claims and the joint experiment's."""
        return len(self.claims) + (len(self.joint.claims) if self.joint else 0)

    def cell(self, unit: PairUnit, seed: int) -> Cell:
        cond, strengths, init, depth = unit
        return Cell(self.preset, init, depth, seed, cond, strengths)

    def control(self, unit: PairUnit, seed: int) -> Cell:
        return Cell(self.preset, unit[2], unit[3], seed, CONTROL)

    def runs(self, unit: Unit, seed: int) -> tuple[Cell, ...]:
        """The unit's runs at ``seed`` (each once)."""
        if isinstance(unit, GridUnit):
            return tuple(Cell(self.preset, i, d, seed) for i in self.preset.inits for d in self.preset.depths)
        if isinstance(unit, DoseUnit):
            cells = [Cell(self.preset, unit.init, d, seed, unit.condition, s)
                     for s in self.preset.strength_cells(unit.condition) for d in self.preset.depths]
            return tuple(cells) + tuple(Cell(self.preset, unit.init, d, seed) for d in self.preset.depths)
        return self.cell(unit, seed), self.control(unit, seed)

    def once_cells(self) -> list[Cell]:
        """Runs with nothing to decide (no predicted direction, or a strength cell of zeros outside a
        dose–response) and the ``none`` runs: trained in round 1 at the first look's seeds only."""
        if self.preset.sweep == "baseline":
            return []
        first = self.seeds[:FIRST_LOOK]
        taken = {c.run_id for u in self.units for s in first for c in self.runs(u, s)}
        grid = replace(self.preset, seeds=first).cells()
        return [c for c in grid if c.condition != CONTROL and c.run_id not in taken] \
            + [Cell(self.preset, i, d, s, CONTROL) for i in self.preset.inits for d in self.preset.depths
               for s in first]

    def target(self, round_: int) -> int:
        """Seeds round ``round_`` (1-based) aims each open unit at."""
        return self.design.looks[min(round_, self.design.n_looks) - 1]


@dataclass(frozen=True)
class Walk:
    """One unit's seeds at a round: those counted (complete or open), those lost."""

    counted: tuple[int, ...]
    lost: tuple[int, ...]
    exhausted: bool  # more lost than the limit (or the sequence ran out) before the target


def seed_state(exp: Experiment, unit: Unit, seed: int, complete: set[str], lost: set[str]) -> str:
    """``complete``, ``lost`` or ``open``: the unit's runs at ``seed``."""
    ids = [c.run_id for c in exp.runs(unit, seed)]
    if any(i in lost for i in ids):
        return "lost"
    return "complete" if all(i in complete for i in ids) else "open"


pair_state = seed_state  # the name before units other than pairs


def walk(exp: Experiment, unit: Unit, target: int, complete: set[str], lost: set[str]) -> Walk:
    """The unit's seeds for ``target`` complete ones (module docstring)."""
    counted: list[int] = []
    skipped: list[int] = []
    for seed in exp.seeds:
        if len(counted) == target:
            break
        if seed_state(exp, unit, seed, complete, lost) == "lost":
            skipped.append(seed)
            if len(skipped) > exp.lost_limit:
                break
        else:
            counted.append(seed)
    return Walk(tuple(counted), tuple(skipped), len(counted) < target)


@dataclass
class ClaimState:
    """Where one claim stands after a look."""

    level: int = 0  # j of the level α/j that rejected it; 0: open
    round: int | None = None  # round that decided it
    look: int = 0  # 1-based look it was decided at, or the last look it reached
    seeds: tuple[int, ...] = ()  # the complete seeds that look used
    outcome: str | None = None
    crossed: int | None = None  # 1-based look whose statistic crossed at the rejecting level
    p: float | None = None  # p of that look (or of the last look reached): never 0
    stats: tuple[LookStat, ...] = ()  # each reached look's statistic (``against``: of y = x − the largest)
    against_stats: tuple[LookStat, ...] | None = None  # of y_against, each look
    note: str | None = None  # why a look's statistic is undefined
    decided_in: str | None = None  # a joint claim: the experiment whose look decided it


@dataclass
class UnitState:
    """One unit after a look: its complete seeds (sequence order) and lost seeds so far."""

    pairs: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()


@dataclass
class Outcomes:
    """What a look reads of the store: the complete runs' final layer-means (run id -> metric ->
    value; a baseline run's dict may be empty) and, for a baseline family, its claims on a set of
    seeds (``sweep.sequential_baseline``: the scorecard's own ``Claim`` objects, by id)."""

    final: dict[str, dict[str, float]]
    claims_at: Callable[[tuple[int, ...]], dict[str, Any]] | None = None

    @property
    def complete(self) -> set[str]:
        return set(self.final)


@dataclass
class State:
    """The experiment after some rounds: each claim's and each unit's state, and the joint claims'."""

    exp: Experiment
    claims: list[ClaimState] = field(default_factory=list)
    units: dict[Unit, UnitState] = field(default_factory=dict)
    joint: list[ClaimState] = field(default_factory=list)
    #: a baseline family's claims on each set of complete seeds (their runs no longer change)
    cache: dict[tuple[int, ...], dict] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.claims = self.claims or [ClaimState() for _ in self.exp.claims]
        self.units = self.units or {u: UnitState() for u in self.exp.units}
        if self.exp.joint and not self.joint:
            self.joint = [_joint_state(self.exp, c) for c in self.exp.joint.claims]

    def exhausted(self, unit: Unit) -> bool:
        """The unit lost more seeds than it may replace."""
        return len(self.units[unit].lost) > self.exp.lost_limit

    def decided(self) -> int:
        """r: claims of the family decided so far (the joint experiment's too)."""
        return sum(1 for s in [*self.claims, *self.joint] if s.level)

    def open_units(self, round_: int) -> list[Unit]:
        """Units round ``round_`` trains: an open claim, short of the round's target, not exhausted."""
        target = self.exp.target(round_)
        return [u for u in self.exp.units
                if any(s.level == 0 for c, s in zip(self.exp.claims, self.claims, strict=True) if c.unit == u)
                and len(self.units[u].pairs) < target and not self.exhausted(u)]


def _joint_state(exp: Experiment, c: JointClaim) -> ClaimState:
    """A joint claim as the other experiment left it (its level, and its decision when it had one)."""
    s = ClaimState(level=c.level, stats=c.stats, against_stats=c.against_stats, look=len(c.stats),
                   seeds=tuple(c.row.get("seeds") or ()), p=c.row.get("p"))
    if c.level:
        _decide(s, bool(c.row.get("against")), 1 if c.row.get("predicted") == "+" else -1, exp.design,
                tuple(c.row.get("seeds") or ()), c.row.get("round"))
        s.decided_in = c.row.get("decided_in") or c.row.get("experiment")
    return s


def plan(state: State, round_: int, complete: set[str], lost: set[str]) -> tuple[dict[Unit, Walk], list[Cell]]:
    """Round ``round_``'s walks of its units and the runs it trains (neither complete nor lost):
    ``lost`` holds the runs lost in earlier rounds only."""
    exp = state.exp
    walks = {u: walk(exp, u, exp.target(round_), complete, lost) for u in state.open_units(round_)}
    cells = exp.once_cells() if round_ == 1 else []
    for u, w in walks.items():
        for s in w.counted:
            cells += list(exp.runs(u, s))
    todo = list({c.run_id: c for c in cells if c.run_id not in complete and c.run_id not in lost}.values())
    return walks, todo


# --- the statistics of a look ----------------------------------------------------------------------


def _per_seed(exp: Experiment, claim: Claim, seeds: tuple[int, ...], final: dict) -> np.ndarray:
    """A paired or dose claim's statistic at each seed [n] (from the runs' final layer-means)."""
    def delta(cell: Cell, depth: int, init: str, seed: int) -> float:
        return final[cell.run_id][claim.metric] - final[Cell(exp.preset, init, depth, seed).run_id][claim.metric]

    u = claim.unit
    if isinstance(u, PairUnit):
        return np.array([delta(exp.cell(u, s), u.depth, u.init, s) for s in seeds], float)
    default = vocab.default_strengths(u.condition).get(u.field, math.nan)
    out = []
    for s in seeds:
        cells = [Cell(exp.preset, u.init, d, s, u.condition, st) for st in exp.preset.strength_cells(u.condition)
                 for d in exp.preset.depths]
        x = np.array([[delta(c, c.depth, u.init, s) for c in cells]])
        strength = np.array([[dict(c.strengths).get(u.field, default) for c in cells]], float)
        out.append(float(slope_rows(strength, x)[0]))
    return np.array(out, float)


def _fisher(v: np.ndarray | float) -> np.ndarray:
    from analysis.inference import fisher_z

    return fisher_z(np.atleast_1d(np.asarray(v, float)))


def _look(claim: Claim, y, y_against) -> tuple[LookStat, LookStat | None, str | None]:
    """The claim's statistic at one look from its per-seed values (None: not measured there, a note)."""
    if y is None:
        return LookStat(0, math.nan, math.nan, math.nan, math.nan), None, "not measured"
    y = np.asarray(y, float)
    null = claim.null
    if claim.fisher:
        y, null = _fisher(y), float(_fisher(null)[0])
        y_against = None if y_against is None else _fisher(y_against)
    note = None if np.isfinite(y).all() else f"a seed's statistic is not finite at {y.size} seeds"
    a = look_stat(np.asarray(y_against, float), null) if claim.against and y_against is not None else None
    return look_stat(y, null), a, note


def look_stats(exp: Experiment, state: State, outcomes: Outcomes, reached: int) -> None:
    """Each claim's statistic at each look its unit reached by look ``reached`` (in place)."""
    looks = exp.design.looks
    cache = state.cache
    for c, s in zip(exp.claims, state.claims, strict=True):
        seeds = state.units[c.unit].pairs
        n_reached = sum(1 for n in looks[:reached] if n <= len(seeds))
        stats, against, notes = [], [], []
        per_seed = None
        for k in range(n_reached):
            head = seeds[: looks[k]]
            if isinstance(c.unit, GridUnit):
                if head not in cache:
                    cache[head] = outcomes.claims_at(head) if outcomes.claims_at else {}
                sc = cache[head].get(c.metric)
                ok = sc is not None and sc.reason is None and sc.y is not None and len(sc.y) == len(head)
                y = sc.y if ok else None
                ya = getattr(sc, "y_against", None) if ok else None
            else:
                if per_seed is None:
                    per_seed = _per_seed(exp, c, seeds, outcomes.final)
                y, ya = per_seed[: looks[k]], None
            st, a, note = _look(c, y, ya)
            stats.append(st)
            against.append(a)
            if note:
                notes.append(f"look {k + 1}: {note}")
        s.stats = tuple(stats)
        s.against_stats = tuple(against) if c.against else None  # type: ignore[arg-type]
        s.note = "; ".join(notes) or None


def _t(stats: tuple[LookStat, ...] | None, n_looks: int) -> np.ndarray:
    t = np.full(n_looks, np.nan)
    for k, st in enumerate(stats or ()):
        if st is not None:
            t[k] = st.t
    return t


def claim_reach(against: bool, sign: int, stats, against_stats, design: Design) -> int:
    """The largest j at which the claim's looks so far cross (``analysis.sequential``)."""
    t = _t(stats, design.n_looks)
    if against:
        return int(against_reach(t[None], _t(against_stats, design.n_looks)[None], np.array([sign]), design)[0])
    return int(crossing_level(t[None], design)[0])


def _decide(s: ClaimState, against: bool, sign: int, design: Design, seeds: tuple[int, ...],
            round_: int | None) -> None:
    """Fill a rejected claim's outcome, deciding look and p from its looks at its level (in place)."""
    j = s.level
    t = _t(s.stats, design.n_looks)
    if against:
        ta = _t(s.against_stats, design.n_looks)
        up = design.upper[j - 1]
        pred = np.flatnonzero(np.nan_to_num(sign * t, nan=-np.inf) >= up)
        rev = np.flatnonzero(np.nan_to_num(-sign * ta, nan=-np.inf) >= up)
        as_pred = len(pred) and (not len(rev) or pred[0] <= rev[0])
        k = int(pred[0] if as_pred else rev[0])
        s.outcome = AS_PREDICTED if as_pred else AGAINST
    else:
        k = int(np.flatnonzero(np.abs(np.nan_to_num(t)) >= design.table[j - 1])[0])
        s.outcome = AS_PREDICTED if np.sign(t[k]) == sign else AGAINST
    s.crossed, s.look = k + 1, k + 1
    s.seeds = seeds[: design.looks[k]]
    s.round = round_
    s.p = claim_p(s, k, against, sign)


def claim_p(s: ClaimState, k: int, against: bool, sign: int) -> float | None:
    """The p of look k (0-based): the two-sided t-test's, or for a claim on two statistics
    ``2 · min`` of its two one-sided p (``analysis.inference.against_test``); never 0."""
    st = s.stats[k] if k < len(s.stats) else None
    if st is None or not math.isfinite(st.p):
        return None
    if not against:
        return st.p
    a = s.against_stats[k] if s.against_stats else None
    rev = a.one_sided_p(-sign) if a is not None else 1.0
    return min(1.0, 2.0 * min(st.one_sided_p(sign), rev))


def evaluate(state: State, round_: int, walks: dict[Unit, Walk], outcomes: Outcomes | dict,
             lost: set[str]) -> list[int]:
    """The look after round ``round_``: the walked units' seeds (``lost``: runs lost up to this
    round) and the claims (Holm-type over the whole family, SPEC §8); returns the indices of this
    experiment's claims it decided (a joint claim it decides is marked in ``state.joint``)."""
    exp, design = state.exp, state.exp.design
    if not exp.claims:
        return []
    outcomes = outcomes if isinstance(outcomes, Outcomes) else Outcomes(outcomes)
    complete = outcomes.complete
    for u, w in walks.items():
        now = {s: seed_state(exp, u, s, complete, lost) for s in w.counted}
        state.units[u] = UnitState(tuple(s for s in w.counted if now[s] == "complete"),
                                   tuple(sorted(set(w.lost) | {s for s in w.counted if now[s] == "lost"},
                                                key=exp.seeds.index)))
    reached = min(round_, design.n_looks)
    before = [s.level for s in state.claims]
    look_stats(exp, state, outcomes, reached)
    joint = exp.joint.claims if exp.joint else ()
    reach = [claim_reach(c.against, c.predicted, s.stats, s.against_stats, design)
             for c, s in zip(exp.claims, state.claims, strict=True)]
    reach += [claim_reach(bool(c.row.get("against")), 1 if c.row.get("predicted") == "+" else -1, s.stats,
                          s.against_stats, design) for c, s in zip(joint, state.joint, strict=True)]
    level = holm_levels(np.array(reach), exp.family_size,
                        np.array([s.level for s in [*state.claims, *state.joint]]))
    decided = []
    for i, (c, s) in enumerate(zip(exp.claims, state.claims, strict=True)):
        seeds = state.units[c.unit].pairs
        if before[i]:
            continue
        if level[i]:
            s.level = int(level[i])
            _decide(s, c.against, c.predicted, design, seeds, round_)
            decided.append(i)
            continue
        s.look = len(s.stats)
        s.seeds = seeds[: design.looks[s.look - 1]] if s.look else ()
        s.p = claim_p(s, s.look - 1, c.against, c.predicted) if s.look else None
    for c, s, lv in zip(joint, state.joint, level[len(exp.claims):], strict=True):
        if lv and not s.level:  # a joint claim decided by α this experiment's decisions handed on
            s.level = int(lv)
            _decide(s, bool(c.row.get("against")), 1 if c.row.get("predicted") == "+" else -1, design,
                    tuple(c.row.get("seeds") or ()), round_)
            s.decided_in = "here"
    return decided


def boundary(s: ClaimState, against: bool, design: Design, m: int, r: int) -> float | None:
    """The boundary that applied to the claim: at its rejecting level and deciding look, or, open or
    undecided, at the level it is now tested at (α/(m − r)) and its last look; one-sided
    (``Design.upper``) for a claim on two statistics."""
    if not s.look:
        return None
    j = s.level or max(1, m - r)
    return float((design.upper if against else design.table)[j - 1][s.look - 1])


def adjusted_interval(s: ClaimState, against: bool, sign: int, b: float | None, fisher: bool
                      ) -> tuple[float, float] | None:
    """The interval the decision rests on, at the look and boundary of ``boundary``: mean ± b · sd / √n
    (a claim on two statistics: the predicted side's bound from y, the other from y_against); it
    excludes the null exactly when the claim was decided. Zero spread: the sign-flip test's set, the
    point when its boundary is crossed, else unbounded (±inf). Fisher claims: back on r."""
    if b is None or not s.look or s.look > len(s.stats):
        return None
    st = s.stats[s.look - 1]
    if not math.isfinite(st.t):
        return None

    def bound(x: LookStat, side: int) -> float:
        """The one-sided bound of ``x`` that excludes the null on ``side`` when side · t ≥ b."""
        if x.zero_spread:
            return x.mean if side * x.t >= b else -side * math.inf
        return x.mean - side * b * x.sd / math.sqrt(x.n)

    if against:
        a = s.against_stats[s.look - 1] if s.against_stats else None
        if a is None or not math.isfinite(a.t):
            return None
        lo, hi = (bound(st, 1), bound(a, -1)) if sign > 0 else (bound(a, 1), bound(st, -1))
    elif st.zero_spread:  # the two-sided sign-flip set: the point, or the whole line
        lo, hi = (st.mean, st.mean) if abs(st.t) >= b else (-math.inf, math.inf)
    else:
        lo, hi = bound(st, 1), bound(st, -1)
    if fisher:
        lo, hi = math.tanh(lo), math.tanh(hi)
    return lo, hi


def claim_text(claim: ClaimState, unit: UnitState, n_looks: int, exhausted: bool, finished: bool) -> str:
    """``as predicted, decided at 5 seeds (look 2 of 4)``, ``undecided at 10 seeds (look 4 of 4)``,
    ``open at 5 seeds (look 2 of 4)``: always the seeds the claim used, and the seeds its unit lost."""
    where = f"look {claim.look} of {n_looks}" if claim.look else f"no look of {n_looks} reached"
    if unit.lost:
        n_lost = len(unit.lost)
        where += f"; {n_lost} seed{'s' if n_lost > 1 else ''} lost: {', '.join(map(str, unit.lost))}"
        if exhausted and not claim.level:
            where += ", no more replacements"
    if claim.level:
        return f"{claim.outcome}, decided at {len(claim.seeds)} seeds ({where})"
    return f"{'undecided' if finished else 'open'} at {len(claim.seeds)} seeds ({where})"
