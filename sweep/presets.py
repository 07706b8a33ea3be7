"""Named sweep presets (SPEC §10) and the flags that override them.

A preset fixes the grid (depths × inits × seeds × conditions) and the
per-run shape: a ``GPTConfig`` and a ``TrainConfig`` template, whose defaults
are the paper's. A preset is checked once, when it is built; ``Preset.cells()``
expands it into one ``Cell`` per run, and ``sweep.trial.spec.TrialSpec`` turns the
cells of a trial into the run spec that crosses into Tune.
"""

from __future__ import annotations

import argparse
import itertools
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from interventions import CONTROL, PAPER_CONDITIONS, default_strengths
from interventions import REGISTRY as INTERVENTIONS
from model.config import GPTConfig, TrainConfig
from model.qk_init import DEFAULT_INIT, PAPER_INITS, QK_INITS
from sweep.cli import UsageError, at_least, flatten, int_list, name_list
from sweep.store.ids import run_id, strengths_json
from sweep.strengths import add_strengths_flag, check_strengths, parse_strengths

INITS = PAPER_INITS  # the paper's regimes; QK_INITS also holds those a --plugin registered


@dataclass(frozen=True)
class Preset:
    """One sweep's grid and run shape: a model and a training template that each cell completes.

    ``model`` sets every ``GPTConfig`` field but ``n_layer`` (the cell's depth) and
    ``vocab_size`` (the corpus'); ``train`` every ``TrainConfig`` field but ``seed``,
    ``device`` and ``compile`` (set per trial). The templates' values of those are ignored.
    """

    name: str
    sweep: str  # "baseline" or "interventions": the store's ``sweep`` column
    corpus: str  # wikitext103, stdlib-docs or a text file path
    depths: tuple[int, ...]
    inits: tuple[str, ...]
    seeds: tuple[int, ...]
    conditions: tuple[str, ...] = (CONTROL,)
    data_dir: str | None = None  # directory holding wiki.train.raw (wikitext103)
    model: GPTConfig = field(default_factory=GPTConfig)  # the paper's shape by default
    train: TrainConfig = field(default_factory=TrainConfig)  # the paper's recipe (45 epochs) by default
    note: str = ""  # printed with the sweep and kept in the report
    #: swept strengths (SPEC §5 dose–response): (condition, field, values) triples; each combination
    #: of a condition's values is its own cell. Conditions not named here run at their defaults.
    strengths: tuple[tuple[str, str, tuple[float, ...]], ...] = ()
    #: the seeds that chose this preset's schedule (LOG.md): a verdict on them is not confirmatory,
    #: so the preset reports other seeds and ``--seeds auto`` never uses them (SPEC §10)
    schedule_seeds: tuple[int, ...] = ()
    #: how the schedule's length was chosen, when the verdicts hold at that length only (the report says it)
    schedule_choice: str = ""
    #: the post-collapse window's first epoch e_c, fixed before the reported data on the runs of the
    #: ``schedule_seeds`` (SPEC §8); None: the report chooses it on the runs it reports, descriptively
    collapse_end: int | None = None

    def __post_init__(self) -> None:
        for axis in ("depths", "inits", "seeds", "conditions"):
            values = getattr(self, axis)
            if isinstance(values, str) or not isinstance(values, tuple | list):
                raise ValueError(f"Preset.{axis} must be a tuple, got {values!r}")
            if not values:
                raise ValueError(f"preset {self.name!r}: the grid is empty ({axis} has no values)")
            kind, what = (str, "strings") if axis in ("inits", "conditions") else (numbers.Integral, "integers")
            bad = [v for v in values if isinstance(v, bool) or not isinstance(v, kind)]
            if bad:
                raise ValueError(f"Preset.{axis} must hold {what}, got {bad[0]!r} in {tuple(values)}")
        for name, kind in (("model", GPTConfig), ("train", TrainConfig)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"Preset.{name} must be a {kind.__name__}, got {getattr(self, name)!r}")
        bad = [s for s in self.seeds if s < 0]
        if bad:
            raise ValueError(f"seeds must be >= 0, got {bad[0]}")
        if self.data_dir is not None and self.corpus != "wikitext103":
            raise UsageError(f"--data-dir {self.data_dir} is read only by the wikitext103 corpus; --corpus "
                             f"{self.corpus} ignores it (drop --data-dir or use --corpus wikitext103)")
        bad = [i for i in self.inits if i not in QK_INITS]
        if bad:
            raise ValueError(f"unknown init(s) {bad}; valid: {', '.join(QK_INITS)}")
        bad = [c for c in self.conditions if c not in INTERVENTIONS]
        if bad:
            raise ValueError(f"unknown condition(s) {bad}; valid: {', '.join(sorted(INTERVENTIONS))}")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"duplicate seeds in {self.seeds}")
        bad = [s for s in self.schedule_seeds if isinstance(s, bool) or not isinstance(s, numbers.Integral)]
        if bad:
            raise ValueError(f"Preset.schedule_seeds must hold integers, got {bad[0]!r}")
        for d in self.depths:
            self.model_config(d, vocab_size=1)  # each depth is a valid n_layer
        check_strengths(self.strengths, self.conditions)

    def model_config(self, depth: int, vocab_size: int) -> GPTConfig:
        """The cell's model: the template with ``depth`` layers over ``vocab_size`` symbols."""
        return replace(self.model, n_layer=depth, vocab_size=vocab_size)

    def train_config(self, seed: int, device: str = "auto", compile: bool = False) -> TrainConfig:
        """The trial's recipe: the template with its seed, device and compile flag."""
        return replace(self.train, seed=seed, device=device, compile=compile)

    def cells(self) -> list[Cell]:
        """Every trial of the grid, in a stable order."""
        return [Cell(self, init, depth, seed, cond, strengths)
                for cond in self.conditions for strengths in self.strength_cells(cond) for init in self.inits
                for depth in self.depths for seed in self.seeds]

    def strength_cells(self, condition: str) -> list[tuple[tuple[str, float], ...]]:
        """The condition's strength settings, one per cell: ``()`` at its defaults (today's cell),
        else every field's value, sorted by field (the swept ones in the order given)."""
        swept = [(f, values) for c, f, values in self.strengths if c == condition]
        if not swept:
            return [()]
        defaults = default_strengths(condition)
        out = []
        for combo in itertools.product(*(values for _, values in swept)):
            full = {**defaults, **{f: float(v) for (f, _), v in zip(swept, combo, strict=True)}}
            out.append(() if full == defaults else tuple(sorted(full.items())))
        return out


