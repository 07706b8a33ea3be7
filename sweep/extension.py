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

Probe text: the same fixed windows for every revision (``probe_windows``):
``--n-seqs`` sequences of ``--seq-len`` tokens in the model's native
tokenizer, one starting at each of ``--n-seqs`` evenly spaced character
offsets of the text (default: the embedded ``stdlib-docs`` corpus), without
special tokens, at positions 0..T−1.
"""

from __future__ import annotations

import argparse
import gc
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

from sweep.checkpoint_series import (
    DEFAULT_REVISIONS,
    SERIES,
    Manifest,
    build_manifest,
    load_manifest,
    write_manifest,
)
from sweep.schema import CHECKPOINT_METRICS, SCHEMA_VERSION
from sweep.store import Store, sweep_lock

#: Files a revision needs: weights (safetensors when the revision has them), config, tokenizer.
CONFIG_PATTERNS = ["*.json", "*.txt", "*.model", "*.tiktoken"]
#: Ray's own retries of a task whose actor died (bounded: see the module docstring).
TASK_RETRIES = 2
FETCH_RETRIES = 3


@dataclass(frozen=True)
class Job:
    """One revision to probe; ``progress`` is tokens (or steps) scaled to [0, 1] within its series."""

    series: str
    revision: str
    repo: str | None
    path: str | None
    step: int | None
    tokens: int | None
    progress: float | None


@dataclass(frozen=True)
class ProbeSettings:
    """What every actor needs: the store, the probe batch shape and the hub cache."""

    store: str
    n_seqs: int = 16
    seq_len: int = 128
    hf_cache: str | None = None  # None = huggingface_hub's default cache, shared by a node's actors
    threads: int = 1


@dataclass
class JobResult:
    series: str
    revision: str
    status: str  # ok / failed / skipped
    reason: str | None = None
    n_layers: int = 0
    seconds: float = 0.0
    pid: int | None = None


def absolute_uri(uri: str) -> str:
    """Actors may run in another working directory: make a local store path absolute."""
    return uri if "://" in uri else str(Path(uri).resolve())


class RevisionError(RuntimeError):
    """A revision cannot be probed (missing path or revision, unsupported model, …)."""


# --- jobs from a manifest -------------------------------------------------------------------


def jobs_from_manifest(manifest: Manifest) -> list[Job]:
    """One job per revision; progress = tokens / max tokens of the series in the manifest.

    A series without tokens falls back to step / max step (equal when tokens per
    step is constant). A revision with neither is at progress 1.0 if it is the
    series' only revision and named ``main`` (an endpoint), else null.
    """
    jobs = []
    for s in manifest.series:
        max_tokens = max((r.tokens for r in s.revisions if r.tokens is not None), default=None)
        max_step = max((r.step for r in s.revisions if r.step is not None), default=None)
        for r in s.revisions:
            progress = None
            if r.tokens is not None and max_tokens:
                progress = r.tokens / max_tokens
            elif r.tokens is not None and max_tokens == 0:
                progress = 0.0
            elif r.step is not None and max_step:
                progress = r.step / max_step
            elif r.revision == "main" and len(s.revisions) == 1:
                progress = 1.0
            jobs.append(Job(s.name, r.revision, r.repo, r.path, r.step, r.tokens, progress))
    return jobs


def done_revisions(store: Store) -> set[tuple[str, str]]:
    """(series, revision) pairs whose rows in the store have status ok."""
    df = store.read("checkpoints", columns=["series", "revision", "status"])
    ok = df[df["status"] == "ok"]
    return set(zip(ok["series"], ok["revision"], strict=True))


# --- what one actor does --------------------------------------------------------------------


def probe_windows(tokenizer: Any, text: str, n_seqs: int, seq_len: int) -> torch.Tensor:
    """[n_seqs, seq_len] int64 token ids: sequence i is the first ``seq_len`` tokens of the
    i-th of ``n_seqs`` equal character slices of ``text`` (no special tokens)."""
    if n_seqs < 1 or seq_len < 2:
        raise ValueError(f"need n_seqs >= 1 and seq_len >= 2, got {n_seqs}, {seq_len}")
    width = len(text) // n_seqs
    rows = []
    for i in range(n_seqs):
        start, end = i * width, (i + 1) * width
        span = min(width, 8 * seq_len)
        while True:
            ids = tokenizer(text[start : start + span], add_special_tokens=False)["input_ids"]
            if len(ids) >= seq_len or start + span >= end:
                break
            span = min(2 * span, end - start)
        if len(ids) < seq_len:
            raise ValueError(
                f"probe text too short: slice {i} of {n_seqs} ({width} characters) gives "
                f"{len(ids)} < seq_len={seq_len} tokens"
            )
        rows.append(ids[:seq_len])
    return torch.tensor(rows, dtype=torch.long)


def fetch_revision(repo: str, revision: str, cache_dir: str | None, retries: int = FETCH_RETRIES) -> str:
    """Download one revision's weights, config and tokenizer; return the local snapshot folder.

    Safetensors are fetched when the revision has them, else ``*.bin``. A missing
    repository or revision is a ``RevisionError`` at once; network errors are retried.
    """
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    last: Exception | None = None
    for attempt in range(retries):
        try:
            files = HfApi().list_repo_files(repo, revision=revision)
            weights = ["*.safetensors"] if any(f.endswith(".safetensors") for f in files) else ["*.bin"]
            return snapshot_download(
                repo, revision=revision, cache_dir=cache_dir, allow_patterns=weights + CONFIG_PATTERNS
            )
        except RevisionNotFoundError:
            raise RevisionError(f"revision {revision!r} does not exist in {repo}") from None
        except (RepositoryNotFoundError, GatedRepoError) as exc:
            raise RevisionError(f"repository {repo} is not available: {type(exc).__name__}") from None
        except EntryNotFoundError as exc:
            raise RevisionError(f"{repo}@{revision}: {exc}") from None
        except Exception as exc:  # network trouble: back off and retry
            last = exc
            if attempt + 1 < retries:
                time.sleep(2.0 * 2**attempt)
    raise RevisionError(f"could not fetch {repo}@{revision} after {retries} tries: {last}")


def model_dir(job: Job, settings: ProbeSettings) -> str:
    """Local folder of the job's model: its ``path``, or a hub snapshot."""
    if job.path is not None:
        if not Path(job.path).is_dir():
            raise RevisionError(f"local path does not exist: {job.path}")
        return job.path
    if job.repo is None:
        raise RevisionError("revision has neither repo nor path")
    return fetch_revision(job.repo, job.revision, settings.hf_cache)


