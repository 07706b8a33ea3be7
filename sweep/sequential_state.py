"""``--seeds auto``'s experiment as a function of what the store holds: the family of claims, the
seed sequence, each round's plan and each look's decisions (SPEC §8). No Ray: ``sweep.sequential``
runs the rounds.

A *unit* is one (condition, strength cell, init, depth): its claims (one per predicted metric)
share its runs. Its data are *pairs*: for a seed, its run and the matched ``none`` run (same init,
depth, seed). A pair is complete when both runs reached their final epoch with finite metrics,
lost when either run is recorded lost (ended in error, diverged, or non-finite), else open.

Round r aims each open unit at ``n_t``, t = min(r, K) (the looks ``n_1 < … < n_K``): walking the
seed sequence in order, it counts complete and open pairs and skips lost ones until it has ``n_t``
(``walk``); the open ones are trained. So a lost seed is replaced by the next seed of the
sequence in the next round, and a claim's look k always uses its first n_k complete pairs. A unit
that has lost more than ``lost_limit(max_seeds)`` seeds takes no more (its claims end undecided and
the command exits 1); the sequence holds ``max_seeds + lost_limit`` seeds.

Planning round r counts as lost only the runs lost in rounds before r, and a look at round r uses
only the pairs its walk reached by then: a rerun re-derives the same rounds and decisions from
the store and the record of lost runs, whatever later rounds added.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats

from analysis import vocabulary as vocab
from analysis.sequential import (
    AGAINST,
    AS_PREDICTED,
    FIRST_LOOK,
    Design,
    first_crossing,
    holm_update,
    t_stats,
)
from interventions import CONTROL
from sweep.presets import Cell, Preset

#: The first seed of the fixed sequence that extends a preset's seeds (documented in docs/seeds.md).
EXTRA_SEED_BASE = 1000

Strengths = tuple[tuple[str, float], ...]
Unit = tuple[str, Strengths, str, int]  # (condition, strengths cell, init, depth)


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
    cond, strengths, init, depth = unit
    return f"{cond}{''.join(f' {k}={v:g}' for k, v in strengths)} ({init}, {depth} layers)"


@dataclass(frozen=True)
class Claim:
    """One predicted direction of one unit."""

    unit: Unit
    metric: str
    predicted: int  # +1 or -1

    def row(self) -> dict:
        cond, strengths, init, depth = self.unit
        return {"condition": cond, "strengths": json.dumps(dict(strengths), sort_keys=True), "init": init,
                "depth": depth, "metric": self.metric, "predicted": "+" if self.predicted > 0 else "-"}


def family(preset: Preset) -> tuple[Claim, ...]:
    """Every claim the experiment decides: each predicted metric of each unit (cell order)."""
    seen: dict[Unit, None] = {}
    for c in preset.cells():
        if c.condition != CONTROL and vocab.predicted(c.condition) and not is_control_cell(c.strengths):
            seen.setdefault((c.condition, c.strengths, c.init, c.depth), None)
    return tuple(Claim(u, m, int(np.sign(p))) for u in seen for m, p in vocab.predicted(u[0]).items())


@dataclass(frozen=True)
class Experiment:
    """The preset, the design, the seed sequence and the family: everything fixed at the start."""

    preset: Preset
    design: Design
    seeds: tuple[int, ...]
    claims: tuple[Claim, ...]

    @property
    def units(self) -> tuple[Unit, ...]:
        return tuple(dict.fromkeys(c.unit for c in self.claims))

    @property
    def lost_limit(self) -> int:
        return lost_limit(self.design.max_seeds)

    def cell(self, unit: Unit, seed: int) -> Cell:
        cond, strengths, init, depth = unit
        return Cell(self.preset, init, depth, seed, cond, strengths)

    def control(self, unit: Unit, seed: int) -> Cell:
        return Cell(self.preset, unit[2], unit[3], seed, CONTROL)

    def once_cells(self) -> list[Cell]:
        """Runs with nothing to decide (no predicted direction, or a strength cell of zeros) and their
        ``none`` runs: trained in round 1 at the first look's seeds only."""
        units = set(self.units)
        grid = replace(self.preset, seeds=self.seeds[:FIRST_LOOK]).cells()
        return [c for c in grid if c.condition != CONTROL and (c.condition, c.strengths, c.init, c.depth) not in units] \
            + [Cell(self.preset, i, d, s, CONTROL) for i in self.preset.inits for d in self.preset.depths
               for s in self.seeds[:FIRST_LOOK]]

    def target(self, round_: int) -> int:
        """Pairs round ``round_`` (1-based) aims each open unit at."""
        return self.design.looks[min(round_, self.design.n_looks) - 1]


@dataclass(frozen=True)
class Walk:
    """One unit's seeds at a round: those counted (complete or open pairs), those lost."""

    counted: tuple[int, ...]
    lost: tuple[int, ...]
    exhausted: bool  # more lost than the limit (or the sequence ran out) before the target