@dataclass(frozen=True)
class Cell:
    """One run of a checked grid: a preset and its (init, depth, seed, condition, strengths)."""

    preset: Preset
    init: str
    depth: int
    seed: int
    condition: str = CONTROL
    #: ``()`` at the condition's default strengths, else all its strengths as sorted (field, value)
    strengths: tuple[tuple[str, float], ...] = ()

    @property
    def run_id(self) -> str:
        return run_id(self.preset.sweep, self.preset.name, self.init, self.depth, self.seed, self.condition,
                      dict(self.strengths))

    def identity(self) -> dict[str, Any]:
        """The run's identity (``sweep.trial.spec.RunIdentity``; ``strengths``: every strength of the
        condition, SPEC §6)."""
        return {"sweep": self.preset.sweep, "run_id": self.run_id, "preset": self.preset.name,
                "init": self.init, "depth": self.depth, "seed": self.seed, "condition": self.condition,
                "strengths": strengths_json({**default_strengths(self.condition), **dict(self.strengths)})}


PAPER_SEEDS = (37, 42, 105, 210)
INTERVENTION_SEEDS = (7, 37, 42, 105, 210)
#: The laptop tiers' seeds: none of them chose a schedule (``*_SCHEDULE_SEEDS``), so their
#: verdicts confirm rather than restate the choice (SPEC §10).
CONFIRMATORY_SEEDS = (11, 12, 13, 14, 15, 16)
#: The seeds each laptop schedule was chosen on (LOG.md, the demo's schedule).
DEMO_BASELINE_SCHEDULE_SEEDS = (37, 42)
DEMO_INTERVENTION_SCHEDULE_SEEDS = (7, 37)
PAPER_DEPTHS_BASELINE_SCHEDULE_SEEDS = (37, 42)
PAPER_DEPTHS_INTERVENTION_SCHEDULE_SEEDS = (7, 37, 42, 105, 210)
ALL_CONDITIONS = PAPER_CONDITIONS

