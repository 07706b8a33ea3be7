"""sweep/extension/pool.py (and ``python -m sweep.extension`` driving it) on a throw-away Ray cluster, with
tiny local models standing in for revisions. Probes that kill their worker or record when they ran are
functions of this module, shipped to the workers by value."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import ray
import ray.cloudpickle
from extension_helpers import N_SEQS, SEQ_LEN, STEPS, TEXT, manifest_for

from sweep.extension import Pool, main, run_extension, summarize
from sweep.extension.checkpoint_series import load_manifest, parse_manifest
from sweep.extension.revision_probe import (
    Job,
    ProbeSettings,
    jobs_from_manifest,
)
from sweep.store import Store
from sweep.store.schema import CHECKPOINT_METRICS, CHECKPOINTS, SCHEMA_VERSION

pytestmark = pytest.mark.ray
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the probes below run in Ray workers


@pytest.fixture(scope="module")
def cluster(ray_env):  # ray_env (tests/conftest.py): RAY_AUTH_MODE=disabled for this module only
    # Logical CPUs: the module's 2-actor pool plus one more one-actor pool must fit at once.
    ray.init(num_cpus=3, num_gpus=0, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


def settings(store: Path) -> ProbeSettings:
    return ProbeSettings(str(store), n_seqs=N_SEQS, seq_len=SEQ_LEN)


@pytest.fixture(scope="module")
def pool(cluster, store):
    """One pool for the module: starting actors (and importing torch in them) is the slow part."""
    with Pool(settings(store), TEXT, n_actors=2) as p:
        yield p


def rows(store: Path, prefix: str):
    df = Store(str(store)).read("checkpoints")
    return df[df["series"].str.startswith(prefix + "-")].reset_index(drop=True)


def _check_rows(store: Path, revisions, kinds, prefix: str) -> None:
    df = rows(store, prefix)
    assert list(df.columns) == CHECKPOINTS.names
    expected = {(f"{prefix}-{k}", f"local-step{s}", layer) for k in kinds for s, _ in revisions[k] for layer in (0, 1)}
    assert set(zip(df["series"], df["revision"], df["layer"], strict=True)) == expected
    assert len(df) == len(expected)  # one row per (revision, layer), no duplicates
    assert (df["status"] == "ok").all() and df["reason"].isna().all()
    assert df[list(CHECKPOINT_METRICS)].notna().all().all()
    assert (df["pr_q_minus_pr_k"] - (df["pr_q"] - df["pr_k"])).abs().max() < 1e-9
    assert df["repo"].isna().all() and (df["schema_version"] == SCHEMA_VERSION).all()
    assert (df["tokens"] == df["step"] * 1024).all()
    assert df["progress"].between(0, 1).all()


def test_pool_writes_one_row_per_revision_and_layer_then_skips_and_forces(pool, store, revisions, tmp_path) -> None:
    manifest_path = tmp_path / "manifest.json"
    manifest_path.write_text(json.dumps(manifest_for(revisions)))
    manifest = load_manifest(manifest_path)
    results = run_extension(manifest, settings(store), TEXT, progress=False, pool=pool)
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
    _check_rows(store, revisions, list(STEPS), "tiny")
    assert summarize(results)["tiny-gpt2"] == {"done": 3, "skipped": 0, "failed": 0}

    again = run_extension(manifest, settings(store), TEXT, progress=False, pool=pool)
    assert {r.status for r in again} == {"skipped"}
    assert summarize(again)["tiny-gpt2"] == {"done": 0, "skipped": 3, "failed": 0}

    only_gpt2 = parse_manifest(manifest_for(revisions, ["gpt2"]))
    before = Store(str(store)).fs.get_file_info(
        Store(str(store)).group_dir("checkpoints", "tiny-gpt2") + "/local-step0.parquet").mtime_ns
    forced = run_extension(only_gpt2, settings(store), TEXT, force=True, progress=False, pool=pool)
    assert [r.status for r in forced] == ["ok"] * 3
    after = Store(str(store)).fs.get_file_info(
        Store(str(store)).group_dir("checkpoints", "tiny-gpt2") + "/local-step0.parquet").mtime_ns
    assert after > before  # really redone
    _check_rows(store, revisions, list(STEPS), "tiny")


def test_missing_path_is_recorded_as_failed_and_others_complete(pool, store, revisions, tmp_path) -> None:
    data = manifest_for(revisions, ["llama"], prefix="miss")
    data["series"][0]["revisions"].insert(1, {"revision": "local-step500", "path": str(tmp_path / "nope"),
                                              "tokens": 500 * 1024})
    results = run_extension(parse_manifest(data), settings(store), TEXT, progress=False, pool=pool)
    assert summarize(results) == {"miss-llama": {"done": 2, "skipped": 0, "failed": 1}}
    df = rows(store, "miss")
    failed = df[df["status"] == "failed"]
    assert len(failed) == 1 and failed["layer"].isna().all()
    assert failed["revision"].item() == "local-step500" and "does not exist" in failed["reason"].item()
    assert failed[list(CHECKPOINT_METRICS)].isna().all().all()
    assert failed["progress"].item() == pytest.approx(0.5)
    assert (df[df["status"] == "ok"]["layer"].notna()).all() and len(df) == 1 + 2 * 2
    # a rerun retries the failed revision only (and it fails again)
    rerun = run_extension(parse_manifest(data), settings(store), TEXT, progress=False, pool=pool)
    assert sorted(r.status for r in rerun) == ["failed", "skipped", "skipped"]


def test_copies_take_the_probed_rows_or_are_probed_when_it_fails(pool, store, revisions, tmp_path) -> None:
    """A revision with the same weight files as a probed one gets its rows (its own identity, status
    duplicate_of); when the probed one fails, the copy is probed instead."""
    _, folder = revisions["gpt_neox"][1]
    head = Job("copy-neox", "local-step1000", None, folder, 1000, 1000, 1.0)
    dup = Job("copy-neox", "local-step0", None, folder, 0, 0, 0.0)
    results = pool.run([head], copies={("copy-neox", "local-step1000"): [dup]})
    assert [(r.revision, r.status) for r in results] == [("local-step1000", "ok"), ("local-step0", "duplicate")]
    df = rows(store, "copy")
    a, b = (df[df["revision"] == r].reset_index(drop=True) for r in ("local-step1000", "local-step0"))
    assert (b["status"] == "duplicate_of:local-step1000").all() and (b["step"] == 0).all()
    assert a[list(CHECKPOINT_METRICS)].equals(b[list(CHECKPOINT_METRICS)])
    bad = Job("copy2-neox", "local-step1000", None, str(tmp_path / "nope"), 1000, 1000, 1.0)
    results = pool.run([bad], copies={("copy2-neox", "local-step1000"): [dup]})
    assert [(r.revision, r.status) for r in results] == [("local-step1000", "failed"), ("local-step0", "ok")]


def timed(log: Path):
    """A probe that records when it ran (start, end) in ``log`` and probes nothing."""

    def probe(job, text, settings, device):
        start = time.time()
        time.sleep(0.6)
        with open(log, "a") as f:
            f.write(json.dumps([job.revision, start, time.time()]) + "\n")
        return [{"layer": 0, **dict.fromkeys(CHECKPOINT_METRICS, 1.0), "dtype": "float32"}]

    return probe


def test_each_task_asks_for_its_revision_memory(cluster, tmp_path) -> None:
    """Three revisions that each need 60 % of the node's memory run one after another although three
    may run at once by CPU; three small ones overlap."""
    from dataclasses import replace

    node = ray.cluster_resources()["memory"]
    small = [Job("mem", f"step{i}", None, "/x", i, i, 1.0, memory=int(0.1 * node)) for i in range(3)]
    big = [replace(j, series="big", memory=int(0.6 * node)) for j in small]
    spans = {}
    for name, jobs in (("small", small), ("big", big)):
        log = tmp_path / f"{name}.jsonl"
        with Pool(settings(tmp_path / name), TEXT, n_actors=3, probe=timed(log)) as pool:
            assert [r.status for r in pool.run(jobs)] == ["ok"] * 3
            assert {r.memory for r in pool.run(jobs[:1])} == {jobs[0].memory}
        spans[name] = sorted(tuple(json.loads(line)[1:]) for line in log.read_text().splitlines())[:3]
    overlaps = lambda s: [b[0] < a[1] for a, b in zip(s, s[1:], strict=False)]  # noqa: E731
    assert not any(overlaps(spans["big"])) and any(overlaps(spans["small"]))


def test_cli_runs_a_manifest_then_skips_it(cluster, revisions, tmp_path, capsys) -> None:
    manifest, text = tmp_path / "m.json", tmp_path / "probe.txt"
    manifest.write_text(json.dumps(manifest_for(revisions, ["gpt_neox"], prefix="cli")))
    text.write_text(TEXT)
    argv = ["--manifest", str(manifest), "--store", str(tmp_path / "store"), "--text", str(text),
            "--n-seqs", str(N_SEQS), "--seq-len", str(SEQ_LEN), "--actors", "1",
            "--write-manifest", str(tmp_path / "used.json")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "cli-gpt_neox" in out and "    2        0       0" in out
    assert "[extension] 2 revisions: probed 2 (2 now, 0 already in the store), failed 0, duplicates 0" in out
    assert load_manifest(tmp_path / "used.json") == load_manifest(manifest)
    assert len(rows(tmp_path / "store", "cli")) == 2 * 2
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "    0        2       0" in out and "probed 2 (0 now, 2 already in the store)" in out
    # two revisions < Appendix A's three: warned up front, once, on stderr
    assert err.count("warning: series cli-gpt_neox has 2 revision(s) in the manifest") == 1
    assert ray.is_initialized()  # main() leaves a Ray it did not start alone


def test_cli_exit_status_and_closing_summary(cluster, revisions, tmp_path, capsys) -> None:
    """Exit 1 when a revision failed, with the closing summary naming it and its reason; exit 2 for
    bad input (one line, nothing probed); the failed revision makes ``sweep.store validate`` exit 1."""
    from sweep.store.cli import main as store_main

    data = manifest_for(revisions, ["olmo2"], prefix="exit")
    data["series"][0]["revisions"].append({"revision": "local-step500", "path": str(tmp_path / "empty"),
                                           "tokens": 500 * 1024})
    (tmp_path / "empty").mkdir()  # exists (the manifest loads), holds nothing: fails in the actor
    manifest, store = tmp_path / "m.json", tmp_path / "store"
    manifest.write_text(json.dumps(data))
    argv = ["--manifest", str(manifest), "--store", str(store), "--n-seqs", str(N_SEQS),
            "--seq-len", str(SEQ_LEN), "--actors", "1"]
    (tmp_path / "probe.txt").write_text(TEXT)
    argv += ["--text", str(tmp_path / "probe.txt")]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "[extension] 3 revisions: probed 2 (2 now, 0 already in the store), failed 1, duplicates 0" in out
    assert f"  failed exit-olmo2@local-step500: RevisionError: no config.json in {tmp_path / 'empty'}" in out
    assert "in the manifest" not in err  # three revisions in the manifest: no warning up front,
    # but one at the end: 2 ok revisions < Appendix A's 3
    assert err.count("warning: series exit-olmo2 has 2 ok revision(s) after this run") == 1
    assert store_main(["validate", "--store", str(store)]) == 1
    assert "failed checkpoint revision exit-olmo2@local-step500" in capsys.readouterr().out

    assert main(argv) == 1  # a rerun retries the failed revision only; it fails again
    out, err = capsys.readouterr()
    assert "probed 2 (0 now, 2 already in the store), failed 1" in out

    with pytest.raises(SystemExit) as bad:
        main([*argv, "--n-seqs", "0"])
    assert bad.value.code == 2
    assert capsys.readouterr().err.strip() == "python -m sweep.extension: error: --n-seqs must be >= 1, got 0"


def test_a_revision_that_does_not_load_as_shipped_is_a_failed_row_and_exit_1(cluster, tmp_path, capsys) -> None:
    """--probe-mode whole (what auto picks for the paper's series) on a Llama revision without one k_proj:
    from_pretrained would fill it at random and the row would be ok; it is failed, naming the tensor and
    its file, the closing summary says so and the command exits 1. Its rows carry the probe settings."""
    from extension_helpers import save_revision

    name = "model.layers.1.self_attn.k_proj.weight"
    save_revision(tmp_path / "clean")
    save_revision(tmp_path / "broken", edit=lambda state: state.pop(name, None))
    revisions = [{"revision": f"step{i}", "path": str(tmp_path / r), "tokens": i}
                 for i, r in ((1, "clean"), (2, "broken"))]
    (tmp_path / "m.json").write_text(json.dumps({"series": [{"name": "shipped", "revisions": revisions}]}))
    (tmp_path / "probe.txt").write_text(TEXT)
    store = tmp_path / "store"
    argv = ["--manifest", str(tmp_path / "m.json"), "--store", str(store), "--text", str(tmp_path / "probe.txt"),
            "--n-seqs", str(N_SEQS), "--seq-len", str(SEQ_LEN), "--actors", "1", "--probe-mode", "whole"]
    assert main(argv) == 1
    reason = (f"CheckpointError: {name} is missing from model.safetensors: from_pretrained would initialise the "
              "model's weight at random")
    assert f"  failed shipped@step2: {reason}" in capsys.readouterr().out
    df = Store(str(store)).read("checkpoints")
    assert df.groupby("revision")["status"].agg(set).to_dict() == {"step1": {"ok"}, "step2": {"failed"}}
    assert df[df["revision"] == "step2"]["reason"].item() == reason
    assert (df["probe_n_seqs"] == N_SEQS).all() and (df["probe_seq_len"] == SEQ_LEN).all()
    assert main(argv) == 1  # not "already in the store": tried again, failed again


# --- workers killed (last: each restart costs a worker start) ------------------------------


def kill_once(marker_dir: Path, revision: str):
    """A probe that SIGKILLs its worker the first time it meets ``revision``, then probes."""
    from sweep.extension.revision_probe import probe_revision

    def probe(job, text, settings, device):
        marker = marker_dir / f"{job.series}-{job.revision}"
        if job.revision == revision and not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return probe_revision(job, text, settings, device)

    return probe


def always_kill(job, text, settings, device):
    os.kill(os.getpid(), signal.SIGKILL)


def test_killed_worker_costs_one_retry_and_the_run_completes_without_duplicates(
        cluster, store, revisions, tmp_path) -> None:
    """Worker restarts cost seconds each: one series, its middle revision's worker killed once."""
    jobs = jobs_from_manifest(parse_manifest(manifest_for(revisions, ["gpt2"], prefix="kill")))
    with Pool(settings(store), TEXT, n_actors=2, probe=kill_once(tmp_path, "local-step100")) as pool:
        results = pool.run(jobs)
    assert sorted((r.series, r.revision) for r in results) == sorted((j.series, j.revision) for j in jobs)
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
    assert [p.name for p in tmp_path.iterdir()] == ["kill-gpt2-local-step100"]  # it was killed, and retried
    _check_rows(store, revisions, ["gpt2"], "kill")


def test_a_revision_that_kills_every_worker_fails_after_max_attempts(cluster, revisions, tmp_path) -> None:
    jobs = [Job("dead-olmo", "local-step0", None, revisions["olmo"][0][1], 0, 0, 1.0)]
    with Pool(settings(tmp_path), TEXT, n_actors=1, max_attempts=2, probe=always_kill) as lone:
        results = lone.run(jobs)
    assert [r.status for r in results] == ["failed"]
    assert results[0].reason.startswith("worker died 2 times"), results[0].reason
    assert rows(tmp_path, "dead")["status"].tolist() == ["failed"]
