"""Character-level corpora, their on-disk cache, and batch sampling (SPEC §2).

A corpus is named by a spec string:
- ``wikitext103``: first 40M characters of WikiText-103's raw train text,
  from ``<data_dir>/wiki.train.raw`` or, when ``datasets`` and the network are
  there, the hub dataset ``Salesforce/wikitext`` / ``wikitext-103-raw-v1``;
- ``stdlib-docs``: the docstrings of this Python's standard library (embedded);
- any other string: a path to a UTF-8 text file.

Encoded splits are cached as ``uint16`` files (NanoGPT ``prepare.py`` style)
under ``<cache_dir>/<name>-<hash>/`` keyed by the source and its length.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

WIKITEXT_CHARS = 40_000_000
TRAIN_FRACTION = 0.9
BUILTIN_CORPORA = ("wikitext103", "stdlib-docs")
PROBE_SEED = 1234  # fixed: every run and epoch is probed on the same text
VAL_SEED = 4321  # fixed validation batches


class CorpusError(ValueError):
    """A corpus that cannot be read or is too small for the requested batches."""


@dataclass(frozen=True)
class Corpus:
    """Encoded train/validation splits and their vocabulary."""

    name: str
    vocab: str  # sorted distinct characters; id = position
    train: np.ndarray  # [N_train] uint16
    val: np.ndarray  # [N_val] uint16

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> np.ndarray:
        lookup = {c: i for i, c in enumerate(self.vocab)}
        try:
            return np.fromiter((lookup[c] for c in text), dtype=np.uint16, count=len(text))
        except KeyError as err:
            raise CorpusError(f"character {err.args[0]!r} is not in the {self.name} vocabulary") from None

    def decode(self, ids: np.ndarray | Tensor | list[int]) -> str:
        return "".join(self.vocab[int(i)] for i in ids)


def stdlib_docs_text() -> str:
    """Docstrings of the standard library's modules, classes and functions.

    Files in sorted order under ``sysconfig``'s stdlib path, tests and
    site-packages excluded; docstrings in ``ast.walk`` order, joined by blank
    lines. About 1.8M characters and 107 symbols on CPython 3.11.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test"}
    parts: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if skip.intersection(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    parts.append(doc)
    return "\n\n".join(parts)


def _wikitext_text(data_dir: str | None) -> str:
    if data_dir is not None:
        path = Path(data_dir) / "wiki.train.raw"
        if not path.is_file():
            raise CorpusError(
                f"wikitext103: no wiki.train.raw in {data_dir!r}. Provide the wikitext-103-raw-v1 "
                "directory with --data-dir, or install `datasets` with network access to use the hub."
            )
        return _read_utf8(path, WIKITEXT_CHARS)
    try:
        import datasets  # type: ignore[import-not-found]
    except ImportError:
        raise CorpusError(
            "wikitext103 needs its data: pass --data-dir DIR where DIR holds wiki.train.raw "
            "(the wikitext-103-raw-v1 layout), or `pip install datasets` with network access "
            "to read Salesforce/wikitext from the hub."
        ) from None
    ds = datasets.load_dataset("Salesforce/wikitext", "wikitext-103-raw-v1", split="train")
    chunks, n = [], 0
    for line in ds["text"]:
        chunks.append(line)
        n += len(line)
        if n >= WIKITEXT_CHARS:
            break
    return "".join(chunks)[:WIKITEXT_CHARS]


def _identity(spec: str, data_dir: str | None) -> tuple[str, str]:
    """(name, cache key) for a corpus spec, computed without reading the text."""
    if spec == "wikitext103":
        if data_dir is None:
            return spec, "wikitext103:hub"
        raw = Path(data_dir) / "wiki.train.raw"
        if not raw.is_file():
            _wikitext_text(data_dir)  # raises the error naming both ways to provide it
        st = raw.stat()
        return spec, f"wikitext103:{raw.resolve()}:{st.st_size}:{st.st_mtime_ns}:{WIKITEXT_CHARS}"
    if spec == "stdlib-docs":
        return spec, f"{spec}:{sys.version}"
    path = Path(spec)
    if not path.exists():
        raise CorpusError(
            f"unknown corpus {spec!r}: no such file; use one of {', '.join(BUILTIN_CORPORA)} or the path of a text file"
        )
    if not path.is_file():
        raise CorpusError(f"corpus {spec!r} is not a file")
    st = path.stat()
    if st.st_size == 0:
        raise CorpusError(f"corpus file {spec!r} is empty")
    return path.stem, f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"


def _text(spec: str, data_dir: str | None) -> str:
    if spec == "wikitext103":
        return _wikitext_text(data_dir)
    if spec == "stdlib-docs":
        return stdlib_docs_text()
    return _read_utf8(Path(spec))


def _read_utf8(path: Path, chars: int | None = None) -> str:
    """The UTF-8 text of ``path`` (its first ``chars`` characters); errors name the file and byte offset."""
    try:
        with open(path, "rb") as f:
            data = f.read() if chars is None else f.read(4 * chars)  # a character is at most 4 bytes
    except OSError as exc:
        raise CorpusError(f"corpus file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        cut_short = chars is not None and len(data) == 4 * chars and exc.start >= len(data) - 3
        if not cut_short:  # not just a character split by the read limit
            raise CorpusError(f"corpus file {str(path)!r} is not UTF-8: byte 0x{data[exc.start]:02x} at "
                              f"byte offset {exc.start}") from None
        text = data[: exc.start].decode("utf-8")
    return text if chars is None else text[:chars]


def check_windows(corpus: Corpus, context: int, spec: str | None = None) -> None:
    """Both splits hold at least one window of ``context + 1`` tokens (what training and the probe draw).

    ``spec``: the corpus as the user typed it (``--corpus``), which the error names; default the corpus's name.
    """
    for name, data in (("train", corpus.train), ("val", corpus.val)):
        if len(data) < context + 1:
            total = len(corpus.train) + len(corpus.val)  # characters: one token each
            raise CorpusError(
                f"--corpus {spec or corpus.name}: {total} characters, too short for context {context}: its "
                f"{name} split has {len(data)}, fewer than one window of context+1 = {context + 1} (the "
                f"split is {TRAIN_FRACTION:.0%}/{1 - TRAIN_FRACTION:.0%}; use a longer text or a smaller context)"
            )


def split(text: str) -> tuple[str, str]:
    """90 % / 10 % in order."""
    cut = int(len(text) * TRAIN_FRACTION)
    return text[:cut], text[cut:]


def default_cache_dir() -> str:
    return str(Path("runs") / "cache")


def load_corpus(spec: str, data_dir: str | None = None, cache_dir: str | None = None,
                context: int | None = None) -> Corpus:
    """Encode (or load from the cache) the corpus named by ``spec``.

    ``context``: also check that both splits hold one window of ``context + 1``
    tokens (before anything is cached).
    """
    if not isinstance(spec, str) or not spec:
        raise CorpusError(f"corpus must be a name or a file path, got {spec!r}")
    name, key = _identity(spec, data_dir)
    cache_root = Path(cache_dir or default_cache_dir())
    cached = _read_cache(cache_root, name, key)
    if cached is not None:
        if context is not None:
            check_windows(cached, context, spec)
        return cached
    text = _text(spec, data_dir)
    vocab = "".join(sorted(set(text)))
    if len(vocab) > np.iinfo(np.uint16).max:
        raise CorpusError(f"corpus {spec!r} has {len(vocab)} distinct characters; ids must fit in uint16")
    lookup = np.zeros(ord(vocab[-1]) + 1, dtype=np.uint16)
    lookup[[ord(c) for c in vocab]] = np.arange(len(vocab), dtype=np.uint16)
    ids = lookup[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)]
    train_text, _ = split(text)
    cut = len(train_text)
    corpus = Corpus(name, vocab, ids[:cut].copy(), ids[cut:].copy())
    if context is not None:
        check_windows(corpus, context, spec)
    _write_cache(cache_root, corpus, key)
    return corpus


def _cache_dir(root: Path, name: str, key_src: str) -> Path:
    return root / f"{name}-{hashlib.sha256(key_src.encode()).hexdigest()[:12]}"


def _read_cache(root: Path, name: str, key_src: str) -> Corpus | None:
    d = _cache_dir(root, name, key_src)
    try:
        meta = json.loads((d / "meta.json").read_text(encoding="utf-8"))
        train = np.memmap(d / "train.bin", dtype=np.uint16, mode="r")
        val = np.memmap(d / "val.bin", dtype=np.uint16, mode="r")
    except (OSError, ValueError):
        return None
    return Corpus(meta["name"], meta["vocab"], train, val)


def _write_cache(root: Path, corpus: Corpus, key_src: str) -> None:
    d = _cache_dir(root, corpus.name, key_src)
    d.mkdir(parents=True, exist_ok=True)
    for split_name, arr in (("train", corpus.train), ("val", corpus.val)):
        tmp = d / f".{split_name}.bin.{os.getpid()}"
        arr.tofile(tmp)
        os.replace(tmp, d / f"{split_name}.bin")
    meta = {"name": corpus.name, "vocab": corpus.vocab, "source": key_src,
            "n_train": int(len(corpus.train)), "n_val": int(len(corpus.val))}
    tmp = d / f".meta.json.{os.getpid()}"
    tmp.write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, d / "meta.json")  # meta last: its presence marks a complete cache