_DEMO_MODEL = GPTConfig(n_head=4, d_model=64, d_mlp=256, context=64)
_DEMO_TRAIN = TrainConfig(batch_size=16, lr=1e-3, eval_batches=4, probe_seqs=16)
_DEMO_NOTE = ("demo preset: lr 1e-3 (paper: 1e-4) and 1-3 layers so that minutes on two cores train "
              "past the initial collapse into the specialisation phase (schedule: LOG.md)")
_QUICK_NOTE = ("quick preset: a pipeline check only. Its runs end inside the initial collapse of both "
               "participation ratios, far too short to show the paper's effects; run `make demo` for them")
_SMOKE_MODEL = GPTConfig(n_head=2, d_model=16, d_mlp=32, context=16)
_SMOKE_TRAIN = TrainConfig(batch_size=4, lr=1e-3, eval_batches=1, probe_seqs=2)
_SMOKE_NOTE = "smoke preset: tests only"


def _schedule(template: TrainConfig, epochs: int, steps_per_epoch: int) -> TrainConfig:
    return replace(template, epochs=epochs, steps_per_epoch=steps_per_epoch)


#: The demo's schedule (LOG.md, the demo's schedule): the baseline gets past the collapse after about
#: 1000 optimiser steps at lr 1e-3 (pr_q - pr_k rising in 13/18 seed-averaged traces at 850,
#: 17/18 at 1000, 18/18 from 1050 on; 22 × 50 keeps one epoch of margin; pr_k falling 16/18);
#: the interventions act from their first step and show every predicted direction in both
#: seeds from 480 to 660 steps (600 chosen; at 420 the K clamp's not yet, at 720 forced
#: contraction's logit_std and qk_erank no longer). The science sets the schedule;
#: ``sweep.demo`` times a few steps first and says how long it will take.
DEMO_DEPTHS = (1, 2, 3)
DEMO_INTERVENTION_DEPTH = 2
DEMO_BASELINE_SCHEDULE = (22, 50)  # epochs × steps per epoch
#: The post-collapse window's e_c, fixed on the schedule seeds' runs before any reported seed (SPEC §8;
#: `python -m sweep.baseline --preset demo --seed-list 37 42`: layer- and run-mean pr_k 6.573, 6.293,
#: 6.454 at epochs 1-3, the trough of epochs 1..6 at 2; LOG.md).
DEMO_BASELINE_COLLAPSE_END = 2
DEMO_INTERVENTION_SCHEDULE = (20, 30)
_DEMO_INTERVENTION_CHOICE = ("600 steps were chosen as a length at which every predicted direction held on seeds 7 "
                             "and 37 (all held from 480 to 660 steps; at 420 the K clamp's not yet, at 720 forced "
                             "contraction's logit_std and qk_erank no longer): the intervention verdicts are "
                             "conditional on this length")
#: ``sweep.demo --paper-depths``: the paper's depths at the demo width, long enough for Table 4's
#: counts (24 × 50: pr_q - pr_k rising in 54/54 traces, pr_k falling in 52/54; LOG.md).
PAPER_DEPTHS = (4, 6, 8)
PAPER_INTERVENTION_DEPTH = 8
PAPER_DEPTHS_BASELINE_SCHEDULE = (24, 50)
PAPER_DEPTHS_INTERVENTION_SCHEDULE = (20, 30)
_PAPER_DEPTHS_NOTE = ("paper-depths preset: the paper's depths 4/6/8 (interventions: 8 layers) at the demo "
                      "width, lr 1e-3 (paper: 1e-4), trained long enough for Table 4's counts (LOG.md)")

# The paper presets take GPTConfig() and TrainConfig() as they are: the paper's shape and recipe.
BASELINE_PRESETS: dict[str, Preset] = {
    "paper": Preset("paper", "baseline", "wikitext103", (4, 6, 8), INITS, PAPER_SEEDS),
    "demo": Preset("demo", "baseline", "stdlib-docs", DEMO_DEPTHS, INITS, CONFIRMATORY_SEEDS, model=_DEMO_MODEL,
                   train=_schedule(_DEMO_TRAIN, *DEMO_BASELINE_SCHEDULE), note=_DEMO_NOTE,
                   collapse_end=DEMO_BASELINE_COLLAPSE_END,
                   schedule_seeds=DEMO_BASELINE_SCHEDULE_SEEDS),
    "paper-depths": Preset("paper-depths", "baseline", "stdlib-docs", PAPER_DEPTHS, INITS, CONFIRMATORY_SEEDS,
                           model=_DEMO_MODEL, train=_schedule(_DEMO_TRAIN, *PAPER_DEPTHS_BASELINE_SCHEDULE),
                           note=_PAPER_DEPTHS_NOTE, schedule_seeds=PAPER_DEPTHS_BASELINE_SCHEDULE_SEEDS),
    "quick": Preset("quick", "baseline", "stdlib-docs", DEMO_DEPTHS, INITS, CONFIRMATORY_SEEDS[:2], model=_DEMO_MODEL,
                    train=_schedule(_DEMO_TRAIN, 3, 10), note=_QUICK_NOTE),
    "smoke": Preset("smoke", "baseline", "stdlib-docs", (1, 2), INITS[:2], (37,), model=_SMOKE_MODEL,
                    train=_schedule(_SMOKE_TRAIN, 2, 2), note=_SMOKE_NOTE),
}

