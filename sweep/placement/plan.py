"""A sweep's trials as they will run, planned once from the GPUs of the cluster they run on and
handed to whoever starts them (``sweep.driver.runner``) or prints them (``sweep.driver.dry_run``):
the packs and their notes (``sweep.placement.packing.plan_packs``) and the resources each trial asks
Ray for (its CPUs; its GPUs: ``sweep.placement.ray_env.gpu_share``). No Ray here: the caller reads
the GPUs, of the running cluster or of this machine, and passes them in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sweep.cli import gpu_fraction
from sweep.placement.flags import PackRequest
from sweep.placement.packing import Pack, describe_plan, plan_packs
from sweep.placement.ray_env import gpu_share
from sweep.presets import Cell, Preset


@dataclass(frozen=True)
class TrialPlan:
    """The trials of one sweep and what each asks Ray for."""

    packs: tuple[Pack, ...]  # in the order Tune is given them
    notes: tuple[str, ...]  # conditions that run unpacked although asked to pack, runs that may not fit
    request: PackRequest  # --pack
    cluster_gpus: float  # the GPUs of the cluster planned for
    cpus: float  # Ray CPUs per trial
    gpus: float  # Ray GPUs per trial
    amp: str | None  # the sweep's --amp, which sizes a member's GPU memory (None: the preset's recipe)

    @property
    def resources(self) -> dict[str, float]:
        """What ``tune.with_resources`` asks for each trial."""
        return {"cpu": self.cpus, "gpu": self.gpus}

    @property
    def packed(self) -> bool:
        return any(p.size > 1 for p in self.packs)

    def describe(self, name: str, preset: Preset) -> str:
        """The dry run's text (``sweep.placement.packing.describe_plan``)."""
        return describe_plan(name, preset, self.packs, self.notes, self.request, self.cluster_gpus, self.resources,
                             amp=self.amp)


def plan_trials(cells: Sequence[Cell], request: PackRequest, cluster_gpus: float, node_gpus: float,
                cpus: float, gpus: float | None, amp: str | None) -> TrialPlan:
    """The trials of ``cells`` on a cluster of ``cluster_gpus`` GPUs whose largest node has ``node_gpus``:
    ``gpus`` (``--gpus-per-trial``) checked against that node first, then the packs (``--pack``,
    each shape capped by a GPU's free memory at ``amp``), then each trial's share of a GPU."""
    gpu_fraction("--gpus-per-trial", gpus, node_gpus)
    packs, notes = plan_packs(cells, request, cluster_gpus, amp=amp)
    return TrialPlan(tuple(packs), tuple(notes), request, cluster_gpus, cpus, gpu_share(gpus, request, cluster_gpus),
                     amp)
