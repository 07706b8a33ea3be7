"""The disk budget of hub downloads (``--disk-budget``): download, probe, delete what this run
downloaded, with every probe process that uses one hub cache sharing one budget (SPEC §7).

**Why a ledger file and not a Ray actor.** The budget guards a folder (the hub cache), and the
processes that share the folder are exactly the ones that share the disk: the actors of a node
with a node-local cache (the default), every process of the cluster when ``--hf-cache`` is on a
shared filesystem, and also a second ``sweep.extension`` run pointed at the same cache. A JSON
ledger beside the cache, changed only under a file lock (``filelock``, which huggingface_hub
itself locks its downloads with), follows the folder without knowing the cluster's layout; a Ray
actor per node would need node-affinity placement, would count per node even for a shared cache
or a second run, and its count would die with it. A holder that died without releasing (an
actor killed mid-download) is noticed by the next process that opens the ledger: its pid is gone
(or reused: the process start time differs) and its reservation is released.

**What is counted.** A holder reserves the bytes of the files it is about to download that are
not in the cache yet (their blobs, named by the LFS sha256 or git blob id the listing gives);
files already there cost nothing and are never deleted (they were not this run's). Reserved
bytes count from the reservation on, before the download, so the cache never holds more than the
budget of this run's downloads. A revision whose files alone exceed the budget fails at once; one
that does not fit now waits until holders release.

**What is deleted.** On release, the blobs this run downloaded (``ours``) that no live holder
still needs, with the snapshot entries this run made for them, through huggingface_hub's own
cache deletion (``scan_cache_dir(...).delete_files``, which also keeps any blob another cached
file still references). The ledger's ``high_water`` is the most bytes this run ever reserved.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sweep.extension.listing import HubFile

#: The ledger and its lock, in huggingface_hub's own lock folder of the cache (``scan_cache_dir``
#: skips that folder, so the cache stays a valid hub cache).
LEDGER = Path(".locks") / "qkgeom-disk-budget.json"
LOCK = Path(".locks") / "qkgeom-disk-budget.lock"

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


class DiskBudgetError(RuntimeError):
    """A revision's files are larger than the whole disk budget."""


