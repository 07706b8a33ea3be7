"""What ``--resume`` reads of an interrupted experiment, and the one repair it makes before restoring.

Tune's ``CheckpointConfig(num_to_keep)`` deletes a trial's older checkpoint as soon as a newer one
registers, while the experiment state on disk is a snapshot taken every few seconds. A driver killed
between the two leaves a state that names a checkpoint which no longer exists; Tune's restore then
fails that trial on every retry ("does not exist on storage anymore"). ``repair_checkpoints`` puts
the trial's newest surviving checkpoint in its place. That is sound because a trial resumes at the
epoch its checkpoint holds (``sweep.trial.trainable.restore``), not at Tune's count, training from a checkpoint
is bit-identical to training through, and every epoch up to a checkpoint's is already in the store
(rows are written before the checkpoint), whose writes are idempotent per (run, epoch).
"""

from __future__ import annotations

import logging
import posixpath
import re
from typing import Any

from sweep.cli import UsageError

CHECKPOINT_DIR = re.compile(r"checkpoint_(\d+)$")


def experiment_trials(path: str) -> list[Any]:
    """The trials of the experiment state at ``path`` (Tune ``Trial`` stubs, those without results too)."""
    from ray import tune

    quiet = logging.getLogger("ray.tune.analysis.experiment_analysis")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # one warning per trial without results otherwise
    try:
        return list(tune.ExperimentAnalysis(path).trials)
    finally:
        quiet.setLevel(level)


def loadable(checkpoint: Any) -> bool:
    """Whether ``checkpoint`` (a ``tune.Checkpoint``) holds a trainer state that loads."""
    from pathlib import Path

    from sweep.trial.trainable import STATE_FILE, load_state

    try:
        with checkpoint.as_directory() as d:
            load_state(Path(d) / STATE_FILE)
        return True
    except Exception:  # missing, truncated by a kill mid-write, or refused: not a candidate
        return False


def replace_missing(checkpoint: Any) -> str | None:
    """Move the newest loadable sibling ``checkpoint_N`` of the missing ``checkpoint`` to its path.

    Returns the name moved, or None when no sibling loads.
    """
    from pyarrow import fs as pafs
    from ray import tune

    fs, trial_dir = checkpoint.filesystem, posixpath.dirname(checkpoint.path)
    siblings = []
    for info in fs.get_file_info(pafs.FileSelector(trial_dir, allow_not_found=True)):
        match = CHECKPOINT_DIR.match(info.base_name)
        if info.type == pafs.FileType.Directory and match:
            siblings.append((int(match.group(1)), info.path))
    for _, path in sorted(siblings, reverse=True):
        if loadable(tune.Checkpoint(path, filesystem=fs)):
            # copy, then delete: S3 cannot rename a directory
            fs.create_dir(checkpoint.path)
            pafs.copy_files(path, checkpoint.path, source_filesystem=fs, destination_filesystem=fs)
            fs.delete_dir(path)
            return posixpath.basename(path)
    return None


def repair_checkpoints(trials: list[Any]) -> list[str]:
    """Give each trial that will be restored (every one not TERMINATED) the checkpoint its state names.

    Returns one line per repair; raises ``UsageError`` when a trial has none left to restore from.
    """
    from pyarrow import fs as pafs

    lines = []
    for trial in trials:
        checkpoint = trial.checkpoint
        if trial.status == "TERMINATED" or checkpoint is None:
            continue
        if checkpoint.filesystem.get_file_info(checkpoint.path).type != pafs.FileType.NotFound:
            continue
        name = posixpath.basename(checkpoint.path)
        moved = replace_missing(checkpoint)
        if moved is None:
            raise UsageError(f"--resume: trial {trial} has lost its checkpoint {checkpoint.path} and no other "
                             "checkpoint of it loads; start the experiment again under a new --name "
                             "(rows already in the store are kept)")
        lines.append(f"trial {trial}: {name}, the checkpoint the experiment state names, is gone (Tune's "
                     f"num_to_keep deletes one once a newer registers; snapshots lag); resuming from {moved}, "
                     "moved into its place")
    return lines
