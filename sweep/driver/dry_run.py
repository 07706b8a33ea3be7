"""``--dry-run``: the plan a sweep would run (its trials, packs and resources), printed; nothing
trained, nothing written, and no Ray started unless one runs or ``--address`` names one."""

from __future__ import annotations

import os
import sys

import pandas as pd

from sweep.cli import gpu_fraction
from sweep.driver.settings import SweepSettings
from sweep.placement.packing import describe_plan, plan_frame, plan_packs
from sweep.placement.ray_env import default_gpus, gpu_share, init_ray, node_gpus
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
    trial = settings.trial
    if not (running or settings.address or os.environ.get("RAY_ADDRESS")):
        gpus = node_gpus(settings.num_gpus)
        gpu_fraction("--gpus-per-trial", trial.gpus_per_trial, gpus)
        gpu = gpu_share(trial.gpus_per_trial, settings.pack, gpus)
    else:
        import ray

        started = init_ray(settings.address, settings.num_cpus, settings.num_gpus)
        try:
            gpu_fraction("--gpus-per-trial", trial.gpus_per_trial, node_gpus())
            gpus = ray.cluster_resources().get("GPU", 0.0)
            gpu = default_gpus(trial.gpus_per_trial, settings.pack)
        finally:
            if started:
                ray.shutdown()
    packs, notes = plan_packs(preset.cells(), settings.pack, gpus, amp=trial.amp)
    resources = {"cpu": trial.cpus_per_trial, "gpu": gpu}
    print(describe_plan(settings.name, preset, packs, notes, settings.pack, gpus, resources, amp=trial.amp))
    print(f"[{settings.name}] dry run: nothing trained, nothing written")
    sys.stdout.flush()
    return plan_frame(packs)
