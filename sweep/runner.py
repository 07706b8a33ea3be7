"""The Ray Tune driver shared by ``sweep.baseline``, ``sweep.interventions`` and ``sweep.demo``:
``run_sweep(preset, SweepSettings(...))``.

Everything is checked before Ray starts (grid, corpus, store); the corpus is
encoded once here and reaches every trial through the object store
(``tune.with_parameters``); an interrupted experiment is restored with
``Tuner.restore`` so finished trials are not rerun.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from interventions import CONTROL
from model.corpus import Corpus, load_corpus
from model.plugins import Plugins, add_plugin_flag
from sweep.cli import (
    DEFAULT_STORE,
    PackRequest,
    UsageError,
    add_pack_flags,
    at_least,
    gpu_fraction,
    local_ray_sizes,
    pack_request,
    plain_name,
)
from sweep.faults import FaultInjection, add_fault_flags, fault_from_args
from sweep.gpu_flags import add_gpu_flags, gpu_options
from sweep.options import TrialOptions
from sweep.packing import check_pack, describe_plan, gpu_share, plan_frame, plan_packs
from sweep.presets import Preset
from sweep.ray_env import absolute_uri, default_gpus, init_ray, node_gpus
from sweep.resume import experiment_trials, repair_checkpoints
from sweep.spec import (
    LEGACY_VERSION,
    SPEC_VERSION,
    TrialSpec,
    cell_of,
    check_versions,
    decode,
    runs_of,
)
from sweep.store import Store, StoreError, store_id, sweep_lock
from sweep.trackers import (
    add_tracker_flags,
    check_trackers,
    export_command,
    make_trackers,
    tracker_folder,
    trackers_from_args,
)


def add_run_flags(p: argparse.ArgumentParser, default_name: str) -> None:
    """Flags for where results go and how trials are placed."""
    g = p.add_argument_group("storage and resources")
    g.add_argument("--store", default=DEFAULT_STORE, help="Parquet store root: a path or s3://bucket/prefix")
    g.add_argument("--storage", default="runs/ray", help="Tune storage: a path or s3://bucket/prefix")
    g.add_argument("--name", help=f"experiment name, a plain name without '/' (default {default_name})")
    g.add_argument("--gpus-per-trial", type=float,
                   help="GPUs per trial, 0..one node's GPUs; fractions pack trials onto a GPU "
                   "(default with GPUs: 1 under --pack auto, 0.25 with an explicit --pack; else 0)")
    g.add_argument("--cpus-per-trial", type=float, default=1.0, help="CPUs per trial (> 0; torch threads)")
    g.add_argument("--max-concurrent", type=int, help="most trials at once, >= 1 (default: as many as "
                   "resources allow)")
    g.add_argument("--max-failures", type=int, default=3,
                   help="retries of a failed trial from its checkpoint; -1 = retry forever")
    g.add_argument("--retry-deterministic", action="store_true",
                   help="retry a trial even when its attempt fails with the same error as the attempt before "
                   "(default: not retried again: an error in the code repeats; see sweep/failfast.py)")
    g.add_argument("--checkpoint-every", type=int, default=1, help="epochs between Tune checkpoints (>= 1)")
    g.add_argument("--address", help="join a running Ray cluster (e.g. auto); default: start a local one")
    g.add_argument("--num-cpus", type=int, help="CPUs of the local Ray instance, >= 1 (default: all)")
    g.add_argument("--num-gpus", type=int, help="GPUs of the local Ray instance, >= 0 (default: the CUDA "
                   "devices here); logical ones work for planning and tests (trials then train on the CPU)")
    g.add_argument("--progress-tables", action="store_true",
                   help="print Tune's full trial status table at every report (default: one progress line)")
    g.add_argument("--resume", action="store_true",
                   help="continue an interrupted experiment (also automatic when one exists)")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA only)")
    add_pack_flags(g)
    add_tracker_flags(g)
    add_plugin_flag(g)
    add_fault_flags(g)  # tests: inject one crash
    add_gpu_flags(p)  # --amp, --graphs, --tf32 (sweep.gpu_flags)


@dataclass(frozen=True)
class SweepSettings:
    """How a sweep runs besides its grid: the experiment, the trials' options, the Ray it uses."""

    name: str  # the Tune experiment: a plain name, one folder under the storage
    trial: TrialOptions  # store, storage, per-trial resources, checkpoints
    address: str | None = None  # a running Ray cluster to join (e.g. auto); None: start a local one
    num_cpus: int | None = None  # CPUs of the local Ray (None: all)
    max_concurrent: int | None = None  # most trials at once (None: as many as resources allow)
    max_failures: int = 3  # retries of a failed trial from its checkpoint; -1 = retry forever
    resume: bool = False  # insist on continuing an experiment (continuing is automatic when one exists)
    num_gpus: int | None = None  # GPUs of the local Ray (None: the CUDA devices here)
    pack: PackRequest = "auto"  # runs per trial: M, or auto (a whole shape with GPUs, else 1)
    dry_run: bool = False  # print the plan, train nothing
    fault: FaultInjection | None = None  # crash tests only (``sweep.faults``): not a user option
    plugins: Plugins = Plugins()  # --plugin modules: every trial imports them first
    trackers: tuple[str, ...] = ()  # --tracker: experiment trackers every run is logged to, live
    tracker_dir: str | None = None  # --tracker-dir: their local files (None: beside a local store)
    retry_deterministic: bool = False  # --retry-deterministic: retry an error that repeats (no fail-fast)
    name_given: bool = True  # --name was given (it wins over MLFLOW_EXPERIMENT_NAME / WANDB_RUN_GROUP)
    progress_tables: bool = False  # --progress-tables: Tune's status table at every report, not one line
    #: a round of ``--seeds auto`` (``sweep.sequential``): an experiment whose newest state holds other
    #: runs than this grid's gets a new experiment state in the same folder instead of being resumed
    extend: bool = False

    def __post_init__(self) -> None:
        """Each value on its own, named by its flag."""
        plain_name("--name", self.name)  # a folder of the storage: no '/' or '..'
        at_least("--max-concurrent", self.max_concurrent, 1)
        at_least("--max-failures", self.max_failures, -1, " (-1 = retry forever)")
        local_ray_sizes(self.address, self.num_cpus, self.num_gpus)
        pack_request("--pack", self.pack)
        check_trackers("--tracker", self.trackers)  # known, and its package installed


