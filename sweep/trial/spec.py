"""The run spec: what one Tune trial trains, built and checked once in the driver (SPEC §5.1, §6).

``TrialSpec`` is a frozen, versioned value: the runs' model (complete: depth and
vocabulary), the training recipe, the condition and its strengths, each run's
store identity (init, seed, run id, …), the trial's options and the ``--plugin``
modules (``model.plugins.Plugins``, the carrier the probe actors get too). The
driver builds it from a checked grid (``TrialSpec.of``); ``to_config()`` is the plain data Tune keeps in its experiment state and hands
to the trial as ``config["spec"]``, and ``decode`` rebuilds it there *without*
re-running any check (the values were checked once, in the driver; the version
says how to read them).

Version 1 is the config of experiments started before the spec existed
(``{"cell": …, "options": …}``, no ``version``): such experiments resume, their
trials decoding the old shape. A version this code does not know is refused
before anything restarts (``check_versions``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from interventions import default_strengths
from model.config import GPTConfig, TrainConfig
from model.plugins import Plugins
from sweep.store.ids import run_id, strengths_json
from sweep.trial.options import TrialOptions

SPEC_VERSION = 2
LEGACY_VERSION = 1  # experiments started before the run spec: no "version" key
READABLE = (LEGACY_VERSION, SPEC_VERSION)
#: ``TrialOptions`` fields added since version 2 began, with the value a trial started before had
ADDED_OPTIONS = {"amp": "auto", "graphs": True, "tf32": True}

#: ``TrialOptions`` fields of version 1 that are no longer options (test-only fault injection; the
#: plugins, now the spec's own field)
_V1_DROPPED_OPTIONS = ("fail_after_epoch", "failure_marker_dir", "plugins")

T = TypeVar("T")


class SpecError(ValueError):
    """A trial config that this qkgeom cannot read (an unknown version, or one that does not match it)."""


@dataclass(frozen=True)
class RunIdentity:
    """One run's store identity: the identity columns of its ``epochs`` and ``layers`` rows (SPEC §6)."""

    sweep: str
    run_id: str
    preset: str
    init: str
    depth: int
    seed: int
    condition: str
    strengths: str  # every strength of the condition, canonical JSON (``schema.strengths_json``)

    def row(self) -> dict[str, Any]:
        """The identity columns, by the store's names."""
        return asdict(self)


