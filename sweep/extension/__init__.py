"""Checkpoint extension (SPEC §7): probe public checkpoint series with a pool of Ray actors.

``python -m sweep.extension --series pythia-70m --revisions 8 --store runs/store``
or ``--manifest FILE`` (see ``sweep.extension.checkpoint_series``). Each revision becomes
one file ``checkpoints/{series}/{revision}.parquet`` in the store: one row per
layer with status ``ok``, or one row with status ``failed``, a reason and a
null layer.

The pool: one actor per slot, each holding one in-flight revision; the driver
keeps a dict of in-flight refs and loops on ``ray.wait``, so a dead actor costs
one retry, not the run (``ActorPool.map_unordered`` stops at the first
``ActorDiedError``). A slot gets work only once its actor is placed and
constructed, so actors still waiting for resources hold no revision. Actors
restart without limit (``max_restarts=-1``); Ray retries a task whose actor
died up to ``TASK_RETRIES`` times and the driver then resubmits it, up to
``--max-attempts`` times, so a revision that kills its actor every time (e.g.
out of memory) ends as ``failed`` instead of looping forever. Store writes
replace the revision's file, so a retried revision never duplicates rows.
Rerunning skips revisions whose rows are ``ok`` (``--force`` redoes them);
failed revisions are tried again. Exit status: 0 when every revision was probed,
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
rows), ``integrity`` (weights value digests, duplicate revisions), ``hub`` (which hub errors are retried), ``pool`` (the Ray
actor pool), ``cli`` (``python -m sweep.extension``; ``probe_checkpoints`` is it as a function) and ``tiny_series`` (a tiny
offline GPT-2 series to probe; ``python -m sweep.tiny_series``). The names below
are the package's API; its modules import each other directly, never through here.
"""

from sweep.extension.cli import ExtensionSettings, main, parse_args, probe_checkpoints
from sweep.extension.pool import Pool, run_extension, summarize

__all__ = ["ExtensionSettings", "Pool", "main", "parse_args", "probe_checkpoints", "run_extension", "summarize"]
