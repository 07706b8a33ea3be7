"""sweep/driver/runner.py end to end on real (local, throw-away) Ray clusters: retries (sweep/trial/trainable.py's
checkpoints), resume, several nodes, a lost node, the interventions driver, and sweep/browse.py
on the experiment the retry test leaves (one file: the tests share one local Ray and one sweep).

Every test starts its own Ray with explicit ``num_cpus`` / logical ``num_gpus``
(CPU torch: trials on a logical GPU fall back to the CPU) and shuts it down.
The tests that share one single-node Ray use the module fixture ``local_ray``;
the several-node tests run first, each on its own ``ray.cluster_utils.Cluster``.
Sweeps use the ``smoke`` preset, so trial start-up dominates the time.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import ray
from ray import tune
from sweep_helpers import assert_store_complete, dirs

from sweep import baseline, browse, interventions
from sweep.driver.resume import CHECKPOINT_DIR, experiment_trials, loadable
from sweep.hooks.faults import FAILURE_MARKER
from sweep.presets import ALL_CONDITIONS, BASELINE_PRESETS
from sweep.store import Store
from sweep.store.schema import CLOCK_COLUMNS
from sweep.trial.spec import cell_of

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_env")]  # ray_env: tests/conftest.py

ROOT = Path(__file__).resolve().parents[1]
SMOKE = BASELINE_PRESETS["smoke"]


def files_mtimes(store_root: Path, run_ids) -> dict[str, int]:
    out = {}
    for table in ("layers", "epochs"):
        for run in run_ids:
            for f in sorted((store_root / table / run).iterdir()):
                out[str(f)] = f.stat().st_mtime_ns
    return out


# --- several nodes on one machine (runs first: it needs its own cluster) --------------------


@pytest.fixture
def two_gpu_nodes(worker_cluster):
    """Two worker nodes with 4 CPUs and 1 logical GPU each."""
    with worker_cluster(2, num_cpus=4, num_gpus=1) as nodes:
        yield nodes


def test_trials_spread_over_nodes_and_pack_four_per_gpu(two_gpu_nodes, tmp_path):
    cluster, workers = two_gpu_nodes
    assert ray.cluster_resources()["GPU"] == 2
    # Placement, sampled from Ray while the sweep runs: free logical GPUs of the cluster.
    free_gpu: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            free_gpu.append(ray.available_resources().get("GPU", 0.0))
            stop.wait(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        summary = baseline.main(["--preset", "smoke", "--inits", "independent_xavier,qk_identical",
                                 "--depths", "1,2", "--seed-list", "1,2",
                                 "--gpus-per-trial", "0.25", "--cpus-per-trial", "1",
                                 "--pack", "1",  # one run per trial: auto would pack a GPU cluster's runs
                                 "--trial-hook", "placement",  # node_id and gpu_ids in each result
                                 *dirs(tmp_path, "nodes")])
    finally:
        stop.set()
        sampler.join(timeout=10)
    assert len(summary) == 8
    assert (summary["status"] == "completed").all(), summary

    results = tune.ExperimentAnalysis(str(tmp_path / "ray" / "nodes")).dataframe()
    assert len(results) == 8
    worker_ids = {w.node_id for w in workers}
    used = set(results["node_id"])
    assert used == worker_ids, "trials must land on both worker nodes and never on the CPU-only head"
    assert set(results["gpu_ids"]) == {"0"}  # each trial saw its node's one (logical) GPU

    # Packing criterion (placement, not timing): every trial asks for 0.25 GPU, the cluster
    # has 2 GPUs. Had Ray placed at most one trial per GPU, at least 1.75 GPUs would always be
    # free; a sample with no GPU free means 8 quarter-GPU trials held both GPUs at once: 4 per GPU.
    assert free_gpu, "the placement sampler took no sample"
    assert min(free_gpu) == pytest.approx(0.0), f"never more than {2 - min(free_gpu)} GPUs in use"
    # Informational: concurrency from the trials' own clocks (start = last timestamp - total time).
    spans = [(r.timestamp - r.time_total_s, r.timestamp) for r in results.itertuples()]
    peak = max(sum(a <= t <= b for a, b in spans) for t, _ in spans)
    print(f"\nmin free GPU {min(free_gpu)} over {len(free_gpu)} samples; peak concurrent trials "
          f"(from result times) {peak}; trials per node {results['node_id'].value_counts().tolist()}")

    assert_store_complete(Store(str(tmp_path / "store")), runs=8, epochs=SMOKE.train.epochs,
                          layer_rows=4 * (SMOKE.train.epochs + 1) * (1 + 2))


# --- a worker node lost mid-sweep (spot preemption): its trials restart on the surviving node
# from their last checkpoints and the store ends with exactly one row per key (own cluster too)

EPOCHS = 10
# Epochs long next to the trials' staggered starts, so that the node goes while its trials still
# run: at 20 steps (7 ms a step) the epochs were [2, 9, 9, 10] when the last trial reached 2, and
# once both of the lost node's trials had finished (1 fresh-clone run of 2); at 60, [2, 3, 4, 6].
STEPS = 60


@pytest.fixture
def two_nodes(worker_cluster):
    # detect the lost node within seconds rather than the default ~30 s
    fast_health_check = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
    with worker_cluster(2, fast_health_check, num_cpus=2) as nodes:
        yield nodes


def test_worker_node_removed_mid_sweep(two_nodes, tmp_path):
    cluster, workers = two_nodes
    lost, survivor = workers[1].node_id, workers[0].node_id
    store = Store(str(tmp_path / "store"))
    argv = ["--preset", "smoke", "--inits", "independent_xavier,qk_identical", "--depths", "2",
            "--seed-list", "1,2", "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS),
            "--cpus-per-trial", "1", "--max-failures", "3", "--trial-hook", "placement",
            *dirs(tmp_path, "nodeloss")]
    out: dict = {}
    driver = threading.Thread(target=lambda: out.update(summary=baseline.main(argv)), daemon=True)
    driver.start()
    # Wait until every trial has checkpointed past epoch 1, then lose the second worker.
    deadline = time.time() + 240
    while time.time() < deadline:
        ep = store.read("epochs")
        if len(ep) and ep["run_id"].nunique() == 4 and ep.groupby("run_id")["epoch"].max().min() >= 2:
            break
        time.sleep(0.2)
    else:
        pytest.fail("trials did not get going")
    cluster.remove_node(workers[1])
    driver.join(timeout=300)
    assert not driver.is_alive(), "the sweep did not finish after the node was lost"
    summary = out["summary"]
    assert (summary["status"] == "completed").all(), summary

    # Each trial's results in order: a trial that was on the lost node either had already
    # finished there or went on on the survivor from a checkpoint (its first result there is
    # past epoch 1; a restart from scratch would report epochs 0 and 1 again).
    histories = tune.ExperimentAnalysis(str(tmp_path / "ray" / "nodeloss")).trial_dataframes.values()
    moved = 0
    for h in histories:
        nodes = list(h["node_id"])
        assert set(nodes) <= {lost, survivor}, nodes
        if nodes[-1] == lost:
            assert h["epoch"].iloc[-1] == EPOCHS, "a trial ended on the lost node before finishing"
        elif lost in nodes:
            moved += 1
            first_on_survivor = h["epoch"][h["node_id"] == survivor].iloc[0]
            assert first_on_survivor > 1, f"restarted from scratch: {list(h['epoch'])}"
    assert moved >= 1, "no trial was running on the lost node when it went"
    assert_store_complete(store, runs=4, epochs=EPOCHS, layer_rows=4 * (EPOCHS + 1) * 2)


# --- one local Ray shared by the single-node tests -----------------------------------------


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def failed_once(local_ray, tmp_path_factory):
    """A one-trial sweep whose worker is SIGKILLed once after epoch 1's rows are written."""
    tmp = tmp_path_factory.mktemp("failure")
    markers = tmp / "markers"
    summary = baseline.main(["--preset", "smoke", "--inits", "independent_xavier", "--depths", "2",
                             "--epochs", "3", "--fail-after-epoch", "1",
                             "--failure-marker-dir", str(markers), *dirs(tmp, "failure")])
    return tmp, markers, summary


