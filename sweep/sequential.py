"""``--seeds auto``: an intervention sweep in rounds until each claim is decided (SPEC §8).

The statistics are ``analysis.sequential``'s (pure); this module runs the rounds. Round k trains
the seeds between look k−1 and look k of every condition that still has an undecided claim,
with their matched ``none`` seeds (the pairing is kept), through the ordinary ``run_sweep``
into the same store and the same Tune experiment folder: each round starts its own experiment
state there (``SweepSettings.extend``), and a round killed midway is restored like any sweep.
The decisions are recomputed from the store after every round, so a rerun (or a resume after a
kill) walks the same looks, picks the same seeds and skips the rounds the store already holds.

Seeds: the preset's own, then ``EXTRA_SEED_BASE``, ``EXTRA_SEED_BASE + 1``, … (skipping any the
preset lists), so a rerun picks the same seeds. The decision record of the experiment is written
to ``<store>/sequential/<experiment>.json`` for the report.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from analysis import vocabulary as vocab
from analysis.interventions import INTERVENTION_LAYER_METRICS
from analysis.sequential import FIRST_LOOK, Decision, Design, decide, make_design
from interventions import CONTROL
from sweep.cli import UsageError
from sweep.presets import Cell, Preset

#: The first seed of the fixed sequence that extends a preset's seeds (documented in docs/seeds.md).
EXTRA_SEED_BASE = 1000
#: Where the decision record of an experiment goes in the store (``sequential/<experiment>.json``).
RECORD_DIR = "sequential"


@dataclass(frozen=True)
class AutoSeeds:
    """``--seeds auto --max-seeds N --alpha A`` (checked before Ray starts)."""

    max_seeds: int = 10
    alpha: float = 0.05

    def __post_init__(self) -> None:
        if isinstance(self.max_seeds, bool) or not isinstance(self.max_seeds, int) or self.max_seeds < FIRST_LOOK:
            raise UsageError(f"--max-seeds must be a whole number >= {FIRST_LOOK} (the first round's seeds), "
                             f"got {self.max_seeds!r}")
        if not (isinstance(self.alpha, int | float) and 0.0 < self.alpha < 0.5):
            raise UsageError(f"--alpha must be in (0, 0.5), got {self.alpha!r}")


def add_auto_flags(p: argparse.ArgumentParser) -> None:
    """``--max-seeds`` and ``--alpha``, read with ``--seeds auto``."""
    g = p.add_argument_group("--seeds auto (docs/seeds.md)")
    g.add_argument("--max-seeds", type=int, default=10, help=f"most seeds per condition (>= {FIRST_LOOK}, the "
                   "first round)")
    g.add_argument("--alpha", type=float, default=0.05, help="error of each claim's sequential test over all "
                   "its looks, in (0, 0.5)")


def auto_from_args(args: argparse.Namespace) -> AutoSeeds | None:
    """``AutoSeeds`` for ``--seeds auto`` (checked), else None; ``--max-seeds`` / ``--alpha`` without it
    are refused."""
    if args.seeds != "auto":
        for flag, value, default in (("--max-seeds", args.max_seeds, 10), ("--alpha", args.alpha, 0.05)):
            if value != default:
                raise UsageError(f"{flag} {value} is read only with --seeds auto")
        return None
    return AutoSeeds(args.max_seeds, args.alpha)


def seed_sequence(preset_seeds: tuple[int, ...], n: int) -> tuple[int, ...]:
    """The first ``n`` seeds: the preset's, then 1000, 1001, … (none repeated)."""
    out = list(preset_seeds[:n])
    extra = EXTRA_SEED_BASE
    while len(out) < n:
        if extra not in preset_seeds:
            out.append(extra)
        extra += 1
    return tuple(out)


def _unit(cell: Cell) -> tuple:
    """What one claim set is about: (condition, strengths cell, init, depth)."""
    return (cell.condition, cell.strengths, cell.init, cell.depth)


def unit_label(unit: tuple) -> str:
    cond, strengths, init, depth = unit
    tag = "".join(f" {k}={v:g}" for k, v in strengths)
    return f"{cond}{tag} ({init}, {depth} layers)"


def _sub_preset(preset: Preset, conditions: list[str], seeds: tuple[int, ...]) -> Preset:
    keep = tuple(c for c in preset.conditions if c in conditions)
    return replace(preset, conditions=keep, seeds=seeds,
                   strengths=tuple(s for s in preset.strengths if s[0] in keep))


def final_outcomes(store, preset: Preset, cells: list[Cell]) -> dict[str, dict[str, float]]:
    """Per complete run (its final epoch, ``preset.train.epochs``, in the store): the final
    layer-means of the Table 5 layer metrics, by run id."""
    from sweep.store import StoreError

    ids = {c.run_id for c in cells}
    try:
        layers = store.read("layers", sweep=preset.sweep)
    except StoreError:
        return {}
    if layers.empty:
        return {}
    rows = layers[layers["run_id"].isin(ids) & (layers["epoch"] == preset.train.epochs)]
    means = rows.groupby("run_id")[list(INTERVENTION_LAYER_METRICS)].mean()
    return {rid: {m: float(v) for m, v in r.items()} for rid, r in means.iterrows()}


