"""What ``--seeds auto`` prints: the plan, a line per unit after each look, the closing summary
(run-epochs against the fixed design of the same power, the runs lost). No Ray."""

from __future__ import annotations

from analysis.sequential import FIRST_LOOK
from analysis.sequential_power import FixedComparison
from interventions import CONTROL
from sweep.sequential_state import (
    EXTRA_SEED_BASE,
    Experiment,
    PairUnit,
    State,
    Unit,
    seed_sequence,
    unit_label,
)


def _round_cells(exp: Experiment, seeds: tuple[int, ...], first: bool) -> set[str]:
    """Run ids of every unit and its ``none`` runs at ``seeds`` (and the runs with nothing to decide)."""
    ids = {c.run_id for u in exp.units for s in seeds for c in exp.runs(u, s)}
    return ids | ({c.run_id for c in exp.once_cells()} if first else set())


def fixed_runs(exp: Experiment, seeds: int) -> int:
    """Runs of a fixed design at ``seeds`` seeds: every unit and its ``none`` runs at each seed, the
    runs with nothing to decide at the first look's seeds (as here)."""
    return len(_round_cells(exp, seeds_of(exp, seeds), first=True))


def seeds_of(exp: Experiment, n: int) -> tuple[int, ...]:
    """The first ``n`` seeds of the experiment's sequence (extended the same way past its end)."""
    return exp.seeds[:n] if n <= len(exp.seeds) else seed_sequence(exp.preset.seeds, n, exp.preset.schedule_seeds)


def plan_lines(exp: Experiment, fixed: FixedComparison) -> list[str]:
    """The design, the seeds, the worst case without losses and the fixed design of the same power."""
    d = exp.design
    size = f"{len(exp.claims)} claims"
    if exp.joint:
        size += (f" and the {len(exp.joint.claims)} of experiment {exp.joint.experiment} "
                 f"({'after' if exp.joint.later else 'before'} this one): one family of {exp.family_size}")
    lines = [f"sequential design: {size}, family-wise error ≤ {d.alpha:g} over all of them and "
             f"all looks (two-sided group-sequential t-tests, Lan–DeMets Pocock-type spending; Holm-type: an open "
             f"claim is tested at α/(m − r), r = claims decided), at most {d.max_seeds} seeds a claim",
             *d.describe(),
             *_against_lines(exp),
             *_joint_lines(exp),
             f"seeds in order: {', '.join(map(str, exp.seeds[:d.max_seeds]))} (the preset's but those that chose "
             f"its schedule, then {EXTRA_SEED_BASE}, {EXTRA_SEED_BASE + 1}, …); a lost seed is replaced by the next "
             f"({', '.join(map(str, exp.seeds[d.max_seeds:]))}); a claim that loses more than {exp.lost_limit} stops"]
    prev, seen = 0, set()
    for k, n in enumerate(d.looks):
        ids = _round_cells(exp, exp.seeds[prev:n], first=k == 0) - seen
        seen |= ids
        lines.append(f"worst case round {k + 1}: seeds {', '.join(map(str, exp.seeds[prev:n]))}: {len(ids)} runs")
        prev = n
    epochs = exp.preset.train.epochs
    runs = fixed_runs(exp, fixed.seeds)
    lines += [f"worst case without losses: {len(seen)} runs = {len(seen) * epochs} run-epochs",
              f"the fixed design of the same power: {fixed.describe()}: {runs} runs = {runs * epochs} run-epochs"]
    return lines


def _against_lines(exp: Experiment) -> list[str]:
    """The claims on two statistics (the alignment gaps) and their one-sided boundaries."""
    two = [c.id or c.metric for c in exp.claims if c.against]
    if not two:
        return []
    m, up = exp.family_size, exp.design.upper
    return [f"{', '.join(two)}: on two statistics (x − the larger and x − the smaller reference), each side a "
            f"one-sided test at α/(2j): at the last look t ≥ {up[m - 1][-1]:.2f} at α/{m} … {up[0][-1]:.2f} at α"]


