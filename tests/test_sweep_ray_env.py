"""sweep/ray_env.py without starting Ray: URIs made absolute for trials, and the GPU defaults."""

from __future__ import annotations

import ray

from sweep.ray_env import DEFAULT_GPU_FRACTION, absolute_uri, default_gpus, node_gpus


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
