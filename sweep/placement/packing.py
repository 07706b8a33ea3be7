"""Which runs share one Tune trial (SPEC §5.1, packed trials), and the plan a ``--dry-run`` prints.

A pack is one trial that trains M runs of one shape, same depth, condition and strengths (the
preset fixes corpus and schedule), differing in init and seed, as one batched model
(``model.trainer.Trainer`` with several members). ``plan_packs`` cuts a grid into packs. ``--pack
auto`` on a cluster with G GPUs cuts each shape into as many packs as keep all G busy
(``sweep.placement.schedule.best_split``: at least G trials where the grid has G runs, each asking one whole GPU,
longest first, each condition's step priced by its cost factor, ``sweep/costs.json``), no pack
larger than the GPU's free memory holds (``model.memory``'s estimate against
``sweep.placement.ray_env.free_gpu_memory``), and is 1 on a CPU-only cluster, where packing buys nothing. A
condition that is not pack-aware runs unpacked. No Ray here: the driver passes the cluster's GPU
count in (the free memory is asked of ``sweep.placement.ray_env`` unless given).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from model.memory import Estimate, Shape, gib
from model.memory import estimate as memory_estimate
from sweep.cli import UsageError
from sweep.placement.flags import PackRequest
from sweep.placement.schedule import (
    Cost,
    best_split,
    cost_factor,
    load_costs,
    longest_first,
    lower_bound,
    simulate,
    split_sizes,
    work,
)
from sweep.presets import Cell, Preset

#: ``plan_packs``' default for ``free_bytes``: ask ``sweep.placement.ray_env.free_gpu_memory`` (on GPUs, for auto)
ASK = "ask"


@dataclass(frozen=True)
class Pack:
    """The cells one trial trains: one cell (an unpacked trial) or M of one shape."""

    cells: tuple[Cell, ...]

    def __post_init__(self) -> None:
        if not self.cells:
            raise ValueError("a pack needs at least one cell")
        shapes = {(c.preset.name, c.depth, c.condition, c.strengths) for c in self.cells}
        if len(shapes) > 1:
            raise ValueError(f"a pack mixes shapes (preset, depth, condition, strengths): {sorted(shapes)}")

    @property
    def size(self) -> int:
        return len(self.cells)

    @property
    def depth(self) -> int:
        return self.cells[0].depth

    @property
    def condition(self) -> str:
        return self.cells[0].condition

    def members_text(self) -> str:
        """``independent_xavier: 37,42 · qk_identical: 37,42``: the members, by init."""
        by_init: dict[str, list[str]] = {}
        for c in self.cells:
            by_init.setdefault(c.init, []).append(str(c.seed))
        return " · ".join(f"{init}: {','.join(seeds)}" for init, seeds in by_init.items())


def shapes(cells: Sequence[Cell]) -> dict[tuple[int, str, tuple[tuple[str, float], ...]], list[Cell]]:
    """The cells by (depth, condition, strengths), each in grid order (init, then seed)."""
    out: dict[tuple[int, str, tuple[tuple[str, float], ...]], list[Cell]] = {}
    for c in cells:
        out.setdefault((c.depth, c.condition, c.strengths), []).append(c)
    return out


def check_pack(flag: str, request: PackRequest, cells: Sequence[Cell]) -> None:
    """A pack size no larger than a shape's runs (checked before Ray starts)."""
    if request == "auto":
        return
    largest = max(len(g) for g in shapes(cells).values())
    if request > largest:
        runs = f"{largest} run{'s' if largest > 1 else ''}"
        raise UsageError(f"{flag} {request}: a shape (depth, condition) of the {cells[0].preset.sweep} grid "
                         f"has at most {runs}; use 1..{largest} or auto")


def pack_size(request: PackRequest, cluster_gpus: float) -> int | None:
    """Members per pack: ``request``; for ``auto`` None (planned from the GPUs) with GPUs, else 1."""
    if request != "auto":
        return request
    return None if cluster_gpus > 0 else 1