def _joint_lines(exp: Experiment) -> list[str]:
    """Where the other experiment of the family left it: its decisions start this one at α/(m − r)."""
    if not exp.joint or exp.joint.later:
        return []
    r = sum(1 for c in exp.joint.claims if c.level)
    m = exp.family_size
    return [f"experiment {exp.joint.experiment} decided {r} of its {len(exp.joint.claims)} claims: this experiment's "
            f"claims start at α/{m - r} (= {exp.design.alpha / (m - r):.4g}), and each decision here can decide its "
            "undecided ones by the α it hands on"]


def look_line(exp: Experiment, state: State, unit: Unit, round_: int) -> str:
    idx = [i for i, c in enumerate(exp.claims) if c.unit == unit]
    decided = [f"{exp.claims[i].metric} {state.claims[i].outcome}" for i in idx if state.claims[i].level]
    open_ = [exp.claims[i].metric for i in idx if not state.claims[i].level]
    pairs = len(state.units[unit].pairs)
    lost = state.units[unit].lost
    if not open_:
        nxt = "done"
    elif state.exhausted(unit):
        nxt = f"lost {len(lost)} seeds, more than {exp.lost_limit}: no more replacements"
    elif pairs >= exp.design.max_seeds:
        nxt = "undecided at the maximum"
    else:
        nxt = f"next look at {exp.target(round_ + 1)} seeds"
    return (f"{unit_label(unit)}: {len(decided)} decided" + (f" ({', '.join(decided)})" if decided else "")
            + f", {len(open_)} open" + (f" ({', '.join(open_)})" if open_ else "")
            + f"; {pairs} seeds so far" + (f" ({len(lost)} lost: {', '.join(map(str, lost))})" if lost else "")
            + f"; {nxt}")


def describe_round(exp: Experiment, state: State, walks: dict, first: bool) -> str:
    """``seeds 14, 15 for forced_k_contraction, k_spectrum_clamp and none``."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for u, w in walks.items():
        new = tuple(s for s in w.counted if s not in state.units[u].pairs)
        if new:
            short = isinstance(u, PairUnit) and len(exp.preset.inits) * len(exp.preset.depths) == 1 and not u[1]
            groups.setdefault(new, []).append(u[0] if short else unit_label(u))
    once = [c for c in dict.fromkeys(x.condition for x in exp.once_cells()) if c != CONTROL] if first else []
    first_seeds = tuple(exp.seeds[:FIRST_LOOK])
    if once:
        groups.setdefault(first_seeds, []).extend(once)
    tail = "" if exp.preset.sweep == "baseline" else " and none"
    return "; ".join(f"seed{'s' if len(k) > 1 else ''} {', '.join(map(str, k))} for {', '.join(v)}"
                     for k, v in groups.items()) + tail


def summary(exp: Experiment, state: State, record: dict, used: int, fixed: FixedComparison, say) -> bool:
    """The closing lines: the run-epochs against the fixed design of the same power, the lost runs.
    True when the command must exit 1."""
    epochs = exp.preset.train.epochs
    runs = fixed_runs(exp, fixed.seeds)
    diff = runs * epochs - used * epochs
    verdict = (f"saved {diff} ({diff / (runs * epochs):.0%})" if diff >= 0
               else f"used {-diff} more ({-diff / (runs * epochs):.0%})")
    say(f"run-epochs used: {used * epochs} ({used} runs × {epochs} epochs) against {runs * epochs} for the fixed "
        f"design of the same power ({fixed.seeds} seeds, {runs} runs; δ* = {fixed.effect:.2f} sd): {verdict}")
    lost = record["lost"]
    errored = False
    if lost:
        reasons: dict[str, int] = {}
        for v in lost.values():
            reasons[v["reason"]] = reasons.get(v["reason"], 0) + 1
        say(f"{len(lost)} runs lost ({', '.join(f'{n} {k}' for k, n in sorted(reasons.items()))}); each claim's "
            "looks used the next seeds of the sequence instead")
        errored = "error" in reasons
    for u in exp.units:
        if state.exhausted(u):
            errored = True
            us = state.units[u]
            say(f"{unit_label(u)}: lost {len(us.lost)} seeds ({', '.join(map(str, us.lost))}), more than "
                f"{exp.lost_limit}: its open claims end undecided at {len(us.pairs)} seeds")
    if errored:
        say("runs were lost (above): the command exits 1")
    return errored
