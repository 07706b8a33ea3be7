"""The flags every sweep command shares: where results go, how trials are placed, packs, trackers,
plugins and the hidden crash-test flags (``add_run_flags``). Imports nothing that trains, so that a
command's ``--help`` answers at once; ``sweep.driver.settings`` turns the parsed flags into ``SweepSettings``."""

from __future__ import annotations

import argparse

from model.plugins import add_plugin_flag
from sweep.cli import DEFAULT_STORE
from sweep.hooks.config import add_fault_flags
from sweep.placement.flags import add_pack_flags
from sweep.trackers import add_tracker_flags
from sweep.trial.gpu_flags import add_gpu_flags


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
                   "(default: not retried again: an error in the code repeats; see sweep/trial/failfast.py)")
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
    add_fault_flags(g)  # hidden: tests and bench/ (a crash, trial hooks: sweep/hooks/config.py)
    add_gpu_flags(p)  # --amp, --graphs, --tf32 (sweep.trial.gpu_flags)