@dataclass(frozen=True)
class TrialSpec:
    """One Tune trial: one run, or a pack of runs of one shape (same model, recipe, condition, strengths)."""

    model: GPTConfig  # every run's model: the preset's shape with the cell's depth and the corpus' vocabulary
    train: TrainConfig  # the preset's recipe; each run's seed and the trial's device are set in the trial
    condition: str
    #: the condition's strengths away from its defaults, sorted by field (``()``: the defaults)
    strengths: tuple[tuple[str, float], ...]
    runs: tuple[RunIdentity, ...]  # a pack's members in grid order; one for an unpacked trial
    options: TrialOptions
    plugins: Plugins = Plugins()  # imported by the trial before it reads any name
    version: int = SPEC_VERSION

    @classmethod
    def of(cls, pack: Any, options: TrialOptions, vocab_size: int, plugins: Plugins) -> TrialSpec:
        """The spec of a ``sweep.placement.packing.Pack`` of checked cells (its preset checked the grid)."""
        first = pack.cells[0]
        return cls(model=first.preset.model_config(first.depth, vocab_size), train=first.preset.train,
                   condition=first.condition, strengths=first.strengths,
                   runs=tuple(RunIdentity(**c.identity()) for c in pack.cells), options=options,
                   plugins=plugins)

    @property
    def depth(self) -> int:
        return self.model.n_layer

    def run_train(self, run: RunIdentity, device: str) -> TrainConfig:
        """The recipe of one run on ``device``: its seed, the options' compile flag and AMP."""
        return _trusted(TrainConfig, {**asdict(self.train), "seed": run.seed, "device": device,
                                      "compile": self.options.compile, "amp": self.options.amp})

    def cell(self) -> dict[str, Any]:
        """What people read (Tune's progress table, ``sweep.browse``, TensorBoard): the condition, depth,
        the non-default strengths; init and seed (a pack's: its members' values, joined) and its size."""
        inits = ",".join(dict.fromkeys(r.init for r in self.runs))
        seeds = ",".join(str(s) for s in dict.fromkeys(r.seed for r in self.runs))
        out: dict[str, Any] = {"condition": self.condition, "depth": self.depth, "strengths": dict(self.strengths),
                               "init": inits, "seed": int(seeds) if len(self.runs) == 1 else seeds}
        if len(self.runs) > 1:
            out["pack"] = len(self.runs)
        return out

    def run_rows(self, experiment: str, trial: str) -> list[dict[str, Any]]:
        """The store's ``runs`` rows of this trial's runs (SPEC §6): each run's identity, the experiment
        and Tune trial it runs in, its place in the pack, the model and the recipe (with the run's seed;
        without the device and ``compile``, which say where it ran, not what) as canonical JSON."""
        model = json.dumps(asdict(self.model), sort_keys=True)
        recipe = {k: v for k, v in asdict(self.train).items() if k not in ("device", "compile")}
        recipe["amp"] = self.options.amp  # --amp: what the runs trained in asks for
        return [{**run.row(), "experiment": experiment, "trial": trial, "pack": len(self.runs), "member": i,
                 "model": model, "train": json.dumps({**recipe, "seed": run.seed}, sort_keys=True)}
                for i, run in enumerate(self.runs)]

    def to_config(self) -> dict[str, Any]:
        """Plain data for Tune's config (kept in the experiment state; read back by ``decode``)."""
        return {"version": self.version, "cell": self.cell(), "model": asdict(self.model),
                "train": asdict(self.train), "condition": self.condition, "strengths": dict(self.strengths),
                "runs": [asdict(r) for r in self.runs], "options": self.options.to_config(),
                "plugins": list(self.plugins.modules)}


def _trusted(cls: type[T], values: Mapping[str, Any]) -> T:
    """A frozen dataclass from values that were checked when the spec was built: no ``__post_init__``.

    The keys must be exactly the fields; anything else is a config of another version.
    """
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    if set(values) != set(names):
        odd = sorted(set(values) ^ set(names))
        raise SpecError(f"{cls.__name__} in the trial config has other fields than this qkgeom's ({', '.join(odd)}): "
                        f"not a run spec version {SPEC_VERSION} config")
    obj = object.__new__(cls)
    for name in names:
        object.__setattr__(obj, name, values[name])
    return obj


def version_of(config: Mapping[str, Any]) -> Any:
    """The run spec version of a trial's Tune config (1: a config from before the spec)."""
    return config["spec"].get("version") if "spec" in config else LEGACY_VERSION


def plugins_of(config: Mapping[str, Any]) -> Plugins:
    """The ``--plugin`` modules of a trial's Tune config (imported before it is decoded; version 1
    kept them in its options)."""
    modules = config["spec"]["plugins"] if "spec" in config else config["options"].get("plugins", ())
    return Plugins(tuple(modules))


def cell_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """What people read of a trial (``TrialSpec.cell``), of either readable version."""
    if "spec" in config:
        return config["spec"]["cell"]
    cell = {k: v for k, v in config["cell"].items() if k not in ("preset", "members", "intervention")}
    return {"condition": config["cell"]["intervention"], **cell}


def _refusal(version: Any) -> str:
    return (f"run spec version {version!r}, which this qkgeom cannot read (it reads versions "
            f"{', '.join(map(str, READABLE))}): resume it with the qkgeom that started it, or start a new "
            "experiment (another --name)")


