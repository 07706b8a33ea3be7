"""The probe pool: each revision one Ray task sized by its revision, a dead worker costs one retry,
not the run (see __init__)."""


from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import ray
import torch

from sweep.extension.checkpoint_series import (
    Manifest,
)
from sweep.extension.integrity import DUPLICATE_PREFIX, mark_duplicates
from sweep.extension.record import ProbeRecord, check_store
from sweep.extension.revision_probe import (
    Job,
    ProbeSettings,
    checkpoint_rows,
    jobs_from_manifest,
    probe_revision,
)
from sweep.placement.ray_env import absolute_uri, default_gpus
from sweep.store import Store

#: What a probe is: (job, probe text, settings, device) -> one metrics dict per layer.
Probe = Callable[[Job, str, ProbeSettings, torch.device], list[dict[str, float]]]


@dataclass
class JobResult:
    series: str
    revision: str
    status: str  # ok / failed / skipped / duplicate
    reason: str | None = None
    n_layers: int = 0
    seconds: float = 0.0
    pid: int | None = None
    mode: str | None = None  # whole / streamed: how it was probed
    memory: int | None = None  # bytes its Ray task asked for


def done_revisions(store: Store) -> set[tuple[str, str]]:
    """(series, revision) pairs whose rows in the store have status ok (or duplicate_of:…)."""
    df = store.read("checkpoints", columns=["series", "revision", "status"])
    ok = df[(df["status"] == "ok") | df["status"].str.startswith(DUPLICATE_PREFIX)]
    return set(zip(ok["series"], ok["revision"], strict=True))


# --- one revision, in a Ray worker ----------------------------------------------------------

_READY: dict[str, Any] = {}  # what a worker process set up once: {"plugins": ..., "threads": ...}


def _prepare(settings: ProbeSettings) -> torch.device:
    """Set this worker process up for probing (once per plugins and threads); the device to use."""
    if not _READY:
        import gc

        import transformers  # noqa: F401 (imported before the freeze below)

        from metrics.hf_stream import return_large_frees

        return_large_frees()  # a probe frees one large block after another (metrics/hf_stream.py)
        # what the imports built lives as long as the worker: out of the collector's reach, so that the
        # gc.collect() after each probe scans what the probe made (it took 0.5 s a revision, a fifth of
        # a Pythia-14M probe, scanning torch's and transformers' objects)
        gc.freeze()
    if _READY.get("plugins") != settings.plugins:
        settings.plugins.load()  # the driver's registrations, in this process too
        _READY["plugins"] = settings.plugins
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one "Loading weights" bar per revision is noise
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(max(1, settings.threads))
    gpu = bool(ray.get_gpu_ids()) and torch.cuda.is_available()
    return torch.device("cuda" if gpu else "cpu")


def probe_and_write(job: Job, text: str, settings: ProbeSettings, probe: Probe = probe_revision) -> JobResult:
    """Probe ``job`` on ``text`` and write its rows to the store; a failure is recorded, not raised."""
    device = _prepare(settings)
    record = ProbeRecord.of(settings, text)  # this worker's transformers: the one that loads and runs
    t0 = time.perf_counter()
    try:
        layers = probe(job, text, settings, device)
        rows, status, reason = checkpoint_rows(job, layers, record=record), "ok", None
    except Exception as exc:  # any failure of one revision is recorded, not raised
        reason = f"{type(exc).__name__}: {exc}"[:2000]
        rows, status, layers = checkpoint_rows(job, None, reason, record), "failed", []
    Store(settings.store).write_checkpoint(rows)
    return JobResult(job.series, job.revision, status, reason, len(layers), time.perf_counter() - t0,
                     os.getpid(), job.mode, job.memory)


@ray.remote(max_retries=0)  # the pool resubmits a revision whose worker died, up to --max-attempts
def _probe_task(job: Job, text: str, settings: ProbeSettings, probe: Probe) -> JobResult:
    return probe_and_write(job, text, settings, probe)


# --- the pool -------------------------------------------------------------------------------


