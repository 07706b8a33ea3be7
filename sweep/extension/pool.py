"""The probe actor pool: one actor per slot, a dead actor costs one retry, not the run (see __init__)."""


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
from sweep.extension.revision_probe import (
    Job,
    ProbeSettings,
    checkpoint_rows,
    jobs_from_manifest,
    probe_revision,
)
from sweep.ray_env import absolute_uri, default_gpus
from sweep.store import Store

#: Ray's own retries of a task whose actor died (bounded: see the module docstring).
TASK_RETRIES = 2


@dataclass
class JobResult:
    series: str
    revision: str
    status: str  # ok / failed / skipped
    reason: str | None = None
    n_layers: int = 0
    seconds: float = 0.0
    pid: int | None = None


def done_revisions(store: Store) -> set[tuple[str, str]]:
    """(series, revision) pairs whose rows in the store have status ok (or duplicate_of:…)."""
    df = store.read("checkpoints", columns=["series", "revision", "status"])
    ok = df[(df["status"] == "ok") | df["status"].str.startswith(DUPLICATE_PREFIX)]
    return set(zip(ok["series"], ok["revision"], strict=True))


# --- the probe actor ----------------------------------------------------------------------


@ray.remote(max_restarts=-1, max_task_retries=TASK_RETRIES)
class ProbeActor:
    """Probes revisions one at a time and writes each one's rows to the store.

    Its constructor takes only the small settings (inlined in the creation task): an
    object-store argument to a restartable actor makes Ray log an error-level line on
    every run. The probe text travels with each ``probe`` call instead, as an object
    ref that Ray resolves (put once by the pool, kept alive by it across restarts).
    """

    def __init__(self, settings: ProbeSettings) -> None:
        settings.plugins.load()  # the driver's registrations, in this process too
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one "Loading weights" bar per revision is noise
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        torch.set_num_threads(max(1, settings.threads))
        self.settings = settings
        self.store = Store(settings.store)
        gpu = bool(ray.get_gpu_ids()) and torch.cuda.is_available()
        self.device = torch.device("cuda" if gpu else "cpu")

    def probe(self, job: Job, text: str) -> JobResult:
        """Probe ``job`` on ``text`` (the probe text) and write its rows; a failure is recorded, not raised."""
        t0 = time.perf_counter()
        try:
            layers = probe_revision(job, text, self.settings, self.device)
            rows, status, reason = checkpoint_rows(job, layers), "ok", None
        except Exception as exc:  # any failure of one revision is recorded, not raised
            reason = f"{type(exc).__name__}: {exc}"[:2000]
            rows, status, layers = checkpoint_rows(job, None, reason), "failed", []
        self.store.write_checkpoint(rows)
        return JobResult(job.series, job.revision, status, reason, len(layers),
                         time.perf_counter() - t0, os.getpid())


# --- the pool -------------------------------------------------------------------------------


