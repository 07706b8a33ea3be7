"""The Tune trainable: one (init, depth, seed, condition) cell of a sweep, or a pack of them.

It converts the Tune config, calls the framework-free ``model.train.Trainer``
(a pack: ``model.pack.PackedTrainer``, every member's rows as its own run's),
writes each epoch's rows to the Parquet store, reports scalars (only) to Tune
with a checkpoint, and resumes from ``tune.get_checkpoint()``. The store's
writes are idempotent per (run, epoch), so an epoch replayed after a crash
overwrites its own rows.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import tempfile
from pathlib import Path
from typing import Any

import ray
import torch
from ray import tune

from interventions import make_intervention
from model.corpus import Corpus
from model.plugins import load_plugins
from model.train import EpochReport, Trainer
from sweep.options import TrialOptions
from sweep.packing import Pack, is_pack_config
from sweep.presets import Cell
from sweep.store import Store

STATE_FILE = "trainer.pt"
FAILURE_MARKER = ".injected_failure_done"


def layer_mean(rows: list[dict[str, Any]], column: str) -> float | None:
    values = [r[column] for r in rows if r.get(column) is not None]
    return sum(values) / len(values) if values else None


def tune_metrics(report: EpochReport) -> dict[str, Any]:
    """The scalars Tune keeps (result.json, TensorBoard, the driver's table)."""
    run = report.run
    return {
        "epoch": report.epoch,
        "status": report.status,
        "val_loss": run["val_loss"],
        "train_loss": run["train_loss"],
        "tokens_per_s": run["tokens_per_s"],
        "wall_s": run["wall_s"],  # the trainer's own training time so far (the sweep's efficiency)
        "qk_alignment": layer_mean(report.layers, "qk_alignment"),
        "pr_q": layer_mean(report.layers, "pr_q"),
        "pr_k": layer_mean(report.layers, "pr_k"),
        "attn_entropy": layer_mean(report.layers, "attn_entropy"),
        # where the trial ran: lets tests (and people) see placement and GPU packing
        "node_id": ray.get_runtime_context().get_node_id(),
        "gpu_ids": ",".join(map(str, ray.get_gpu_ids())),
    }


def _device() -> str:
    # Logical GPUs (tests, CPU-only torch) get the CPU: Ray counts, torch decides.
    return "cuda" if ray.get_gpu_ids() and torch.cuda.is_available() else "cpu"


def _maybe_inject_failure(epoch: int, options: TrialOptions) -> None:
    """Test-only: kill this worker process once, after epoch k's rows are written
    but before its checkpoint is reported, so the retry replays epoch k."""
    if options.fail_after_epoch is None or epoch != options.fail_after_epoch:
        return
    marker = Path(options.failure_marker_dir) / f"{tune.get_context().get_trial_id()}{FAILURE_MARKER}"
    if marker.exists():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    os.kill(os.getpid(), signal.SIGKILL)


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


def restore(trainer: Any) -> int:
    """Load the trial's Tune checkpoint into ``trainer`` (a ``Trainer`` or ``PackedTrainer``), if
    there is one; the epoch it holds (stored and reported already), else -1."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return -1
    with checkpoint.as_directory() as d:
        trainer.load_state_dict(load_state(Path(d) / STATE_FILE))
    return trainer.epoch


def write_rows(store: Store, identity: dict[str, Any], report: EpochReport) -> None:
    """One run's rows of one epoch (idempotent per (run, epoch))."""
    if report.layers:
        store.write_layers([{**identity, "epoch": report.epoch, **row} for row in report.layers])
    store.write_epoch({**identity, "epoch": report.epoch, **report.run})


def report_to_tune(trainer: Any, metrics: dict[str, Any], checkpoint: bool) -> None:
    """``tune.report`` the epoch's scalars, with the trainer's whole state when ``checkpoint``."""
    if not checkpoint:
        tune.report(metrics)
        return
    with tempfile.TemporaryDirectory() as d:
        torch.save(trainer.state_dict(), Path(d) / STATE_FILE)
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(d))


