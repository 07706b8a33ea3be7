"""Probe one revision of a public checkpoint series (SPEC §7), without Ray.

A ``Job`` names one revision (hub repo + revision, or a local folder); ``probe_revision``
fetches or opens it, loads the model and its own tokenizer, builds the fixed probe
windows (``probe_windows``) and returns one metrics dict per layer
(``metrics.hf_probe.probe_hf_model``); ``checkpoint_rows`` turns that into rows of the
``checkpoints`` table. ``sweep.extension`` runs these in a pool of Ray actors.
"""

from __future__ import annotations

import gc
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from model.plugins import Plugins
from sweep.cli import at_least, positive
from sweep.extension.checkpoint_series import Manifest
from sweep.extension.hub import transient_hub_error
from sweep.extension.integrity import weights_sha256
from sweep.store.schema import CHECKPOINT_METRICS, SCHEMA_VERSION

#: Files a revision needs: weights (safetensors when the revision has them), config, tokenizer.
CONFIG_PATTERNS = ["*.json", "*.txt", "*.model", "*.tiktoken"]

FETCH_RETRIES = 3
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

    def __post_init__(self) -> None:
        """Each value on its own, named by its flag."""
        at_least("--n-seqs", self.n_seqs, 1)
        at_least("--seq-len", self.seq_len, 2)
        positive("--cpus-per-actor", self.cpus)


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


def fetch_revision(repo: str, revision: str, cache_dir: str | None, retries: int = FETCH_RETRIES,
                   allow_pickle: bool = False) -> str:
    """Download one revision's weights, config and tokenizer; return the local snapshot folder.

    Safetensors only; pickled ``*.bin`` weights (a pickle can run code) only with
    ``allow_pickle`` and when the revision has no safetensors. ``config.json`` comes first,
    alone: a revision without one or of an unsupported ``model_type`` is refused before any
    weight is downloaded. A missing repository or revision is a ``RevisionError`` at once;
    network errors are retried.
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
            if any(f.endswith(".safetensors") for f in files):
                weights = ["*.safetensors"]
            elif allow_pickle:
                weights = ["*.bin"]
            else:
                raise RevisionError(f"{repo}@{revision} has no safetensors weights; {PICKLE_HINT}")
            if "config.json" not in files:
                raise RevisionError(f"{repo}@{revision} has no config.json")
            head = snapshot_download(repo, revision=revision, cache_dir=cache_dir, allow_patterns=["config.json"])
            check_model_type(Path(head) / "config.json")  # before any weight is downloaded
            return snapshot_download(
                repo, revision=revision, cache_dir=cache_dir, allow_patterns=weights + CONFIG_PATTERNS
            )
        except RevisionError:
            raise
        except RevisionNotFoundError:
            raise RevisionError(f"revision {revision!r} does not exist in {repo}") from None
        except (RepositoryNotFoundError, GatedRepoError) as exc:
            raise RevisionError(f"repository {repo} is not available: {type(exc).__name__}") from None
        except EntryNotFoundError as exc:  # also "hub answered 503, nothing cached": that one is retried
            if not transient_hub_error(exc):
                raise RevisionError(f"{repo}@{revision}: {exc}") from None
            last = exc
        except Exception as exc:  # network trouble: back off and retry
            last = exc
        if attempt + 1 < retries:
            time.sleep(2.0 * 2**attempt)
    raise RevisionError(f"could not fetch {repo}@{revision} after {retries} tries: {last}")


def model_dir(job: Job, settings: ProbeSettings) -> str:
    """Local folder of the job's model: its ``path`` (a hub-cache root resolved to its snapshot,
    see ``resolve_snapshot``), or a hub snapshot."""
    if job.path is not None:
        if not Path(job.path).is_dir():
            raise RevisionError(f"local path does not exist: {job.path}")
        return resolve_snapshot(job.path, job.revision)
    if job.repo is None:
        raise RevisionError("revision has neither repo nor path")
    return fetch_revision(job.repo, job.revision, settings.hf_cache, allow_pickle=settings.allow_pickle)


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


def has_tokenizer_files(folder: str) -> bool:
    """Whether ``folder`` holds one of ``TOKENIZER_FILES`` (all of a group)."""
    root = Path(folder)
    return any(all(any(root.glob(name)) for name in group) for group in TOKENIZER_FILES)


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


def weight_files(folder: str, allow_pickle: bool = False) -> list[Path]:
    """The revision's safetensors files; its ``*.bin`` pickles only with ``allow_pickle``."""
    safe = sorted(Path(folder).glob("*.safetensors"))
    if safe:
        return safe
    pickled = sorted(p for p in Path(folder).glob("*.bin") if p.name != "training_args.bin")
    if not pickled:
        raise RevisionError(f"no weights (*.safetensors) in {folder}")
    if not allow_pickle:
        raise RevisionError(f"{folder} has only pickled weights ({pickled[0].name}); {PICKLE_HINT}")
    return pickled


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
         "dtype": row.get("dtype"), "status": "ok", "reason": None, **tail, "weights_sha256": row.get("weights_sha256")}
        for row in layers
    ]


def probe_revision(job: Job, text: str, settings: ProbeSettings, device: torch.device) -> list[dict[str, float]]:
    """Fetch (or open), check, load, tokenize and probe one revision; free the model afterwards.

    The cheap checks (``check_revision``) run before the weights are hashed or loaded.
    """
    from transformers import AutoModelForCausalLM

    from metrics.hf_probe import probe_hf_model

    folder = model_dir(job, settings)
    check_revision(folder, job, settings)
    files = weight_files(folder, settings.allow_pickle)
    digest = weights_sha256(files, allow_pickle=settings.allow_pickle)
    dtype = torch.float32  # on every device (SPEC §7): bf16 on CUDA moved pr_q − pr_k by up to ~2 %
    model = None
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, trust_remote_code=False,
                                                     use_safetensors=files[0].suffix == ".safetensors")
        tokenizer = load_tokenizer(folder, job, settings)
        ids = probe_windows(tokenizer, text, settings.n_seqs, settings.seq_len).to(device)
        model.to(device)
        return [{**row, "weights_sha256": digest} for row in probe_hf_model(model, ids)]
    finally:
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
