"""Checkpoint extension (SPEC §7): probe public checkpoint series with a pool of Ray actors.

``python -m sweep.extension --series pythia-70m --revisions 8 --store runs/store``
or ``--manifest FILE`` (see ``sweep.checkpoint_series``). Each revision becomes
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
failed revisions are tried again.

Probe text: the same fixed windows for every revision (``sweep.revision_probe.probe_windows``):
``--n-seqs`` sequences of ``--seq-len`` tokens in the model's native
tokenizer, one starting at each of ``--n-seqs`` evenly spaced character
offsets of the text (default: the embedded ``stdlib-docs`` corpus), without
special tokens, at positions 0..T−1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
import torch

from model.plugins import add_plugin_flag, load_plugins, preload
from sweep.checkpoint_series import (
    DEFAULT_REVISIONS,
    SERIES,
    Manifest,
    build_manifest,
    load_manifest,
    write_manifest,
)
from sweep.cli import (
    DEFAULT_STORE,
    UsageError,
    at_least,
    existing_path,
    flatten,
    gpu_fraction,
    name_list,
    parser,
    positive,
    read_text,
    run_cli,
)
from sweep.integrity import DUPLICATE_PREFIX, mark_duplicates
from sweep.ray_env import absolute_uri, default_gpus, init_ray, node_gpus
from sweep.revision_probe import (
    Job,
    ProbeSettings,
    checkpoint_rows,
    jobs_from_manifest,
    probe_revision,
)
from sweep.store import Store, sweep_lock

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
    """Probes revisions one at a time and writes each one's rows to the store."""

    def __init__(self, settings: ProbeSettings, text: str) -> None:
        load_plugins(settings.plugins)  # the driver's registrations, in this process too
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one "Loading weights" bar per revision is noise
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        torch.set_num_threads(max(1, settings.threads))
        self.settings = settings
        self.text = text
        self.store = Store(settings.store)
        gpu = bool(ray.get_gpu_ids()) and torch.cuda.is_available()
        self.device = torch.device("cuda" if gpu else "cpu")

    def probe(self, job: Job) -> JobResult:
        t0 = time.perf_counter()
        try:
            layers = probe_revision(job, self.text, self.settings, self.device)
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
    _text_ref: Any = field(default=None, init=False, repr=False)  # kept: restarted actors re-read it

    def start(self) -> Pool:
        self.settings = replace(self.settings, store=absolute_uri(self.settings.store))
        gpus = default_gpus(self.gpus_per_actor)
        self._text_ref = ray.put(self.text)
        options = {"num_cpus": self.settings.cpus or self.settings.threads, "num_gpus": gpus}
        self.actors = [
            ProbeActor.options(**options).remote(self.settings, self._text_ref) for _ in range(self.n_actors)
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
                inflight[self.actors[slot].probe.remote(job)] = (job, slot)

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
    (``sweep.integrity``).
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
    lines = [f"{'series':<16} {'done':>5} {'skipped':>8} {'failed':>7}"]
    lines += [f"{s:<16} {c['done']:>5} {c['skipped']:>8} {c['failed']:>7}" for s, c in summary.items()]
    lines += [f"  failed {r.series}@{r.revision}: {r.reason}" for r in results if r.status == "failed"]
    lines += [f"  {r.series}@{r.revision}: same weights as another revision, {r.reason} "
              "(left out of Appendix A)" for r in results if r.status == "duplicate"]
    return "\n".join(lines)


# --- command line ---------------------------------------------------------------------------


def default_probe_text() -> str:
    """The embedded ``stdlib-docs`` corpus (SPEC §2)."""
    from model.corpus import stdlib_docs_text

    return stdlib_docs_text()


PROG = "python -m sweep.extension"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    preload(argv, PROG)  # --plugin modules: their names are valid below
    p = parser(PROG, __doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--manifest", help="JSON manifest of revisions (see sweep/checkpoint_series.py)")
    src.add_argument("--series", type=name_list, nargs="+", metavar="NAME",
                     help=f"series from the registry, a,b or a b (default: all): {', '.join(SERIES)}")
    p.add_argument("--revisions", type=int, default=DEFAULT_REVISIONS,
                   help="revisions per series, log-uniform over training (endpoint-only series: 1)")
    p.add_argument("--write-manifest", metavar="FILE", help="save the manifest used, for a rerun")
    p.add_argument("--store", default=DEFAULT_STORE, help="Parquet store root: a path or s3://bucket/prefix")
    p.add_argument("--actors", type=int, default=2, help="probe actors (>= 1)")
    p.add_argument("--gpus-per-actor", type=float, default=None,
                   help="GPUs per actor, 0..one node's GPUs (default 0.25 when the cluster has GPUs, else 0)")
    p.add_argument("--cpus-per-actor", type=float, default=1.0,
                   help="CPUs per actor (> 0); torch threads = max(1, floor of it)")
    p.add_argument("--text", help="probe text, a UTF-8 file (default: the embedded stdlib-docs corpus)")
    p.add_argument("--n-seqs", type=int, default=16, help="probe sequences (>= 1)")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per probe sequence (>= 2)")
    p.add_argument("--hf-cache", help="hub cache shared by the actors of a node (default: HF's own)")
    p.add_argument("--max-attempts", type=int, default=2,
                   help="tries of a revision whose actor keeps dying before it is recorded as failed (>= 1)")
    p.add_argument("--allow-pickle-weights", action="store_true",
                   help="also load pickled *.bin weights when a revision has no safetensors "
                   "(a pickle can run code: only for repositories you trust)")
    p.add_argument("--force", action="store_true", help="redo revisions already in the store")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--num-cpus", type=int, help="CPUs of a local Ray, >= 1 (default: all)")
    p.add_argument("--num-gpus", type=int, help="GPUs of a local Ray, >= 0 (default: detected)")
    add_plugin_flag(p)
    args = p.parse_args(argv)
    args.series = flatten(args.series)
    if args.series is not None:
        args.series = list(args.series)
        bad = [s for s in args.series if s not in SERIES]
        if bad or not args.series:
            p.error(f"argument --series: invalid choice: {bad[0] if bad else ''!r} "
                    f"(choose from {', '.join(SERIES)})")
    return args


def check_args(args: argparse.Namespace) -> None:
    """Every value, before the store is touched or Ray starts."""
    at_least("--actors", args.actors, 1)
    at_least("--n-seqs", args.n_seqs, 1)
    at_least("--seq-len", args.seq_len, 2)
    at_least("--revisions", args.revisions, 1)
    at_least("--max-attempts", args.max_attempts, 1)
    positive("--cpus-per-actor", args.cpus_per_actor)
    at_least("--num-cpus", args.num_cpus, 1)
    at_least("--num-gpus", args.num_gpus, 0)
    if args.address and (args.num_cpus is not None or args.num_gpus is not None):
        raise UsageError(f"--num-cpus/--num-gpus size a local Ray; with --address {args.address} the "
                         "cluster's own resources are used (drop one of them)")
    node = None if args.address else node_gpus(args.num_gpus)
    gpu_fraction("--gpus-per-actor", args.gpus_per_actor, node)
    if args.write_manifest:
        parent = Path(args.write_manifest).resolve().parent
        if not parent.is_dir():
            raise UsageError(f"--write-manifest {args.write_manifest}: folder {parent} does not exist")


def main(argv: list[str] | None = None) -> int:
    """Probe the revisions; a bad value ends it with one line and exit status 2, before Ray starts."""
    return run_cli(PROG, argv, parse_args, _main)


def _main(args: argparse.Namespace) -> int:
    check_args(args)
    if args.manifest:
        existing_path("--manifest", args.manifest)
        manifest = load_manifest(args.manifest, require_paths=True)
    else:
        try:
            manifest = build_manifest(args.series or list(SERIES), args.revisions)
        except Exception as exc:  # the hub listing needs the network
            raise UsageError(f"cannot list the series' revisions on the hub ({type(exc).__name__}: {exc}); "
                             "without network access pass --manifest with local paths") from None
    text = read_text("--text", args.text) if args.text else default_probe_text()
    if args.text and len(text) < args.n_seqs:
        raise UsageError(f"--text {args.text}: {len(text)} characters cannot give --n-seqs {args.n_seqs} "
                         "sequences")
    store_uri = absolute_uri(args.store)
    store = Store(store_uri)
    store.check_writable()
    if args.write_manifest:
        write_manifest(manifest, args.write_manifest)
    n_revs = sum(len(s.revisions) for s in manifest.series)
    print(f"[extension] {len(manifest.series)} series, {n_revs} revisions -> {store_uri}")
    settings = ProbeSettings(store_uri, args.n_seqs, args.seq_len, args.hf_cache,
                             max(1, int(args.cpus_per_actor)), args.allow_pickle_weights,
                             args.cpus_per_actor, tuple(args.plugin))
    started = init_ray(args.address, args.num_cpus, args.num_gpus)
    try:
        with sweep_lock(store, "extension"):
            results = run_extension(manifest, settings, text, args.actors, args.gpus_per_actor,
                                    args.force, args.max_attempts)
    finally:
        if started:
            ray.shutdown()
    print(format_summary(summarize(results), results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