def settings_from_args(args: argparse.Namespace, default_name: str) -> SweepSettings:
    """The storage and resource flags as ``SweepSettings`` (checked as they are built)."""
    name = args.name or default_name
    trial = TrialOptions(
        store=args.store, storage=args.storage, cpus_per_trial=args.cpus_per_trial,
        gpus_per_trial=args.gpus_per_trial, checkpoint_every=args.checkpoint_every, compile=args.compile,
        **gpu_options(args),
    )
    return SweepSettings(name, trial, args.address, args.num_cpus, args.max_concurrent, args.max_failures,
                         args.resume, args.num_gpus, pack_request("--pack", args.pack), args.dry_run,
                         fault_from_args(args, name), Plugins.from_args(args), trackers_from_args(args),
                         args.tracker_dir, args.retry_deterministic, args.name is not None,
                         args.progress_tables)


def prepare_corpus(preset: Preset) -> Corpus:
    """Encode once in the driver (checked: one window of context + 1 in both splits);
    plain arrays so Ray shares them zero-copy."""
    corpus = load_corpus(preset.corpus, preset.data_dir, context=preset.model.context)
    return replace(corpus, train=np.ascontiguousarray(corpus.train), val=np.ascontiguousarray(corpus.val))


def _reporter(preset: Preset, n_trials: int, packed: bool, tables: bool = False):
    names = ["init", "depth", "seed"]
    if preset.conditions != (CONTROL,):
        names.insert(0, "condition")
    if packed:  # a pack's init and seed columns list its members'
        names.append("pack")
    if preset.strengths:
        names.append("strengths")
    cell = {f"spec/cell/{n}": n for n in names}
    from sweep.progress import EtaReporter

    return EtaReporter(
        epochs_per_trial=preset.train.epochs, n_trials=n_trials, tables=tables,
        parameter_columns=cell, max_column_length=24,
        metric_columns={"epoch": "epoch", "val_loss": "val loss", "qk_alignment": "align",
                        "attn_entropy": "entropy", "status": "status"},
        max_report_frequency=15, sort_by_metric=False,
    )


def _strength_tag(strengths: dict[str, float]) -> str:
    """``-lam0.2`` for a cell away from its condition's default strengths (SPEC §5), else ``""``."""
    return "".join(f"-{k}{v:g}" for k, v in sorted((strengths or {}).items()))


def trial_name(config: dict) -> str:
    """Tune's name of the trial of ``config`` (its ``trial_name_creator``; the store's ``runs`` table has it)."""
    c = cell_of(config)
    tag = _strength_tag(c.get("strengths"))
    if "pack" in c:
        first = runs_of(config)[0]
        return f"{c['condition']}{tag}-L{c['depth']}-pack{c['pack']}-{first.init}-s{first.seed}"
    return f"{c['condition']}{tag}-{c['init']}-L{c['depth']}-s{c['seed']}"


