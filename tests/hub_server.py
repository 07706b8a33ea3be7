"""A throw-away Hugging Face Hub on 127.0.0.1 for tests and bench/checkpoint_scale.py: the parts of
its HTTP API that ``huggingface_hub`` (2.4) calls for ``list_repo_refs``, ``list_repo_files``,
``model_info(files_metadata=True)``, ``hf_hub_download`` and ``snapshot_download``, serving
repositories held in memory or on disk.

    repo = HubRepo("EleutherAI/pythia-70m", {"step0": {"config.json": b"..."}, ...})
    with hub_server([repo], fail_once=[("HEAD", r"/resolve/.*/model\\.safetensors$")]) as hub:
        env = {"HF_ENDPOINT": hub.url, ...}
        ...
    hub.requests  # [(method, path without query, status), ...]

Routes (``{rev}`` is a branch name or a commit hash, URL-quoted):

- ``GET /api/models?author=…&search=…``: the repositories whose owner is ``author`` and whose id
  contains ``search`` (``HfApi.list_models``), one page, ``id`` each;
- ``GET /api/models/{repo}/refs``: branches (``name``, ``ref``, ``targetCommit``), no tags;
- ``GET /api/models/{repo}/revision/{rev}``: model info (``id``, ``sha``, ``siblings``); with
  ``?blobs=true`` (``model_info(files_metadata=True)``) each sibling adds ``size``, ``blobId`` and
  ``lfs`` (``sha256``, ``size``) for LFS files, as the Hub does;
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file list (``type``, ``path``, ``size``,
  ``oid``, ``lfs`` with the sha256 for weight files), one page;
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``: headers ``X-Repo-Commit``, ``ETag`` (the sha256
  for weight files, as the Hub gives for LFS files, else the git blob sha1) and
  ``Content-Length``; GET adds the bytes.

A file's content is ``bytes`` or a ``Path`` on disk (served in chunks, hashed once: the
benchmark's 1 GB revisions are not held in memory).

A revision in ``HubRepo.missing`` is listed among the branches but answers 404 with
``X-Error-Code: RevisionNotFound`` everywhere (a branch deleted between listing and fetching);
an unknown repository answers ``RepoNotFound``, an unknown file ``EntryNotFound``, anything
else 404. ``fail_once``: (method, path regex) pairs each answered 503 the first time they match.
The server runs in a daemon thread and stops when the ``with`` block ends (or after ``lifetime``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

#: Files the Hub stores through LFS: their ETag is the sha256 of the bytes.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".h5", ".msgpack")


def commit_of(repo: str, revision: str) -> str:
    """A fixed fake 40-hex commit hash for a branch."""
    return hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


Content = bytes | Path


@cache
def _file_sha256(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def content_size(data: Content) -> int:
    return data.stat().st_size if isinstance(data, Path) else len(data)


def content_sha256(data: Content) -> str:
    if isinstance(data, Path):
        st = data.stat()
        return _file_sha256(data, st.st_size, st.st_mtime_ns)
    return hashlib.sha256(data).hexdigest()


def content_oid(data: Content) -> str:
    """The git blob id: of the bytes for small files, of an LFS pointer for files on disk."""
    if isinstance(data, Path):
        return git_blob_sha1(f"oid sha256:{content_sha256(data)}\nsize {content_size(data)}\n".encode())
    return git_blob_sha1(data)


@dataclass
class HubRepo:
    """One model repository: ``{branch: {file path: bytes or a Path}}``; ``missing`` branches answer 404."""

    repo_id: str
    branches: dict[str, dict[str, Content]]
    missing: set[str] = field(default_factory=set)

    def resolve(self, rev: str) -> str | None:
        """The branch a branch name or commit hash names, or None."""
        for name in self.branches:
            if rev in (name, commit_of(self.repo_id, name)):
                return name
        return None


@dataclass
class Hub:
    """What a running ``hub_server`` offers the test."""

    url: str
    requests: list[tuple[str, str, int]]


def _handler(repos: dict[str, HubRepo], fail_once: list[tuple[str, re.Pattern]], log: list,
             lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    pending = list(fail_once)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # quiet: the test reads ``Hub.requests``
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _send(self, status: int, headers: dict[str, str], data: Content, body: bool) -> None:
            with lock:
                log.append((self.command, urlsplit(self.path).path, status))
            self.send_response(status)
            for k, v in {**headers, "Content-Length": str(content_size(data))}.items():
                self.send_header(k, v)
            self.end_headers()
            if body and isinstance(data, Path):
                with open(data, "rb") as f:
                    while chunk := f.read(1 << 22):
                        self.wfile.write(chunk)
            elif body:
                self.wfile.write(data)

        def _error(self, status: int, code: str | None, body: bool) -> None:
            message = json.dumps({"error": code or "Not Found"}).encode()
            headers = {"Content-Type": "application/json"}
            if code:
                headers |= {"X-Error-Code": code, "X-Error-Message": code}
            self._send(status, headers, message, body)

        def _json(self, obj: object, body: bool) -> None:
            self._send(200, {"Content-Type": "application/json"}, json.dumps(obj).encode(), body)

        def _serve(self, body: bool) -> None:
            path = urlsplit(self.path).path
            with lock:
                hit = next((f for f in pending if f[0] == self.command and f[1].search(path)), None)
                if hit is not None:
                    pending.remove(hit)
            if hit is not None:
                return self._error(503, None, body)
            if path == "/api/models":
                query = parse_qs(urlsplit(self.path).query)
                author, search = query.get("author", [""])[0], query.get("search", [""])[0]
                return self._json([{"id": r, "modelId": r} for r in sorted(repos)
                                   if (not author or r.split("/")[0] == author) and search in r], body)
            if m := re.fullmatch(r"/api/models/(.+?)/(refs|revision|tree)(?:/([^/]+)(?:/(.*))?)?", path):
                blobs = [v.lower() for v in parse_qs(urlsplit(self.path).query).get("blobs", [])] == ["true"]
                return self._api(m.group(1), m.group(2), unquote(m.group(3) or ""), body, blobs)
            if m := re.fullmatch(r"/(.+?)/resolve/([^/]+)/(.+)", path):
                return self._resolve(m.group(1), unquote(m.group(2)), unquote(m.group(3)), body)
            return self._error(404, None, body)

        def _branch(self, repo_id: str, rev: str, body: bool) -> tuple[HubRepo, str] | None:
            repo = repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", body)
                return None
            branch = repo.resolve(rev)
            if branch is None or branch in repo.missing:
                self._error(404, "RevisionNotFound", body)
                return None
            return repo, branch

        def _api(self, repo_id: str, what: str, rev: str, body: bool, blobs: bool = False) -> None:
            if what == "refs":
                repo = repos.get(repo_id)
                if repo is None:
                    return self._error(404, "RepoNotFound", body)
                branches = [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": commit_of(repo_id, b)}
                            for b in repo.branches]
                return self._json({"branches": branches, "converts": [], "tags": []}, body)
            found = self._branch(repo_id, rev, body)
            if found is None:
                return None
            repo, branch = found
            files = repo.branches[branch]
            if what == "revision":
                siblings = [_sibling(f, data) if blobs else {"rfilename": f} for f, data in sorted(files.items())]
                return self._json({"id": repo_id, "sha": commit_of(repo_id, branch), "private": False,
                                   "siblings": siblings}, body)
            entries = []
            for name, data in sorted(files.items()):
                entry = {"type": "file", "path": name, "size": content_size(data), "oid": content_oid(data)}
                if name.endswith(LFS_SUFFIXES):
                    entry["lfs"] = {"oid": content_sha256(data), "size": content_size(data), "pointerSize": 134}
                entries.append(entry)
            return self._json(entries, body)

        def _resolve(self, repo_id: str, rev: str, name: str, body: bool) -> None:
            found = self._branch(repo_id, rev, body)
            if found is None:
                return None
            repo, branch = found
            data = repo.branches[branch].get(name)
            if data is None:
                return self._error(404, "EntryNotFound", body)
            etag = content_sha256(data) if name.endswith(LFS_SUFFIXES) else content_oid(data)
            headers = {"X-Repo-Commit": commit_of(repo_id, branch), "ETag": f'"{etag}"',
                       "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
            return self._send(200, headers, data, body)

    return Handler


def _sibling(name: str, data: Content) -> dict:
    """A ``siblings`` entry with ``blobs=true``: size, git blob id, and the LFS sha256 for weights."""
    out = {"rfilename": name, "size": content_size(data), "blobId": content_oid(data)}
    if name.endswith(LFS_SUFFIXES):
        out["lfs"] = {"sha256": content_sha256(data), "size": content_size(data), "pointerSize": 134}
    return out


@contextmanager
def hub_server(repos: list[HubRepo], fail_once: list[tuple[str, str]] = (), lifetime: float = 600.0
               ) -> Iterator[Hub]:
    """Serve ``repos`` on a free port of 127.0.0.1 until the block ends, or at most ``lifetime`` s."""
    log: list[tuple[str, str, int]] = []
    handler = _handler({r.repo_id: r for r in repos}, [(m, re.compile(p)) for m, p in fail_once], log,
                       threading.Lock())
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    deadline = threading.Timer(lifetime, server.shutdown)  # a hung test does not keep it serving
    deadline.daemon = True
    deadline.start()
    try:
        yield Hub(f"http://127.0.0.1:{server.server_address[1]}", log)
    finally:
        deadline.cancel()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