def test_injected_failure_is_retried_from_checkpoint(failed_once):
    tmp, markers, summary = failed_once
    assert list(markers.glob(f"*{FAILURE_MARKER}")), "the injected failure did not happen"
    assert len(summary) == 1 and summary["status"].item() == "completed"
    assert summary["epoch"].item() == 3

    store = Store(str(tmp / "store"))
    ep, ly = assert_store_complete(store, runs=1, epochs=3, layer_rows=(3 + 1) * 2)
    assert set(ly["sweep"]) == {"baseline"} and set(ly["init"]) == {"independent_xavier"}

    analysis = tune.ExperimentAnalysis(str(tmp / "ray" / "failure"))
    (history,) = analysis.trial_dataframes.values()
    # Epoch 1 was stored but never reported (the kill came before its checkpoint); the retry
    # restored the epoch-0 checkpoint and reported epochs 1..3 once each: no epoch twice.
    # Epoch 0's row may be missing: on a retry Tune replaces progress.csv with the copy its
    # storage got with the epoch-0 checkpoint (CSVLoggerCallback._restore_from_remote), and
    # whether the driver had written that row before the copy is a race inside Tune.
    assert history["epoch"].tolist() in ([0, 1, 2, 3], [1, 2, 3])
    assert history["iterations_since_restore"].iloc[-1] == 3  # resumed, not restarted from scratch


