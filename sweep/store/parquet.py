"""The Parquet store of sweep results (SPEC §6).

Layout under a root (a local path, ``file://`` URI, ``s3://bucket/prefix`` or any
URI ``pyarrow.fs`` opens); a file's path alone names (table, run, epoch) and no
directory holds ``=``, so pandas infers no partitions::

    {root}/layers/{run_id}/epoch-0003.parquet     one file per (run, epoch)
    {root}/epochs/{run_id}/epoch-0003.parquet
    {root}/checkpoints/{series}/{revision}.parquet
    {root}/runs/{run_id}/run.parquet              one file per run: what it was started with
    {root}/{table}/{dir}/compacted.parquet        written by ``compact`` (sweep/store/compact.py)
    {root}/_locks/{name}.json                     ``sweep_lock`` (sweep/store/locks.py): a sweep is writing

Names are made path-safe by ``safe_name``. Writes are atomic (temporary
``.name.inprogress`` then rename on file systems; one object PUT on object
stores) and idempotent (a rewrite replaces its file). Readers skip names that
start with ``.`` or ``_``, and skip unreadable files with a warning. A file of an
older store reads as the current schema: a column added since is null, a column
renamed since (``RENAMED``) reads under its new name (``Store._read_files``).

Precedence rule: a row of ``compacted.parquet`` is *shadowed* (not read) when its
own per-epoch file exists, readable, in the same directory. So a rewrite after
compaction, or a compaction that crashed before deleting its inputs, never shows
a row twice through ``Store.read``; sweep/store/compact.py explains the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import uuid
import warnings
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sweep.store.schema import KEYS, RENAMED, SCHEMA_VERSION, SCHEMAS, TABLES

COMPACTED = "compacted.parquet"
#: Per table, the column naming a file's directory and the column naming the file in it.
GROUPS: dict[str, tuple[str, str]] = {
    "layers": ("run_id", "epoch"),
    "epochs": ("run_id", "epoch"),
    "checkpoints": ("series", "revision"),
    "runs": ("run_id", "run_id"),
}
OBJECT_STORES = frozenset({"s3", "gcs", "abfs"})
HEARTBEAT_S = 30.0
STALE_AFTER_S = 600.0
READ_ERRORS = (pa.ArrowException, OSError, ValueError)
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,149}")


class StoreError(RuntimeError):
    """The store cannot be reached or written, or maintenance would be unsafe."""


def safe_name(name: object) -> str:
    """``name`` itself when path-safe, else a cleaned form plus a hash of it (deterministic)."""
    text = str(name)
    if _SAFE.fullmatch(text) and text != "compacted" and not text.endswith(".inprogress"):
        return text
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", text).lstrip("._-")[:100]
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{clean}-{digest}" if clean else digest


def file_name(table: str, value: object) -> str:
    """Name of the file holding one epoch (layers, epochs), one revision (checkpoints) or a run (runs)."""
    if table == "checkpoints":
        return f"{safe_name(value)}.parquet"
    if table == "runs":
        return "run.parquet"
    return f"epoch-{int(value):04d}.parquet"


def parquet_bytes(table: pa.Table) -> pa.Buffer:
    """Serialise ``table`` in memory, so a failed write never publishes half a file."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue()


@dataclass
class DirListing:
    """The data files of one directory (a run, or a checkpoint series)."""

    path: str
    small: dict[str, pafs.FileInfo] = field(default_factory=dict)  # basename -> info
    compacted: pafs.FileInfo | None = None


@dataclass
class ScanResult:
    """What a read found: the rows, the files it skipped, compacted rows shadowed per directory."""

    table: pa.Table
    unreadable: list[tuple[str, str]]
    shadowed: dict[str, int]

    @property
    def frame(self) -> pd.DataFrame:
        return self.table.to_pandas()


def _open(root: str, connect_timeout: float, request_timeout: float, retries: int) -> tuple[pafs.FileSystem, str]:
    """File system and base path of ``root``; S3 gets bounded timeouts and retries."""
    if "://" not in root:
        return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(root))
    try:
        fs, base = pafs.FileSystem.from_uri(root)
        if fs.type_name == "s3":  # endpoint: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, as from_uri reads them
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
            fs = pafs.S3FileSystem(
                region=fs.region or None, endpoint_override=endpoint,
                connect_timeout=connect_timeout, request_timeout=request_timeout,
                retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=retries))
    except READ_ERRORS as exc:
        raise StoreError(f"cannot open store {root}: {exc}") from exc
    return fs, base.rstrip("/")