INTERVENTION_PRESETS: dict[str, Preset] = {
    "paper": Preset("paper", "interventions", "wikitext103", (8,), (DEFAULT_INIT,), INTERVENTION_SEEDS,
                    ALL_CONDITIONS, train=TrainConfig(epochs=15)),
    "demo": Preset("demo", "interventions", "stdlib-docs", (DEMO_INTERVENTION_DEPTH,), (DEFAULT_INIT,),
                   CONFIRMATORY_SEEDS, ALL_CONDITIONS, model=_DEMO_MODEL,
                   train=_schedule(_DEMO_TRAIN, *DEMO_INTERVENTION_SCHEDULE), note=_DEMO_NOTE,
                   schedule_seeds=DEMO_INTERVENTION_SCHEDULE_SEEDS, schedule_choice=_DEMO_INTERVENTION_CHOICE),
    "paper-depths": Preset("paper-depths", "interventions", "stdlib-docs", (PAPER_INTERVENTION_DEPTH,),
                           (DEFAULT_INIT,), CONFIRMATORY_SEEDS, ALL_CONDITIONS, model=_DEMO_MODEL,
                           train=_schedule(_DEMO_TRAIN, *PAPER_DEPTHS_INTERVENTION_SCHEDULE),
                           note=_PAPER_DEPTHS_NOTE, schedule_seeds=PAPER_DEPTHS_INTERVENTION_SCHEDULE_SEEDS),
    "quick": Preset("quick", "interventions", "stdlib-docs", (DEMO_INTERVENTION_DEPTH,), (DEFAULT_INIT,),
                    CONFIRMATORY_SEEDS[:2], ALL_CONDITIONS, model=_DEMO_MODEL, train=_schedule(_DEMO_TRAIN, 3, 10),
                    note=_QUICK_NOTE),
    "smoke": Preset("smoke", "interventions", "stdlib-docs", (2,), (DEFAULT_INIT,), (7,), ALL_CONDITIONS,
                    model=_SMOKE_MODEL, train=_schedule(_SMOKE_TRAIN, 2, 2), note=_SMOKE_NOTE),
}


def _describe(presets: dict[str, Preset], value: Callable[[Preset], Any]) -> str:
    """``demo: 6, smoke: 2, …``: ``value(preset)`` per preset, for ``--help``."""
    return ", ".join(f"{n}: {value(p)}" for n, p in presets.items())


def _csv(values: tuple) -> str:
    return ",".join(map(str, values))


def add_grid_flags(p: argparse.ArgumentParser, presets: dict[str, Preset], conditions: bool = False) -> None:
    """The flags that select a preset and override its fields (lists: ``4,6,8`` or ``4 6 8``)."""
    g = p.add_argument_group("grid (override the preset; lists take 4,6,8 or 4 6 8)")
    g.add_argument("--preset", default="demo", choices=list(presets), help="named grid and run shape")
    g.add_argument("--depths", type=int_list, nargs="+", metavar="N",
                   help=f"layer counts (preset: {_describe(presets, lambda p: _csv(p.depths))})")
    g.add_argument("--inits", type=name_list, nargs="+", metavar="INIT",
                   help=f"subset of {', '.join(QK_INITS)} (preset: all but smoke)")
    g.add_argument("--seeds", type=seeds_arg, metavar="N",
                   help=f"the first N of the preset's seeds ({_describe(presets, lambda p: _csv(p.seeds))})"
                   + ("; auto = add seeds in rounds until each claim is decided (--max-seeds, --alpha; "
                      "docs/seeds.md)" if conditions else ""))
    g.add_argument("--seed-list", type=int_list, nargs="+", metavar="SEED", help="explicit seeds (>= 0)")
    if conditions:
        g.add_argument("--conditions", type=name_list, nargs="+", metavar="COND",
                       help=f"subset of {', '.join(INTERVENTIONS)} (preset: all)")
        add_strengths_flag(g)
    g.add_argument("--epochs", type=int, help=f"epochs after epoch 0 (preset: {_describe(presets, lambda p: p.train.epochs)})")
    g.add_argument("--steps-per-epoch", type=int,
                   help=f"optimiser steps per epoch (preset: {_describe(presets, lambda p: p.train.steps_per_epoch)}; "
                   "None = one pass over the training split)")
    g.add_argument("--corpus", help="wikitext103, stdlib-docs or a UTF-8 text file "
                   f"(preset: {_describe(presets, lambda p: p.corpus)})")
    g.add_argument("--data-dir", help="folder holding wiki.train.raw; only with the wikitext103 corpus")