def load_tokenizer(folder: str, job: Job, settings: ProbeSettings) -> Any:
    """The revision's own tokenizer, else (hub revisions only) the repository's ``main`` one."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError) as exc:
        if job.repo is None or job.revision == "main":
            raise RevisionError(f"no tokenizer in {folder}: {exc}") from None
    return AutoTokenizer.from_pretrained(fetch_revision(job.repo, "main", settings.hf_cache))


def checkpoint_rows(job: Job, layers: list[dict[str, float]] | None, reason: str | None = None) -> list[dict]:
    """Rows of the ``checkpoints`` table for one revision: per layer, or one failed row."""
    base = {
        "series": job.series, "repo": job.repo, "revision": job.revision, "step": job.step,
        "tokens": job.tokens, "progress": job.progress,
    }
    tail = {"schema_version": SCHEMA_VERSION}
    if layers is None:
        return [{**base, "layer": None, **dict.fromkeys(CHECKPOINT_METRICS), "status": "failed",
                 "reason": reason, **tail}]
    return [
        {**base, "layer": int(row["layer"]), **{c: float(row[c]) for c in CHECKPOINT_METRICS},
         "status": "ok", "reason": None, **tail}
        for row in layers
    ]


def probe_revision(job: Job, text: str, settings: ProbeSettings, device: torch.device) -> list[dict[str, float]]:
    """Fetch (or open), load, tokenize and probe one revision; free the model afterwards."""
    from transformers import AutoModelForCausalLM

    from metrics.hf_probe import SUPPORTED_MODEL_TYPES, probe_hf_model

    folder = model_dir(job, settings)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = None
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=False)
        if model.config.model_type not in SUPPORTED_MODEL_TYPES:
            raise RevisionError(f"model_type {model.config.model_type!r} is not supported")
        limit = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
        if limit is not None and settings.seq_len > limit:
            raise RevisionError(f"seq_len {settings.seq_len} exceeds the model's {limit} positions")
        tokenizer = load_tokenizer(folder, job, settings)
        ids = probe_windows(tokenizer, text, settings.n_seqs, settings.seq_len).to(device)
        model.to(device)
        return probe_hf_model(model, ids)
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


@ray.remote(max_restarts=-1, max_task_retries=TASK_RETRIES)
class ProbeActor:
    """Probes revisions one at a time and writes each one's rows to the store."""

    def __init__(self, settings: ProbeSettings, text: str) -> None:
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
        gpus = self.gpus_per_actor
        if gpus is None:
            gpus = 0.25 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0
        self._text_ref = ray.put(self.text)
        options = {"num_cpus": self.settings.threads, "num_gpus": gpus}
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
    one result per revision, skipped ones included.
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
            return results + pool.run(todo, on_result=tick)
        with Pool(settings, text, min(n_actors, len(todo)), gpus_per_actor, max_attempts) as fresh:
            return results + fresh.run(todo, on_result=tick)


