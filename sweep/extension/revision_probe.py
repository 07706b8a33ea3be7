"""Probe one revision of a public checkpoint series (SPEC §7), without Ray.

A ``Job`` names one revision (hub repo + revision, or a local folder); ``probe_revision``
fetches or opens it, checks that its weight files (the loader's: ``weight_set``) load into the
model as shipped, hashes them (every parameter finite), loads its own tokenizer, builds the fixed
probe windows (``probe_windows``, their ids checked against the embedding) and returns one metrics
dict per layer — the whole model (``metrics.hf_probe.probe_hf_model``) or one decoder block at a
time (``metrics.hf_stream.probe_streamed``), as the job's ``mode`` says; ``checkpoint_rows`` turns
that into rows of the ``checkpoints`` table, with the probe settings (``sweep.extension.record``).
A hub revision is downloaded file by file from its listing (``sweep.extension.listing``), within
the disk budget when there is one (``sweep.extension.disk``), and what this run downloaded is
deleted after its probe.
``sweep.extension`` runs these as Ray tasks.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from metrics.hf_files import (
    CheckpointError,
    KeyMap,
    WeightSet,
    check_loading_info,
    key_map,
    local_weights,
    tensor_table,
)
from model.plugins import Plugins
from sweep.cli import at_least, positive
from sweep.extension.checkpoint_series import Manifest
from sweep.extension.disk import DISK_WAIT, DiskLedger, default_cache
from sweep.extension.hub import with_hub_retries
from sweep.extension.integrity import weights_sha256
from sweep.extension.listing import HubFile, Listing, list_revision
from sweep.extension.record import ProbeRecord
from sweep.store.schema import CHECKPOINT_METRICS, SCHEMA_VERSION

FETCH_RETRIES = 3
#: How a revision is probed: the whole model loaded, or one decoder block at a time.
ProbeMode = Literal["whole", "streamed"]
PROBE_MODES = ("auto", "whole", "streamed")
PICKLE_HINT = ("pickled *.bin weights can run code when loaded and load only with "
               "--allow-pickle-weights (for sources you trust)")


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
    listing: Listing | None = None  # a hub revision's files, listed before any download (the driver's)
    mode: ProbeMode = "whole"  # the whole model, or one decoder block at a time (metrics.hf_stream)
    memory: int | None = None  # bytes of memory its Ray task asks for (sweep.extension.plan)
    params: int | None = None  # the model's parameters (sweep.extension.plan; the projection prices it)
    group: str | None = None  # its series' set, the seed in it and what the set varies (SPEC §7 "Sets")
    seed: str | None = None
    varies: str | None = None


@dataclass(frozen=True)
class ProbeSettings:
    """What every actor needs: the store, the probe batch shape and the hub cache."""

    store: str
    n_seqs: int = 16
    seq_len: int = 128
    hf_cache: str | None = None  # None = huggingface_hub's default cache, shared by a node's actors
    threads: int = 1  # torch threads per actor
    allow_pickle: bool = False  # load pickled *.bin weights when a revision has no safetensors
    cpus: float | None = None  # Ray CPUs per actor (None: ``threads``)
    plugins: Plugins = Plugins()  # --plugin modules, imported again in every actor
    disk_budget: int | None = None  # bytes of hub downloads a cache may hold at once (None: no limit, kept)
    probe_mode: str = "auto"  # auto: streamed when the whole model does not fit memory_per_actor
    memory_per_actor: int | None = None  # bytes one probe may use (None: a node's share, sweep.extension.plan)
    disk_wait: float = DISK_WAIT  # seconds a revision waits for room in the disk budget before it fails

    def __post_init__(self) -> None:
        """Each value on its own, named by its flag."""
        from sweep.cli import UsageError

        at_least("--n-seqs", self.n_seqs, 1)
        at_least("--seq-len", self.seq_len, 2)
        positive("--cpus-per-actor", self.cpus)
        positive("--disk-budget", self.disk_budget)
        positive("--memory-per-actor", self.memory_per_actor)
        positive("--disk-wait", self.disk_wait)
        if self.probe_mode not in PROBE_MODES:
            raise UsageError(f"--probe-mode {self.probe_mode!r}: choose from {', '.join(PROBE_MODES)}")


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
            jobs.append(Job(s.name, r.revision, r.repo, r.path, r.step, r.tokens, progress,
                            group=s.group, seed=s.seed, varies=s.varies))
    return jobs




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


def revision_listing(repo: str, revision: str) -> Listing:
    """``list_revision``, its errors as one-line ``RevisionError``s (a missing repository or revision
    is one at once; transient errors were tried again)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return list_revision(repo, revision)
    except RevisionNotFoundError:
        raise RevisionError(f"revision {revision!r} does not exist in {repo}") from None
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise RevisionError(f"repository {repo} is not available: {type(exc).__name__}") from None
    except Exception as exc:
        raise RevisionError(f"could not list {repo}@{revision}: {type(exc).__name__}: {exc}") from None


