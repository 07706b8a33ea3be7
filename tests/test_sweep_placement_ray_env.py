"""sweep/placement/ray_env.py without starting Ray: URIs made absolute for trials, and the GPU defaults."""

from __future__ import annotations

import ray

from sweep.placement.ray_env import DEFAULT_GPU_FRACTION, absolute_uri, default_gpus, node_gpus


def test_local_paths_become_absolute_and_uris_stay(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_uri("runs/store") == str(tmp_path.resolve() / "runs" / "store")
    assert absolute_uri("s3://bucket/runs/store") == "s3://bucket/runs/store"
    assert absolute_uri("file:///data/store") == "file:///data/store"


def test_gpu_counts_without_a_running_ray() -> None:
    assert not ray.is_initialized()
    assert node_gpus(3.0) == 3.0  # this machine's count, as told
    assert default_gpus(0.5) == 0.5 and default_gpus(0.0) == 0.0  # a flag wins, without asking Ray
    assert 0 < DEFAULT_GPU_FRACTION <= 1


def test_psutil_comes_with_ray_in_a_fresh_interpreter():
    """psutil is Ray's bundled copy, importable only once Ray is: a command that plans without Ray
    (``sweep.extension --dry-run``) still reads the machine's memory."""
    import subprocess
    import sys

    code = "from sweep.placement.ray_env import bundled_psutil; print(bundled_psutil().virtual_memory().total > 0)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
