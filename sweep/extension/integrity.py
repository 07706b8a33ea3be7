"""Checkpoint integrity: a content hash per revision, and revisions that repeat another's weights.

Public series do serve wrong weights (EleutherAI/pythia#83, #195, #205, #206:
e.g. 86 of 154 pythia-2.8b step branches serve final-era weights, some as
``.bin`` where others have ``.safetensors``). ``weights_sha256`` is therefore a
digest of the weights' *values*, not of their files:

- tensors in name order (across all shards), each as its name, its shape and
  its values in a canonical dtype — every floating dtype as float32
  (little-endian, NaNs canonical), integers as int64, booleans as uint8 — so
  one model saved as one ``.safetensors`` file, as sharded safetensors or as a
  pickled ``.bin`` state dict (read with ``torch.load(weights_only=True)``,
  only with ``allow_pickle``) gets one digest, and so do identical values
  stored as float16 in one revision and float32 in another;
- float32 holds every float16 and bfloat16 value exactly, so casting loses
  nothing: a bfloat16 *copy* of float32 weights has other values (rounded) and
  another digest — on purpose: the probe would measure other numbers. float64
  tensors hash as float32 only when that is exact, otherwise as float64;
- names that share one storage in a pickle (a tied input/output embedding: a
  pickle stores ``lm_head.weight`` as an alias of the embedding, a safetensors
  file stores it once) count once, under the name that sorts last — the input
  embedding in every supported family (``model.embed_tokens`` > ``lm_head``,
  ``gpt_neox.embed_in`` > ``embed_out``, ``transformer.wte`` > ``lm_head``),
  the name transformers' safetensors writer keeps;
- file names, file metadata and extra files do not enter (only the files
  ``from_pretrained`` loads are hashed: ``metrics.hf_files``); every tensor a file
  stores does (an old checkpoint that also stores a buffer, e.g. GPT-2's causal
  mask ``attn.bias``, hashes differently from one without it).

Tensors are read one at a time (safetensors through ``safe_open``, the file
opened for each tensor and closed after it, so the pages a read touched do not
stay in the process's resident memory; pickles memory-mapped) and cast in
chunks, so hashing needs about one tensor's memory, not a second copy of the
model. Fast path: the same bytes give the same value
digest, so a process remembers the digest of every file set it hashed, keyed by
each file's byte identity — in a Hugging Face cache the blob name (for weight
files, the sha256 of the bytes: branches serving the same file share one
blob), else (real path, size, mtime) — and returns it without reading again.

Stores written before value digests (the first stores) hold byte digests in
``weights_sha256``: probe their revisions again (``--force``) before comparing
them with new ones.

``mark_duplicates`` then gives every revision of a series whose digest another
revision of it already has the status ``duplicate_of:<revision>``, pointing at
the revision with the highest step (progress) of the group — the one whose
weights those are in the pythia case — and the reducer leaves it out of
Appendix A's fits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import struct
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from metrics.hf_files import CheckpointError, open_safetensors, read_pickle
from sweep.store import Store

DUPLICATE_PREFIX = "duplicate_of:"
#: First bytes hashed: names the canonical form, so a change of it changes every digest.
DIGEST_FORMAT = b"qkgeom-weights-values-v1\0"
#: Elements cast and hashed at a time (16 MiB as float32).
_CHUNK = 1 << 22
#: file-set identity -> value digest, for this process (the fast path).
_MEMO: dict[tuple, str] = {}
_MEMO_SIZE = 256
_BLOB = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def weights_sha256(files: Iterable[str | Path], allow_pickle: bool = False,
                   finite: Collection[str] | None = None) -> str:
    """sha256 of the weights' values: (name, shape, values as canonical dtype) per tensor, by name.

    ``files``: the revision's weight files as ``from_pretrained`` loads them (``metrics.hf_files``:
    ``model.safetensors`` or an index's shards; its pickled ``*.bin`` state dicts only with
    ``allow_pickle``). See the module docstring for the canonical form. ``finite``: tensor names whose
    values must be finite (the model's parameters): a NaN or an infinity among them is a
    ``CheckpointError`` naming the tensor and its file, found in the same pass that hashes them.
    """
    paths = sorted({Path(f) for f in files}, key=str)
    if not paths:
        raise ValueError("no weight files to hash")
    pickled = [p.name for p in paths if p.suffix != ".safetensors"]
    if pickled and not allow_pickle:
        raise ValueError(f"{pickled[0]} is a pickle; hashing it loads it: needs allow_pickle")
    checked = frozenset(finite or ())
    key = (tuple(_byte_identity(p) for p in paths), hashlib.sha256("\0".join(sorted(checked)).encode()).hexdigest())
    if key in _MEMO:
        return _MEMO[key]
    digest = hashlib.sha256(DIGEST_FORMAT)
    with _tensor_readers(paths) as readers:
        for name in sorted(readers):
            path, read = readers[name]
            _hash_tensor(digest, name, read(), path if name in checked else None)
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.pop(next(iter(_MEMO)))
    _MEMO[key] = out = digest.hexdigest()
    return out


def files_sha256(files: Iterable[str | Path]) -> str:
    """sha256 over (file name, bytes) of the files, in name order: the byte digest, for comparison."""
    digest = hashlib.sha256()
    for path in sorted(map(Path, files), key=lambda p: p.name):
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def _byte_identity(path: Path) -> tuple:
    """What makes two files the same bytes without reading them: a hub-cache blob name, else
    (real path, size, mtime)."""
    real = Path(os.path.realpath(path))
    if real.parent.name == "blobs" and _BLOB.fullmatch(real.name):
        return ("blob", real.name)
    stat = real.stat()
    return ("file", str(real), stat.st_size, stat.st_mtime_ns)


@contextlib.contextmanager
def _tensor_readers(paths: list[Path]) -> Iterator[dict[str, tuple[Path, Callable[[], torch.Tensor]]]]:
    """{tensor name: (its file, a function reading it)}, over all files; a name in two files, or a file
    that cannot be read, is a ``CheckpointError`` naming the file."""
    readers: dict[str, tuple[Path, Callable[[], torch.Tensor]]] = {}

    def add(name: str, path: Path, read: Callable[[], torch.Tensor]) -> None:
        if name in readers:
            raise CheckpointError(f"tensor {name!r} is in both {readers[name][0].name} and {path.name}")
        readers[name] = (path, read)

    def read_one(path: Path, name: str) -> torch.Tensor:
        with open_safetensors(path) as handle:  # closed again: its pages leave the process
            return handle.get_tensor(name)

    for path in paths:
        if path.suffix == ".safetensors":
            with open_safetensors(path) as handle:
                names = list(handle.keys())
            for name in names:
                add(name, path, lambda p=path, n=name: read_one(p, n))
        else:
            for name, tensor in _load_pickle(path).items():
                add(name, path, lambda t=tensor: t)
    yield readers


def _load_pickle(path: Path) -> dict[str, torch.Tensor]:
    """A pickled state dict (``metrics.hf_files.read_pickle``), tied aliases counted once."""
    state = read_pickle(path)
    groups: dict[tuple, list[str]] = defaultdict(list)
    for name, t in state.items():  # empty tensors hold no storage to share: each is its own
        view = (t.untyped_storage().data_ptr(), t.storage_offset(), t.dtype, tuple(t.shape), t.stride())
        groups[view if t.numel() else ("empty", name)].append(name)
    return {max(names): state[max(names)] for names in groups.values()}


def _hash_tensor(digest: hashlib._Hash, name: str, tensor: torch.Tensor, finite_in: Path | None = None) -> None:
    """Feed one tensor's name, canonical kind, shape and canonical values to ``digest``; with
    ``finite_in`` (its file), a floating tensor with a NaN or infinity is a ``CheckpointError``."""
    tag, dtype, np_dtype = _canonical(tensor)
    encoded = name.encode()
    shape = tuple(tensor.shape)
    digest.update(struct.pack("<Q", len(encoded)) + encoded + tag
                  + struct.pack(f"<Q{len(shape)}Q", len(shape), *shape))
    flat = tensor.reshape(-1)
    bad = 0
    for start in range(0, flat.numel(), _CHUNK):
        chunk = flat[start : start + _CHUNK].to(dtype)
        # a sum is finite only when every value is (NaN and ±inf propagate; overflow merely sends it to the count)
        if finite_in is not None and dtype.is_floating_point and not torch.isfinite(chunk.sum()):
            bad += int((~torch.isfinite(chunk)).sum())
        if dtype.is_floating_point:
            nan = torch.isnan(chunk)
            if nan.any():
                chunk = chunk.masked_fill(nan, float("nan"))
        digest.update(np.ascontiguousarray(chunk.numpy(), dtype=np_dtype).data)
    if bad:
        raise CheckpointError(f"{name} in {finite_in.name} holds {bad} non-finite value{'s' if bad > 1 else ''} "
                              f"(NaN or infinity) of {flat.numel()}")


def _canonical(tensor: torch.Tensor) -> tuple[bytes, torch.dtype, str]:
    """(tag, torch dtype, little-endian numpy dtype) a tensor's values are hashed in."""
    if tensor.dtype == torch.bool:
        return b"b1", torch.uint8, "<u1"
    if tensor.dtype.is_complex:
        return b"c16", torch.complex128, "<c16"
    if not tensor.dtype.is_floating_point:
        return b"i8", torch.int64, "<i8"
    if tensor.dtype == torch.float64:
        flat = tensor.reshape(-1)
        exact = all(
            bool(((c.float().double() == c) | torch.isnan(c)).all())
            for c in (flat[i : i + _CHUNK] for i in range(0, flat.numel(), _CHUNK))
        )
        if not exact:
            return b"f8", torch.float64, "<f8"
    return b"f4", torch.float32, "<f4"


def duplicate_status(revisions: pd.DataFrame) -> dict[str, str]:
    """{revision: "duplicate_of:<rev>"} for one series' revisions (columns revision, step,
    progress, weights_sha256, status ``ok`` or already a duplicate)."""
    live = revisions[revisions["weights_sha256"].notna()]
    live = live.assign(_order=live["progress"].fillna(live["step"]).fillna(-1.0))
    out: dict[str, str] = {}
    for _, group in live.groupby("weights_sha256"):
        if group["revision"].nunique() < 2:
            continue
        keep = group.sort_values(["_order", "revision"]).iloc[-1]["revision"]
        for rev in group["revision"].unique():
            if rev != keep:
                out[str(rev)] = f"{DUPLICATE_PREFIX}{keep}"
    return out


def mark_duplicates(store: Store, series: Iterable[str]) -> dict[tuple[str, str], str]:
    """Rewrite the rows of repeated revisions of ``series`` with ``duplicate_of:<revision>``
    (and earlier duplicates that no longer repeat back to ``ok``); return {(series, revision): status}."""
    names = set(series)
    by_rev: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in store.scan("checkpoints").table.to_pylist():
        if row["series"] in names and (row["status"] == "ok" or row["status"].startswith(DUPLICATE_PREFIX)):
            by_rev[(row["series"], row["revision"])].append(row)
    changed: dict[tuple[str, str], str] = {}
    for name in names:
        revs = {rev: rows for (s, rev), rows in by_rev.items() if s == name}
        if not revs:
            continue
        frame = pd.DataFrame([{k: rows[0][k] for k in ("revision", "step", "progress", "weights_sha256")}
                              for rows in revs.values()], dtype=object)
        frame[["step", "progress"]] = frame[["step", "progress"]].astype(float)
        wanted = duplicate_status(frame)
        for rev, rows in revs.items():
            status = wanted.get(rev, "ok")
            if any(r["status"] != status for r in rows):
                store.write_checkpoint([{**r, "status": status} for r in rows])
                changed[(name, rev)] = status
    return changed