@dataclass
class Pool:
    """A set of ``ProbeActor``s, each fed one revision at a time from a queue."""

    settings: ProbeSettings
    text: str
    n_actors: int = 2
    gpus_per_actor: float | None = None  # None: 0.25 when the cluster has GPUs, else 0
    max_attempts: int = 2
    actors: list = field(default_factory=list, init=False)
    _text_ref: Any = field(default=None, init=False, repr=False)  # the probe text, passed with every probe call

    def start(self) -> Pool:
        self.settings = replace(self.settings, store=absolute_uri(self.settings.store))
        gpus = default_gpus(self.gpus_per_actor)
        self._text_ref = ray.put(self.text)
        options = {"num_cpus": self.settings.cpus or self.settings.threads, "num_gpus": gpus}
        self.actors = [
            ProbeActor.options(**options).remote(self.settings) for _ in range(self.n_actors)
        ]
        return self

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor)
        self.actors, self._text_ref = [], None

    def __enter__(self) -> Pool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, jobs: Iterable[Job], on_result: Callable[[JobResult], None] | None = None) -> list[JobResult]:
        """Probe every job and return one result each.

        A slot gets work only once its actor is placed and constructed (an actor
        waiting for resources holds no job). A job whose actor died goes back to
        the queue, up to ``max_attempts`` times, and its slot is probed again
        before new work; a slot whose actor cannot come back is dropped, and
        when none is left the remaining jobs are recorded as failed.
        """
        queue = deque(jobs)
        attempts: Counter[tuple[str, str]] = Counter()
        # ref -> (job, slot); job None marks a readiness probe of the slot's actor
        inflight: dict[ray.ObjectRef, tuple[Job | None, int]] = {}
        live = set(range(len(self.actors)))
        results: list[JobResult] = []

        def probe_slot(slot: int) -> None:
            inflight[self.actors[slot].__ray_ready__.remote()] = (None, slot)

        def submit(slot: int) -> None:
            if queue:
                job = queue.popleft()
                inflight[self.actors[slot].probe.remote(job, self._text_ref)] = (job, slot)

        def finish(result: JobResult) -> None:
            results.append(result)
            if on_result is not None:
                on_result(result)

        for slot in live:
            probe_slot(slot)
        last_error = "no actors"
        while queue or any(job is not None for job, _ in inflight.values()):
            if not live:
                while queue:
                    finish(self._record_failure(queue.popleft(), f"no probe actor is alive: {last_error}"))
                break
            (ref,), _ = ray.wait(list(inflight), num_returns=1)
            job, slot = inflight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                last_error = str(exc).splitlines()[0]
                if job is None:  # the actor cannot be constructed or restarted
                    live.discard(slot)
                    continue
                key = (job.series, job.revision)
                attempts[key] += 1
                if attempts[key] < self.max_attempts:
                    queue.appendleft(job)
                else:
                    finish(self._record_failure(job, f"actor died {attempts[key]} times: {last_error}"))
                probe_slot(slot)
                continue
            except ray.exceptions.RayTaskError as exc:
                result = self._record_failure(job, f"{type(exc).__name__}: {exc}") if job else None
            if job is not None:
                finish(result)
            submit(slot)
        return results

    def _record_failure(self, job: Job, reason: str) -> JobResult:
        reason = reason[:2000]
        Store(self.settings.store).write_checkpoint(checkpoint_rows(job, None, reason))
        return JobResult(job.series, job.revision, "failed", reason)


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

    Needs an initialised Ray. ``pool``: a started pool to use and leave open (its
    own settings and text apply); default: a fresh pool for this call. Returns
    one result per revision, skipped ones included. Afterwards a revision whose
    weights repeat another's in its series is marked ``duplicate_of:<revision>``
    (``sweep.extension.integrity``).
    """
    from tqdm.auto import tqdm

    store = Store((pool.settings if pool is not None else settings).store)
    jobs = jobs_from_manifest(manifest)
    done = set() if force else done_revisions(store)
    todo = [j for j in jobs if (j.series, j.revision) not in done]
    results = [JobResult(j.series, j.revision, "skipped") for j in jobs if (j.series, j.revision) in done]
    if not todo:
        return results
    with tqdm(total=len(todo), unit="rev", desc="checkpoints", disable=not progress) as bar:

        def tick(r: JobResult) -> None:
            bar.update(1)
            bar.set_postfix_str(f"{r.series}@{r.revision}: {r.status}")

        if pool is not None:
            results += pool.run(todo, on_result=tick)
        else:
            with Pool(settings, text, min(n_actors, len(todo)), gpus_per_actor, max_attempts) as fresh:
                results += fresh.run(todo, on_result=tick)
    marked = mark_duplicates(store, {s.name for s in manifest.series})
    for r in results:
        if marked.get((r.series, r.revision), "ok") != "ok":
            r.status, r.reason = "duplicate", marked[(r.series, r.revision)]
    return results


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
              "(left out of Appendix A)" for r in results if r.status == "duplicate"]
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