class Store:
    """One store root; see the module docstring for the layout and guarantees."""

    def __init__(self, root: str, *, connect_timeout: float = 5.0, request_timeout: float = 30.0,
                 retries: int = 3) -> None:
        if not isinstance(root, str | os.PathLike) or not str(root):
            raise StoreError(f"store root must be a path or URI string, got {root!r}")
        scheme, sep, rest = str(root).partition("://")
        if sep and not rest.strip("/"):
            raise StoreError(f"store URI {root!r} names no bucket or path: use {scheme}://bucket/prefix")
        self.root = str(root).rstrip("/") or "/"
        self._options = (connect_timeout, request_timeout, retries)
        self.fs, self.base = _open(self.root, *self._options)
        self.object_store = self.fs.type_name in OBJECT_STORES
        #: (path, error) of every file ``read`` skipped as unreadable, in order, for reports to list.
        self.skipped: list[tuple[str, str]] = []

    def __reduce__(self):  # picklable for Ray / spawn workers: reopen from the root
        timeouts = dict(zip(("connect_timeout", "request_timeout", "retries"), self._options, strict=True))
        return (_reopen, (self.root, timeouts))

    def __repr__(self) -> str:
        return f"Store({self.root!r})"

    # --- paths and listing -------------------------------------------------------
    def table_dir(self, table: str) -> str:
        if table not in SCHEMAS:
            raise ValueError(f"unknown table {table!r}; expected one of {TABLES}")
        return f"{self.base}/{table}"

    def group_dir(self, table: str, value: object) -> str:
        """Directory of one run (layers, epochs) or one checkpoint series."""
        return f"{self.table_dir(table)}/{safe_name(value)}"

    def listing(self, table: str, subdir: str | None = None) -> tuple[dict[str, DirListing], list[pafs.FileInfo]]:
        """Data files of ``table`` (or of one directory name in it) by directory, and ``.inprogress`` files."""
        top = self.table_dir(table)
        start = top if subdir is None else f"{top}/{subdir}"
        dirs: dict[str, DirListing] = {}
        inprogress: list[pafs.FileInfo] = []
        for info in self.fs.get_file_info(pafs.FileSelector(start, recursive=True, allow_not_found=True)):
            parts = info.path[len(top) + 1:].split("/")
            if info.type != pafs.FileType.File:
                continue
            if parts[-1].endswith(".inprogress"):
                inprogress.append(info)
            elif parts[-1].endswith(".parquet") and not any(p.startswith((".", "_")) for p in parts):
                parent = info.path.rsplit("/", 1)[0]
                entry = dirs.setdefault(parent, DirListing(parent))
                if parts[-1] == COMPACTED:
                    entry.compacted = info
                else:
                    entry.small[parts[-1]] = info
        return dict(sorted(dirs.items())), inprogress

    # --- writing -----------------------------------------------------------------
    def put(self, path: str, data: bytes | pa.Buffer) -> None:
        """Publish ``data`` at ``path`` atomically (rename on file systems, one PUT on object stores)."""
        if self.object_store:
            with self.fs.open_output_stream(path) as out:
                out.write(data)
            return
        parent, name = path.rsplit("/", 1)
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{parent}/.{name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.inprogress"
        try:
            with self.fs.open_output_stream(tmp) as out:
                out.write(data)
            self.fs.move(tmp, path)
        except BaseException:
            with suppress(OSError):
                self.fs.delete_file(tmp)
            raise

    def delete_file(self, path: str) -> None:
        """Delete one file (one place to intercept in tests)."""
        self.fs.delete_file(path)

    def write(self, table: str, rows: list[dict]) -> str:
        """Write the rows of one (run, epoch) or (series, revision), replacing any earlier copy; return the path."""
        data = _to_arrow(table, rows)
        dcol, fcol = GROUPS[table]
        fval = data[fcol][0].as_py()
        directory = self.group_dir(table, data[dcol][0].as_py())
        path = f"{directory}/{file_name(table, fval)}"
        self.put(path, parquet_bytes(data))
        self._drop_from_compacted(table, directory, fval)
        return path

    def write_layers(self, rows: list[dict]) -> str:
        return self.write("layers", rows)

    def write_epoch(self, row: dict) -> str:
        return self.write("epochs", [row])

    def write_checkpoint(self, rows: list[dict]) -> str:
        return self.write("checkpoints", rows)

    def write_run(self, row: dict) -> str:
        return self.write("runs", [row])

    def epoch_rows(self, table: str, run_id: str, epochs: list[int]) -> list[dict]:
        """The rows of some epochs of one run (``layers`` or ``epochs``) as plain dicts (null stays
        None, NaN stays NaN), sorted by key, reading only those epochs' own files; when one has none
        (compacted, or not written), the run's whole directory. Unreadable files are skipped as
        ``read`` skips them."""
        if not epochs:
            return []
        schema = SCHEMAS[table]
        directory = self.group_dir(table, run_id)
        infos = self.fs.get_file_info([f"{directory}/{file_name(table, e)}" for e in epochs])
        if any(i.type != pafs.FileType.File for i in infos):
            result = self.scan(table, run_id=run_id)
            data, bad = result.table.filter(pc.is_in(result.table["epoch"], pa.array(epochs, pa.int32()))), \
                result.unreadable
        else:
            data, bad = self._scan_files(infos, schema, list(schema.names), None)
        for path, error in bad:
            warnings.warn(f"skipping unreadable store file {path}: {error}", stacklevel=2)
            self.skipped.append((path, error))
        return data.sort_by([(k, "ascending") for k in KEYS[table]]).to_pylist()

    def _drop_from_compacted(self, table: str, directory: str, fval: object) -> None:
        """Remove a rewritten epoch's rows from the directory's compacted file, if it has any."""
        path = f"{directory}/{COMPACTED}"
        info = self.fs.get_file_info(path)
        if info.type != pafs.FileType.File:
            return
        try:
            old = self._read_files([info], SCHEMAS[table])
        except READ_ERRORS as exc:
            warnings.warn(f"cannot update {path}: {exc}", stacklevel=3)
            return
        kept = old.filter(ds.field(GROUPS[table][1]) != fval)
        if kept.num_rows == 0:
            self.delete_file(path)
        elif kept.num_rows < old.num_rows:
            self.put(path, parquet_bytes(kept))

    # --- reading -----------------------------------------------------------------
    def _read_files(self, infos: list[pafs.FileInfo], schema: pa.Schema, columns: list[str] | None = None,
                   filt: ds.Expression | None = None) -> pa.Table:
        """``columns`` (default: all) of the files' rows as one table of ``schema``'s types.

        The one place older files are mapped to the current schema: a column a file lacks is null,
        and a renamed column (``RENAMED``) is read from its older name where the new one is absent.
        """
        cols = list(columns) if columns else list(schema.names)
        fmt = ds.ParquetFileFormat()
        frags = [fmt.make_fragment(i.path, filesystem=self.fs, file_size=i.size) for i in infos]
        data = ds.FileSystemDataset(frags, schema=_with_old_names(schema), format=fmt, filesystem=self.fs)
        proj = {c: pc.coalesce(ds.field(c), ds.field(RENAMED[c])) if c in RENAMED else ds.field(c) for c in cols}
        return data.to_table(columns=proj, filter=filt).cast(pa.schema([schema.field(c) for c in cols]))

    def _scan_files(self, infos: list[pafs.FileInfo], schema: pa.Schema, columns: list[str],
                    filt: ds.Expression | None) -> tuple[pa.Table, list[tuple[str, str]]]:
        """Read files as one dataset; only if that fails, file by file, skipping unreadable ones."""
        parts, bad = [schema.empty_table().select(columns)], []
        if infos:
            try:
                return self._read_files(infos, schema, columns, filt), []
            except READ_ERRORS:
                pass
        for info in infos:
            try:
                parts.append(self._read_files([info], schema, columns, filt))
            except READ_ERRORS as exc:
                bad.append((info.path, str(exc)))
        return pa.concat_tables(parts), bad

    def scan(self, table: str, sweep: str | None = None, run_id: str | None = None,
             columns: list[str] | None = None, subdir: str | None = None) -> ScanResult:
        """Like ``read``, but also return the unreadable files and shadowed compacted rows.

        ``subdir`` limits the scan to one directory name of the table (what ``compact`` uses).
        """
        self.table_dir(table)  # raises on an unknown table
        schema = SCHEMAS[table]
        cols = list(columns) if columns else list(schema.names)
        for name in cols + ["sweep"] * (sweep is not None) + ["run_id"] * (run_id is not None):
            if name not in schema.names:
                raise ValueError(f"table {table!r} has no column {name!r}")
        need = list(dict.fromkeys(cols + list(GROUPS[table]) + list(KEYS[table])))
        filt = None
        for name, value in (("sweep", sweep), ("run_id", run_id)):
            if value is not None:
                term = ds.field(name) == value
                filt = term if filt is None else filt & term
        if run_id is not None and GROUPS[table][0] == "run_id":
            subdir = safe_name(run_id)
        dirs, _ = self.listing(table, subdir)
        small, bad = self._scan_files([i for d in dirs.values() for i in d.small.values()], schema, need, filt)
        comp, bad2 = self._scan_files([d.compacted for d in dirs.values() if d.compacted], schema, need, filt)
        bad_paths = {p for p, _ in bad}
        present = {(d.path, n) for d in dirs.values() if d.compacted
                   for n, i in d.small.items() if i.path not in bad_paths}
        comp, shadowed = self._unshadow(table, comp, present)
        out = pa.concat_tables([small, comp]).sort_by([(k, "ascending") for k in KEYS[table]])
        return ScanResult(out.select(cols), bad + bad2, shadowed)

    def _unshadow(self, table: str, comp: pa.Table, present: set[tuple[str, str]]) -> tuple[pa.Table, dict[str, int]]:
        """Drop compacted rows whose own per-epoch file is ``present`` (directory, name)."""
        if not present or comp.num_rows == 0:
            return comp, {}
        dcol, fcol = GROUPS[table]
        keys = comp.select([dcol, fcol]).to_pandas()
        where = {k: (self.group_dir(table, k[0]), file_name(table, k[1]))
                 for k in keys.drop_duplicates().itertuples(index=False, name=None)}
        hidden = [k for k, loc in where.items() if loc in present]
        if not hidden:
            return comp, {}
        mask = pd.MultiIndex.from_frame(keys).isin(hidden)
        shadowed: dict[str, int] = {}
        for k in keys[mask].itertuples(index=False, name=None):
            shadowed[where[k][0]] = shadowed.get(where[k][0], 0) + 1
        return comp.filter(pa.array(~mask)), shadowed

    def read(self, table: str, sweep: str | None = None, run_id: str | None = None,
             columns: list[str] | None = None) -> pd.DataFrame:
        """All rows of ``table`` (optionally one sweep / run), sorted by key.

        An unreadable file warns and is appended to ``self.skipped`` (``scan`` returns them too).
        """
        result = self.scan(table, sweep=sweep, run_id=run_id, columns=columns)
        for path, error in result.unreadable:
            warnings.warn(f"skipping unreadable store file {path}: {error}", stacklevel=2)
            self.skipped.append((path, error))
        return result.frame

    def read_json_files(self, folder: str) -> dict[str, Any]:
        """Every readable ``*.json`` directly under ``{root}/{folder}``, by file name without ``.json``,
        in path order (none, or no folder: ``{}``; a file that cannot be read or parsed is skipped)."""
        infos = self.fs.get_file_info(pafs.FileSelector(f"{self.base}/{folder}", allow_not_found=True))
        out = {}
        for info in sorted(infos, key=lambda i: i.path):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
                continue
            try:
                with self.fs.open_input_stream(info.path) as f:
                    out[info.base_name[: -len(".json")]] = json.loads(f.read().decode())
            except (OSError, ValueError):
                continue
        return out

    # --- probes and locks --------------------------------------------------------
    def exists(self) -> bool:
        """Whether the root is there (a folder, or on an object store any object under the prefix)."""
        try:
            return self.fs.get_file_info(self.base).type != pafs.FileType.NotFound
        except READ_ERRORS as exc:
            raise StoreError(f"cannot read store {self.root}: {exc}") from exc

    def check_writable(self) -> None:
        """Write, read back and delete a probe under the root; raise ``StoreError`` naming the cause."""
        probe = f"{self.base}/_probe-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        payload = b"qkgeom store probe"
        try:
            self.put(probe, payload)
            with self.fs.open_input_stream(probe) as f:
                echoed = f.read()
            self.delete_file(probe)
        except READ_ERRORS as exc:
            raise StoreError(f"store {self.root} is not writable: {exc}") from exc
        if echoed != payload:
            raise StoreError(f"store {self.root}: a probe written under the root read back differently")


def _with_old_names(schema: pa.Schema) -> pa.Schema:
    """``schema`` plus, for each of its renamed columns, a nullable field of the older name."""
    old = [pa.field(RENAMED[f.name], f.type) for f in schema if f.name in RENAMED]
    return pa.schema([*schema, *old])


def _reopen(root: str, options: dict) -> Store:
    return Store(root, **options)


def _to_arrow(table: str, rows: list[dict]) -> pa.Table:
    """Rows of one file as an Arrow table of the table's schema, checked."""
    schema = SCHEMAS[table]
    if not rows:
        raise ValueError(f"no rows to write to {table}")
    unknown = set().union(*rows) - set(schema.names)
    if unknown:
        raise ValueError(f"{table} has no columns {sorted(unknown)}")
    rows = [{**r, "schema_version": r.get("schema_version") or SCHEMA_VERSION} for r in rows]
    data = pa.Table.from_pylist(rows, schema=schema)
    for f in schema:
        if not f.nullable and data[f.name].null_count:
            raise ValueError(f"{table}.{f.name} may not be null ({data[f.name].null_count} rows)")
    for col in GROUPS[table]:
        if len(data[col].unique()) != 1:
            raise ValueError(f"rows of one {table} write must share one {col}")
    keys = list(zip(*(data[k].to_pylist() for k in KEYS[table]), strict=True))
    if len(set(keys)) != len(keys):
        raise ValueError(f"duplicate {KEYS[table]} among the rows written to {table}")
    return data