def pair_state(exp: Experiment, unit: Unit, seed: int, complete: set[str], lost: set[str]) -> str:
    """``complete``, ``lost`` or ``open``."""
    ids = (exp.cell(unit, seed).run_id, exp.control(unit, seed).run_id)
    if any(i in lost for i in ids):
        return "lost"
    return "complete" if all(i in complete for i in ids) else "open"


def walk(exp: Experiment, unit: Unit, target: int, complete: set[str], lost: set[str]) -> Walk:
    """The unit's seeds for ``target`` pairs (module docstring)."""
    counted: list[int] = []
    skipped: list[int] = []
    for seed in exp.seeds:
        if len(counted) == target:
            break
        if pair_state(exp, unit, seed, complete, lost) == "lost":
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
    seeds: tuple[int, ...] = ()  # the complete pairs that look used
    outcome: str | None = None
    crossed: int | None = None  # 1-based look whose t crossed at the rejecting level
    p: float | None = None  # two-sided t-test p-value of that look (or of the last look reached)


@dataclass
class UnitState:
    """One unit after a look: its complete pairs (seed order) and lost seeds so far."""

    pairs: tuple[int, ...] = ()
    lost: tuple[int, ...] = ()


@dataclass
class State:
    """The experiment after some rounds: each claim's and each unit's state."""

    exp: Experiment
    claims: list[ClaimState] = field(default_factory=list)
    units: dict[Unit, UnitState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.claims = self.claims or [ClaimState() for _ in self.exp.claims]
        self.units = self.units or {u: UnitState() for u in self.exp.units}

    def exhausted(self, unit: Unit) -> bool:
        """The unit lost more seeds than it may replace."""
        return len(self.units[unit].lost) > self.exp.lost_limit

    def open_units(self, round_: int) -> list[Unit]:
        """Units round ``round_`` trains: an open claim, short of the round's target, not exhausted."""
        target = self.exp.target(round_)
        return [u for u in self.exp.units
                if any(s.level == 0 for c, s in zip(self.exp.claims, self.claims, strict=True) if c.unit == u)
                and len(self.units[u].pairs) < target and not self.exhausted(u)]


def plan(state: State, round_: int, complete: set[str], lost: set[str]) -> tuple[dict[Unit, Walk], list[Cell]]:
    """Round ``round_``'s walks of its units and the runs it trains (neither complete nor lost):
    ``lost`` holds the runs lost in earlier rounds only."""
    exp = state.exp
    walks = {u: walk(exp, u, exp.target(round_), complete, lost) for u in state.open_units(round_)}
    cells = exp.once_cells() if round_ == 1 else []
    for u, w in walks.items():
        for s in w.counted:
            cells += [exp.cell(u, s), exp.control(u, s)]
    todo = list({c.run_id: c for c in cells if c.run_id not in complete and c.run_id not in lost}.values())
    return walks, todo


def evaluate(state: State, round_: int, walks: dict[Unit, Walk], outcomes: dict[str, dict[str, float]],
             lost: set[str]) -> list[int]:
    """The look after round ``round_``: the walked units' pairs (``lost``: runs lost up to this round)
    and the claims (Holm-type, SPEC §8); returns the indices of the claims it decided."""
    exp, design = state.exp, state.exp.design
    if not exp.claims:
        return []
    complete = set(outcomes)
    for u, w in walks.items():
        now = {s: pair_state(exp, u, s, complete, lost) for s in w.counted}
        state.units[u] = UnitState(tuple(s for s in w.counted if now[s] == "complete"),
                                   tuple(sorted(set(w.lost) | {s for s in w.counted if now[s] == "lost"},
                                                key=exp.seeds.index)))
    reached = min(round_, design.n_looks)
    t = np.full((len(exp.claims), design.n_looks), np.nan)
    for i, c in enumerate(exp.claims):
        x = [outcomes[exp.cell(c.unit, s).run_id][c.metric] - outcomes[exp.control(c.unit, s).run_id][c.metric]
             for s in state.units[c.unit].pairs]
        t[i] = t_stats(np.asarray(x, float), design.looks)
    t[:, reached:] = np.nan
    level = holm_update(t, design, np.array([s.level for s in state.claims]))
    look, sign = first_crossing(t, design, level)
    decided = []
    for i, (c, s) in enumerate(zip(exp.claims, state.claims, strict=True)):
        if s.level:
            continue
        pairs = state.units[c.unit].pairs
        s.look = sum(1 for n in design.looks[:reached] if n <= len(pairs))
        s.seeds = pairs[: design.looks[s.look - 1]] if s.look else ()
        k_p = s.look - 1
        if level[i]:
            s.level, s.round, s.crossed = int(level[i]), round_, int(look[i]) + 1
            s.outcome = AS_PREDICTED if int(sign[i]) == c.predicted else AGAINST
            k_p = int(look[i])
            decided.append(i)
        s.p = _p_value(t[i, k_p], design.looks[k_p]) if k_p >= 0 else None
    return decided


def _p_value(t: float, n: int) -> float | None:
    if np.isnan(t):
        return None
    return float(2.0 * stats.t.sf(abs(t), n - 1))


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
