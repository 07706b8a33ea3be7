"""The one place that starts Ray and settles what its workers need: absolute store URIs, GPUs and
their free memory (``free_gpu_memory``: what ``--pack auto`` caps a pack by).

Trials and probe actors run in their own working directories (local paths must be
absolute) and share the cluster's GPUs (by default a whole one per trial under ``--pack auto``, a
quarter of one per trial or probe actor otherwise, when the cluster has any; else none). ``sweep.driver.runner`` and ``sweep.extension`` both use this.
Ray is imported inside the functions, so a bad flag is refused before it loads.
"""

from __future__ import annotations

import functools
from pathlib import Path

from sweep.cli import local_gpus
from sweep.placement.flags import PackRequest

#: GPUs per trial (an explicit ``--pack``) / per probe actor when the flag is not given and the
#: cluster has GPUs; ``--pack auto`` plans whole GPUs (``gpu_share``).
DEFAULT_GPU_FRACTION = 0.25

#: A local Ray on a laptop runs its trials at the priority of any other program and leaves out
#: what nobody reads there (LOG.md, the demo's minutes). Ray starts its workers at nice 15 (Ray 2.60's
#: ``worker_niceness``), so on a machine with anything else to do — the driver, Ray's own
#: processes, the user's programs — the trials get the leftovers: 2-core sweeps under load got
#: half the training a plain process pool got. Also off: the usage-stats reporter, and the
#: metrics every worker exports every few seconds (no dashboard or Prometheus reads them). A joined
#: cluster (``--address``) keeps its own settings. A variable already set in the environment wins;
#: the others are set only while Ray starts its processes (which inherit them), then restored.
LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0, "enable_metrics_collection": False}


def absolute_uri(uri: str) -> str:
    """Trials and actors run in another working directory: make a local path absolute."""
    return uri if "://" in uri else str(Path(uri).resolve())


def init_ray(address: str | None, num_cpus: int | None, num_gpus: int | None = None) -> bool:
    """Connect to ``address`` or start a local Ray; True when this call started it (then stop it)."""
    import os

    import ray

    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=True)
    else:
        added = [key for key in LOCAL_ENV if key not in os.environ]
        os.environ.update({key: LOCAL_ENV[key] for key in added})
        try:
            ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False, log_to_driver=True,
                     _system_config=dict(LOCAL_SYSTEM_CONFIG))
        finally:
            for key in added:
                os.environ.pop(key, None)
    return True


def node_gpus(local: float | None = None) -> float:
    """GPUs of the largest node: of the running Ray if there is one, else ``local`` or this machine's."""
    import sys

    ray = sys.modules.get("ray")  # not imported: not running in this process (importing it costs ~0.5 s)
    if ray is not None and ray.is_initialized():
        return max((n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n.get("Alive")), default=0.0)
    return float(local if local is not None else local_gpus())


def gpu_share(requested: float | None, request: PackRequest, cluster_gpus: float) -> float:
    """GPUs per trial: ``--gpus-per-trial``; else with GPUs one whole GPU for ``--pack auto`` (its
    plan fills each GPU with one trial at a time) and ``DEFAULT_GPU_FRACTION`` for an explicit
    ``--pack``; 0 without GPUs."""
    if requested is not None:
        return requested
    if cluster_gpus <= 0:
        return 0.0
    return min(1.0, cluster_gpus) if request == "auto" else DEFAULT_GPU_FRACTION  # a cluster of 0.5 GPU: 0.5


def default_gpus(requested: float | None, pack: PackRequest = 1) -> float:
    """``requested``, else what ``gpu_share`` gives on the running cluster: one whole GPU a trial for
    ``--pack auto``, ``DEFAULT_GPU_FRACTION`` for an explicit pack or a probe actor; 0 without GPUs."""
    if requested is not None:
        return requested
    import ray

    return gpu_share(None, pack, ray.cluster_resources().get("GPU", 0.0))


def bundled_psutil():
    """``psutil``, which this project has through Ray only: Ray ships it in ``ray/thirdparty_files``
    and puts that folder on ``sys.path`` when it is imported, so Ray is imported first."""
    import importlib

    importlib.import_module("ray")
    return importlib.import_module("psutil")


def device_free_bytes() -> list[int]:
    """Free bytes of each CUDA device this process sees (``torch.cuda.mem_get_info``; [] without
    CUDA). Creates a CUDA context: ``free_gpu_memory`` runs it in a process of its own."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [int(torch.cuda.mem_get_info(i)[0]) for i in range(torch.cuda.device_count())]


@functools.cache
def free_gpu_memory() -> tuple[int | None, str]:
    """(the free bytes of the least free GPU a trial may get, where they were read), or (None, why
    not). Read where the trials will run: with a running Ray whose GPUs are on other nodes, by a
    one-GPU task there (its worker exits after it); else on this machine, in a subprocess (so that
    the driver holds no CUDA context for the whole sweep). Once a process (a dry run asks twice)."""
    import json
    import subprocess
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        here = ray.util.get_node_ip_address()
        elsewhere = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) > 0
                     and n.get("NodeManagerAddress") != here]
        if elsewhere:
            try:
                free = ray.get(ray.remote(num_gpus=1, max_calls=1)(device_free_bytes).remote(), timeout=120)
            except Exception as exc:  # noqa: BLE001 - the plan goes on, uncapped, and says why
                return None, f"not read on the cluster ({type(exc).__name__}): packs not capped"
            return (min(free), "read on a GPU node of the cluster") if free else (None, "no CUDA on the GPU node")
    if local_gpus() == 0:
        return None, "no CUDA device on this machine to read"
    root = str(Path(__file__).resolve().parents[2])
    code = "import json, sweep.placement.ray_env as r; print(json.dumps(r.device_free_bytes()))"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root,
                             check=True).stdout
        free = json.loads(out.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as exc:
        return None, f"not read on this machine ({type(exc).__name__}): packs not capped"
    return (min(free), "read on this machine's GPUs") if free else (None, "no CUDA device on this machine")
