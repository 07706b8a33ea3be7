"""How long a probe run takes, before it starts (SPEC §7 "Suite scale"): from each planned revision's
parameter count and bytes, and the seconds a revision's probe took where it was measured.

``probe_costs.json`` (beside this file) holds the measured seconds of one revision on a dedicated
core — value digest, load, tokenizer and probe, in one thread's CPU seconds; no download, and the
pool's own cost per revision, within the noise, left out — at two model sizes, written by
``python -m bench.checkpoint_scale --suite --costs FILE`` with the machine and its load. Between and beyond them the seconds follow the power law in parameters
through the two points (``seconds``), and scale linearly with the probe's tokens (``--n-seqs`` ×
``--seq-len``: a lower bound for a longer ``--seq-len``, whose attention spectra grow faster) and
inversely with the threads of a probe (optimistic). The projection (``project``) runs
``concurrency`` probes at once per node — ``--actors`` within the node's CPUs over
``--cpus-per-actor`` and its memory over the largest task's — and downloads at an assumed
bandwidth per node, overlapped with probing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

COSTS = Path(__file__).with_name("probe_costs.json")
#: Assumed sustained Hub download per node, bytes per second (not measured here: no network).
BANDWIDTH = 100e6


@dataclass(frozen=True)
class Costs:
    """Measured seconds of one revision at one thread: ((parameters, seconds), ...) at ``n_seqs`` ×
    ``seq_len`` tokens, and where they were measured."""

    points: tuple[tuple[int, float], ...]
    n_seqs: int
    seq_len: int
    source: str

    def seconds(self, params: int, n_seqs: int, seq_len: int, threads: int = 1) -> float:
        """One revision of ``params`` parameters (module docstring)."""
        (p0, s0), (p1, s1) = self.points[0], self.points[-1]
        slope = math.log(s1 / s0) / math.log(p1 / p0) if p1 != p0 else 1.0
        base = s0 * (max(params, 1) / p0) ** slope
        return base * (n_seqs * seq_len) / (self.n_seqs * self.seq_len) / max(1, threads)


def load_costs(path: str | Path = COSTS) -> Costs:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    points = tuple(sorted((int(p["params"]), float(p["seconds"])) for p in data["points"]))
    return Costs(points, int(data["n_seqs"]), int(data["seq_len"]), str(data["measured"]))


@dataclass(frozen=True)
class Projection:
    """What ``project`` found: revisions, seconds of probing and of downloading, the total."""

    revisions: int
    probe_s: float  # wall seconds of probing, over the nodes' concurrent probes
    download_s: float  # wall seconds of downloading, over the nodes
    weight_bytes: int
    concurrency: int  # probes at once, all nodes
    nodes: int
    cpus: int  # all nodes

    @property
    def total_s(self) -> float:
        return max(self.probe_s, self.download_s)

    def text(self, where: str) -> str:
        bound = "download" if self.download_s > self.probe_s else "probe"
        return (f"{self.revisions} revisions on {where} ({self.nodes} node(s), {self.cpus} CPUs, {self.concurrency} "
                f"probe(s) at once): probing {hours(self.probe_s)}, downloading {self.weight_bytes / 1e9:.1f} GB at "
                f"an assumed {BANDWIDTH / 1e6:.0f} MB/s per node {hours(self.download_s)}, overlapped: "
                f"≈ {hours(self.total_s)} ({bound}-bound)")


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def concurrency(cpus: float, cpus_per_actor: float, actors: int, node_memory: int = 0, task_memory: int = 0) -> int:
    """Probes one node runs at once: ``actors``, within its CPUs and (when known) its memory."""
    by_cpu = max(1, math.floor(cpus / cpus_per_actor))
    by_memory = max(1, int(node_memory // task_memory)) if node_memory and task_memory else by_cpu
    return max(1, min(actors, by_cpu, by_memory))


def project(revisions: list[tuple[int, int]], costs: Costs, n_seqs: int, seq_len: int,
            nodes: list[tuple[float, int]], cpus_per_actor: float = 1.0, actors: int | None = None,
            task_memory: int = 0, bandwidth: float = BANDWIDTH) -> Projection:
    """``revisions``: (parameters, weight bytes to download) per revision to probe; ``nodes``: (CPUs,
    memory bytes, 0 when unknown) per node; ``actors``: probes at once in all (default: as many as the
    CPUs hold), spread over the nodes."""
    slots = [concurrency(c, cpus_per_actor, 10**9, m, task_memory) for c, m in nodes]
    at_once = min(sum(slots), actors) if actors else sum(slots)
    threads = max(1, math.floor(cpus_per_actor))
    work = sum(costs.seconds(p, n_seqs, seq_len, threads) for p, _ in revisions)
    size = sum(b for _, b in revisions)
    return Projection(len(revisions), work / max(1, at_once), size / (bandwidth * len(nodes)), size, at_once,
                      len(nodes), int(sum(c for c, _ in nodes)))


def plan_projection(plan, settings, nodes: list[tuple[float, int]], actors: int, where: str,
                    costs_path: str | Path = COSTS) -> str:
    """The dry run's projection line for ``plan`` (``sweep.extension.plan.Plan``) under ``settings``
    (``ProbeSettings``): the revisions to probe, priced by ``probe_costs.json``; duplicates cost nothing."""
    costs = load_costs(costs_path)
    known = [(j.params, j.listing.weight_bytes(settings.allow_pickle) if j.listing else 0) for j in plan.jobs
             if j.params is not None]
    unknown = len(plan.jobs) - len(known)
    task = max((j.memory or 0 for j in plan.jobs), default=0)
    got = project(known, costs, settings.n_seqs, settings.seq_len, nodes, settings.cpus or settings.threads,
                  actors, task)
    text = f"[extension] projected: {got.text(where)}; probe seconds per revision from {costs.source}"
    if unknown:
        text += f"; {unknown} revision(s) of unknown size not projected (the probe will say why)"
    return text