def device_tokens(data: np.ndarray, device: torch.device | str = "cpu") -> Tensor:
    """A split as int32 [N] on ``device``: one copy, which every sampler of a trainer shares."""
    return torch.from_numpy(np.asarray(data, dtype=np.int32)).to(torch.device(device))


class BatchSampler:
    """Random windows of ``context + 1`` tokens (NanoGPT ``get_batch``), drawn on ``device``.

    The split lives on the device, so drawing a batch is one ``randint`` and
    one gather there, with no host→device copy per step. ``data``: the split (copied to the
    device as int32) or a tensor from ``device_tokens``, used as it is: a pack's members share
    one copy (WikiText-103's split is 144 MB as int32).
    """

    def __init__(self, data: np.ndarray | Tensor, batch_size: int, context: int, seed: int,
                 device: torch.device | str = "cpu") -> None:
        if len(data) < context + 1:
            raise CorpusError(
                f"split of {len(data)} tokens is shorter than one window of context+1={context + 1}"
            )
        self.device = torch.device(device)
        self.data = data.to(self.device) if isinstance(data, Tensor) else device_tokens(data, self.device)
        self.batch_size, self.context = batch_size, context
        self.offsets = torch.arange(context + 1, device=self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def next(self) -> tuple[Tensor, Tensor]:
        """x, y: [B, T] int64, y shifted by one."""
        starts = torch.randint(len(self.data) - self.context, (self.batch_size,),
                               generator=self.generator, device=self.device)
        w = self.data[starts[:, None] + self.offsets].long()  # (B, T+1)
        return w[:, :-1], w[:, 1:]

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])


def fixed_windows(data: np.ndarray, n: int, context: int, seed: int) -> tuple[Tensor, Tensor]:
    """``n`` windows chosen by ``seed`` alone: x, y [n, context] int64 on the CPU."""
    if len(data) < context + 1:
        raise CorpusError(f"split of {len(data)} tokens is shorter than one window of {context + 1}")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(len(data) - context, (n,), generator=gen)
    arr = torch.from_numpy(np.asarray(data, dtype=np.int64))
    w = arr[starts[:, None] + torch.arange(context + 1)]
    return w[:, :-1], w[:, 1:]


def probe_batch(corpus: Corpus, n_seqs: int, context: int) -> Tensor:
    """The fixed probe batch: [n_seqs, context] validation windows, same for every run."""
    return fixed_windows(corpus.val, n_seqs, context, PROBE_SEED)[0]