def _is_control(strengths: tuple[tuple[str, float], ...]) -> bool:
    """A strength cell whose every strength is 0 trains the ``none`` run itself (SPEC §5): nothing to decide."""
    return bool(strengths) and all(v == 0 for _, v in strengths)


def claim_decisions(preset: Preset, seeds: tuple[int, ...], design: Design,
                    outcomes: dict[str, dict[str, float]]) -> dict[tuple, dict[str, Decision]]:
    """Each unit's claims decided on the paired Δ of its first seeds (a prefix of ``seeds`` with
    both the run and its matched ``none`` run complete)."""
    out: dict[tuple, dict[str, Decision]] = {}
    full = replace(preset, seeds=seeds)
    control = {(c.init, c.depth, c.seed): c.run_id for c in full.cells() if c.condition == CONTROL}
    by_unit: dict[tuple, list[Cell]] = {}
    for c in full.cells():
        if c.condition != CONTROL and vocab.predicted(c.condition) and not _is_control(c.strengths):
            by_unit.setdefault(_unit(c), []).append(c)
    for unit, cells in by_unit.items():
        diffs: dict[str, list[float]] = {m: [] for m in vocab.predicted(unit[0])}
        for c in cells:  # seed order; stop at the first seed without a complete pair
            mine, base = outcomes.get(c.run_id), outcomes.get(control.get((c.init, c.depth, c.seed), ""))
            if mine is None or base is None:
                break
            for m in diffs:
                diffs[m].append(mine[m] - base[m])
        out[unit] = {m: decide(np.asarray(d), design, vocab.predicted(unit[0])[m]) for m, d in diffs.items()}
    return out


def _look_line(unit: tuple, claims: dict[str, Decision], n: int, next_look: int | None) -> str:
    decided = [f"{m} {d.outcome}" for m, d in claims.items() if d.decided]
    open_ = [m for m, d in claims.items() if not d.decided]
    nxt = "done" if not open_ else (f"next look at {next_look} seeds" if next_look else "undecided at the maximum")
    return (f"{unit_label(unit)}: {len(decided)} decided" + (f" ({', '.join(decided)})" if decided else "")
            + f", {len(open_)} undecided" + (f" ({', '.join(open_)})" if open_ else "")
            + f"; {n} seeds so far; {nxt}")


def plan_lines(preset: Preset, design: Design, seeds: tuple[int, ...]) -> list[str]:
    """The look schedule and the worst-case plan (every claim undecided to the last look)."""
    conds = [c for c in preset.conditions if c != CONTROL]
    deciding = [c for c in conds if vocab.predicted(c)]
    per_seed = len(_sub_preset(preset, [*deciding, CONTROL], (seeds[0],)).cells())
    once = len(_sub_preset(preset, [c for c in conds if c not in deciding], (seeds[0],)).cells()) \
        if len(deciding) < len(conds) else 0
    epochs = preset.train.epochs
    lines = [f"sequential design: group-sequential paired t-test per claim, Lan–DeMets Pocock-type "
             f"spending, α = {design.alpha:g} per claim (two-sided), at most {design.max_seeds} seeds",
             *design.describe(),
             f"seeds in order: {', '.join(map(str, seeds))} (the preset's, then {EXTRA_SEED_BASE}, "
             f"{EXTRA_SEED_BASE + 1}, …)"]
    total = 0
    prev = 0
    for k, n in enumerate(design.looks):
        runs = per_seed * (n - prev) + (once * FIRST_LOOK if k == 0 else 0)
        total += runs
        lines.append(f"worst case round {k + 1}: seeds {', '.join(map(str, seeds[prev:n]))}: {runs} runs")
        prev = n
    fixed = len(replace(preset, seeds=seeds).cells())
    lines.append(f"worst case: {total} runs = {total * epochs} run-epochs; a fixed design at {design.max_seeds} "
                 f"seeds: {fixed} runs = {fixed * epochs} run-epochs")
    return lines