def revision_files(repo: str, revision: str, listing: Listing, allow_pickle: bool = False
                   ) -> list[tuple[str, HubFile]]:
    """(commit, file) pairs a probe of ``repo@revision`` downloads: its config, tokenizer and weight
    files, and ``main``'s config and tokenizer files when it has no tokenizer of its own.

    A ``RevisionError`` when it has no config.json or no weights to load (pickles only without
    ``allow_pickle``).
    """
    try:
        loaded, pickles = listing.weights(allow_pickle), listing.weights(allow_pickle=True)
    except CheckpointError as exc:
        raise RevisionError(f"{repo}@{revision}: {exc}") from None
    if not loaded:
        if pickles:
            raise RevisionError(f"{repo}@{revision} has no safetensors weights; {PICKLE_HINT}")
        raise RevisionError(f"{repo}@{revision} has no weights (model.safetensors or model.safetensors.index.json)")
    if not listing.has("config.json"):
        raise RevisionError(f"{repo}@{revision} has no config.json")
    files = [(listing.commit, f) for f in listing.fetch(allow_pickle)]
    if revision != "main" and not has_tokenizer_files([f.path for f in listing.files]):
        main = revision_listing(repo, "main")
        files += [(main.commit, f) for f in main.configs()]
    return files


def download(repo: str, files: Sequence[tuple[str, HubFile]], cache_dir: str | Path | None) -> dict[str, str]:
    """Download ``files`` ((commit, file) pairs) into the hub cache; {commit: snapshot folder}.

    Each commit's ``config.json`` comes first, alone: an unsupported ``model_type`` is refused
    before any weight is downloaded. Transient errors are tried again (``with_hub_retries``).
    """
    from huggingface_hub import hf_hub_download

    first = sorted(files, key=lambda cf: cf[1].path != "config.json")
    folders: dict[str, str] = {}
    for commit, f in first:
        try:
            path = with_hub_retries(lambda c=commit, f=f: hf_hub_download(
                repo, f.path, revision=c, cache_dir=str(cache_dir) if cache_dir else None))
        except Exception as exc:
            raise RevisionError(f"could not download {f.path} of {repo}@{commit[:12]}: "
                                f"{type(exc).__name__}: {exc}") from None
        folders.setdefault(commit, str(Path(path).parent))
        if f.path == "config.json" and commit == first[0][0]:
            check_model_type(Path(path))  # before any weight is downloaded
    return folders


def fetch_revision(repo: str, revision: str, cache_dir: str | None, allow_pickle: bool = False) -> str:
    """Download one revision's weights, config and tokenizer (no disk budget); its snapshot folder.

    Safetensors only; pickled ``*.bin`` weights (a pickle can run code) only with
    ``allow_pickle`` and when the revision has no safetensors. ``config.json`` comes first,
    alone: a revision without one or of an unsupported ``model_type`` is refused before any
    weight is downloaded. A missing repository or revision is a ``RevisionError`` at once;
    network errors are retried.
    """
    listing = revision_listing(repo, revision)
    return download(repo, revision_files(repo, revision, listing, allow_pickle), cache_dir)[listing.commit]