@dataclass
class Pool:
    """At most ``n_actors`` revisions probed at once, each a Ray task that asks for its own memory."""

    settings: ProbeSettings
    text: str
    n_actors: int = 2
    gpus_per_actor: float | None = None  # None: 0.25 when the cluster has GPUs, else 0
    max_attempts: int = 2
    probe: Probe = probe_revision  # what a task runs (the tests pass one that kills its worker once)
    _text_ref: Any = field(default=None, init=False, repr=False)  # the probe text, put once
    _gpus: float = field(default=0.0, init=False, repr=False)

    def start(self) -> Pool:
        self.settings = replace(self.settings, store=absolute_uri(self.settings.store))
        self._gpus = default_gpus(self.gpus_per_actor)
        self._text_ref = ray.put(self.text)
        return self

    def close(self) -> None:
        self._text_ref = None

    def __enter__(self) -> Pool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, jobs: Iterable[Job], on_result: Callable[[JobResult], None] | None = None,
            copies: dict[tuple[str, str], list[Job]] | None = None) -> list[JobResult]:
        """Probe every job and return one result each (and one per copy).

        Each job is a Ray task asking for ``job.memory`` bytes (when set), its CPUs and GPUs; Ray
        starts it on a node with room. A job whose worker died (killed, out of memory, node lost)
        goes back to the queue, up to ``max_attempts`` times. ``copies``: {(series, revision) of a
        job: jobs with the same weight files}; when the job is probed they are written as its
        copies (``duplicate_of``), never downloaded; when it fails, the next copy is probed instead.
        """
        queue = deque(jobs)
        copies = {k: list(v) for k, v in (copies or {}).items()}
        attempts: Counter[tuple[str, str]] = Counter()
        inflight: dict[ray.ObjectRef, Job] = {}
        results: list[JobResult] = []
        cpus = self.settings.cpus or self.settings.threads

        def submit(job: Job) -> None:
            options: dict[str, Any] = {"num_cpus": cpus, "num_gpus": self._gpus}
            if job.memory:
                options["memory"] = int(job.memory)
            ref = _probe_task.options(**options).remote(job, self._text_ref, self.settings, self.probe)
            inflight[ref] = job

        def finish(job: Job, result: JobResult) -> None:
            results.append(result)
            if on_result is not None:
                on_result(result)
            group = copies.pop((job.series, job.revision), [])
            if group and result.status == "ok":
                for dup in group:
                    finish(dup, self._write_copy(job, dup))
            elif group:  # the probed one failed: probe the next of its group
                head, rest = group[0], group[1:]
                if rest:
                    copies[(head.series, head.revision)] = rest
                queue.appendleft(head)

        while queue or inflight:
            while queue and len(inflight) < self.n_actors:
                submit(queue.popleft())
            (ref,), _ = ray.wait(list(inflight), num_returns=1)
            job = inflight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:  # the task itself raised (not the probe: it records)
                result = self._record_failure(job, f"{type(exc).__name__}: {exc}")
            except ray.exceptions.RayError as exc:  # the worker died: killed, out of memory, node lost
                key = (job.series, job.revision)
                attempts[key] += 1
                if attempts[key] < self.max_attempts:
                    queue.appendleft(job)
                    continue
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                result = self._record_failure(job, f"worker died {attempts[key]} times: {first}")
            finish(job, result)
        return results

    def _record_failure(self, job: Job, reason: str) -> JobResult:
        reason = reason[:2000]
        record = ProbeRecord.of(self.settings, self.text)
        Store(self.settings.store).write_checkpoint(checkpoint_rows(job, None, reason, record))
        return JobResult(job.series, job.revision, "failed", reason, mode=job.mode, memory=job.memory)

    def _write_copy(self, probed: Job, dup: Job) -> JobResult:
        """``dup``'s rows: ``probed``'s (same weight bytes, so the same numbers), its own identity,
        status ``duplicate_of:<probed>``; nothing downloaded."""
        from sweep.store.parquet import safe_name

        store = Store(self.settings.store)
        rows = [r for r in store.scan("checkpoints", subdir=safe_name(probed.series)).table.to_pylist()
                if r["series"] == probed.series and r["revision"] == probed.revision]
        status = f"{DUPLICATE_PREFIX}{probed.revision}"
        reason = f"same weight files (sha256) as {probed.revision}: rows copied, not downloaded"
        store.write_checkpoint([{**r, "revision": dup.revision, "repo": dup.repo, "step": dup.step,
                                 "tokens": dup.tokens, "progress": dup.progress, "status": status,
                                 "reason": reason} for r in rows])
        return JobResult(dup.series, dup.revision, "duplicate", status, len(rows), mode="copied")