def _trial_name(trial) -> str:
    return trial_name(trial.config)


def record_runs(store: Store, name: str, configs: list[dict], vocab_size: int) -> None:
    """Write the store's ``runs`` row of every run of the sweep's trials (SPEC §6): its experiment,
    trial, pack, model and recipe (idempotent: a resumed sweep rewrites the same rows)."""
    for config in configs:
        for row in decode(config, vocab_size).run_rows(name, trial_name(config)):
            store.write_run(row)


def _trial_dirname(trial) -> str:
    c = cell_of(trial.config)
    tag = _strength_tag(c.get("strengths"))[:12]
    if "pack" in c:
        first = runs_of(trial.config)[0]
        return (f"{trial.trial_id}-{c['condition'][:8]}{tag}-L{c['depth']}-pack{c['pack']}-"
                f"{first.init[:8]}-s{first.seed}")
    return f"{trial.trial_id}-{c['condition'][:8]}{tag}-{c['init'][:8]}-L{c['depth']}-s{c['seed']}"


def dry_run(preset: Preset, settings: SweepSettings) -> pd.DataFrame:
    """Print the plan ``run_sweep`` would run; trains nothing, writes nothing.

    Packs are decided from the GPUs a sweep would see: those of the running Ray or the cluster at
    ``--address`` / ``RAY_ADDRESS`` (joined for the count, then left), else of this machine
    (``--num-gpus`` or what it has), which a local run would give its own Ray: no Ray is started.
    """
    import ray

    trial = settings.trial
    if not (ray.is_initialized() or settings.address or os.environ.get("RAY_ADDRESS")):
        gpus = node_gpus(settings.num_gpus)
        gpu_fraction("--gpus-per-trial", trial.gpus_per_trial, gpus)
        gpu = gpu_share(trial.gpus_per_trial, settings.pack, gpus)
    else:
        started = init_ray(settings.address, settings.num_cpus, settings.num_gpus)
        try:
            gpu_fraction("--gpus-per-trial", trial.gpus_per_trial, node_gpus())
            gpus = ray.cluster_resources().get("GPU", 0.0)
            gpu = default_gpus(trial.gpus_per_trial, settings.pack)
        finally:
            if started:
                ray.shutdown()
    packs, notes = plan_packs(preset.cells(), settings.pack, gpus)
    resources = {"cpu": trial.cpus_per_trial, "gpu": gpu}
    print(describe_plan(settings.name, preset, packs, notes, settings.pack, gpus, resources))
    print(f"[{settings.name}] dry run: nothing trained, nothing written")
    sys.stdout.flush()
    return plan_frame(packs)