def seeds_arg(text: str) -> int | str:
    """argparse type of ``--seeds``: a whole number, or ``auto`` (interventions: ``sweep.sequential.rounds``)."""
    if text.strip() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {text!r}") from None


def preset_from_args(args: argparse.Namespace, presets: dict[str, Preset]) -> Preset:
    """The named preset with every given flag applied; errors name the bad value."""
    if args.preset not in presets:
        raise UsageError(f"--preset {args.preset!r} is not a preset; valid: {', '.join(presets)}")
    base = presets[args.preset]
    for flag in ("depths", "seed_list", "inits", "conditions"):  # nargs="+": join the words
        if getattr(args, flag, None) is not None:
            setattr(args, flag, flatten(getattr(args, flag)))
    _check_grid_flags(args)
    changes: dict[str, Any] = {}
    if args.seeds == "auto":
        if not hasattr(args, "max_seeds"):
            raise UsageError("--seeds auto decides intervention claims; this sweep has none (give --seeds N)")
        if args.seed_list is not None:
            raise UsageError("--seeds auto picks its own seeds (the preset's, then 1000, 1001, ...); "
                             "drop --seed-list")
    elif args.seeds is not None and args.seed_list is not None:
        raise UsageError("give either --seeds N or --seed-list, not both")
    elif args.seeds is not None:
        if not 1 <= args.seeds <= len(base.seeds):
            raise UsageError(f"--seeds {args.seeds}: the {base.name} preset has {len(base.seeds)} seeds "
                             f"{base.seeds}; use 1..{len(base.seeds)} or --seed-list")
        changes["seeds"] = base.seeds[: args.seeds]
    for flag, fieldname in (("seed_list", "seeds"), ("depths", "depths"), ("inits", "inits"),
                            ("conditions", "conditions"), ("corpus", "corpus"), ("data_dir", "data_dir")):
        value = getattr(args, flag, None)
        if value is not None:
            changes[fieldname] = value
    schedule = {f: getattr(args, f) for f in ("epochs", "steps_per_epoch") if getattr(args, f) is not None}
    if schedule:
        changes["train"] = replace(base.train, **schedule)
    if getattr(args, "strengths", None):
        changes["strengths"] = parse_strengths(args.strengths, changes.get("conditions", base.conditions))
    return replace(base, **changes)  # the cross-flag rules are the preset's own checks


def _check_grid_flags(args: argparse.Namespace) -> None:
    """Each grid flag on its own, named as typed."""
    at_least("--epochs", args.epochs, 1)
    at_least("--steps-per-epoch", args.steps_per_epoch, 1)
    for flag, valid in (("depths", None), ("seed_list", None), ("inits", QK_INITS),
                        ("conditions", INTERVENTIONS)):
        values, name = getattr(args, flag, None), f"--{flag.replace('_', '-')}"
        if values is None:
            continue
        if not values:
            raise UsageError(f"{name} is empty: give at least one value")
        for v in values:
            if valid is None:
                at_least(name, v, 1 if flag == "depths" else 0)
            elif v not in valid:
                raise UsageError(f"{name}: {v!r} is not valid; valid: {', '.join(sorted(valid))}")


__all__ = ["BASELINE_PRESETS", "INTERVENTION_PRESETS", "Cell", "Preset", "add_grid_flags",
           "preset_from_args"]