def local_dir(job: Job) -> str:
    """Local folder of a ``path`` job (a hub-cache root resolved to its snapshot, see
    ``resolve_snapshot``)."""
    if job.path is None or not Path(job.path).is_dir():
        raise RevisionError(f"local path does not exist: {job.path}")
    return resolve_snapshot(job.path, job.revision)


def resolve_snapshot(path: str, revision: str) -> str:
    """``path`` itself, or — when it is a hub-cache root (``snapshots/<hash>/`` inside, no
    ``config.json``) — the snapshot that ``refs/<revision>`` names, else its only snapshot.
    Several snapshots and no matching ref: a ``RevisionError`` naming them."""
    root = Path(path)
    snapshots = root / "snapshots"
    if (root / "config.json").is_file() or not snapshots.is_dir():
        return path
    found = sorted(d.name for d in snapshots.iterdir() if d.is_dir())
    ref = root / "refs" / revision
    if ref.is_file() and ref.read_text().strip() in found:
        return str(snapshots / ref.read_text().strip())
    if len(found) == 1:
        return str(snapshots / found[0])
    if not found:
        raise RevisionError(f"{path} is a hub-cache root with no snapshot in {snapshots}")
    raise RevisionError(f"{path} is a hub-cache root with {len(found)} snapshots ({', '.join(found)}) and "
                        f"no refs/{revision}: give one {snapshots}/<hash> folder as the path")


#: Files one of which (or one pair) ``AutoTokenizer`` needs: fast, sentencepiece, BPE, WordPiece, tiktoken.
TOKENIZER_FILES: tuple[tuple[str, ...], ...] = (
    ("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"), ("vocab.txt",), ("*.tiktoken",),
)


def has_tokenizer_files(folder: str | Sequence[str]) -> bool:
    """Whether ``folder`` (or a list of file names) holds one of ``TOKENIZER_FILES`` (all of a group)."""
    import fnmatch

    names = [p.name for p in Path(folder).iterdir()] if isinstance(folder, str | Path) else list(folder)
    return any(all(fnmatch.filter(names, name) for name in group) for group in TOKENIZER_FILES)


def check_model_type(path: Path) -> None:
    """A ``RevisionError`` unless the ``config.json`` at ``path`` names a supported ``model_type``
    (read from the JSON alone, nothing else loaded)."""
    from metrics.hf_arch import UnsupportedArchitecture, adapter_for

    try:
        model_type = json.loads(path.read_text(encoding="utf-8")).get("model_type")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise RevisionError(f"{path} is not a readable JSON object: {exc}") from None
    try:
        adapter_for(model_type)
    except UnsupportedArchitecture as exc:
        raise RevisionError(str(exc)) from None


def check_revision(folder: str, job: Job, settings: ProbeSettings) -> Any:
    """The cheap checks, before any weight is hashed or loaded; returns the model's config.

    In order: ``config.json`` present and its ``model_type`` supported (refused from the
    JSON alone, naming the supported ones); the probe windows fit the model's positions
    and sliding-attention window; tokenizer files present (a hub revision may borrow
    ``main``'s); weight files present (``weight_files``).
    """
    from transformers import AutoConfig

    from metrics.hf_arch import attention_window

    path = Path(folder) / "config.json"
    if not path.is_file():
        hint = " (a hub-cache root? give its snapshots/<hash> folder)" if (Path(folder) / "blobs").is_dir() else ""
        raise RevisionError(f"no config.json in {folder}{hint}")
    check_model_type(path)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    if getattr(config, "transformers_weights", None):
        raise RevisionError(f"{path} names its own weight file (transformers_weights: "
                            f"{config.transformers_weights!r}): not supported by the probe")
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if limit is not None and settings.seq_len > limit:
        raise RevisionError(f"seq_len {settings.seq_len} exceeds the model's {limit} positions")
    window = attention_window(config)
    if window is not None and settings.seq_len > window:
        raise RevisionError(f"seq_len {settings.seq_len} exceeds the model's sliding-attention window {window}")
    if not has_tokenizer_files(folder) and (job.repo is None or job.revision == "main"):
        wanted = ", ".join(" + ".join(g) for g in TOKENIZER_FILES)
        raise RevisionError(f"no tokenizer files in {folder} (need one of: {wanted})")
    weight_files(folder, settings.allow_pickle)
    return config


