"""Before any download: what each revision needs, and which revisions repeat another (SPEC §7,
"Large series"). Runs in the driver, without Ray.

For a hub revision, one listing (``sweep.extension.listing``) gives its files' sizes and sha256,
and its ``config.json`` (a few kB, fetched into a throw-away folder) gives the model's shape. From
those:

* **refusals in one line**, recorded as failed rows before anything is downloaded: a missing
  revision, no weights to load, an unsupported ``model_type``, files larger than
  ``--disk-budget``, a probe that needs more memory than any node has;
* **the probe mode**: ``whole`` when the whole-model probe fits the memory of one actor
  (``--memory-per-actor``, default ``actor_memory``), else ``streamed`` (one decoder block at a
  time; ``--probe-mode`` forces either);
* **the memory the revision's Ray task asks for**: that probe's estimate
  (``metrics.hf_stream.probe_memory``) plus ``PROCESS_BYTES``, so that Ray starts a revision only
  on a node with room for it;
* **duplicates before download**: revisions of a series whose weight files have the same sha256
  set serve the same bytes; one of them (the one ``integrity.duplicate_status`` would keep: the
  highest step) is probed, the others are written as its copies with ``duplicate_of`` and never
  downloaded.

A local folder is planned from the folder itself (its config and weight files' sizes; no
duplicates by bytes: its value digest, after the probe, finds them). Anything the plan cannot
read is left to the probe, which records it as it always has.
"""

from __future__ import annotations

import functools
import math
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sweep.extension.disk import format_size
from sweep.extension.listing import Listing
from sweep.extension.revision_probe import (
    Job,
    ProbeSettings,
    RevisionError,
    check_model_type,
    local_dir,
    revision_files,
    revision_listing,
    weight_files,
)

#: Memory of a probe process besides its probe: Python, torch, transformers and tokenizers imported,
#: the tokenizer, allocator slack (measured ~0.55 GB RSS before a probe: bench/checkpoint_scale.py).
PROCESS_BYTES = 1 << 30


@dataclass
class Plan:
    """``jobs`` to probe (mode and memory set), ``failed`` (job, one-line reason) refused before any
    download, and ``copies``: {probed job: the jobs that repeat its weight files}."""

    jobs: list[Job] = field(default_factory=list)
    failed: list[tuple[Job, str]] = field(default_factory=list)
    copies: dict[tuple[str, str], list[Job]] = field(default_factory=dict)


def actor_memory(nodes: Iterable[tuple[float, float]], cpus_per_actor: float, actors: int) -> int:
    """The memory one probe may use by default: over the nodes ((CPUs, memory bytes) each, Ray's
    resources), the smallest share memory / probes that its CPUs hold (at most ``actors``)."""
    shares = [mem / max(1, min(actors, math.floor(cpus / cpus_per_actor))) for cpus, mem in nodes if mem > 0]
    return int(min(shares)) if shares else 0


def _order(job: Job) -> tuple[float, str]:
    """What ``integrity.duplicate_status`` keeps of a group: the highest progress, else step, then name."""
    value = job.progress if job.progress is not None else job.step if job.step is not None else -1.0
    return (float(value), job.revision)


def plan_jobs(jobs: list[Job], settings: ProbeSettings, actor_bytes: int, largest_node: int,
              list_fn: Callable[[str, str], Listing] = revision_listing) -> Plan:
    """The plan of ``jobs`` (see the module docstring). ``actor_bytes``: the memory one probe may
    use in ``auto`` mode; ``largest_node``: the most memory a node offers Ray (0: unknown)."""
    plan = Plan()
    configs: dict[tuple[str, str], Any] = {}
    groups: dict[tuple[str, frozenset[str]], list[Job]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="qkgeom-configs-") as scratch:
        for job in jobs:
            try:
                job = _plan_one(job, settings, actor_bytes, largest_node, list_fn, configs, Path(scratch))
            except RevisionError as exc:
                plan.failed.append((job, f"RevisionError: {exc}"))
                continue
            key = job.listing.weights_key(settings.allow_pickle) if job.listing else None
            if key is None:
                plan.jobs.append(job)
            else:
                groups[(job.series, key)].append(job)
    for members in groups.values():
        members.sort(key=_order, reverse=True)
        head, rest = members[0], members[1:]
        plan.jobs.append(head)
        if rest:
            plan.copies[(head.series, head.revision)] = rest
    return plan