def planned_gpus(cluster_gpus: float) -> int:
    """The GPUs ``--pack auto`` plans for: the cluster's whole GPUs (at least one)."""
    return max(1, int(cluster_gpus))


def trial_work(pack: Pack, steps: int = 1, costs: Mapping[str, Cost] | None = None) -> float:
    """The pack's work (``sweep.placement.schedule.work``: members × depth × steps × its condition's cost factor,
    ``costs`` by default ``sweep/costs.json``'s)."""
    costs = load_costs() if costs is None else costs
    return work(pack.size, pack.depth, steps, cost_factor(pack.condition, costs))


def _corpus_size(preset: Preset) -> tuple[int, int]:
    """(training tokens, vocabulary) of the preset's corpus: wikitext103's estimated without reading
    it (its first 40M characters, 90 % train; the paper's vocabulary), another corpus read."""
    if preset.corpus == "wikitext103":
        from model.corpus import TRAIN_FRACTION, WIKITEXT_CHARS

        return int(WIKITEXT_CHARS * TRAIN_FRACTION), preset.model.vocab_size
    return _read_size(preset.corpus, preset.data_dir, preset.model.context)


@functools.cache
def _read_size(corpus: str, data_dir: str | None, context: int) -> tuple[int, int]:
    from model.corpus import load_corpus

    c = load_corpus(corpus, data_dir, context=context)
    return len(c.train), c.vocab_size


def memory(preset: Preset, depth: int, packed: bool, amp: str | None = None) -> Estimate:
    """``model.memory``'s estimate of a trainer of this preset at ``depth`` (``packed``: M > 1);
    ``amp``: the sweep's ``--amp`` (None: the preset's recipe), half precision unless ``off``."""
    m, t = preset.model, preset.train
    train_tokens, vocab = _corpus_size(preset)
    shape = Shape(d_model=m.d_model, n_layer=depth, n_head=m.n_head, d_mlp=m.d_mlp, vocab_size=vocab,
                  context=m.context, batch_size=t.batch_size, half=(amp or t.amp) != "off")
    return memory_estimate(shape, packed, train_tokens, t.eval_batches)


def _free(free_bytes: int | None | str) -> tuple[int | None, str]:
    """(free bytes of a GPU, where from): asked of ``sweep.placement.ray_env`` for ``ASK``, else as given."""
    if free_bytes == ASK:
        from sweep.placement.ray_env import free_gpu_memory

        return free_gpu_memory()
    return (None, "not given: packs not capped") if free_bytes is None else (int(free_bytes), "as given")


def plan_packs(cells: Sequence[Cell], request: PackRequest, cluster_gpus: float,
               packable: Callable[[str], bool] | None = None, free_bytes: int | None | str = ASK,
               amp: str | None = None, costs: Mapping[str, Cost] | None = None) -> tuple[list[Pack], list[str]]:
    """The trials of a grid and one note per condition that runs unpacked although asked to pack,
    and per shape whose single run does not fit the GPU's free memory.

    Each shape's runs are cut, in grid order, into packs of the requested size (the last one may be
    smaller); the trials follow the grid's order of their first runs (``--compile`` compiles a
    pack's batched loss, ``model.trainer``). ``--pack auto`` with GPUs: ``best_split`` with each
    condition's cost factor (``costs``, by default ``sweep/costs.json``) and each shape's packs
    capped at the members ``free_bytes`` hold (``model.memory``; ``ASK``: read by
    ``sweep.placement.ray_env.free_gpu_memory``; None: no cap), ``amp`` the sweep's ``--amp``.
    ``packable(condition)`` is ``interventions.base.packable_condition`` by default.
    """
    if packable is None:
        from interventions.base import packable_condition as packable
    check_pack("--pack", request, cells)
    size = pack_size(request, cluster_gpus)
    groups = shapes(cells)
    notes = [f"condition {condition} is not pack-aware: its runs train unpacked, one per trial"
             for (_, condition, _), group in groups.items()
             if not packable(condition) and len(group) > 1 and size != 1]
    packs: list[Pack] = []
    if size is None:  # auto with GPUs: as many packs per shape as keep every GPU busy
        costs = load_costs() if costs is None else costs
        free, _ = _free(free_bytes)
        caps: list[int | None] = []
        for (d, c, _), group in groups.items():
            most = None if free is None or not packable(c) else memory(group[0].preset, d, True, amp).most_members(free)
            if most == 0:
                need = memory(group[0].preset, d, False, amp).total(1)
                notes.append(f"one run at depth {d} needs about {gib(need)} of GPU memory, more than the "
                             f"{gib(free)} free: it will likely run out of memory")
            caps.append(most)
        counts = best_split([(len(g), work(1, d, cost=cost_factor(c, costs)), packable(c))
                             for (d, c, _), g in groups.items()], planned_gpus(cluster_gpus), caps)
        for group, k in zip(groups.values(), counts, strict=True):
            at = 0
            for n in split_sizes(len(group), k):
                packs.append(Pack(tuple(group[at:at + n])))
                at += n
        order = longest_first([trial_work(p, costs=costs) for p in packs])
        return [packs[i] for i in order], list(dict.fromkeys(notes))
    for (_, condition, _), group in groups.items():
        k = size if packable(condition) else 1
        packs += [Pack(tuple(group[i:i + k])) for i in range(0, len(group), k)]
    order = {c.run_id: i for i, c in enumerate(cells)}
    packs.sort(key=lambda p: order[p.cells[0].run_id])  # unpacked: the grid's own order, as before
    return packs, list(dict.fromkeys(notes))


