"""What a hub revision holds, known before anything is downloaded: its files, their sizes and
their sha256 (SPEC §7, "Large series").

``list_revision`` asks the Hub once (``HfApi.model_info(files_metadata=True)``): the commit the
branch points at, and per file its size, its git blob id and, for LFS files (weights), the
sha256 of its bytes. From that alone:

* ``Listing.weights`` — the weight files ``from_pretrained`` loads (``metrics.hf_files.loader_files``):
  ``model.safetensors`` when listed, else the shards its index's ``weight_map`` names (the index, a
  few kB, is read when the revision is listed); pickles (``pytorch_model.bin`` or its index) only with
  ``--allow-pickle-weights`` and when there are no safetensors. Any other weight-like file (an
  adapter, ``consolidated.safetensors``) is never downloaded;
* ``Listing.fetch`` — the files a probe downloads (config, tokenizer and those weights) — and their
  bytes, which the disk budget and the memory request of the revision's Ray task are computed from;
* ``Listing.weights_key`` — the set of the weight files' sha256: two revisions with the same
  set serve byte-identical weights, and the second is a duplicate found without a download
  (public series do this: pythia step branches that serve the end-of-training files).

Files are downloaded by commit, not by branch name, so a branch that moves during a run cannot
mix two commits' files.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass

from metrics.hf_files import CheckpointError, loader_files, parse_index

#: Files a probe needs besides the weights: config, tokenizer files (``TOKENIZER_FILES`` of
#: revision_probe), generation config and the like.
CONFIG_PATTERNS = ("*.json", "*.txt", "*.model", "*.tiktoken")


@dataclass(frozen=True)
class HubFile:
    """One file of a revision: ``path`` in the repository, ``size`` in bytes, ``blob`` the name
    its bytes get in the hub cache (the LFS sha256 for LFS files, else the git blob id) and
    ``sha256`` (LFS files only)."""

    path: str
    size: int
    blob: str
    sha256: str | None = None


@dataclass(frozen=True)
class Listing:
    """A revision's ``commit`` and ``files`` as the Hub lists them, and ``indexes``: the ``weight_map``
    of each weight index the loader reads (index file, ((tensor, shard), ...)), read at listing time."""

    commit: str
    files: tuple[HubFile, ...]
    indexes: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    def _loaded(self, pickled: bool) -> tuple[str, ...]:
        names = {f.path for f in self.files if "/" not in f.path}
        maps = dict(self.indexes)

        def read(index: str) -> Mapping[str, str]:
            if index not in maps:
                raise CheckpointError(f"{index} was not read when the revision was listed")
            return dict(maps[index])

        return loader_files(names, read, pickled)[0]

    def weights(self, allow_pickle: bool = False) -> tuple[HubFile, ...]:
        """The weight files ``from_pretrained`` loads (see the module docstring); empty when there are
        none to load. A ``CheckpointError`` when its index names a shard the revision lacks."""
        names = self._loaded(pickled=False) or (self._loaded(pickled=True) if allow_pickle else ())
        by_path = {f.path: f for f in self.files}
        return tuple(by_path[n] for n in names)

    def configs(self) -> tuple[HubFile, ...]:
        """The top-level config and tokenizer files (``CONFIG_PATTERNS``)."""
        return tuple(f for f in self.files if "/" not in f.path
                     and any(fnmatch.fnmatch(f.path, p) for p in CONFIG_PATTERNS))

    def fetch(self, allow_pickle: bool = False) -> tuple[HubFile, ...]:
        """Everything a probe downloads: config and tokenizer files, then the weights."""
        return self.configs() + self.weights(allow_pickle)

    def weight_bytes(self, allow_pickle: bool = False) -> int:
        return sum(f.size for f in self.weights(allow_pickle))

    def weights_key(self, allow_pickle: bool = False) -> frozenset[str] | None:
        """The weight files' sha256 set; None when a weight file has none listed (not LFS)."""
        weights = self.weights(allow_pickle)
        if not weights or any(f.sha256 is None for f in weights):
            return None
        return frozenset(f.sha256 for f in weights)

    def has(self, path: str) -> bool:
        return any(f.path == path for f in self.files)


def list_revision(repo: str, revision: str) -> Listing:
    """The Hub's listing of ``repo`` at ``revision`` (one API call, transient errors tried again).

    Raises huggingface_hub's own errors for a missing repository or revision.
    """
    from huggingface_hub import HfApi

    from sweep.extension.hub import with_hub_retries

    info = with_hub_retries(lambda: HfApi().model_info(repo, revision=revision, files_metadata=True))
    files = []
    for s in info.siblings or []:
        sha = s.lfs.sha256 if s.lfs is not None else None
        blob = sha or s.blob_id
        if blob is None or s.size is None:
            raise ValueError(f"{repo}@{revision}: the Hub listed {s.rfilename} without its size or blob id")
        files.append(HubFile(s.rfilename, int(s.size), blob, sha))
    if not info.sha:
        raise ValueError(f"{repo}@{revision}: the Hub listed no commit")
    return Listing(info.sha, tuple(files), read_indexes(repo, info.sha, [f.path for f in files]))


def read_indexes(repo: str, commit: str, paths: list[str]) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """The ``weight_map`` of each index file the loader reads among ``paths`` (downloaded alone, by
    commit, into a throw-away folder: outside the hub cache and its disk budget)."""
    import tempfile
    from pathlib import Path

    from huggingface_hub import hf_hub_download

    from sweep.extension.hub import with_hub_retries

    names = {p for p in paths if "/" not in p}
    maps: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="qkgeom-index-") as scratch:

        def read(index: str) -> dict[str, str]:
            local = with_hub_retries(lambda: hf_hub_download(repo, index, revision=commit, cache_dir=scratch))
            maps[index] = parse_index(Path(local).read_text(encoding="utf-8"), index)
            return maps[index]

        if not loader_files(names, read)[0]:
            loader_files(names, read, pickled=True)
    return tuple((name, tuple(sorted(m.items()))) for name, m in sorted(maps.items()))
