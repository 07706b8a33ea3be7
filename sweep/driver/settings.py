"""``SweepSettings``: how a sweep runs besides its grid (the experiment, the trials' options, the Ray
it uses), each value checked on creation and named by its flag; ``settings_from_args`` builds it
from ``sweep.driver.flags``' flags. Imports nothing that trains."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from model.plugins import Plugins
from sweep.cli import at_least, local_ray_sizes, plain_name
from sweep.hooks.config import hooks_from_args
from sweep.hooks.faults import fault_from_args
from sweep.placement.flags import PackRequest, pack_request
from sweep.trackers import check_trackers, trackers_from_args
from sweep.trial.gpu_flags import gpu_options
from sweep.trial.options import TrialOptions

if TYPE_CHECKING:
    from sweep.placement.plan import TrialPlan
    from sweep.presets import Cell


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
    #: trial hooks (``sweep.hooks.config``: name -> settings) for tests and benchmarks only, from hidden flags
    hooks: dict[str, dict[str, Any]] = field(default_factory=dict)
    plugins: Plugins = Plugins()  # --plugin modules: every trial imports them first
    trackers: tuple[str, ...] = ()  # --tracker: experiment trackers every run is logged to, live
    tracker_dir: str | None = None  # --tracker-dir: their local files (None: beside a local store)
    retry_deterministic: bool = False  # --retry-deterministic: retry an error that repeats (no fail-fast)
    name_given: bool = True  # --name was given (it wins over MLFLOW_EXPERIMENT_NAME / WANDB_RUN_GROUP)
    progress_tables: bool = False  # --progress-tables: Tune's status table at every report, not one line
    #: a round of ``--seeds auto`` (``sweep.sequential.rounds``): an experiment whose newest state holds other
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

    def plan(self, cells: Sequence[Cell], cluster_gpus: float, node_gpus: float) -> TrialPlan:
        """The trials of ``cells`` as these settings place them on a cluster of ``cluster_gpus`` GPUs
        whose largest node has ``node_gpus``: one plan, made the same way for a run and its dry run."""
        from sweep.placement.plan import plan_trials  # pandas: after the flags

        trial = self.trial
        return plan_trials(cells, self.pack, cluster_gpus, node_gpus, trial.cpus_per_trial, trial.gpus_per_trial,
                           trial.amp)


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
                         hooks_from_args(args, fault_from_args(args, name)), Plugins.from_args(args), trackers_from_args(args),
                         args.tracker_dir, args.retry_deterministic, args.name is not None,
                         args.progress_tables)
