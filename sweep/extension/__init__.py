"""Checkpoint extension (SPEC §7): probe public checkpoint series as Ray tasks, each sized by its revision.

``python -m sweep.extension --series pythia-70m --revisions 8 --store runs/store``
or ``--manifest FILE`` (see ``sweep.extension.checkpoint_series``). Each revision becomes
one file ``checkpoints/{series}/{revision}.parquet`` in the store: one row per
layer with status ``ok``, or one row with status ``failed``, a reason and a
null layer.

Before any download the driver plans the revisions (``plan``): each hub revision is
listed once (files, sizes, sha256), refused in one line when it cannot be probed, given a
probe mode (the whole model, or one decoder block at a time when the whole model does not
fit an actor's memory) and the memory its task asks Ray for; revisions with the same weight
files as another are its copies and are never downloaded.

The pool: each revision is one Ray task asking for its own memory; at most ``--actors`` run at
once, and Ray starts each on a node with room for it. A task whose worker died (killed, out of
memory, node lost) is resubmitted by the driver, up to ``--max-attempts`` times, then recorded
as ``failed``. Store writes replace the revision's file, so a retried revision never
duplicates rows. With ``--disk-budget`` a revision is downloaded, probed and deleted again,
within a budget that the probes sharing a hub cache share (``disk``).
Rerunning skips revisions whose rows are ``ok`` (``--force`` redoes them);
failed revisions are tried again. Every row carries the probe settings (``record``), and a rerun
of a store under other settings is refused before Ray starts. A revision whose weights do not load
as shipped (a key missing, unexpected or of another shape, a non-float or non-finite weight:
``metrics.hf_files``) is a failed row naming the tensor and its file, in both probe modes. Exit status: 0 when every revision was probed,
1 when some failed (the closing summary names each with its reason), 2 for bad
input. Model families are adapters in ``metrics.hf_arch``; a revision of another
``model_type`` is refused from its ``config.json`` before any weight is read.

Probe text: the same fixed windows for every revision (``sweep.extension.revision_probe.probe_windows``):
``--n-seqs`` sequences of ``--seq-len`` tokens in the model's native
tokenizer, one starting at each of ``--n-seqs`` evenly spaced character
offsets of the text (default: the embedded ``stdlib-docs`` corpus), without
special tokens, at positions 0..T−1.

One module per idea: ``checkpoint_series`` (the series registry, revision
selection, manifests), ``revision_probe`` (one revision: download, load, probe,
rows), ``integrity`` (weights value digests, duplicate revisions), ``hub`` (which hub errors are retried),
``listing`` (a hub revision's files before download), ``plan`` (what each revision needs, duplicates by
file sha256), ``disk`` (the disk budget and its leases), ``record`` (the probe settings of a row; a store
of other settings refused), ``seed_sets`` (sets of seeds of one model: the registry, members from the
Hub's listing, every seed at the same revisions), ``projection`` (a run's projected time), ``pool`` (the Ray
tasks), ``cli`` (``python -m sweep.extension``; ``probe_checkpoints`` is it as a function) and ``tiny_series``
(a tiny offline GPT-2 series to probe; ``python -m sweep.tiny_series``). The names below
are the package's API; its modules import each other directly, never through here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweep.extension.cli import ExtensionSettings, main, parse_args, probe_checkpoints
    from sweep.extension.pool import Pool, run_extension, summarize

#: each name's module, imported when the name is first used (PEP 562), so that a submodule's
#: command (``python -m sweep.tiny_series --help``) does not import Ray through this file
_WHERE = {"ExtensionSettings": "cli", "main": "cli", "parse_args": "cli", "probe_checkpoints": "cli",
          "Pool": "pool", "run_extension": "pool", "summarize": "pool"}
__all__ = ["ExtensionSettings", "Pool", "main", "parse_args", "probe_checkpoints", "run_extension", "summarize"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'sweep.extension' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sweep.extension.{_WHERE[name]}"), name)