def _plan_one(job: Job, settings: ProbeSettings, actor_bytes: int, largest_node: int,
              list_fn: Callable[[str, str], Listing], configs: dict, scratch: Path) -> Job:
    if job.repo is not None and job.path is None:
        listing = job.listing or list_fn(job.repo, job.revision)
        files = revision_files(job.repo, job.revision, listing, settings.allow_pickle)
        fetch = sum(f.size for _, f in files)
        if settings.disk_budget and fetch > settings.disk_budget:
            raise RevisionError(f"{job.repo}@{job.revision} needs {format_size(fetch)} of files, more than "
                                f"--disk-budget {format_size(settings.disk_budget)}: not downloaded")
        config = _hub_config(job.repo, listing, configs, scratch)
        weights = listing.weights(settings.allow_pickle)
        job = replace(job, listing=listing)
    else:
        try:
            folder = local_dir(job)
            check_model_type(Path(folder) / "config.json")
            config = _config(folder)
            weights = weight_files(folder, settings.allow_pickle)
        except (RevisionError, OSError, ValueError):
            return replace(job, mode="whole", memory=PROCESS_BYTES)  # the probe records why
    return _sized(job, config, [Path(getattr(w, "path", w)).name for w in weights], settings, actor_bytes,
                  largest_node)


def _config(folder: str | Path) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(folder), trust_remote_code=False)


def _hub_config(repo: str, listing: Listing, seen: dict, scratch: Path) -> Any:
    """The revision's config (fetched alone, once per distinct config file); its model_type checked."""
    from huggingface_hub import hf_hub_download

    from sweep.extension.hub import with_hub_retries

    blob = next(f.blob for f in listing.files if f.path == "config.json")
    if (repo, blob) not in seen:
        try:
            path = with_hub_retries(lambda: hf_hub_download(repo, "config.json", revision=listing.commit,
                                                            cache_dir=str(scratch)))
        except Exception as exc:
            raise RevisionError(f"could not fetch the config of {repo}: {type(exc).__name__}: {exc}") from None
        check_model_type(Path(path))
        seen[(repo, blob)] = _config(Path(path).parent)
    return seen[(repo, blob)]


@functools.lru_cache(maxsize=64)
def _probe_memory(config_json: str, n_seqs: int, seq_len: int) -> Any:
    """``probe_memory`` once per distinct config (a series' revisions share theirs)."""
    import json

    from transformers import AutoConfig

    from metrics.hf_stream import probe_memory

    data = json.loads(config_json)
    return probe_memory(AutoConfig.for_model(data.pop("model_type"), **data), n_seqs, seq_len)


def _sized(job: Job, config: Any, weight_names: list[str], settings: ProbeSettings, actor_bytes: int,
           largest_node: int) -> Job:
    """The job with its probe mode and memory request (see the module docstring)."""
    need = _probe_memory(config.to_json_string(), settings.n_seqs, settings.seq_len)
    safe = all(n.endswith(".safetensors") for n in weight_names)
    limit = settings.memory_per_actor or actor_bytes
    mode = settings.probe_mode
    if mode == "auto":
        mode = "whole" if not safe or not limit or need.whole + PROCESS_BYTES <= limit else "streamed"
    if mode == "streamed" and not safe:
        raise RevisionError(f"{job.series}@{job.revision} has pickled weights only: "
                            "the layer-streamed probe (--probe-mode streamed) reads safetensors")
    memory = (need.whole if mode == "whole" else need.streamed) + PROCESS_BYTES
    if largest_node and memory > largest_node:
        raise RevisionError(f"{job.series}@{job.revision}: the {mode} probe needs {format_size(memory)} of memory, "
                            f"more than any node offers Ray ({format_size(largest_node)})")
    return replace(job, mode=mode, memory=int(memory), params=int(need.params))