def weight_set(folder: str, allow_pickle: bool = False) -> WeightSet:
    """The weight files ``from_pretrained`` loads from ``folder`` (``metrics.hf_files.local_weights``):
    ``model.safetensors``, else the shards its index names; pickles (``pytorch_model.bin`` or its index)
    only with ``allow_pickle`` and when there are no safetensors. Any other file is ignored."""
    try:
        found = local_weights(folder) or (local_weights(folder, pickled=True) if allow_pickle else None)
        pickled = None if found else local_weights(folder, pickled=True)
    except CheckpointError as exc:
        raise RevisionError(f"{exc} (in {folder})") from None
    if found is not None:
        return found
    if pickled is not None:
        raise RevisionError(f"{folder} has only pickled weights ({pickled.describe()}); {PICKLE_HINT}")
    stray = sorted(p.name for p in Path(folder).glob("*.safetensors"))
    also = f"; its {', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not what from_pretrained loads" if stray else ""
    raise RevisionError(f"no weights (model.safetensors or model.safetensors.index.json) in {folder}{also}")


def weight_files(folder: str, allow_pickle: bool = False) -> list[Path]:
    """The files of ``weight_set``."""
    return list(weight_set(folder, allow_pickle).files)


def load_tokenizer(folder: str, job: Job, fallback: str | None = None) -> Any:
    """The revision's own tokenizer, else (hub revisions only) the one in ``fallback`` (``main``'s)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError, TypeError) as exc:
        if fallback is None or job.repo is None or job.revision == "main":
            raise RevisionError(f"no tokenizer in {folder}: {exc}") from None
    return AutoTokenizer.from_pretrained(fallback)


def checkpoint_rows(job: Job, layers: list[dict[str, float]] | None, reason: str | None = None,
                    record: ProbeRecord | None = None) -> list[dict]:
    """Rows of the ``checkpoints`` table for one revision: per layer, or one failed row; ``record``: the
    probe settings every row carries (``sweep.extension.record``; None only for tests of other columns);
    every row also carries the job's set, seed and what the set varies."""
    base = {
        "series": job.series, "repo": job.repo, "revision": job.revision, "step": job.step,
        "tokens": job.tokens, "progress": job.progress,
    }
    tail = {"schema_version": SCHEMA_VERSION}
    stamp = (record.columns() if record is not None else {}) | {"group": job.group, "seed": job.seed,
                                                                "varies": job.varies}  # on failed rows too
    if layers is None:
        return [{**base, "layer": None, **dict.fromkeys(CHECKPOINT_METRICS), "status": "failed",
                 "reason": reason, **tail, **stamp}]
    return [
        {**base, "layer": int(row["layer"]), **{c: float(row[c]) for c in CHECKPOINT_METRICS},
         "dtype": row.get("dtype"), "status": "ok", "reason": None, **tail, "weights_sha256": row.get("weights_sha256"),
         **stamp}
        for row in layers
    ]


