"""What crosses from a sweep's driver into each Tune trial (no Ray here: the CLIs build it
before Ray is imported)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from model.flags import AMP_CHOICES
from sweep.cli import UsageError, at_least, gpu_fraction, positive


@dataclass(frozen=True)
class TrialOptions:
    """Everything a trial needs besides its cell: what crosses from the driver into Tune.

    Part of each trial's run spec (``sweep.trial.spec.TrialSpec``), kept in the experiment state, so a
    resumed sweep runs its trials with the options it started with.
    """

    store: str  # the Parquet store's root: a path or URI (absolute once the sweep starts)
    storage: str  # Tune's storage: a path or URI (for the record: Tune itself is told in RunConfig)
    cpus_per_trial: float = 1.0  # Ray CPUs per trial = torch threads
    # Ray GPU fraction per trial (the CPU runs it when torch sees none); None until the sweep
    # starts: a quarter of a GPU when the cluster has GPUs, else 0
    gpus_per_trial: float | None = None
    checkpoint_every: int = 1  # epochs between Tune checkpoints (the last epoch always checkpoints)
    compile: bool = False  # torch.compile the model (CUDA only)
    amp: str = "auto"  # --amp: autocast on CUDA (auto: native bf16, else fp16 with loss scaling; SPEC §3)
    graphs: bool = True  # --graphs/--no-graphs: replay each step from a CUDA graph (CUDA only)
    tf32: bool = True  # --tf32/--no-tf32: fp32 matmuls in TF32 on CUDA, set where the trial starts

    def __post_init__(self) -> None:
        """Each value on its own, named by its flag (``run_sweep`` checks the GPUs against the nodes)."""
        positive("--cpus-per-trial", self.cpus_per_trial)
        at_least("--checkpoint-every", self.checkpoint_every, 1)
        gpu_fraction("--gpus-per-trial", self.gpus_per_trial, None)
        if self.amp not in AMP_CHOICES:
            raise UsageError(f"--amp {self.amp!r}: use one of {', '.join(AMP_CHOICES)}")

    def to_config(self) -> dict[str, Any]:
        """Plain data (read back by ``sweep.trial.spec.decode``)."""
        return asdict(self)