def train_cell(config: dict[str, Any], corpus: Corpus) -> None:
    """Tune function trainable. ``config = {"cell": Pack.to_config(), "options": TrialOptions.to_config()}``
    (for one run ``Pack.to_config()`` is ``Cell.to_config()``)."""
    options = TrialOptions.from_config(config["options"])
    load_plugins(options.plugins)  # before the cell's names are checked against the registries
    for noisy in ("ray.train", "ray.tune"):  # one INFO line per checkpoint otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    torch.set_num_threads(max(1, int(options.cpus_per_trial)))
    if is_pack_config(config["cell"]):
        train_pack(Pack.from_config(config["cell"]), options, corpus)
        return
    cell = Cell.from_config(config["cell"])
    preset = cell.preset
    intervention = make_intervention(cell.intervention, **dict(cell.strengths))  # SPEC §5 strengths
    trainer = Trainer(preset.model_config(cell.depth, corpus.vocab_size),
                      preset.train_config(cell.seed, _device(), options.compile),
                      corpus, cell.init, cell.seed, intervention)
    restored_epoch = restore(trainer)
    store = Store(options.store)
    identity = cell.identity()
    every = options.checkpoint_every

    def on_epoch(report: EpochReport) -> None:
        if report.epoch <= restored_epoch:  # Trainer.run re-measures epoch 0 when restored there
            return
        write_rows(store, identity, report)
        _maybe_inject_failure(report.epoch, options)
        report_to_tune(trainer, tune_metrics(report), checkpoint=not report.epoch % every
                       or report.status != "running")

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
    out["node_id"], out["gpu_ids"] = per[0]["node_id"], per[0]["gpu_ids"]
    out["members"] = members
    return out


def train_pack(pack: Pack, options: TrialOptions, corpus: Corpus) -> None:
    """Train a pack's members as one batched model; each member's rows go to the store as its own run's.

    Tune gets one report per epoch, after every member still training has written that epoch's rows,
    with one checkpoint of the whole pack: a retry resumes every member from the same epoch, and an
    epoch replayed after a crash overwrites each member's own rows.
    """
    from model.pack import Member, PackedTrainer

    preset = pack.cells[0].preset
    device = _device()
    members = [Member(c.init, c.seed, preset.train_config(c.seed, device, options.compile)) for c in pack.cells]
    trainer = PackedTrainer(preset.model_config(pack.depth, corpus.vocab_size), members, corpus,
                            lambda: make_intervention(pack.intervention, **dict(pack.cells[0].strengths)))
    restored_epoch = restore(trainer)
    store = Store(options.store)
    identities = [c.identity() for c in pack.cells]
    every = options.checkpoint_every
    # members still training: each reports every epoch until it completes or diverges
    waiting = {i for i, s in enumerate(trainer.statuses) if s == "running"}
    epoch_reports: dict[int, EpochReport] = {}
    last: dict[str, dict[str, Any]] = {str(i): {"status": s} for i, s in enumerate(trainer.statuses)}

    def on_epoch(i: int, report: EpochReport) -> None:
        nonlocal waiting
        if report.epoch <= restored_epoch:
            return
        identity = identities[i]
        write_rows(store, identity, report)
        epoch_reports[i] = report
        last[str(i)] = {k: v for k, v in tune_metrics(report).items() if k not in ("node_id", "gpu_ids")}
        if waiting - set(epoch_reports):
            return  # other members' rows of this epoch still to come
        _maybe_inject_failure(report.epoch, options)
        metrics = pack_metrics(epoch_reports, last)
        waiting = {j for j, r in epoch_reports.items() if r.status == "running"}
        epoch_reports.clear()
        report_to_tune(trainer, metrics, checkpoint=not report.epoch % every or not waiting)

    trainer.run(on_epoch)
