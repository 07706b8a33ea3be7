"""``--dry-run``: the plan a sweep would run (its trials, packs and resources), printed; nothing
trained, nothing written, and no Ray started unless one runs or ``--address`` names one."""

from __future__ import annotations

import os
import sys

import pandas as pd

from sweep.driver.settings import SweepSettings
from sweep.placement.packing import plan_frame
from sweep.placement.ray_env import init_ray, node_gpus
from sweep.presets import Preset


def dry_run(preset: Preset, settings: SweepSettings) -> pd.DataFrame:
    """Print the plan ``run_sweep`` would run; trains nothing, writes nothing.

    Packs are decided from the GPUs a sweep would see: those of the running Ray or the cluster at
    ``--address`` / ``RAY_ADDRESS`` (joined for the count, then left), else of this machine
    (``--num-gpus`` or what it has), which a local run would give its own Ray: no Ray is started.
    With GPUs the plan also prices each condition (``sweep/costs.json``) and sets the GPU memory of
    its largest trial (``model.memory``) beside a GPU's free memory, which caps ``--pack auto``.
    """
    ray = sys.modules.get("ray")  # not imported: not running in this process (importing it costs ~0.5 s)
    running = ray is not None and ray.is_initialized()
    if not (running or settings.address or os.environ.get("RAY_ADDRESS")):
        cluster = node = node_gpus(settings.num_gpus)
    else:
        import ray

        started = init_ray(settings.address, settings.num_cpus, settings.num_gpus)
        try:
            cluster, node = ray.cluster_resources().get("GPU", 0.0), node_gpus()
        finally:
            if started:
                ray.shutdown()
    plan = settings.plan(preset.cells(), cluster, node)
    print(plan.describe(settings.name, preset))
    print(f"[{settings.name}] dry run: nothing trained, nothing written")
    sys.stdout.flush()
    return plan_frame(plan.packs)