def test_tensorboard_reads_the_per_epoch_metrics(failed_once):
    """``tensorboard --logdir`` (printed by every sweep) works: its EventAccumulator finds each epoch."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tmp, _, _ = failed_once
    (events,) = {p.parent for p in (tmp / "ray" / "failure").rglob("events.out.tfevents.*")}
    acc = EventAccumulator(str(events))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    for metric in ("val_loss", "qk_alignment", "attn_entropy", "epoch"):
        assert f"ray/tune/{metric}" in tags, tags
    epochs = {int(e.value) for e in acc.Scalars("ray/tune/epoch")}
    assert epochs == {0, 1, 2, 3}
    assert all(math.isfinite(e.value) for e in acc.Scalars("ray/tune/val_loss"))


def test_resume_flag_without_experiment_is_refused(local_ray, tmp_path):
    with pytest.raises(SystemExit, match="no restorable experiment"):
        baseline.main(["--preset", "smoke", "--resume", *dirs(tmp_path, "nothing-here")])


# --- experiments of other run spec versions (sweep/trial/spec.py) -----------------------------------

LEGACY_GRID = ["--preset", "smoke", "--inits", "independent_xavier", "--depths", "1", "--epochs", "2"]


def _tuner(config: dict, storage: Path, name: str):
    """A Tune experiment of ``train_cell`` with one trial of ``config``, no retries."""
    from sweep.driver.runner import prepare_corpus
    from sweep.trial.trainable import train_cell

    corpus = prepare_corpus(BASELINE_PRESETS["smoke"])
    return tune.Tuner(tune.with_resources(tune.with_parameters(train_cell, corpus=corpus), {"cpu": 1}),
                      param_space=config,
                      run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=0,
                                                failure_config=tune.FailureConfig(max_failures=0)))


def test_an_experiment_started_before_the_run_spec_resumes(local_ray, tmp_path, capsys):
    """A trial with the version 1 config (as qkgeom wrote it before the run spec) died after epoch 1's
    rows; ``--resume`` finishes it, and its rows are those of a fresh sweep of the same grid."""
    from sweep_helpers import v1_config

    from model.plugins import Plugins
    from sweep.presets import preset_from_args
    from sweep.trial.options import TrialOptions

    old = tmp_path / "old"
    preset = preset_from_args(baseline.parse(LEGACY_GRID), BASELINE_PRESETS)
    config = v1_config(preset.cells(), TrialOptions(str(old / "store"), str(old / "ray"), gpus_per_trial=0.0),
                       Plugins())
    config["options"].update(fail_after_epoch=1, failure_marker_dir=str(tmp_path / "markers"))
    assert _tuner(config, old / "ray", "old").fit().errors  # killed after epoch 1, no retry
    summary = baseline.main([*LEGACY_GRID, *dirs(old, "old"), "--resume"])
    assert "started before the run spec (version 1)" in capsys.readouterr().out
    assert summary["status"].tolist() == ["completed"] and summary["epoch"].tolist() == [2]
    fresh = baseline.main([*LEGACY_GRID, *dirs(tmp_path / "new", "new")])
    assert fresh["status"].tolist() == ["completed"]
    for table in ("epochs", "layers"):
        a, b = (Store(str(d / "store")).read(table).drop(columns=list(CLOCK_COLUMNS), errors="ignore")
                .sort_values(["epoch", *(["layer"] if table == "layers" else [])], ignore_index=True)
                for d in (old, tmp_path / "new"))
        pd.testing.assert_frame_equal(a, b)  # CPU runs are bit-identical


def test_an_experiment_of_an_unknown_run_spec_version_is_refused(local_ray, tmp_path, capsys):
    future = {"spec": {"version": 99, "options": {"plugins": []}}}
    assert _tuner(future, tmp_path / "ray", "future").fit().errors  # its trial cannot read it either
    capsys.readouterr()  # Tune's own log of that trial's error
    with pytest.raises(SystemExit) as exit_:
        baseline.main(["--preset", "smoke", *dirs(tmp_path, "future")])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "was written with run spec version 99, which this qkgeom cannot read" in line, line


def test_interventions_smoke(local_ray, tmp_path):
    summary = interventions.main(["--preset", "smoke", "--seeds", "1", *dirs(tmp_path, "interventions")])
    smoke = interventions.INTERVENTION_PRESETS["smoke"]
    (depth,) = smoke.depths
    assert len(summary) == 6 and (summary["status"] == "completed").all(), summary
    assert set(summary["condition"]) == set(ALL_CONDITIONS)

    store = Store(str(tmp_path / "store"))
    ep, ly = assert_store_complete(store, runs=6, epochs=smoke.train.epochs,
                                   layer_rows=6 * 1 * (smoke.train.epochs + 1) * depth)
    assert set(ly["sweep"]) == {"interventions"} and set(ep["sweep"]) == {"interventions"}
    assert set(ly["condition"]) == set(ALL_CONDITIONS)
    assert ly.groupby("condition").size().to_dict() == {c: (smoke.train.epochs + 1) * depth for c in ALL_CONDITIONS}
    assert set(ly["seed"]) == {smoke.seeds[0]}
    assert store.read("layers", sweep="baseline").empty


def test_dose_response_sweep_writes_one_cell_per_strength(local_ray, tmp_path):
    """``--strengths`` at demo shape (a few steps): 3 strengths x 2 seeds + the matched none runs are
    distinct cells whose rows carry their strengths; λ = 0 trains exactly the none run (SPEC §5)."""
    summary = interventions.main(["--preset", "demo", "--conditions", "none,forced_k_contraction",
                                  "--strengths", "forced_k_contraction.lam=0,0.05,0.2", "--seeds", "2",
                                  "--epochs", "1", "--steps-per-epoch", "2", *dirs(tmp_path, "dose")])
    assert len(summary) == 8 and (summary["status"] == "completed").all(), summary
    store = Store(str(tmp_path / "store"))
    ep, ly = assert_store_complete(store, runs=8, epochs=1, layer_rows=8 * 2 * 2)
    base = "interventions.demo.independent_xavier.L2.s{}.{}"
    ids = {base.format(s, c) for s in (11, 12) for c in ("none", "forced_k_contraction",
                                                          "forced_k_contraction.lam0", "forced_k_contraction.lam0.2")}
    assert set(ep["run_id"]) == ids  # λ = 0.05 is the default: the run id of every earlier store
    for table in (ep, ly):
        got = table.groupby(["condition", "strengths"]).size().to_dict()
        per_run = len(table) // 8
        assert got == {("none", "{}"): 2 * per_run, ("forced_k_contraction", '{"lam": 0.0}'): 2 * per_run,
                       ("forced_k_contraction", '{"lam": 0.05}'): 2 * per_run,
                       ("forced_k_contraction", '{"lam": 0.2}'): 2 * per_run}
    metrics = [c for c in ly.columns if c not in ("run_id", "condition", "strengths", "schema_version")]
    key = ["seed", "epoch", "layer"]
    zero = ly[ly["strengths"] == '{"lam": 0.0}'].sort_values(key)[metrics].reset_index(drop=True)
    none = ly[ly["condition"] == "none"].sort_values(key)[metrics].reset_index(drop=True)
    pd.testing.assert_frame_equal(zero, none)  # bit-identical, every measured column
    strong = ly[ly["strengths"] == '{"lam": 0.2}'].sort_values(key)[metrics].reset_index(drop=True)
    assert not strong[strong["epoch"] == 1]["pr_k"].equals(none[none["epoch"] == 1]["pr_k"])
    losses = ep[ep["epoch"] == 1].set_index("run_id")["train_loss"]
    for s in (11, 12):
        assert losses[base.format(s, "forced_k_contraction.lam0")] == losses[base.format(s, "none")]


def _run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_browse_lists_trials_and_history(failed_once, capsys):
    tmp, _, _ = failed_once
    experiment = str(tmp / "ray" / "failure")
    (trial_id,) = tune.ExperimentAnalysis(experiment).results_df.index

    listing = _run("-m", "sweep.browse", experiment)
    assert listing.returncode == 0, listing.stderr
    assert "1 trials" in listing.stdout and "TERMINATED" in listing.stdout
    assert trial_id in listing.stdout and "independent_xavier" in listing.stdout

    browse.main([experiment, "--trial", trial_id])  # in-process: the CLI's start-up is tested above
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    header = next(r for r in rows if "epoch" in r)
    col = header.index("epoch")
    epochs = [int(r[col]) for r in rows[rows.index(header) + 1:] if len(r) == len(header) and r[col].isdigit()]
    # epoch 0's row may be missing: the progress.csv race of test_injected_failure_is_retried_from_checkpoint
    assert epochs in ([0, 1, 2, 3], [1, 2, 3]), rows


def test_browse_latest_and_unknown_trial(failed_once, capsys):
    tmp, _, _ = failed_once
    browse.main(["--storage", str(tmp / "ray")])  # default: the latest experiment under --storage
    assert str(tmp / "ray" / "failure") in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no-such-trial"):
        browse.main([str(tmp / "ray" / "failure"), "--trial", "no-such-trial"])
    with pytest.raises(SystemExit, match="no Tune experiment"):
        browse.main(["--storage", str(tmp / "nothing")])


def test_browse_relative_paths_from_another_directory(failed_once, tmp_path):
    """Tune reads only absolute paths and URIs: browse resolves relative ones first."""
    tmp, _, _ = failed_once
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "runs").symlink_to(tmp)  # runs/ray/failure, as the default --storage runs/ray expects
    for argv in (["runs/ray/failure"], [], ["--storage", "runs/ray"]):
        out = _run("-m", "sweep.browse", *argv, cwd=elsewhere)
        assert out.returncode == 0, (argv, out.stderr)
        assert "1 trials" in out.stdout and "independent_xavier" in out.stdout, argv
    from sweep.browse import experiment_analysis  # what README.md's snippet may use

    cwd = os.getcwd()
    try:
        os.chdir(elsewhere)
        assert len(experiment_analysis("runs/ray/failure").trials) == 1
    finally:
        os.chdir(cwd)


# --- the driver dies mid-sweep; --resume finishes it ------------------------------------------


def _session_alive(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``, from /proc.

    The driver's local Ray (GCS, raylet, agents) shares the driver's process group;
    Ray's worker processes get groups of their own but stay in the driver's session.
    """
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _ppid, _pgrp, session = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:4]
        except OSError:
            continue
        if int(session) == sid and state != "Z":
            alive.append(int(entry.name))
    return alive


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the driver and everything of its local Ray (the driver leads its own session)."""
    sid = proc.pid
    try:
        os.killpg(sid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while (left := _session_alive(sid)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    assert not _session_alive(sid), "processes of the killed sweep survive"


def _trial_states(experiment: Path) -> dict[tuple[str, int, int], tuple[str, str | None]]:
    """(init, depth, seed) -> (status, latest checkpoint path) of each trial the experiment state records."""
    if not list(experiment.glob("experiment_state-*.json")):
        return {}
    try:
        trials = experiment_trials(str(experiment))
    except Exception:  # state being written: try again
        return {}
    return {(cell_of(t.config)["init"], cell_of(t.config)["depth"], cell_of(t.config)["seed"]):
            (t.status, t.checkpoint.path if t.checkpoint else None) for t in trials}


def _lose_named_checkpoint(named: str) -> None:
    """Leave what a driver killed inside Tune's snapshot lag leaves: the checkpoint the experiment state
    names is gone, a newer one is on disk. ``num_to_keep`` deletes a checkpoint once a newer one
    registers, and the state on disk may still name it; where no newer one has been written yet,
    the named one is renamed to the next index instead."""
    path = Path(named)
    if not path.exists():  # Tune deleted it already
        return
    index = {d: int(m.group(1)) for d in path.parent.iterdir() if (m := CHECKPOINT_DIR.match(d.name))}
    if any(i > index[path] and loadable(tune.Checkpoint(str(d))) for d, i in index.items()):
        shutil.rmtree(path)
    else:  # past every index on disk (a newer one may be half-written: the kill)
        path.rename(path.with_name(f"checkpoint_{max(index.values()) + 1:06d}"))
    assert not path.exists()


def test_driver_killed_then_resume(local_ray, tmp_path, capsys):
    epochs, steps = 6, 120  # long enough for the second trial to be caught running, with a checkpoint
    argv = ["--preset", "smoke", "--depths", "1", "--epochs", str(epochs), "--steps-per-epoch", str(steps),
            *dirs(tmp_path, "killed")]
    store_root = tmp_path / "store"
    experiment = tmp_path / "ray" / "killed"
    log = open(tmp_path / "driver.log", "w")  # closed in the finally below
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen([sys.executable, "-m", "sweep.baseline", *argv, "--num-cpus", "1"],
                            cwd=ROOT, stdout=log,
                            # experiment state every second, not Tune's "auto" (>= 10 s): the kill
                            # must come while the second trial still runs
                            env={**env, "RAY_AUTH_MODE": "disabled", "TUNE_GLOBAL_CHECKPOINT_S": "1"},
                            stderr=subprocess.STDOUT, start_new_session=True)
    store = Store(str(store_root))
    cells = [c for c in SMOKE.cells() if c.depth == 1]  # two trials, one after the other
    assert len(cells) == 2
    finished: set[tuple[str, int, int]] = set()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the sweep ended before it was interrupted:\n" + (
                tmp_path / "driver.log").read_text()[-3000:]
            done = set()
            if (store_root / "epochs").exists():
                ep = store.read("epochs", columns=["run_id", "status"])
                done = set(ep.loc[ep["status"] == "completed", "run_id"])
            if done:
                states = _trial_states(experiment)
                finished = {k for k, (status, _) in states.items() if status == "TERMINATED"}
                # the other trial caught with a checkpoint the state names: made to be gone below
                running = [c for k, (status, c) in states.items() if status != "TERMINATED" and c]
                if finished and running:
                    break
            time.sleep(0.3)
        else:
            pytest.fail("no trial finished within 240 s:\n" + (tmp_path / "driver.log").read_text()[-3000:])
    finally:
        _kill_session(proc)
        log.close()
    _lose_named_checkpoint(running[0])

    ep = store.read("epochs")
    completed_at_kill = set(ep.loc[ep["status"] == "completed", "run_id"])
    assert len(completed_at_kill) < len(cells), "every run finished before the kill: nothing to resume"
    reached = ep.loc[~ep["run_id"].isin(completed_at_kill), "epoch"].max()
    finished_ids = {c.run_id for c in cells if (c.init, c.depth, c.seed) in finished}
    assert finished_ids and finished_ids <= completed_at_kill
    before = files_mtimes(store_root, finished_ids)
    assert len(before) == 2 * len(finished_ids) * (epochs + 1)

    with pytest.warns(UserWarning, match="looks live"):  # the dead driver's sweep lock
        summary = baseline.main([*argv, "--resume"])
    assert "moved into its place" in capsys.readouterr().out
    errors = "\n".join(p.read_text()[-2000:] for p in experiment.rglob("error.txt"))
    assert len(summary) == len(cells) and (summary["status"] == "completed").all(), f"{summary}\n{errors}"
    assert files_mtimes(store_root, finished_ids) == before, "finished runs were rerun"
    layer_rows = sum((epochs + 1) * c.depth for c in cells)
    assert_store_complete(store, runs=len(cells), epochs=epochs, layer_rows=layer_rows)
    print(f"\nkilled with {len(finished_ids)} of {len(cells)} trials finished "
          f"({len(completed_at_kill)} completed in the store; the other at epoch {reached} of {epochs})")


def test_sweep_efficiency_is_trainer_time_over_cores_and_wall():
    """What each sweep prints at its end (no Ray needed)."""
    import pandas as pd

    from sweep.driver.summary import sweep_efficiency

    summary = pd.DataFrame({"wall_s": [30.0, 50.0, None, 40.0]})  # an errored trial reports nothing
    assert sweep_efficiency(summary, wall=80.0, cores=2) == pytest.approx(120 / 2 / 80)
    assert sweep_efficiency(summary.iloc[:0], wall=80.0, cores=2) is None
    assert sweep_efficiency(pd.DataFrame({"status": ["error"]}), wall=80.0, cores=2) is None
    assert sweep_efficiency(summary, wall=0.0, cores=2) is None