def run_sweep(preset: Preset, settings: SweepSettings) -> pd.DataFrame:
    """Run (or resume) the preset's grid on Ray Tune; returns the per-trial summary.

    Everything is checked before Ray starts (a Ray already running is used and left running).
    """
    name, trial = settings.name, settings.trial
    gpu_fraction("--gpus-per-trial", trial.gpus_per_trial,
                 None if settings.address else node_gpus(settings.num_gpus))
    cells = preset.cells()
    check_pack("--pack", settings.pack, cells)
    if settings.dry_run:
        return dry_run(preset, settings)
    store_uri, storage = absolute_uri(trial.store), absolute_uri(trial.storage)
    corpus = prepare_corpus(preset)  # before any folder or bucket object is created
    store = Store(store_uri)
    try:
        tune_storage = Store(storage)
    except StoreError as exc:
        raise StoreError(f"Tune storage (--storage): {exc}") from None
    from ray import tune

    path = f"{storage.rstrip('/')}/{name}"
    restorable = tune.Tuner.can_restore(path)  # reads the experiment state; needs no Ray
    if settings.resume and not restorable:
        raise UsageError(f"--resume: no restorable experiment at {path}")
    if restorable:  # a run spec version this code cannot read stops here, before anything restarts
        trials = experiment_trials(path)
        version = check_versions([t.config for t in trials], path)
        if settings.extend and {r.run_id for t in trials for r in runs_of(t.config)} != {c.run_id for c in cells}:
            restorable = False  # a new round: its trials start a new experiment state in the folder
            print(f"[{name}] a new round of the experiment at {path}: {len(cells)} runs added")
    store.check_writable()  # a clear error now rather than in every trial
    if storage != store_uri:  # Tune's storage too, before Ray starts (a missing bucket, a typo)
        try:
            tune_storage.check_writable()
        except StoreError as exc:
            raise StoreError(f"Tune storage (--storage): {exc}") from None
    print(f"[{name}] {len(cells)} runs ({preset.sweep}, preset {preset.name}); corpus {corpus.name}: "
          f"{corpus.vocab_size} symbols, {len(corpus.train):,} train tokens")
    if preset.note:
        print(f"[{name}] note: {preset.note}")

    if restorable:  # a checkpoint the state names but Tune deleted (sweep/resume.py), before Ray starts
        for line in repair_checkpoints(trials):
            print(f"[{name}] {line}")

    import ray

    live = None
    started = init_ray(settings.address, settings.num_cpus, settings.num_gpus)
    try:
        if settings.trackers:  # reached on their own threads: a hung one costs at most a line here
            from sweep.trackers.live import Live

            trackers = make_trackers(settings.trackers, tracker_folder(settings.tracker_dir, store_uri),
                                     folder_given=settings.tracker_dir is not None,
                                     name_given=settings.name_given)
            live = Live(store, trackers, store_id(store), prefix=f"[{name}] ")
            live.started()
        gpu_fraction("--gpus-per-trial", trial.gpus_per_trial, node_gpus())  # the joined cluster's nodes
        packs, notes = plan_packs(cells, settings.pack, ray.cluster_resources().get("GPU", 0.0))
        for note in notes:
            print(f"[{name}] note: {note}")
        if any(p.size > 1 for p in packs) and not restorable:
            print(f"[{name}] {len(cells)} runs packed into {len(packs)} trials "
                  f"(--pack {settings.pack}; --dry-run lists the members)")
        from sweep.failfast import FailFast
        from sweep.trackers.live import StoreFollower, following
        from sweep.trial import train_cell

        options = replace(trial, store=store_uri, storage=storage,
                          gpus_per_trial=default_gpus(trial.gpus_per_trial, settings.pack))
        trainable = tune.with_resources(tune.with_parameters(train_cell, corpus=corpus),
                                        {"cpu": options.cpus_per_trial, "gpu": options.gpus_per_trial})
        # Tune's classic CLIReporter (the columns we choose) is only used with the old output engine.
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        # num_to_keep bounds disk use; the snapshots it forces are cheap next to an epoch.
        os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
        if restorable:
            print(f"[{name}] resuming the experiment at {path}: finished trials are kept, and so are the packs "
                  "it started with")
            if version < SPEC_VERSION:
                print(f"[{name}] the experiment was started before the run spec (version {LEGACY_VERSION}): "
                      "its trials read their old configs")
            tuner = tune.Tuner.restore(path, trainable=trainable, resume_errored=True)
            configs = [t.config for t in trials]
        else:
            specs = [TrialSpec.of(p, options, corpus.vocab_size, settings.plugins).to_config() for p in packs]
            configs = [{"spec": s} for s in specs]
            tuner = tune.Tuner(
                trainable,
                param_space={"spec": tune.grid_search(specs),
                             **({"fault": settings.fault.to_config()} if settings.fault else {})},
                # reuse_actors: a trial's worker keeps its imports (torch, ray, the plugins);
                # a fresh actor per trial cost ~6 s of CPU each (LOG.md). Results are identical.
                tune_config=tune.TuneConfig(max_concurrent_trials=settings.max_concurrent, reuse_actors=True,
                                            trial_name_creator=_trial_name,
                                            trial_dirname_creator=_trial_dirname),
                run_config=tune.RunConfig(
                    name=name, storage_path=storage, verbose=1,
                    progress_reporter=_reporter(preset, len(packs), any(p.size > 1 for p in packs),
                                                settings.progress_tables),
                    failure_config=tune.FailureConfig(max_failures=settings.max_failures),
                    checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                    # sends each trial's stored rows to --tracker's trackers (none: does nothing)
                    callbacks=[StoreFollower(), FailFast(f"[{name}] ", not settings.retry_deterministic)],
                ),
            )
        record_runs(store, name, configs, corpus.vocab_size)
        cores = ray.cluster_resources().get("CPU", 0.0)
        t0 = time.perf_counter()
        with sweep_lock(store, name), following(live):
            results = tuner.fit()
        wall = time.perf_counter() - t0
        if live:  # what no callback sent (trials finished before a resume, a failed read); then close
            live.finish([r.config for r in results])
        summary = summarize(results)
        print_summary(name, summary, wall, store_uri, path, trials=len(results))
        print_efficiency(name, summary, wall, cores)
        errored = int((summary["status"] == "error").sum())
        if errored:
            print(f"[{name}] {errored} of {len(summary)} runs ended in error (the tracebacks above); the other "
                  "runs' rows are in the store; the command exits 1", flush=True)
        if live:
            print_trackers(name, live, len(summary), export_command(trial.store, settings.trackers,
                                                                  settings.tracker_dir))
        return summary
    finally:
        if live:  # an error or an interrupt before ``finish``: close the trackers anyway
            live.close()
        if started:
            ray.shutdown()


