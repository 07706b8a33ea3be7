"""``--seeds auto``: a sweep in rounds until each claim is decided (SPEC §8); the intervention sweep
(paired and dose–response claims) and the baseline sweep (the scorecard's baseline claims).

The statistics are ``analysis.sequential``'s, the rounds' plan and looks ``sweep.sequential_state``'s,
the baseline's family ``sweep.sequential_baseline``'s, the record ``sweep.sequential_record``'s, the
printed lines ``sweep.sequential_text``'s (all without Ray) and the flags ``sweep.auto_flags``'
(what a parser imports); this module checks the stored design and runs the rounds. Each round
trains, through the ordinary ``run_sweep``, the runs its plan lacks into the same store and the
same Tune experiment folder: each round starts its own experiment state there
(``SweepSettings.extend``), and a round killed midway is restored like any sweep.

The experiment's record, ``<store>/sequential/<experiment>.json``, is written before round 1
with the design (max seeds, α, looks, the family of claims, the procedure, the seed sequence,
the schedule, the joint experiment); a rerun whose design differs, and an experiment that would
decide another experiment's claims on the same seeds, are refused (exit 2) before anything starts.
It is rewritten after each round that trained (each round's runs, the runs lost and why, the
claims so far) and at the end (``written_at``: the report uses the newest record per claim). The
decisions are recomputed from the store and that record, so a rerun walks the same rounds, trains
nothing the store holds and reaches the same decisions.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.interventions import INTERVENTION_LAYER_METRICS
from analysis.sequential import FIRST_LOOK, make_design
from analysis.sequential_power import fixed_same_power
from interventions import CONTROL
from sweep.auto_flags import AutoSeeds
from sweep.cli import UsageError
from sweep.presets import Cell, Preset
from sweep.sequential_record import (
    NEW_NAME,
    check_design,
    check_overlap,
    claim_rows,
    joint_claims,
    new_record,
    put_record,
    read_record,
    read_records,
    record_uri,
)
from sweep.sequential_state import (
    Experiment,
    Joint,
    JointClaim,
    Outcomes,
    State,
    evaluate,
    family,
    lost_limit,
    plan,
    seed_sequence,
)
from sweep.sequential_text import describe_round, fixed_runs, look_line, plan_lines, summary


def own_family(preset: Preset):
    """The claims an experiment of ``preset`` decides (its sweep's kind)."""
    if preset.sweep == "baseline":
        from sweep.sequential_baseline import baseline_family

        return baseline_family(preset)
    return family(preset)


def make_experiment(preset: Preset, auto: AutoSeeds, joint: Joint | None = None, claims=None) -> Experiment:
    """The design, the seed sequence (skipping ``preset.schedule_seeds``) and the family of claims
    (``joint``: with the other experiment's, one family)."""
    claims = own_family(preset) if claims is None else claims
    m = len(claims) + (len(joint.claims) if joint else 0)
    design = make_design(auto.max_seeds, auto.alpha, max(1, m))
    seeds = seed_sequence(preset.seeds, auto.max_seeds + lost_limit(auto.max_seeds), preset.schedule_seeds)
    return Experiment(preset, design, seeds, tuple(claims), joint)


def joint_experiments(baseline: Preset, interventions: Preset, auto: AutoSeeds, names: tuple[str, str],
                      first_record: dict | None = None) -> tuple[Experiment, Experiment]:
    """``sweep.demo --seeds auto``: the baseline's and the interventions' experiments as one family
    (SPEC §8). The baseline runs first with the intervention claims open and without data; the
    interventions start from the baseline's finished record (``first_record``; None: the plan only)."""
    b_claims, i_claims = own_family(baseline), own_family(interventions)
    first = make_experiment(baseline, auto, Joint(names[1], tuple(JointClaim(c.row()) for c in i_claims), True),
                            b_claims)
    if first_record is None:
        partner = tuple(JointClaim(c.row()) for c in b_claims)
    else:
        partner = joint_claims(first_record)
    return first, make_experiment(interventions, auto, Joint(names[0], partner, False), i_claims)


# --- the store -------------------------------------------------------------------------------------


def final_outcomes(store, preset: Preset) -> dict[str, dict[str, float]]:
    """Per complete run of the preset (its final epoch, ``preset.train.epochs``, in the store, every
    Table 5 layer metric finite): the final layer-means, by run id."""
    from sweep.store import StoreError

    try:
        layers = store.read("layers", sweep=preset.sweep)
    except StoreError:
        return {}
    if layers.empty:
        return {}
    rows = layers[(layers["preset"] == preset.name) & (layers["epoch"] == preset.train.epochs)]
    means = rows.groupby("run_id")[list(INTERVENTION_LAYER_METRICS)].mean()
    return {rid: {m: float(v) for m, v in r.items()} for rid, r in means.iterrows()
            if np.isfinite(r.to_numpy(float)).all()}


def read_outcomes(store, exp: Experiment) -> Outcomes:
    """What a look reads: the complete runs, and for a baseline family its claims on a set of seeds."""
    if exp.preset.sweep != "baseline":
        return Outcomes(final_outcomes(store, exp.preset))
    from sweep.sequential_baseline import claims_at_factory, final_baseline
    from sweep.store import StoreError

    try:
        layers = store.read("layers", sweep="baseline")
        epochs = store.read("epochs", sweep="baseline")
    except StoreError:
        return Outcomes({})
    if layers.empty:
        return Outcomes({})
    layers, epochs = layers[layers["preset"] == exp.preset.name], epochs[epochs["preset"] == exp.preset.name]
    return Outcomes(final_baseline(layers, epochs, exp.preset), claims_at_factory(layers, epochs, exp.preset))


def why_lost(store, preset: Preset, run_ids: list[str]) -> dict[str, str]:
    """Why each run of a finished round lacks a complete final epoch: diverged, non-finite, or error."""
    from sweep.store import StoreError

    try:
        epochs = store.read("epochs", sweep=preset.sweep, columns=["run_id", "epoch", "status"])
    except StoreError:
        epochs = pd.DataFrame(columns=["run_id", "epoch", "status"])
    out = {}
    for rid in run_ids:
        mine = epochs[epochs["run_id"] == rid]
        if (mine["status"] == "diverged").any():
            out[rid] = "diverged"
        elif (mine["epoch"] == preset.train.epochs).any():
            out[rid] = "non-finite final metric"
        else:
            out[rid] = "error"
    return out


@dataclass(frozen=True)
class RoundPreset(Preset):
    """The preset restricted to one round's runs: ``run_sweep`` trains ``cells()``."""

    runs: tuple[str, ...] = ()

    def cells(self) -> list[Cell]:
        keep = set(self.runs)
        return [c for c in super().cells() if c.run_id in keep]


def round_preset(preset: Preset, cells: list[Cell]) -> RoundPreset:
    fields = {f.name: getattr(preset, f.name) for f in dataclasses.fields(Preset)}
    conds = tuple(c for c in preset.conditions if any(x.condition == c for x in cells))
    seeds = tuple(dict.fromkeys(sorted((c.seed for c in cells), key=[x.seed for x in cells].index)))
    fields.update(conditions=conds, seeds=seeds, strengths=tuple(s for s in preset.strengths if s[0] in conds),
                  inits=tuple(i for i in preset.inits if any(x.init == i for x in cells)),
                  depths=tuple(d for d in preset.depths if any(x.depth == d for x in cells)))
    return RoundPreset(**fields, runs=tuple(c.run_id for c in cells))


# --- the rounds ----------------------------------------------------------------------------------


def run_auto(preset: Preset, settings, auto: AutoSeeds, exp: Experiment | None = None,
             new_design: str = NEW_NAME) -> pd.DataFrame:
    """Run the rounds (``settings``: the sweep's ``SweepSettings``; ``exp``: the experiment, by
    default ``make_experiment(preset, auto)``); returns one row per claim, ``attrs["errored"]`` when a
    run ended in error or a claim ran out of replacements (exit 1). ``new_design``: what a refused
    rerun is told to do."""
    from sweep.ray_env import absolute_uri
    from sweep.store import Store, StoreError

    name = settings.name
    exp = exp or make_experiment(preset, auto)
    fixed = fixed_same_power(exp.design)
    say = lambda line: print(f"[{name}] {line}", flush=True)  # noqa: E731
    store_uri = absolute_uri(settings.trial.store)
    store = Store(store_uri)
    where = record_uri(store_uri, name)
    try:
        record = read_record(store, name)
        others = read_records(store)
    except (StoreError, OSError, ValueError) as exc:
        if not settings.dry_run:
            raise StoreError(f"--seeds auto: cannot read the experiment's record {where}: {exc}") from None
        record, others = None, {}
        say(f"(the record {where} could not be read: the real command checks its design)")
    check_design(record, exp, name, where, new_design)
    if record is None:  # a new experiment (an existing one passed this check when it began)
        check_overlap(others, exp, name, where.rsplit("/", 1)[0])
    if exp.joint and not exp.joint.later and not settings.dry_run:
        first = others.get(exp.joint.experiment)
        if first is None or not first.get("finished"):
            raise UsageError(f"--seeds auto: experiment {name} decides one family with experiment "
                             f"{exp.joint.experiment}, which has not finished in this store: run it first")
    for line in plan_lines(exp, fixed):
        say(line)
    for cond in dict.fromkeys(c.condition for c in exp.once_cells() if c.condition != CONTROL):
        say(f"{cond}: nothing to decide (no predicted direction, or strengths all 0): it runs at the first "
            f"round's {FIRST_LOOK} seeds only")
    if settings.dry_run:
        say("dry run: nothing trained, nothing written")
        return pd.DataFrame()
    if settings.resume:  # the rounds resume by themselves; --resume insists that an experiment exists
        from ray import tune

        path = f"{absolute_uri(settings.trial.storage).rstrip('/')}/{name}"
        if not tune.Tuner.can_restore(path):
            raise UsageError(f"--resume: no restorable experiment at {path}")
    if record is None:  # the design, stored before round 1
        record = new_record(exp, name)
        put_record(store, name, record)
    try:  # one Ray for every round (run_sweep uses a running one and leaves it running)
        state, used = _rounds(exp, settings, store, record, say)
    finally:
        import ray

        if ray.is_initialized() and _STARTED.pop(name, False):
            ray.shutdown()
    rows = claim_rows(exp, state, finished=True, name=name)
    errored = summary(exp, state, record, used, fixed, say)
    final = {**record, "finished": True, "claims": rows, "run_epochs_used": used * exp.preset.train.epochs,
             "fixed": {"effect": fixed.effect, "level": fixed.level, "power": fixed.power, "seeds": fixed.seeds,
                       "runs": fixed_runs(exp, fixed.seeds),
                       "run_epochs": fixed_runs(exp, fixed.seeds) * exp.preset.train.epochs},
             "errored": errored}
    final.pop("written_at", None)
    old = read_record(store, name)
    if old is None or {k: v for k, v in old.items() if k != "written_at"} != json.loads(json.dumps(final)):
        put_record(store, name, final)
    sys.stdout.flush()
    frame = pd.DataFrame(rows)
    frame.attrs["errored"] = errored  # the command exits 1 (``exit_status``)
    return frame


#: experiments whose Ray ``_rounds`` started (stopped by ``run_auto`` at the end)
_STARTED: dict[str, bool] = {}


def _rounds(exp: Experiment, settings, store, record: dict, say) -> tuple[State, int]:
    """Plan, train and look, round after round; (the state, runs used)."""
    from sweep.ray_env import init_ray
    from sweep.runner import run_sweep

    name, design = settings.name, exp.design
    lost: dict[str, dict] = record["lost"]
    state = State(exp)
    used: set[str] = set()
    catalog = {c.run_id: c for c in dataclasses.replace(exp.preset, seeds=exp.seeds).cells()}
    round_ = 0
    while True:
        round_ += 1
        outcomes = read_outcomes(store, exp)
        before = {r for r, v in lost.items() if v["round"] < round_}
        walks, todo = plan(state, round_, outcomes.complete, before)
        todo = [c for c in todo if c.run_id not in lost]
        if not walks and not (round_ == 1 and todo):
            break
        planned = next((r for r in record["rounds"] if r["round"] == round_), None)
        if planned is None:  # first time here: the round's runs are recorded before they train
            planned = {"round": round_, "target": exp.target(round_), "runs": [c.run_id for c in todo]}
            record["rounds"].append(planned)
            if todo:
                put_record(store, name, {**record, "claims": claim_rows(exp, state, False, name)})
        by_id = {c.run_id: c for c in todo} | {c.run_id: c for u, w in walks.items() for s in w.counted
                                               for c in exp.runs(u, s)}
        runs = [by_id.get(r) or catalog.get(r) or _unknown(r) for r in planned["runs"]]
        runs += [c for c in todo if c.run_id not in set(planned["runs"])]
        every = {c.run_id for u, w in walks.items() for s in w.counted if s not in state.units[u].pairs
                 for c in exp.runs(u, s)}
        every |= {c.run_id for c in runs} | ({c.run_id for c in exp.once_cells()} if round_ == 1 else set())
        used |= every
        left = [c for c in runs if c.run_id not in outcomes.complete and c.run_id not in lost]
        head = f"round {round_} (look {min(round_, design.n_looks)} of {design.n_looks}, {exp.target(round_)} seeds)"
        if left:
            say(f"{head}: {describe_round(exp, state, walks, round_ == 1)}: {len(every)} runs ({len(left)} to train)")
            if not _STARTED.get(name):
                _STARTED[name] = init_ray(settings.address, settings.num_cpus, settings.num_gpus)
            train = runs if _newest_state(settings) == {c.run_id for c in runs} else left
            run_sweep(round_preset(exp.preset, train), dataclasses.replace(settings, extend=True, resume=False))
            outcomes = read_outcomes(store, exp)
            failed = [c.run_id for c in runs if c.run_id not in outcomes.complete and c.run_id not in lost]
            for rid, why in why_lost(store, exp.preset, failed).items():
                lost[rid] = {"reason": why, "round": round_}
        else:
            say(f"{head}: all {len(every)} runs already in the store")
        now = {r for r, v in lost.items() if v["round"] <= round_}
        joint_before = [s.level for s in state.joint]
        newly = evaluate(state, round_, walks, outcomes, now)
        say(f"look after round {round_}:")
        shown = set(walks) | {exp.claims[i].unit for i in newly}
        for unit in exp.units:
            if unit in shown:
                say("  " + look_line(exp, state, unit, round_))
        handed = [(c, s) for c, s, b in zip(exp.joint.claims if exp.joint else (), state.joint, joint_before,
                                            strict=True) if s.level and not b]
        if handed:
            say(f"  {len(handed)} claims of experiment {exp.joint.experiment} decided by the α handed on: "
                + ", ".join(f"{c.row.get('id')} {s.outcome}" for c, s in handed))
        r, m = state.decided(), exp.family_size
        if r < m:
            say(f"  {r} of {m} claims decided; an open claim is now tested at α/{m - r}")
        if left:
            put_record(store, name, {**record, "claims": claim_rows(exp, state, False, name)})
    return state, len(used)


def _newest_state(settings) -> set[str]:
    """Run ids of the newest experiment state in the experiment's Tune folder (none: empty): a round
    killed midway is resumed with exactly these runs, else only the runs it lacks start afresh (a new
    state of the same set would train its finished runs again)."""
    from ray import tune

    from sweep.ray_env import absolute_uri
    from sweep.resume import experiment_trials
    from sweep.spec import runs_of

    path = f"{absolute_uri(settings.trial.storage).rstrip('/')}/{settings.name}"
    if not tune.Tuner.can_restore(path):
        return set()
    return {r.run_id for t in experiment_trials(path) for r in runs_of(t.config)}


def _unknown(run_id: str) -> Cell:
    raise UsageError(f"--seeds auto: the record names run {run_id}, which this preset does not have; "
                     "a new design needs a new experiment: add --name NEW")