def run_auto(preset: Preset, settings, auto: AutoSeeds) -> pd.DataFrame:
    """Run the rounds (``settings``: the sweep's ``SweepSettings``); returns one row per claim."""
    from sweep.ray_env import absolute_uri
    from sweep.store import Store

    name = settings.name
    design = make_design(auto.max_seeds, auto.alpha)
    seeds = seed_sequence(preset.seeds, design.max_seeds)
    say = lambda line: print(f"[{name}] {line}", flush=True)  # noqa: E731
    for line in plan_lines(preset, design, seeds):
        say(line)
    conds = [c for c in preset.conditions if c != CONTROL]
    undecidable = [c for c in conds if not vocab.predicted(c)]
    for c in undecidable:
        say(f"{c}: no predicted direction, nothing to decide: it runs at the first round's {FIRST_LOOK} seeds only")
    if settings.dry_run:
        say("dry run: nothing trained, nothing written")
        return pd.DataFrame()
    active = [c for c in conds if c not in undecidable]
    if settings.resume:  # the rounds resume by themselves; --resume insists that an experiment exists
        from ray import tune

        path = f"{absolute_uri(settings.trial.storage).rstrip('/')}/{name}"
        if not tune.Tuner.can_restore(path):
            raise UsageError(f"--resume: no restorable experiment at {path}")
    store = Store(absolute_uri(settings.trial.store))
    try:  # one Ray for every round (run_sweep uses a running one and leaves it running)
        frame, used_n = _rounds(preset, settings, design, seeds, store, active, undecidable, say)
    finally:
        import ray

        if ray.is_initialized() and _STARTED.pop(name, False):
            ray.shutdown()
    epochs = preset.train.epochs
    fixed = len(replace(preset, seeds=seeds).cells())
    say(f"run-epochs used: {used_n * epochs} ({used_n} runs × {epochs} epochs) against {fixed * epochs} for a fixed "
        f"design at {design.max_seeds} seeds ({fixed} runs): saved {(fixed - used_n) * epochs} "
        f"({1 - used_n / fixed:.0%})")
    write_record(store, name, preset, design, seeds, frame, used_n * epochs, fixed * epochs)
    sys.stdout.flush()
    return frame


#: experiments whose Ray ``_rounds`` started (stopped by ``run_auto`` at the end)
_STARTED: dict[str, bool] = {}


def _rounds(preset: Preset, settings, design: Design, seeds: tuple[int, ...], store, active: list[str],
            undecidable: list[str], say) -> tuple[pd.DataFrame, int]:
    """The rounds: train what each look needs, decide, print a line per unit; (claims, runs used)."""
    from sweep.ray_env import init_ray
    from sweep.runner import exit_status, run_sweep

    name = settings.name
    errored = 0
    used: list[Cell] = []
    decisions: dict[tuple, dict[str, Decision]] = {}
    prev = 0
    for k, n in enumerate(design.looks):
        round_conds = [*active, *(undecidable if k == 0 else []), CONTROL]
        if not active and k > 0:
            break
        sub = _sub_preset(preset, round_conds, seeds[prev:n])
        cells = sub.cells()
        used += cells
        done = final_outcomes(store, preset, cells)
        if len(done) < len(cells):
            say(f"round {k + 1} of {len(design.looks)}: seeds {', '.join(map(str, seeds[prev:n]))} for "
                f"{', '.join(c for c in round_conds)}: {len(cells)} runs ({len(cells) - len(done)} to train)")
            if not _STARTED.get(name):
                _STARTED[name] = init_ray(settings.address, settings.num_cpus, settings.num_gpus)
            errored |= exit_status(run_sweep(sub, replace(settings, extend=True, resume=False)))
        else:
            say(f"round {k + 1} of {len(design.looks)}: all {len(cells)} runs already in the store")
        all_cells = replace(preset, seeds=seeds[:n]).cells()
        decisions = claim_decisions(preset, seeds[:n], design, final_outcomes(store, preset, all_cells))
        nxt = design.looks[k + 1] if k + 1 < len(design.looks) else None
        say(f"look {k + 1} of {len(design.looks)} at {n} seeds:")
        for unit, claims in decisions.items():
            if unit[0] in active:
                say("  " + _look_line(unit, claims, n, nxt))
        active = [c for c in active if any(not d.decided for u, cl in decisions.items() if u[0] == c
                                           for d in cl.values())]
        prev = n
    frame = decision_frame(decisions, design)
    frame.attrs["errored"] = bool(errored)  # a round lost a run: the command exits 1 (``exit_status``)
    return frame, len({c.run_id for c in used})


def decision_frame(decisions: dict[tuple, dict[str, Decision]], design: Design) -> pd.DataFrame:
    """One row per claim: unit, metric, predicted sign, outcome, look, seeds, and the report's text."""
    rows = []
    for (cond, strengths, init, depth), claims in decisions.items():
        for metric, d in claims.items():
            rows.append({"condition": cond, "strengths": json.dumps(dict(strengths), sort_keys=True),
                         "init": init, "depth": depth, "metric": metric,
                         "predicted": "+" if vocab.predicted(cond)[metric] > 0 else "-",
                         "outcome": d.outcome or "undecided", "look": d.look, "n": d.n if d.decided else None,
                         "n_looks": d.n_looks, "p": d.p, "text": d.text(design.max_seeds)})
    return pd.DataFrame(rows)


def write_record(store, name: str, preset: Preset, design: Design, seeds: tuple[int, ...], frame: pd.DataFrame,
                 used: int, fixed: int) -> None:
    """``<store>/sequential/<name>.json``: the design, the seeds and each claim's decision."""
    record = {"experiment": name, "preset": preset.name, "alpha": design.alpha, "looks": list(design.looks),
              "nominal": list(design.nominal), "bounds": list(design.bounds), "seeds": list(seeds),
              "run_epochs_used": used, "run_epochs_fixed": fixed,
              "claims": json.loads(frame.to_json(orient="records"))}
    store.put(f"{store.base}/{RECORD_DIR}/{name}.json", json.dumps(record, indent=1).encode())
