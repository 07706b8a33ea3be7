"""The Tune trainable: one run of a sweep, or a pack of them, as its run spec says.

It decodes the run spec (``sweep.trial.spec``: checked once in the driver, read here
without re-checking), calls the framework-free ``model.trainer.Trainer`` (one
run, or a pack whose every member's rows are its own run's), writes each
epoch's rows to the Parquet store, reports scalars (only) to Tune with a
checkpoint, and resumes from ``tune.get_checkpoint()``. The store's writes are
idempotent per (run, epoch), so an epoch replayed after a crash overwrites its
own rows.
"""

from __future__ import annotations

import importlib
import logging
import pickle
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from interventions import make_intervention
from model.corpus import Corpus
from model.recipe import set_tf32
from model.report import EpochReport
from model.stack import Member
from model.trainer import Trainer
from sweep.hooks.config import hooks_of
from sweep.store import Store
from sweep.trial.failfast import report_attempt_error
from sweep.trial.spec import RunIdentity, decode, plugins_of

STATE_FILE = "trainer.pt"
#: what the checkpoint of epoch 0 holds: a trainer just built (seeded weights, sampler and
#: optimiser untouched, the probe and validation change nothing) is that state, so a pack of 36
#: at paper width does not write ~0.8 GB before its first step
INITIAL = {"epoch": 0, "initial": True}


def layer_mean(rows: list[dict[str, Any]], column: str) -> float | None:
    values = [r[column] for r in rows if r.get(column) is not None]
    return sum(values) / len(values) if values else None


def tune_metrics(report: EpochReport) -> dict[str, Any]:
    """The scalars Tune keeps (result.json, TensorBoard, the driver's table)."""
    run = report.run
    return {
        "epoch": report.epoch,
        "status": run["status"],
        "val_loss": run["val_loss"],
        "train_loss": run["train_loss"],
        "tokens_per_s": run["tokens_per_s"],
        "wall_s": run["wall_s"],  # the trainer's own training time so far (the sweep's efficiency)
        "qk_alignment": layer_mean(report.layers, "qk_alignment"),
        "pr_q": layer_mean(report.layers, "pr_q"),
        "pr_k": layer_mean(report.layers, "pr_k"),
        "attn_entropy": layer_mean(report.layers, "attn_entropy"),
    }


def _device() -> str:
    # Logical GPUs (tests, CPU-only torch) get the CPU: Ray counts, torch decides.
    return "cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"


class CheckpointError(RuntimeError):
    """A Tune checkpoint that is not plain tensors and containers (and so is not loaded)."""


def load_state(path: Path) -> dict[str, Any]:
    """A trainer state saved by ``train_cell``, loaded with ``weights_only=True``.

    Anyone who can write to a shared ``--storage`` could plant a pickle that runs
    code on load; only tensors, numbers, strings and containers are accepted.
    """
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"refusing checkpoint {path}: it holds more than weights ({first})") from None


def restore(trainer: Trainer) -> int:
    """Load the trial's Tune checkpoint into ``trainer``, if there is one; the epoch it holds
    (stored and reported already), else -1. The checkpoint of epoch 0 is a marker (``INITIAL``): a trainer just built is that state already."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return -1
    try:
        with checkpoint.as_directory() as d:
            state = load_state(Path(d) / STATE_FILE)
            if state == INITIAL:
                return 0
            trainer.load_state_dict(state)
    except Exception as exc:  # an unloadable checkpoint: Tune's retries, never fail-fast (sweep.trial.failfast)
        exc.qkgeom_checkpoint = True  # type: ignore[attr-defined]
        raise
    return trainer.epoch


def write_rows(store: Store, run: RunIdentity, report: EpochReport) -> None:
    """One run's rows of one epoch (idempotent per (run, epoch))."""
    identity = run.row()
    if report.layers:
        store.write_layers([{**identity, "epoch": report.epoch, **row} for row in report.layers])
    store.write_epoch({**identity, "epoch": report.epoch, **report.run, "time": datetime.now(UTC)})


def report_to_tune(trainer: Trainer, metrics: dict[str, Any], checkpoint: bool) -> None:
    """``tune.report`` the epoch's scalars, with the trainer's whole state when ``checkpoint`` (at
    epoch 0 the ``INITIAL`` marker: the initial state is rebuilt from the seeds, not saved)."""
    if not checkpoint:
        tune.report(metrics)
        return
    with tempfile.TemporaryDirectory() as d:
        torch.save(INITIAL if trainer.epoch == 0 else trainer.state_dict(), Path(d) / STATE_FILE)
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))