def probe_revision(job: Job, text: str, settings: ProbeSettings, device: torch.device) -> list[dict[str, float]]:
    """Fetch (or open), check, load, tokenize and probe one revision; free the model afterwards.

    A hub revision is downloaded from its listing (the job's, else listed now) within the disk
    budget when ``settings.disk_budget`` is set, and what this run downloaded for it is deleted
    when the probe ends (``DiskLedger.hold``). The cheap checks (``check_revision``) run before
    the weights are hashed or loaded.
    """
    if job.path is not None:
        return probe_folder(local_dir(job), job, text, settings, device)
    if job.repo is None:
        raise RevisionError("revision has neither repo nor path")
    listing = job.listing or revision_listing(job.repo, job.revision)
    files = revision_files(job.repo, job.revision, listing, settings.allow_pickle)
    cache = Path(settings.hf_cache) if settings.hf_cache else default_cache()
    ledger = DiskLedger(cache, settings.disk_budget, wait=settings.disk_wait) if settings.disk_budget else None
    what = f"{job.repo}@{job.revision}"
    with ledger.hold(job.repo, files, what) if ledger else nullcontext():
        folders = download(job.repo, files, cache)
        others = [f for c, f in folders.items() if c != listing.commit]
        return probe_folder(folders[listing.commit], job, text, settings, device, others[0] if others else None)


def probe_folder(folder: str, job: Job, text: str, settings: ProbeSettings, device: torch.device,
                 tokenizer_from: str | None = None) -> list[dict[str, float]]:
    """Check, hash, load and probe the revision in ``folder`` as ``job.mode`` says (whole model,
    or one decoder block at a time); ``tokenizer_from``: a folder with ``main``'s tokenizer.

    In both modes, before any forward pass: the weight files are the loader's (``weight_set``); they
    load into the model as shipped (``metrics.hf_files.key_map``: no key missing, unexpected or of
    another shape, every parameter floating point); every parameter is finite (checked while hashed);
    every probe token id has a row in the input embedding. Each failure names the tensor and its file.
    """
    from transformers import AutoModelForCausalLM

    from metrics.hf_probe import probe_hf_model
    from metrics.hf_stream import meta_model, probe_streamed

    config = check_revision(folder, job, settings)
    weights = weight_set(folder, settings.allow_pickle)
    meta = meta_model(config)
    table = tensor_table(weights.files)
    keys = key_map(meta, table, weights)
    digest = weights_sha256(weights.files, allow_pickle=settings.allow_pickle, finite=keys.stored_params())
    tokenizer = load_tokenizer(folder, job, tokenizer_from)
    ids = probe_windows(tokenizer, text, settings.n_seqs, settings.seq_len)
    check_vocabulary(ids, tokenizer, meta, keys, table)
    ids = ids.to(device)
    if job.mode == "streamed":
        if weights.pickled:
            raise RevisionError(f"{folder} has pickled weights only: the layer-streamed probe reads safetensors")
        return [{**row, "weights_sha256": digest} for row in probe_streamed(folder, ids, weights)]
    dtype = torch.float32  # on every device (SPEC §7): bf16 on CUDA moved pr_q − pr_k by up to ~2 %
    model = None
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            folder, dtype=dtype, trust_remote_code=False, use_safetensors=not weights.pickled,
            output_loading_info=True)
        check_loading_info(info, model, weights)  # what key_map found, as transformers itself saw it
        model.to(device)
        return [{**row, "weights_sha256": digest} for row in probe_hf_model(model, ids)]
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def check_vocabulary(ids: torch.Tensor, tokenizer: Any, model: torch.nn.Module, keys: KeyMap,
                     table: dict[str, Any]) -> None:
    """A ``RevisionError`` when a probe token id [B, T] has no row in the input embedding (the tokenizer
    is not the model's: the forward pass would fail, or read another token's row)."""
    embed = model.get_input_embeddings()
    key = next(f"{name}.weight" for name, m in model.named_modules() if m is embed)
    stored = keys.names[key]
    rows = table[stored].shape[0]
    top = int(ids.max())
    if top >= rows or int(ids.min()) < 0:
        bad = top if top >= rows else int(ids.min())
        token = tokenizer.convert_ids_to_tokens(bad) if bad >= 0 else None
        raise RevisionError(f"the tokenizer gives token id {bad} ({token!r}), beyond the {rows} rows of the input "
                            f"embedding {stored} in {table[stored].path.name}: tokenizer and model do not match")