def summarize(results: list[JobResult]) -> dict[str, dict[str, int]]:
    """Per series: how many revisions were done, skipped and failed."""
    out: dict[str, dict[str, int]] = {}
    for r in results:
        counts = out.setdefault(r.series, {"done": 0, "skipped": 0, "failed": 0})
        counts["done" if r.status == "ok" else r.status] += 1
    return out


def format_summary(summary: dict[str, dict[str, int]], results: list[JobResult]) -> str:
    lines = [f"{'series':<16} {'done':>5} {'skipped':>8} {'failed':>7}"]
    lines += [f"{s:<16} {c['done']:>5} {c['skipped']:>8} {c['failed']:>7}" for s, c in summary.items()]
    lines += [f"  failed {r.series}@{r.revision}: {r.reason}" for r in results if r.status == "failed"]
    return "\n".join(lines)


# --- command line ---------------------------------------------------------------------------


def default_probe_text() -> str:
    """The embedded ``stdlib-docs`` corpus (SPEC §2)."""
    from model.corpus import stdlib_docs_text

    return stdlib_docs_text()


def init_ray(address: str | None, num_cpus: int | None, num_gpus: int | None) -> bool:
    """Connect to ``address`` or start a local Ray; True when this call started it (then stop it)."""
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False)
    return True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sweep.extension", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group()
    src.add_argument("--manifest", help="JSON manifest of revisions (see sweep/checkpoint_series.py)")
    src.add_argument("--series", nargs="+", choices=sorted(SERIES), metavar="NAME",
                     help=f"series from the registry (default: all): {', '.join(SERIES)}")
    p.add_argument("--revisions", type=int, default=DEFAULT_REVISIONS,
                   help="revisions per series, log-uniform over training (endpoint-only series: 1)")
    p.add_argument("--write-manifest", metavar="FILE", help="save the manifest used, for a rerun")
    p.add_argument("--store", default="runs/store", help="store root URI (default runs/store)")
    p.add_argument("--actors", type=int, default=2, help="probe actors")
    p.add_argument("--gpus-per-actor", type=float, default=None,
                   help="GPU fraction per actor (default 0.25 when the cluster has GPUs, else 0)")
    p.add_argument("--cpus-per-actor", type=int, default=1, help="CPUs (torch threads) per actor")
    p.add_argument("--text", help="probe text file (default: the embedded stdlib-docs corpus)")
    p.add_argument("--n-seqs", type=int, default=16, help="probe sequences")
    p.add_argument("--seq-len", type=int, default=128, help="tokens per probe sequence")
    p.add_argument("--hf-cache", help="hub cache shared by the actors of a node (default: HF's own)")
    p.add_argument("--max-attempts", type=int, default=2, help="tries of a revision whose actor keeps dying before it is recorded as failed")
    p.add_argument("--force", action="store_true", help="redo revisions already in the store")
    p.add_argument("--address", help="Ray cluster address (default: start a local Ray)")
    p.add_argument("--num-cpus", type=int, help="CPUs of a local Ray (default: all)")
    p.add_argument("--num-gpus", type=int, help="GPUs of a local Ray (default: detected)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    store_uri = absolute_uri(args.store)
    store = Store(store_uri)
    store.check_writable()
    if args.manifest:
        manifest = load_manifest(args.manifest)
    else:
        try:
            manifest = build_manifest(args.series or list(SERIES), args.revisions)
        except Exception as exc:  # the hub listing needs the network
            raise SystemExit(f"cannot list the series' revisions on the hub ({type(exc).__name__}: {exc}); "
                             "without network access pass --manifest with local paths") from None
    if args.write_manifest:
        write_manifest(manifest, args.write_manifest)
    text = Path(args.text).read_text() if args.text else default_probe_text()
    n_revs = sum(len(s.revisions) for s in manifest.series)
    print(f"[extension] {len(manifest.series)} series, {n_revs} revisions -> {store_uri}")
    settings = ProbeSettings(store_uri, args.n_seqs, args.seq_len, args.hf_cache, args.cpus_per_actor)
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