def _warm_cuda() -> None:
    """Create the CUDA context in a thread while this one imports and builds the trainer (both
    mostly CPU); the first CUDA call waits for it (``torch.cuda``'s lazy-init lock)."""
    if ray.get_gpu_ids() and torch.cuda.is_available():
        threading.Thread(target=torch.cuda.init, name="cuda-init", daemon=True).start()
        importlib.import_module("torch._dynamo")  # torch.optim imports it on first use (~2 s): now, beside it


def train_cell(config: dict[str, Any], corpus: Corpus) -> None:
    """Tune function trainable: one run, or a pack trained as one batched model whose every
    member's rows go to the store as its own run's. ``config``: ``TrialSpec.to_config()`` (and,
    for tests and benchmarks, ``hooks``: ``sweep.hooks``, called after each epoch's rows are written).

    Tune gets one report per epoch, after every member still training has written that epoch's rows,
    with one checkpoint of the whole trial: a retry resumes every member from the same epoch, and an
    epoch replayed after a crash overwrites each member's own rows. An attempt that raises reports
    its error's signature first (``sweep.trial.failfast``), so that the driver stops retrying an error that
    repeats; an unloadable checkpoint is left to Tune's retries.
    """
    try:
        _train_cell(config, corpus)
    except Exception as exc:
        if not getattr(exc, "qkgeom_checkpoint", False):  # set by ``restore``
            report_attempt_error(exc)
        raise


def _train_cell(config: dict[str, Any], corpus: Corpus) -> None:
    hooks = hooks_of(config)  # tests' and benchmarks' seams (sweep.hooks); none in a user's sweep
    _warm_cuda()
    plugins_of(config).load()  # before the spec's names meet the registries
    spec = decode(config, corpus.vocab_size)
    for noisy in ("ray.train", "ray.tune"):  # one INFO line per checkpoint otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    torch.set_num_threads(max(1, int(spec.options.cpus_per_trial)))
    device = _device()
    set_tf32(spec.options.tf32, torch.device(device))  # --tf32: where the run starts (sweep.trial.gpu_flags)
    trainer = Trainer(spec.model, [Member(r.init, r.seed, spec.run_train(r, device)) for r in spec.runs], corpus,
                      lambda: make_intervention(spec.condition, **dict(spec.strengths)),  # SPEC §5 strengths
                      graphs=spec.options.graphs)
    for hook in hooks:
        hook.built()
    restored_epoch = restore(trainer)
    store = Store(spec.options.store)
    every = spec.options.checkpoint_every
    # members still training: each reports every epoch until it completes or diverges
    waiting = {i for i, s in enumerate(trainer.statuses) if s == "running"}
    epoch_reports: dict[int, EpochReport] = {}
    last: dict[str, dict[str, Any]] = {str(i): {"status": s} for i, s in enumerate(trainer.statuses)}

    def on_epoch(i: int, report: EpochReport) -> None:
        nonlocal waiting
        if report.epoch <= restored_epoch:  # the trainer re-measures epoch 0 when restored there
            return
        write_rows(store, spec.runs[i], report)
        epoch_reports[i] = report
        last[str(i)] = tune_metrics(report)
        if waiting - set(epoch_reports):
            return  # other members' rows of this epoch still to come
        extra: dict[str, Any] = {}
        for hook in hooks:
            extra.update(hook.before_report(report.epoch))
        metrics = tune_metrics(report) if len(spec.runs) == 1 else pack_metrics(epoch_reports, last)
        waiting = {j for j, r in epoch_reports.items() if r.run["status"] == "running"}
        epoch_reports.clear()
        report_to_tune(trainer, {**metrics, **extra}, checkpoint=not report.epoch % every or not waiting)

    trainer.run(on_epoch)


def pack_metrics(reports: dict[int, EpochReport], members: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A pack's scalars for Tune: the means over this epoch's reports, the pack's status, and each
    member's own last metrics under ``members/<index>/`` (what ``summarize`` and ``sweep.browse`` read)."""
    per = [tune_metrics(r) for r in reports.values()]
    statuses = [m["status"] for m in members.values()]
    status = ("running" if "running" in statuses else "diverged" if "diverged" in statuses else "completed")
    out: dict[str, Any] = {"epoch": max(r.epoch for r in reports.values()), "status": status,
                           "members_running": statuses.count("running")}
    for key in ("val_loss", "train_loss", "tokens_per_s", "qk_alignment", "pr_q", "pr_k", "attn_entropy"):
        values = [m[key] for m in per if m[key] is not None]
        out[key] = sum(values) / len(values) if values else None
    out["members"] = members
    return out