def parse_size(text: str) -> int:
    """Bytes of ``"50GB"``, ``"1.5 TiB"``, ``"1e9"`` (decimal and binary units, case-insensitive)."""
    m = re.fullmatch(r"\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if m is None or m.group(2).upper() not in _UNITS:
        raise ValueError("not a size: give a number and a unit (B, KB, MB, GB, TB or KiB, MiB, GiB, TiB), e.g. 40GB")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not value > 0:
        raise ValueError(f"a size must be > 0, got {text!r}")
    return int(value)


def format_size(n: float) -> str:
    """``12.3 GB`` (decimal units, as the Hub shows sizes)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def default_cache() -> Path:
    """huggingface_hub's cache folder (``HF_HUB_CACHE``, ``HF_HOME``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def repo_cache(cache_dir: Path, repo: str) -> Path:
    from huggingface_hub.file_download import repo_folder_name

    return cache_dir / repo_folder_name(repo_id=repo, repo_type="model")


def _process_started(pid: int) -> float | None:
    """The start time of process ``pid``, or None when there is no such process."""
    from sweep.ray_env import bundled_psutil

    psutil = bundled_psutil()

    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None


@dataclass
class DiskLedger:
    """The budget of one hub cache (see the module docstring)."""

    cache_dir: Path
    budget: int
    poll: float = 0.5  # seconds between looks while waiting for room

    def __post_init__(self) -> None:
        self.cache_dir = Path(self.cache_dir)

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        from filelock import FileLock

        (self.cache_dir / LOCK).parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.cache_dir / LOCK)):
            path = self.cache_dir / LEDGER
            state = json.loads(path.read_text()) if path.is_file() else {}
            state.setdefault("holders", {})
            state.setdefault("ours", {})
            state.setdefault("high_water", 0)
            before = json.dumps(state, sort_keys=True)
            self._reap(state)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
                os.replace(tmp, path)

    def state(self) -> dict[str, Any]:
        """A copy of the ledger: ``holders``, ``ours`` (blob path → bytes) and ``high_water``."""
        with self._locked() as state:
            return json.loads(json.dumps(state))

    def used(self) -> int:
        """Bytes this run's downloads hold or have reserved now."""
        return sum(self.state()["ours"].values())

    @contextmanager
    def hold(self, repo: str, files: Sequence[tuple[str, HubFile]], what: str) -> Iterator[None]:
        """Reserve room for ``files`` ((commit, file) pairs of ``repo``) not yet in the cache, waiting
        while they do not fit; on exit release and delete (see the module docstring).

        ``DiskBudgetError`` at once when they could never fit. ``what`` names the revision in it.
        """
        me = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        root = repo_cache(self.cache_dir, repo)
        blobs = {str(root / "blobs" / f.blob): f.size for _, f in files}
        paths = [str(root / "snapshots" / commit / f.path) for commit, f in files]
        while not self._reserve(me, blobs, paths, what):
            time.sleep(self.poll)
        try:
            yield
        finally:
            with self._locked() as state:
                self._release(state, me)

    def _reserve(self, me: str, blobs: dict[str, int], paths: list[str], what: str) -> bool:
        with self._locked() as state:
            ours = state["ours"]
            new = {b: n for b, n in blobs.items() if b not in ours and not os.path.lexists(b)}
            need = sum(new.values())
            if need > self.budget:
                raise DiskBudgetError(f"{what} needs {format_size(need)} of new files, more than --disk-budget "
                                      f"{format_size(self.budget)}: not downloaded")
            used = sum(ours.values())
            if used + need > self.budget:
                return False
            ours.update(new)
            state["high_water"] = max(state["high_water"], used + need)
            made = [p for p in paths if not os.path.lexists(p)]
            dirs = sorted({str(Path(p).parent) for p in made if not Path(p).parent.exists()})
            state["holders"][me] = {"pid": os.getpid(), "host": socket.gethostname(),
                                    "started": _process_started(os.getpid()), "blobs": sorted(blobs),
                                    "paths": paths, "made": made, "dirs": dirs}
            return True

    def _reap(self, state: dict[str, Any]) -> None:
        """Release the holders of this host whose process is gone (killed mid-probe)."""
        host = socket.gethostname()
        for me, h in list(state["holders"].items()):
            if h["host"] == host and _process_started(h["pid"]) != h["started"]:
                self._release(state, me)

    def _release(self, state: dict[str, Any], me: str) -> None:
        """Drop holder ``me``; delete the blobs of ``ours`` no live holder needs, with the snapshot
        entries this run made for them, then any snapshot folder this run made that is left empty."""
        gone = state["holders"].pop(me, None)
        if gone is None:
            return
        held = {b for h in state["holders"].values() for b in h["blobs"]}
        needed = {p for h in state["holders"].values() for p in h["paths"]}
        free = {b for b in state["ours"] if b not in held}
        entries = [p for p in gone["made"] if p not in needed]
        _delete(self.cache_dir, entries, free)
        for b in free:  # a download its holder did not finish (killed mid-file)
            Path(b + ".incomplete").unlink(missing_ok=True)
        for b in free:
            if not os.path.lexists(b):
                state["ours"].pop(b)
        for d in gone["dirs"]:
            if Path(d).is_dir() and not any(Path(d).iterdir()) and d not in {str(Path(p).parent) for p in needed}:
                Path(d).rmdir()


def _delete(cache_dir: Path, entries: list[str], blobs: set[str]) -> None:
    """Unlink the snapshot ``entries`` and delete those of ``blobs`` no other cached file references,
    through huggingface_hub's cache deletion; a blob with no snapshot entry left (its download
    never finished linking) is deleted as is."""
    from huggingface_hub import scan_cache_dir

    if not entries and not blobs:
        return
    wanted = set(entries)
    info = scan_cache_dir(cache_dir) if cache_dir.is_dir() else None
    files = [f for repo in (info.repos if info else ()) for rev in repo.revisions for f in rev.files
             if str(f.file_path) in wanted]
    if files:
        strategy = info.delete_files(*files)
        strategy = replace(strategy, blobs=frozenset(b for b in strategy.blobs if str(b) in blobs))
        strategy.execute()
    referenced = {str(f.blob_path) for repo in (info.repos if info else ()) for rev in repo.revisions
                  for f in rev.files if str(f.file_path) not in wanted}
    for b in blobs:
        if b not in referenced and os.path.lexists(b):
            Path(b).unlink()
