"""The disk budget of hub downloads (``--disk-budget``): download, probe, delete what this run
downloaded, with every probe process that uses one hub cache sharing one budget (SPEC §7).

**Why a ledger file and not a Ray actor.** The budget guards a folder (the hub cache), and the
processes that share the folder are exactly the ones that share the disk: the actors of a node
with a node-local cache (the default), every process of the cluster when ``--hf-cache`` is on a
shared filesystem, and also a second ``sweep.extension`` run pointed at the same cache. A JSON
ledger beside the cache, changed only under a file lock (``filelock``, which huggingface_hub
itself locks its downloads with), follows the folder without knowing the cluster's layout; a Ray
actor per node would need node-affinity placement, would count per node even for a shared cache
or a second run, and its count would die with it.

**Leases: no holder blocks the budget forever.** A holder holds a lease (``LEASE`` seconds, by its
host's clock) that a thread of its process renews every fifth of it while the holder lives. Any
process that opens the ledger, on any host, releases the holders whose lease has run out (a dead
process, a lost node: its reservation and what it downloaded go); on its own host it also releases
at once a holder whose process is gone (its pid missing, or reused: the start time differs). Hosts'
clocks must agree to well within a lease. A revision that does not fit waits, printing every
``REPORT_EVERY`` seconds who holds the space (host, pid, revision, bytes, last renewal), and fails
with the same line after ``--disk-wait`` seconds.

**What is counted.** A holder reserves the bytes of the files it is about to download that are
not in the cache yet (their blobs, named by the LFS sha256 or git blob id the listing gives);
files already there cost nothing and are never deleted (they were not this run's). Reserved
bytes count from the reservation on, before the download, so the cache never holds more than the
budget of this run's downloads. A revision whose files alone exceed the budget fails at once.

**What is deleted, by reference count.** The ledger records the blobs (``ours``) and the snapshot
entries and folders (``entries``, ``dirs``) that its holders brought into the cache; every holder
lists all the blobs and entries it needs, made by itself or by another holder (two revisions that
borrow ``main``'s config and tokenizer share its entries). On release, an entry of ``entries`` that
no live holder lists is unlinked, then every blob of ``ours`` that no live holder lists is deleted
(through huggingface_hub's cache deletion, ``scan_cache_dir(...).delete_files``, which keeps a blob
another cached file still references; such a blob is no longer counted), and a snapshot folder of
``dirs`` left empty is removed. The ledger's ``high_water`` is the most bytes this run ever reserved.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sweep.extension.listing import HubFile

#: The ledger and its lock, in huggingface_hub's own lock folder of the cache (``scan_cache_dir``
#: skips that folder, so the cache stays a valid hub cache).
LEDGER = Path(".locks") / "qkgeom-disk-budget.json"
LOCK = Path(".locks") / "qkgeom-disk-budget.lock"
#: Seconds a holder's lease runs unrenewed; its process renews it every fifth of that.
LEASE = 300.0
#: Seconds a revision waits for room in the budget before it fails (``--disk-wait``).
DISK_WAIT = 7200.0
#: Seconds between the lines a waiting revision prints.
REPORT_EVERY = 60.0

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
    from sweep.placement.ray_env import bundled_psutil

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
    wait: float | None = None  # seconds to wait for room before failing (None: ``DISK_WAIT``)
    lease: float | None = None  # seconds a holder's lease runs unrenewed (None: ``LEASE``)
    report_every: float | None = None  # seconds between the lines a wait prints (None: ``REPORT_EVERY``)
    host: str | None = None  # this process's host in the ledger (None: its hostname)
    say: Callable[[str], None] | None = None  # where a wait's lines go (None: stderr)

    def __post_init__(self) -> None:
        self.cache_dir = Path(self.cache_dir)
        # module constants read now, not at import: the tests shorten them
        self.wait = DISK_WAIT if self.wait is None else self.wait
        self.lease = LEASE if self.lease is None else self.lease
        self.report_every = REPORT_EVERY if self.report_every is None else self.report_every
        self.host = self.host or socket.gethostname()

    def _say(self, line: str) -> None:
        if self.say is not None:
            self.say(line)
        else:
            print(line, file=sys.stderr, flush=True)

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        from filelock import FileLock

        (self.cache_dir / LOCK).parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.cache_dir / LOCK)):
            path = self.cache_dir / LEDGER
            state = json.loads(path.read_text()) if path.is_file() else {}
            before = json.dumps(state, sort_keys=True)
            _upgrade(state)
            self._reap(state)
            yield state
            if json.dumps(state, sort_keys=True) != before:
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
                os.replace(tmp, path)

    def state(self) -> dict[str, Any]:
        """A copy of the ledger: ``holders``, ``ours`` (blob path → bytes), ``entries``, ``dirs`` and
        ``high_water``."""
        with self._locked() as state:
            return json.loads(json.dumps(state))

    def used(self) -> int:
        """Bytes this run's downloads hold or have reserved now."""
        return sum(self.state()["ours"].values())

    @contextmanager
    def hold(self, repo: str, files: Sequence[tuple[str, HubFile]], what: str) -> Iterator[None]:
        """Reserve room for ``files`` ((commit, file) pairs of ``repo``) not yet in the cache, waiting
        while they do not fit (at most ``wait`` seconds, saying who holds the space); hold a lease,
        renewed while the block runs; on exit release and delete (see the module docstring).

        ``DiskBudgetError`` at once when they could never fit, or when the wait runs out. ``what``
        names the revision in it.
        """
        me = f"{self.host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        root = repo_cache(self.cache_dir, repo)
        blobs = {str(root / "blobs" / f.blob): f.size for _, f in files}
        paths = sorted({str(root / "snapshots" / commit / f.path) for commit, f in files})
        start = report = time.monotonic()
        while True:
            got, line = self._reserve(me, blobs, paths, what)
            if got:
                break
            now = time.monotonic()
            if now - start >= self.wait:
                raise DiskBudgetError(f"{what} waited {now - start:.0f} s (--disk-wait) for {line}")
            if now >= report:
                self._say(f"[disk] {what} waits for {line}")
                report = now + self.report_every
            time.sleep(self.poll)
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(me, what, stop), daemon=True,
                                   name=f"qkgeom-disk-lease-{me}")
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()
            with self._locked() as state:
                self._release(state, me)

    def _renew(self, me: str, what: str, stop: threading.Event) -> None:
        """Extend ``me``'s lease every fifth of it until ``stop``; say so once if it was lost."""
        while not stop.wait(self.lease / 5):
            with self._locked() as state:
                holder = state["holders"].get(me)
                if holder is None:
                    self._say(f"[disk] warning: the lease of {what} ran out before it was renewed (the process "
                              "stalled for longer than a lease): another process may have deleted its files")
                    return
                holder["lease_until"] = time.time() + self.lease
                holder["renewed"] = time.time()

    def _reserve(self, me: str, blobs: dict[str, int], paths: list[str], what: str) -> tuple[bool, str]:
        """(True, "") once reserved; else (False, what it waits for and who holds the space)."""
        with self._locked() as state:
            ours = state["ours"]
            new = {b: n for b, n in blobs.items() if b not in ours and not os.path.lexists(b)}
            need = sum(new.values())
            if need > self.budget:
                raise DiskBudgetError(f"{what} needs {format_size(need)} of new files, more than --disk-budget "
                                      f"{format_size(self.budget)}: not downloaded")
            used = sum(ours.values())
            if used + need > self.budget:
                return False, (f"{format_size(need)} of --disk-budget {format_size(self.budget)}, "
                               f"{format_size(used)} held: {_holders(state)}")
            ours.update(new)
            state["high_water"] = max(state["high_water"], used + need)
            made = [p for p in paths if p not in state["entries"] and not os.path.lexists(p)]
            state["entries"] = sorted({*state["entries"], *made})
            dirs = {str(Path(p).parent) for p in made if not Path(p).parent.exists()}
            state["dirs"] = sorted({*state["dirs"], *dirs})
            now = time.time()
            state["holders"][me] = {"pid": os.getpid(), "host": self.host, "started": _process_started(os.getpid()),
                                    "what": what, "lease_until": now + self.lease, "renewed": now,
                                    "blobs": sorted(blobs), "paths": paths}
            return True, ""

    def _reap(self, state: dict[str, Any]) -> None:
        """Release every holder whose lease ran out (any host), and those of this host whose process
        is gone (killed mid-probe)."""
        now = time.time()
        for me, h in list(state["holders"].items()):
            expired = h.get("lease_until", 0.0) < now
            gone = h["host"] == self.host and _process_started(h["pid"]) != h["started"]
            if expired or gone:
                self._release(state, me)

    def _release(self, state: dict[str, Any], me: str) -> None:
        """Drop holder ``me``; delete what the ledger's holders brought in that no live holder lists
        (see the module docstring)."""
        gone = state["holders"].pop(me, None)
        if gone is None:
            return
        live_paths = {p for h in state["holders"].values() for p in h["paths"]}
        live_blobs = {b for h in state["holders"].values() for b in h["blobs"]}
        entries = [p for p in state["entries"] if p not in live_paths]
        free = {b for b in state["ours"] if b not in live_blobs}
        _delete(self.cache_dir, entries, free)
        for b in free:  # a download its holder did not finish (killed mid-file)
            Path(b + ".incomplete").unlink(missing_ok=True)
            state["ours"].pop(b)  # deleted, or referenced by a file the ledger did not bring: not ours now
        state["entries"] = [p for p in state["entries"] if p in live_paths]
        live_dirs = {str(Path(p).parent) for p in live_paths}
        for d in list(state["dirs"]):
            if d in live_dirs:
                continue
            if Path(d).is_dir() and not any(Path(d).iterdir()):
                Path(d).rmdir()
            state["dirs"].remove(d)


def _holders(state: dict[str, Any]) -> str:
    """Who holds the space: ``host:pid (revision, bytes, renewed N s ago)`` per holder."""
    if not state["holders"]:
        return "no live holder (the space is this run's files not yet released)"
    now = time.time()
    parts = []
    for h in state["holders"].values():
        held = sum(state["ours"].get(b, 0) for b in h["blobs"])
        parts.append(f"{h['host']}:{h['pid']} ({h.get('what', '?')}, {format_size(held)}, lease renewed "
                     f"{now - h.get('renewed', now):.0f} s ago)")
    return "held by " + ", ".join(parts)


def _upgrade(state: dict[str, Any]) -> None:
    """Fill in the ledger's fields (an empty or older ledger): older holders' own ``made``/``dirs`` lists
    become the ledger's ``entries``/``dirs``, and they hold no lease (the next look releases them)."""
    state.setdefault("holders", {})
    state.setdefault("ours", {})
    state.setdefault("high_water", 0)
    state.setdefault("entries", [])
    state.setdefault("dirs", [])
    for h in state["holders"].values():
        state["entries"] = sorted({*state["entries"], *h.pop("made", [])})
        state["dirs"] = sorted({*state["dirs"], *h.pop("dirs", [])})


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