def steps_per_epoch(preset: Preset) -> tuple[int, bool]:
    """(optimiser steps an epoch, whether estimated): the preset's, else one pass over the training
    split, estimated for wikitext103 (its first 40M characters, 90 % train) without reading it."""
    train = preset.train
    if train.steps_per_epoch is not None:
        return train.steps_per_epoch, False
    per_step = train.batch_size * preset.model.context
    if preset.corpus == "wikitext103":
        from model.corpus import TRAIN_FRACTION, WIKITEXT_CHARS

        return int(WIKITEXT_CHARS * TRAIN_FRACTION) // per_step, True
    from model.corpus import load_corpus

    return len(load_corpus(preset.corpus, preset.data_dir, context=preset.model.context).train) // per_step, False


def plan_frame(packs: Sequence[Pack], costs: Mapping[str, Cost] | None = None) -> pd.DataFrame:
    """One row per run: its trial (0-based), the pack's size, the run's cell and the cost factor its
    condition was planned with (``sweep/costs.json``)."""
    costs = load_costs() if costs is None else costs
    return pd.DataFrame([{"trial": t, "pack": p.size, "condition": c.condition, "init": c.init,
                          "depth": c.depth, "seed": c.seed, "cost": cost_factor(c.condition, costs)}
                         for t, p in enumerate(packs) for c in p.cells])