def run_extension(
    manifest: Manifest,
    settings: ProbeSettings,
    text: str,
    n_actors: int = 2,
    gpus_per_actor: float | None = None,
    force: bool = False,
    max_attempts: int = 2,
    progress: bool = True,
    pool: Pool | None = None,
) -> list[JobResult]:
    """Probe every revision of ``manifest`` not already ``ok`` in the store (all with ``force``).

    A ``UsageError`` first when the store holds rows measured under other probe settings
    (``sweep.extension.record.check_store``). Needs an initialised Ray. ``pool``: a started pool to use and leave open (its
    own settings and text apply); default: a fresh pool for this call. Before any
    download the revisions are planned (``sweep.extension.plan``: refusals, probe
    mode, memory per task, duplicates by weight-file sha256). Returns one result per
    revision, skipped ones included. Afterwards a revision whose weights repeat
    another's in its series is marked ``duplicate_of:<revision>``
    (``sweep.extension.integrity``).
    """
    from tqdm.auto import tqdm

    from sweep.extension.plan import plan_jobs
    from sweep.extension.seed_sets import label_sets

    used = pool.settings if pool is not None else settings
    text = pool.text if pool is not None else text
    store = Store(used.store)
    jobs = jobs_from_manifest(manifest)
    record = ProbeRecord.of(used, text)
    check_store(store, record, [(j.series, j.revision) for j in jobs], force)
    done = set() if force else done_revisions(store)
    label_sets(store, [j for j in jobs if (j.series, j.revision) in done])  # probed before, outside this set
    todo = [j for j in jobs if (j.series, j.revision) not in done]
    results = [JobResult(j.series, j.revision, "skipped") for j in jobs if (j.series, j.revision) in done]
    if not todo:
        return results
    actors = pool.n_actors if pool is not None else n_actors
    plan = plan_jobs(todo, used, *node_memory(used.cpus or used.threads, actors))
    for job, reason in plan.failed:
        store.write_checkpoint(checkpoint_rows(job, None, reason, record))
        results.append(JobResult(job.series, job.revision, "failed", reason))
    with tqdm(total=len(todo) - len(plan.failed), unit="rev", desc="checkpoints", disable=not progress) as bar:

        def tick(r: JobResult) -> None:
            bar.update(1)
            bar.set_postfix_str(f"{r.series}@{r.revision}: {r.status}")

        if pool is not None:
            results += pool.run(plan.jobs, on_result=tick, copies=plan.copies)
        elif plan.jobs:
            with Pool(settings, text, min(n_actors, len(plan.jobs)), gpus_per_actor, max_attempts) as fresh:
                results += fresh.run(plan.jobs, on_result=tick, copies=plan.copies)
    marked = mark_duplicates(store, {s.name for s in manifest.series})
    for r in results:
        if marked.get((r.series, r.revision), "ok") != "ok":
            r.status, r.reason = "duplicate", marked[(r.series, r.revision)]
    return results


def node_memory(cpus_per_actor: float, actors: int) -> tuple[int, int]:
    """(memory one probe may use by default, the most memory one node offers): from the alive
    nodes' Ray resources (``sweep.extension.plan.actor_memory``)."""
    from sweep.extension.plan import actor_memory

    nodes = [(n["Resources"].get("CPU", 0.0), n["Resources"].get("memory", 0.0)) for n in ray.nodes() if n["Alive"]]
    return actor_memory(nodes, cpus_per_actor, actors), int(max((m for _, m in nodes), default=0))


def summarize(results: list[JobResult]) -> dict[str, dict[str, int]]:
    """Per series: how many revisions were done, skipped and failed."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        counts = out.setdefault(r.series, {"done": 0, "skipped": 0, "failed": 0})
        counts["done" if r.status in ("ok", "duplicate") else r.status] += 1
    return out


def format_summary(summary: dict[str, dict[str, int]], results: list[JobResult]) -> str:
    """The per-series table, the duplicates, then the closing summary (``closing_summary``)."""
    lines = [f"{'series':<16} {'done':>5} {'skipped':>8} {'failed':>7}"]
    lines += [f"{s:<16} {c['done']:>5} {c['skipped']:>8} {c['failed']:>7}" for s, c in summary.items()]
    lines += [f"  {r.series}@{r.revision}: same weights as another revision, {r.reason} "
              f"({'found before download, ' if r.mode == 'copied' else ''}left out of Appendix A)"
              for r in results if r.status == "duplicate"]
    modes = Counter(r.mode for r in results if r.mode in ("whole", "streamed") and r.status != "skipped")
    if modes.get("streamed"):
        lines.append(f"  probed whole: {modes.get('whole', 0)}, one decoder block at a time: {modes['streamed']}")
    return "\n".join(lines + [closing_summary(results)])


def closing_summary(results: list[JobResult]) -> str:
    """One line of totals — probed (this run / already in the store), failed, duplicates — then
    each failed revision with the first line of its reason."""
    failed = [r for r in results if r.status == "failed"]
    skipped = sum(r.status == "skipped" for r in results)
    probed = len(results) - len(failed)
    dups = sum(r.status == "duplicate" for r in results)
    lines = [f"[extension] {len(results)} revisions: probed {probed} ({probed - skipped} now, {skipped} already "
             f"in the store), failed {len(failed)}, duplicates {dups}"]
    lines += [f"  failed {r.series}@{r.revision}: {one_line(r.reason)}" for r in failed]
    return "\n".join(lines)


def one_line(reason: str | None, width: int = 300) -> str:
    """The first line of a failure reason, cut to ``width`` characters."""
    text = (reason or "no reason recorded").strip().splitlines() or ["no reason recorded"]
    return text[0] if len(text[0]) <= width else text[0][: width - 1] + "…"