def local_node(cpus_per_actor: float, actors: int) -> tuple[int, int]:
    """(memory one probe may use, the node's memory) for this machine as the only node, as Ray would
    offer it: about 70 % of the memory available now (``--dry-run`` plans without Ray)."""
    import os

    from sweep.placement.ray_env import bundled_psutil

    psutil = bundled_psutil()

    memory = 0.7 * psutil.virtual_memory().available
    return actor_memory([(os.cpu_count() or 1, memory)], cpus_per_actor, actors), int(memory)


#: A plan of more revisions than this prints one line per series instead of one per revision.
PLAN_LINES = 40


def weight_bytes(job: Job, settings: ProbeSettings) -> int | None:
    """The bytes of a hub revision's weight files (None for a local folder)."""
    return job.listing.weight_bytes(settings.allow_pickle) if job.listing else None


def format_plan(plan: Plan, settings: ProbeSettings, actor_bytes: int) -> str:
    """One line per revision (per series, with its set and seed, beyond ``PLAN_LINES`` revisions): what
    will be downloaded, how it is probed, with how much memory, the duplicates found from the listing;
    then the refusals and the totals."""
    lines = [f"[extension] plan (--probe-mode {settings.probe_mode}, memory per actor "
             f"{format_size(settings.memory_per_actor or actor_bytes)}, disk budget "
             f"{format_size(settings.disk_budget) if settings.disk_budget else 'none'}):"]
    n_revisions = len(plan.jobs) + len(plan.failed) + sum(len(v) for v in plan.copies.values())
    if n_revisions <= PLAN_LINES:
        for job in plan.jobs:
            size = weight_bytes(job, settings)
            where = f"{format_size(size)} of weights" if size is not None else "local folder"
            member = f" (set {job.group}, seed {job.seed})" if job.group else ""
            lines.append(f"  {job.series}@{job.revision}{member}: {where}, probe {job.mode}, task memory "
                         f"{format_size(job.memory or 0)}")
            for dup in plan.copies.get((job.series, job.revision), []):
                lines.append(f"  {dup.series}@{dup.revision}: same weight files as {job.revision}: not downloaded, "
                             "rows copied")
    else:
        lines += _per_series(plan, settings)
    lines += [f"  {job.series}@{job.revision}: refused: {reason}" for job, reason in plan.failed]
    n_copies = sum(len(v) for v in plan.copies.values())
    total = sum(weight_bytes(j, settings) or 0 for j in plan.jobs)
    lines.append(f"[extension] {n_revisions} revisions: {len(plan.jobs)} to probe ({format_size(total)} of weights "
                 f"to download), {n_copies} duplicate(s) found before download, {len(plan.failed)} refused")
    return "\n".join(lines)


def _per_series(plan: Plan, settings: ProbeSettings) -> list[str]:
    by: dict[str, list[Job]] = defaultdict(list)
    for job in plan.jobs:
        by[job.series].append(job)
    dups = defaultdict(int)
    for (series, _), group in plan.copies.items():
        dups[series] += len(group)
    out = []
    for series, jobs in by.items():
        head = jobs[0]
        where = f" (set {head.group}, seed {head.seed})" if head.group else ""
        size = sum(weight_bytes(j, settings) or 0 for j in jobs)
        modes = "/".join(sorted({j.mode for j in jobs}))
        out.append(f"  {series}{where}: {len(jobs)} to probe, {format_size(size)} of weights, probe {modes}, task "
                   f"memory up to {format_size(max(j.memory or 0 for j in jobs))}, {dups[series]} duplicate(s)")
    return out
