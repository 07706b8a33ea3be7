"""How trials fill a cluster's GPUs (SPEC §5.1, ``--pack auto``): the work of a trial, the order Ray
starts trials in, the makespan that gives, and its lower bound. Pure functions, no Ray.

The model: a trial holds one whole GPU; its *work* is its members' optimiser steps weighted by depth
(``work``: at one width a step costs about its layers) and by its condition's cost (``COSTS``: a
step of ``k_spectrum_clamp`` costs a ``none`` step plus M·L decompositions, as measured by
``bench.clamp_cost``); a GPU does one unit of work per unit of time. Tune starts trials in the
order it is given them, each as soon as a GPU is free (FIFO): list scheduling, which ``simulate``
replays. Longest first (LPT) is within 4/3 of the optimum. A pack may also be capped in size (the
GPU's memory: ``sweep.placement.packing``).
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: a split whose makespan is this close to the shortest counts as equally fast (fewer trials win)
SLACK = 1.05


#: each condition's step as × a none step of the same shape (the plan's cost factors): written by
#: ``python -m bench.clamp_cost --costs``, kept at sweep/costs.json (where the docs say to copy a GPU's
#: measurement), read by every plan
COSTS = Path(__file__).resolve().parents[1] / "costs.json"


@dataclass(frozen=True)
class Cost:
    """A condition's step as ``factor`` × a none step, and where that figure comes from."""

    factor: float
    source: str
    measured: bool


def load_costs(path: Path = COSTS) -> dict[str, Cost]:
    """The cost factors (``COSTS``; a missing file: none, every condition costs 1)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {name: Cost(float(v["factor"]), str(v["source"]), bool(v["measured"]))
            for name, v in data.items() if isinstance(v, dict)}


def cost_factor(condition: str, costs: Mapping[str, Cost]) -> float:
    """``condition``'s step as × a none step (1 for a condition without a figure)."""
    cost = costs.get(condition)
    return cost.factor if cost is not None else 1.0


def work(members: int, depth: int, steps: int = 1, cost: float = 1.0) -> float:
    """A trial's work: ``members`` runs of ``steps`` optimiser steps at ``depth`` layers (layer-steps),
    each step ``cost`` × a none step (``cost_factor``)."""
    return float(members * depth * steps) * cost


@dataclass(frozen=True)
class Schedule:
    """When each trial starts and ends (trial order as given) and on which GPU."""

    starts: tuple[float, ...]
    ends: tuple[float, ...]
    gpus: tuple[int, ...]

    @property
    def makespan(self) -> float:
        return max(self.ends, default=0.0)


def simulate(works: Sequence[float], gpus: int) -> Schedule:
    """Start the trials in order, each on the GPU that frees first (what Tune's FIFO does with one
    GPU per trial); ``gpus`` >= 1."""
    free = [(0.0, g) for g in range(gpus)]
    heapq.heapify(free)
    starts, ends, where = [], [], []
    for w in works:
        t, g = heapq.heappop(free)
        starts.append(t)
        ends.append(t + w)
        where.append(g)
        heapq.heappush(free, (t + w, g))
    return Schedule(tuple(starts), tuple(ends), tuple(where))


def lower_bound(unit_works: Sequence[float], gpus: int) -> float:
    """No schedule of this work on ``gpus`` GPUs ends sooner: max(all the work / GPUs, the largest
    indivisible unit: one run, the G-th and (G+1)-th largest runs together: of the G+1 largest, two
    share a GPU)."""
    ranked = sorted(unit_works, reverse=True)
    pair = ranked[gpus - 1] + ranked[gpus] if len(ranked) > gpus else 0.0
    return max(sum(unit_works) / gpus, max(unit_works, default=0.0), pair)


def longest_first(works: Sequence[float]) -> list[int]:
    """The trial order Tune should get: longest first, ties in the given order."""
    return sorted(range(len(works)), key=lambda i: -works[i])


def split_sizes(n: int, k: int) -> list[int]:
    """``n`` runs in ``k`` packs as equal as they go, larger first: 12, 5 → 3, 3, 2, 2, 2."""
    return [n // k + (1 if i < n % k else 0) for i in range(k)]


def best_split(shapes: Sequence[tuple[int, float, bool]], gpus: int,
               caps: Sequence[int | None] | None = None) -> list[int]:
    """Packs per shape for ``gpus`` GPUs. ``shapes``: (runs, one run's work, packable) each;
    ``caps``: the most runs a pack of each shape may hold (None: no limit; the GPU's memory).

    Tries every pack size that divides some shape's work evenly among its packs as the target
    size (work per trial) for all shapes; each is scheduled longest first. Of the splits whose
    makespan is within ``SLACK`` of the shortest, the one of fewest trials wins (packing's own
    gain: one batched kernel for many runs). At least ``gpus`` trials when the grid has that many
    runs. An unpackable shape is always one run per trial; a capped one at least ceil(runs / cap)."""
    caps = list(caps) if caps is not None else [None] * len(shapes)
    least = [n if not ok else 1 if cap is None else min(n, math.ceil(n / max(1, cap)))
             for (n, _, ok), cap in zip(shapes, caps, strict=True)]
    runs = sum(n for n, _, _ in shapes)
    targets = {n * w / k for (n, w, ok), low in zip(shapes, least, strict=True) if ok for k in range(low, n + 1)} \
        or {0.0}
    found: list[tuple[float, int, list[int]]] = []
    for target in sorted(targets):
        counts = [n if not ok or target <= 0 else min(n, max(low, math.ceil(n * w / target - 1e-9)))
                  for (n, w, ok), low in zip(shapes, least, strict=True)]
        works = [s * w for (n, w, _), k in zip(shapes, counts, strict=True) for s in split_sizes(n, k)]
        if len(works) < min(gpus, runs):
            continue
        found.append((simulate(sorted(works, reverse=True), gpus).makespan, len(works), counts))
    if not found:  # fewer runs than GPUs: every run alone
        return [n for n, _, _ in shapes]
    shortest = min(span for span, _, _ in found)
    return min((t, span, counts) for span, t, counts in found if span <= shortest * SLACK)[2]