def exit_status(summary: pd.DataFrame | None) -> int:
    """A sweep command's exit status: 1 when a run ended in error (a lost run), else 0. ``--seeds
    auto`` returns its claims, marked ``attrs["errored"]`` when a round lost a run."""
    if summary is not None and summary.attrs.get("errored"):
        return 1
    if summary is None or "status" not in summary:
        return 0
    return int(bool((summary["status"] == "error").any()))


def summarize(results) -> pd.DataFrame:
    """One row per run (a pack's members each get their own): its cell, status and last metrics."""
    rows = []
    for r in results:
        m = r.metrics or {}
        runs = runs_of(r.config)
        strengths = cell_of(r.config).get("strengths")
        for i, run in enumerate(runs):
            own = (m.get("members") or {}).get(str(i), m) if len(runs) > 1 else m
            wall_s = own.get("wall_s")
            rows.append({"condition": run.condition + _strength_tag(strengths), "init": run.init,
                         "depth": run.depth, "seed": run.seed,
                         "status": "error" if r.error else own.get("status", "?"),
                         "epoch": own.get("epoch"), "val_loss": own.get("val_loss"),
                         "qk_alignment": own.get("qk_alignment"), "attn_entropy": own.get("attn_entropy"),
                         # a pack's members share one trainer's time: each carries its share
                         "wall_s": None if wall_s is None else wall_s / len(runs)})
    return pd.DataFrame(rows).sort_values(["condition", "init", "depth", "seed"], ignore_index=True)


def sweep_efficiency(summary: pd.DataFrame, wall: float, cores: float) -> float | None:
    """The share of the machine the sweep turned into training: the trainers' own time (steps only;
    probes, validation, store writes, checkpoints and Ray excluded) / cores ÷ the sweep's wall time."""
    train = pd.to_numeric(summary.get("wall_s"), errors="coerce").dropna() if "wall_s" in summary else None
    if train is None or train.empty or wall <= 0 or cores <= 0:
        return None
    return float(train.sum()) / cores / wall


def print_efficiency(name: str, summary: pd.DataFrame, wall: float, cores: float) -> None:
    ratio = sweep_efficiency(summary, wall, cores)
    if ratio is None:
        return
    train = float(pd.to_numeric(summary["wall_s"], errors="coerce").sum())
    print(f"[{name}] efficiency {ratio:.2f}: the trainers' own training time {train:.0f} s / {cores:g} cores "
          f"over the sweep's {wall:.0f} s (the rest: per-epoch probes and validation, store writes, "
          "checkpoints, trial start, Ray, other programs)", flush=True)


def print_trackers(name: str, live, runs: int, export: str) -> None:
    """One line per tracker: where its runs are (the command that opens or syncs them), or that it
    failed, why, and the ``sweep.store export`` command that sends what it missed."""
    failed = live.failed()
    for tracker in live.trackers:
        if tracker.name in failed:
            print(f"{tracker.name + ':':<12} FAILED ({failed[tracker.name]}): the runs are in the store; "
                  f"send what it missed with: {export}")
        else:
            print(f"{tracker.name + ':':<12} {runs} runs, experiment {name}: {tracker.where()}")
    sys.stdout.flush()


def print_summary(name: str, summary: pd.DataFrame, wall: float, store: str, experiment: str,
                  trials: int | None = None) -> None:
    shown = summary.copy().drop(columns="wall_s", errors="ignore")
    if shown["condition"].nunique() == 1:
        shown = shown.drop(columns="condition")
    packed = f"{len(summary)} runs in {trials} trials" if trials not in (None, len(summary)) else None
    print(f"\n[{name}] {packed or f'{len(summary)} trials'} in {wall:.0f} s; status: "
          + ", ".join(f"{k} {v}" for k, v in summary["status"].value_counts().items()))
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"\nstore:       {store}")
    print(f"experiment:  {experiment}   (browse: python -m sweep.browse {experiment})")
    print(f"tensorboard: tensorboard --logdir {experiment}")
    sys.stdout.flush()
