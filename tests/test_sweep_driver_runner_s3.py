"""Sweeps with the store and Tune's storage on S3 (moto's standalone server, tests/s3_server.py).

The error tests run first and must fail before Ray starts; the module's Ray is
started afterwards, with the AWS_* environment already pointing at the moto
server so that Tune's trial workers reach it too.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pandas as pd
import pyarrow.fs as pafs
import pytest
import ray
import s3_server
from ray import tune

from sweep import baseline
from sweep.presets import BASELINE_PRESETS
from sweep.store import Store, StoreError, validate

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_env")]  # fixtures: tests/conftest.py

ROOT = Path(__file__).resolve().parents[1]
SMOKE = BASELINE_PRESETS["smoke"]
#: The sweep run on S3 and, for the timing, on local disk: the smoke grid for one init (2 trials).
GRID = ["--preset", "smoke", "--inits", "independent_xavier"]
CELLS = [c for c in SMOKE.cells() if c.init == "independent_xavier"]
SMOKE_LAYER_ROWS = (SMOKE.train.epochs + 1) * sum(c.depth for c in CELLS)
SMOKE_RUNS = len(CELLS)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3fs(endpoint: str) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(endpoint_override=endpoint, region="us-east-1")


# --- errors: before Ray ----------------------------------------------------------------------


@pytest.mark.parametrize("which", ["store", "storage"])
def test_missing_bucket_fails_before_ray(s3_endpoint, tmp_path, which):
    bucket = s3_server.create_bucket(s3_endpoint)
    good, bad = f"s3://{bucket}/x", "s3://qkgeom-no-such-bucket/x"
    argv = ["--preset", "smoke", "--store", bad if which == "store" else good,
            "--storage", bad if which == "storage" else str(tmp_path / "ray")]
    with pytest.raises((SystemExit, StoreError), match="qkgeom-no-such-bucket"):
        baseline.main(argv)
    assert not ray.is_initialized()


def test_unreachable_endpoint_fails_before_ray(s3_endpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises((SystemExit, StoreError), match="s3://some-bucket/store"):
        baseline.main(["--preset", "smoke", "--store", "s3://some-bucket/store",
                       "--storage", str(tmp_path / "ray")])
    assert not ray.is_initialized()
    assert not (tmp_path / "ray").exists()


# --- sweeps on S3 ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3_ray(s3_endpoint):
    """Ray started with the AWS_* environment set, so its workers reach the moto server."""
    assert os.environ["AWS_ENDPOINT_URL"] == s3_endpoint
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def s3_sweep(s3_ray, s3_endpoint):
    bucket = s3_server.create_bucket(s3_endpoint)
    summary = baseline.main([*GRID, "--store", f"s3://{bucket}/store",
                             "--storage", f"s3://{bucket}/ray", "--name", "s3smoke"])
    return bucket, summary


def test_sweep_on_s3_completes_and_reads_back(s3_sweep, s3_endpoint):
    bucket, summary = s3_sweep
    assert len(summary) == SMOKE_RUNS and (summary["status"] == "completed").all(), summary

    # plain pandas, whole tables, through pyarrow's S3 file system
    fs = s3fs(s3_endpoint)
    layers = pd.read_parquet(f"{bucket}/store/layers", filesystem=fs)
    epochs = pd.read_parquet(f"{bucket}/store/epochs", filesystem=fs)
    assert len(layers) == SMOKE_LAYER_ROWS
    assert len(epochs) == SMOKE_RUNS * (SMOKE.train.epochs + 1)
    assert not layers.duplicated(["run_id", "epoch", "layer"]).any()
    assert set(epochs.loc[epochs["epoch"] == SMOKE.train.epochs, "status"]) == {"completed"}
    assert set(layers["run_id"]) == {c.run_id for c in CELLS}

    store = Store(f"s3://{bucket}/store")
    report = validate(store)
    assert report.ok, str(report)
    assert report.rows["layers"] == SMOKE_LAYER_ROWS
    # the sweep lock is released, the writability probes are gone
    left = [i.path for i in fs.get_file_info(pafs.FileSelector(f"{bucket}/store", recursive=True))
            if i.type == pafs.FileType.File and "/_" in i.path]
    assert left == []


def test_experiment_on_s3_reads_with_tune(s3_sweep):
    bucket, _ = s3_sweep
    analysis = tune.ExperimentAnalysis(f"s3://{bucket}/ray/s3smoke")
    assert len(analysis.trials) == SMOKE_RUNS
    assert {t.status for t in analysis.trials} == {"TERMINATED"}
    for history in analysis.trial_dataframes.values():
        assert history["epoch"].tolist() == list(range(SMOKE.train.epochs + 1))


def test_report_reads_the_store_from_s3(s3_sweep, tmp_path):
    bucket, _ = s3_sweep
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "sweep.report", "--store", f"s3://{bucket}/store",
                           "--out", str(out), "--no-figures"], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "could not read" not in done.stderr and "failed" not in done.stderr, done.stderr[-3000:]
    assert "smoke" in (out / "report.md").read_text()
    provenance = json.loads((out / "stats.json").read_text())["provenance"]
    assert provenance["n_runs"] == SMOKE_RUNS  # the runs it read are the S3 store's


# --- an interrupted sweep on S3 resumes from its checkpoint on S3 ------------------------------


def _last_modified(bucket: str, key: str, endpoint: str):
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    return s3.head_object(Bucket=bucket, Key=key)["LastModified"]


def test_errored_sweep_on_s3_resumes_from_checkpoint(s3_ray, s3_endpoint, tmp_path):
    bucket = s3_server.create_bucket(s3_endpoint)
    cell = ["--inits", "independent_xavier", "--depths", "1", "--epochs", "3"]
    argv = ["--preset", "smoke", *cell, "--store", f"s3://{bucket}/store", "--storage", f"s3://{bucket}/ray",
            "--name", "resume", "--fail-after-epoch", "1", "--max-failures", "0",
            "--failure-marker-dir", str(tmp_path / "markers")]
    first = baseline.main(argv)
    assert first["status"].tolist() == ["error"], first  # the trial died after epoch 1's rows
    (run_id,) = {c.run_id for c in SMOKE.cells() if c.init == "independent_xavier" and c.depth == 1}
    store = Store(f"s3://{bucket}/store")
    assert sorted(set(store.read("epochs", run_id=run_id)["epoch"])) == [0, 1]
    epoch0 = f"store/layers/{run_id}/epoch-0000.parquet"
    stamp0 = _last_modified(bucket, epoch0, s3_endpoint)
    time.sleep(1.1)  # S3 modification times have one-second resolution

    second = baseline.main(argv)  # the same command: Tuner.restore(resume_errored=True)
    assert second["status"].tolist() == ["completed"], second
    assert second["epoch"].tolist() == [3]

    analysis = tune.ExperimentAnalysis(f"s3://{bucket}/ray/resume")
    (history,) = analysis.trial_dataframes.values()
    # epoch 0 reported once before the failure; after it, only epochs 1..3 (restored at epoch 0)
    assert history["epoch"].tolist() == [0, 1, 2, 3]
    assert history["iterations_since_restore"].iloc[-1] == 3
    assert _last_modified(bucket, epoch0, s3_endpoint) == stamp0, "epoch 0 was recomputed"
    report = validate(store)
    assert report.ok, str(report)
    assert report.rows == {"layers": 4 * 1, "epochs": 4, "checkpoints": 0, "runs": 1}
