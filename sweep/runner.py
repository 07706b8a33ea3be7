"""The Ray Tune driver shared by ``sweep.baseline``, ``sweep.interventions`` and ``sweep.demo``:
``run_sweep(preset, SweepSettings(...))``. The commands' flags are ``sweep.run_flags``, the settings
they make ``sweep.settings``; ``--dry-run`` is ``sweep.dry_run``; what a sweep prints at the end and
the status it exits with are ``sweep.summary``.

Everything is checked before Ray starts (grid, corpus, store); the corpus is
encoded once here and reaches every trial through the object store
(``tune.with_parameters``); an interrupted experiment is restored with
``Tuner.restore`` so finished trials are not rerun.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import numpy as np
import pandas as pd

from interventions import CONTROL
from model.corpus import Corpus, load_corpus
from sweep.cli import UsageError, gpu_fraction
from sweep.dry_run import dry_run
from sweep.packing import check_pack, plan_packs
from sweep.presets import Preset
from sweep.ray_env import absolute_uri, default_gpus, init_ray, node_gpus
from sweep.resume import experiment_trials, repair_checkpoints
from sweep.settings import SweepSettings
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
from sweep.summary import print_efficiency, print_summary, print_trackers, strength_tag, summarize
from sweep.trackers import export_command, make_trackers, tracker_folder


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
    from sweep.progress import EtaReporter, quiet_never_started

    quiet_never_started()  # Tune lists trials that never started as failures to fetch metrics
    return EtaReporter(
        epochs_per_trial=preset.train.epochs, n_trials=n_trials, tables=tables,
        parameter_columns=cell, max_column_length=24,
        metric_columns={"epoch": "epoch", "val_loss": "val loss", "qk_alignment": "align",
                        "attn_entropy": "entropy", "status": "status"},
        max_report_frequency=15, sort_by_metric=False,
    )


def trial_name(config: dict) -> str:
    """Tune's name of the trial of ``config`` (its ``trial_name_creator``; the store's ``runs`` table has it)."""
    c = cell_of(config)
    tag = strength_tag(c.get("strengths"))
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
    tag = strength_tag(c.get("strengths"))[:12]
    if "pack" in c:
        first = runs_of(trial.config)[0]
        return (f"{trial.trial_id}-{c['condition'][:8]}{tag}-L{c['depth']}-pack{c['pack']}-"
                f"{first.init[:8]}-s{first.seed}")
    return f"{trial.trial_id}-{c['condition'][:8]}{tag}-{c['init'][:8]}-L{c['depth']}-s{c['seed']}"


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
                             **({"hooks": dict(settings.hooks)} if settings.hooks else {})},
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