def describe_plan(name: str, preset: Preset, packs: Sequence[Pack], notes: Sequence[str], request: PackRequest,
                  cluster_gpus: float, resources: dict[str, float], free_bytes: int | None | str = ASK,
                  amp: str | None = None, costs: Mapping[str, Cost] | None = None) -> str:
    """The dry run's text: trials, packs and their members, resources per trial, optimiser steps; with
    GPUs also each condition's cost factor, the makespan, and the GPU memory a trial needs against
    what is free (``plan_packs``' ``free_bytes``, ``amp`` and ``costs``)."""
    costs = load_costs() if costs is None else costs
    steps, estimated = steps_per_epoch(preset)
    about = "≈" if estimated else ""
    runs = sum(p.size for p in packs)
    sizes = sorted({p.size for p in packs}, reverse=True)
    why = (f"auto: the Ray cluster has {cluster_gpus:g} GPUs" if request == "auto" else f"--pack {request}")
    epochs = preset.train.epochs
    trial_steps = epochs * steps
    lines = [f"[{name}] plan ({preset.sweep}, preset {preset.name}): {runs} runs in {len(packs)} trials, "
             f"packs of {'/'.join(map(str, sizes))} ({why})",
             *(f"[{name}] note: {n}" for n in notes),
             f"  resources per trial: {resources['cpu']:g} CPU, {resources['gpu']:g} GPU",
             f"  optimiser steps: {epochs} epochs × {about}{steps:,} = {about}{trial_steps:,} per trial; "
             f"{about}{trial_steps * len(packs):,} trial steps, {about}{trial_steps * runs:,} run steps in all"]
    if cluster_gpus > 0 and resources["gpu"] > 0:
        priced = sorted({p.condition for p in packs if p.condition in costs})
        for c in priced:
            cost = costs[c]
            lines.append(f"  cost of a {c} step: ×{cost.factor:g} a none step of the same shape "
                         f"({'measured' if cost.measured else 'an estimate, not measured on a GPU'}: {cost.source}; "
                         "sweep/costs.json)")
        lines.append(makespan_line(packs, cluster_gpus, resources["gpu"], trial_steps, about, costs))
        lines.append(memory_line(preset, packs, resources["gpu"], free_bytes, amp))
    for t, p in enumerate(packs, 1):
        swept = "".join(f" {k}={v:g}" for k, v in p.cells[0].strengths)
        lines.append(f"  trial {t:>3}: {p.condition}{swept} L{p.depth}, {p.size} run{'s' if p.size > 1 else ''}: "
                     f"{p.members_text()}")
    return "\n".join(lines)


def memory_line(preset: Preset, packs: Sequence[Pack], gpu: float, free_bytes: int | None | str = ASK,
                amp: str | None = None) -> str:
    """The GPU memory of the plan's largest trial (``model.memory``) against a GPU's free memory
    (shared by the trials on one GPU when ``gpu`` < 1)."""
    big = max(packs, key=lambda p: memory(preset, p.depth, p.size > 1, amp).total(p.size))
    est = memory(preset, big.depth, big.size > 1, amp)
    precision = "fp32" if (amp or preset.train.amp) == "off" else "bf16/fp16"
    line = (f"  GPU memory (model.memory): ≈{gib(est.member)} a member at L{big.depth} ({precision}, batch "
            f"{preset.train.batch_size}); the largest trial, {big.size} run{'s' if big.size > 1 else ''} at "
            f"L{big.depth}, ≈{gib(est.total(big.size))}")
    free, where = _free(free_bytes)
    if free is None:
        return f"{line}; free on a GPU: unknown ({where})"
    share = max(1, int(1 / gpu)) if gpu < 1 else 1  # trials that share one GPU
    fits = share * est.total(big.size) <= free
    return (f"{line}{f' × {share} trials a GPU' if share > 1 else ''}; free on a GPU: {gib(free)} ({where}): "
            f"{'fits' if fits else 'does NOT fit'}; at most {est.most_members(free // share)} members a trial "
            f"at L{big.depth}")


def makespan_line(packs: Sequence[Pack], cluster_gpus: float, gpu: float, steps: int, about: str = "",
                  costs: Mapping[str, Cost] | None = None) -> str:
    """The plan's estimated makespan on the cluster's GPUs (``sweep.placement.schedule``: a GPU runs one
    layer-step of work per unit of time, one trial at a time in Tune's order; ``gpu`` < 1 per trial:
    trials sharing a GPU split its time, so at best all the work over all GPUs, or the longest
    trial) next to the best any split of the runs could do; each condition's steps priced by its
    cost factor."""
    costs = load_costs() if costs is None else costs
    gpus = planned_gpus(cluster_gpus)
    works = [trial_work(p, steps, costs) for p in packs]
    if gpu < 1:
        span = max(sum(works) / gpus, max(works))
    else:
        span = simulate(works, max(1, int(gpus / gpu))).makespan
    bound = lower_bound([work(1, p.depth, steps, cost_factor(p.condition, costs)) for p in packs for _ in p.cells],
                        gpus)
    return (f"  estimated makespan on {gpus} GPU{'s' if gpus > 1 else ''}: {about}{span:,.0f} layer-steps "
            f"on the busiest GPU (none-step equivalents × layers; the best split of the runs: {about}{bound:,.0f}, "
            f"×{span / bound:.2f})")