def decode(config: Mapping[str, Any], vocab_size: int | None = None) -> TrialSpec:
    """The spec of a trial's Tune config, read without re-running the driver's checks.

    ``vocab_size`` (the trial's corpus) completes a version 1 model and is checked against a
    version 2 one. Unknown versions raise ``SpecError``.
    """
    version = version_of(config)
    if version == LEGACY_VERSION:
        return _decode_v1(config, vocab_size)
    if version != SPEC_VERSION:
        raise SpecError(f"the trial config is {_refusal(version)}")
    config = config["spec"]
    model = _trusted(GPTConfig, config["model"])
    if vocab_size is not None and model.vocab_size != vocab_size:
        raise SpecError(f"the trial's model has {model.vocab_size} symbols but the corpus given to the sweep has "
                        f"{vocab_size}: resume with the corpus the experiment started with")
    return TrialSpec(model=model, train=_trusted(TrainConfig, config["train"]), condition=config["condition"],
                     strengths=tuple(sorted((k, float(v)) for k, v in config["strengths"].items())),
                     runs=tuple(_trusted(RunIdentity, r) for r in config["runs"]),
                     options=_trusted(TrialOptions, {**ADDED_OPTIONS, **config["options"]}),
                     plugins=Plugins(tuple(config["plugins"])))


def runs_of(config: Mapping[str, Any]) -> tuple[RunIdentity, ...]:
    """The runs of a trial's Tune config, of either readable version (``summarize``, ``sweep.browse``)."""
    version = version_of(config)
    if version == SPEC_VERSION:
        return tuple(_trusted(RunIdentity, r) for r in config["spec"]["runs"])
    if version != LEGACY_VERSION:
        raise SpecError(f"the trial config is {_refusal(version)}")
    cell = config["cell"]
    shape = cell["preset"]
    condition, depth = cell["intervention"], cell["depth"]
    strengths = _v1_strengths(cell)
    members = cell.get("members") or [{"init": cell["init"], "seed": cell["seed"]}]
    full = strengths_json({**default_strengths(condition), **dict(strengths)})
    return tuple(RunIdentity(sweep=shape["sweep"], run_id=run_id(shape["sweep"], shape["name"], m["init"], depth,
                                                                  m["seed"], condition, dict(strengths)),
                             preset=shape["name"], init=m["init"], depth=depth, seed=m["seed"],
                             condition=condition, strengths=full) for m in members)


def _v1_strengths(cell: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((k, float(v)) for k, v in (cell.get("strengths") or {}).items()))


def _decode_v1(config: Mapping[str, Any], vocab_size: int | None) -> TrialSpec:
    """A trial config of an experiment started before the run spec: ``{"cell": Cell or pack config,
    "options": TrialOptions}``, where the cell carried the preset's shape (its model and recipe
    without the per-cell fields) and a pack listed its ``members``; the vocabulary is the corpus'."""
    if vocab_size is None:
        raise SpecError("a run spec version 1 config needs the corpus' vocabulary size to rebuild its model")
    cell = config["cell"]
    shape = cell["preset"]
    condition, strengths = cell["intervention"], _v1_strengths(cell)
    runs = runs_of(config)
    model = {**shape["model"], "n_layer": cell["depth"], "vocab_size": vocab_size}
    train = {**shape["train"], "seed": 0, "device": "auto", "compile": False}
    options = {k: v for k, v in config["options"].items() if k not in _V1_DROPPED_OPTIONS}
    return TrialSpec(model=_trusted(GPTConfig, model), train=_trusted(TrainConfig, train), condition=condition,
                     strengths=strengths, runs=runs, version=LEGACY_VERSION,
                     options=_trusted(TrialOptions, options), plugins=plugins_of(config))


def check_versions(configs: Iterable[Mapping[str, Any]], experiment: str) -> int:
    """The oldest run spec version among an experiment's trial configs; a ``SpecError`` naming the
    version when one cannot be read (checked before the experiment is resumed)."""
    versions = {version_of(c) for c in configs}
    unknown = sorted(v for v in versions if v not in READABLE)
    if unknown:
        raise SpecError(f"the experiment at {experiment} was written with {_refusal(unknown[0])}")
    return min(versions, default=SPEC_VERSION)

