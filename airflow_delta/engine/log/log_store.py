"""LogStore: list, read and write the files of `_delta_log`, with an atomic put-if-absent.

A commit is visible whole or not at all, and two writers never both win a version. How that
is achieved depends on the filesystem:

- local: the bytes go to a temporary file in the target directory, which is fsynced and then
  hard-linked to the target name; `os.link` fails when the name is taken. The directory is
  fsynced after the link, so that the commit is durable when `write` returns.
- S3 (`s3://`, `s3a://`): one single-part PUT with `If-None-Match: *`.
- GCS (`gs://`): a create with `ifGenerationMatch=0`; Azure Blob / ADLS Gen2 (`az://`,
  `abfs://`, `abfss://`): a PUT with `If-None-Match: *`.
- memory (tests): an exists-check and a write under one process-wide lock.
- anything else fsspec can open: reads and listings work, but a put-if-absent is refused with
  `UnsupportedStorageError` unless the storage option `"single_writer": "true"` promises that
  only one writer ever commits to the table.

Paths handed to and returned by a LogStore are in the terms of its filesystem: absolute OS paths
for local tables, `bucket/key` for S3 and GCS, `container/key` for Azure, `/path` for memory.

The log store is the engine's only door to storage: data files, deletion vectors and
checkpoints are opened through it too (`open_input`, `open_output`, `file_path`), so no other
module touches fsspec.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import re
import stat
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

import fsspec
import fsspec.asyn
import fsspec.implementations.local  # every local table needs it: loaded with the engine
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from airflow_delta.engine.errors import (
    CorruptLogError,
    InvalidArgumentError,
    UnsupportedStorageError,
)
from airflow_delta.engine.log.azure_blobs import check_addressable, delete_blobs
from airflow_delta.engine.log.object_keys import (
    check_gcs_literal,
    check_s3_addressable,
    delete_objects,
)
from airflow_delta.engine.log.storage_options import (
    LOG_COMPACTION_OPTION,
    SINGLE_WRITER_OPTION,
    s3fs_options,
    truthy,
)
from airflow_delta.engine.log.store_guard import GUARDED_METHODS, guarded, protocols_of
from airflow_delta.engine.protocol.paths import FileLocation, canonical_scheme, resolve_path

log = logging.getLogger(__name__)


#: Data files up to this size (bytes) are read whole by `LogStore.open_input`.
WHOLE_READ_SIZE = 2 * 2**20
# Largest body S3 takes in one PUT; below it s3fs never switches to a multipart upload.
_MAX_SINGLE_PUT = 5 * 2**30
_memory_lock = threading.Lock()


def _reset_memory_lock() -> None:
    """In a forked child: a fresh lock (one held by a parent thread would never be released)."""
    global _memory_lock
    _memory_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_memory_lock)


def temporary_name(name: str) -> str:
    """The name of a temporary file written before it is linked in as `name` (hidden, unique)."""
    return f".{name}.{uuid.uuid4().hex}.tmp"


def is_temporary(name: str) -> bool:
    """Whether `name` is a `temporary_name`: one a killed writer may leave behind."""
    return re.fullmatch(r"\.(.+)\.[0-9a-f]{32}\.tmp", name) is not None


@dataclass(frozen=True)
class FileStatus:
    """One file of a listing."""

    path: str
    name: str
    size: int
    modification_time: int  # milliseconds since the epoch


def write_row_groups(
    sink: pa.NativeFile, tables: Iterable[pa.Table], schema: pa.Schema, options: Mapping[str, Any]
) -> None:
    """Write each of `tables` as a row group of a parquet file of `schema` into `sink`."""
    with pq.ParquetWriter(sink, schema, **options) as writer:
        for table in tables:
            writer.write_table(table)


class LogStore(ABC):
    """Reads, lists and atomically writes log files on one filesystem.

    Every method that touches storage (`GUARDED_METHODS`, here and in subclasses) turns a
    missing or refused credential into StorageAccessError.
    """

    fs: fsspec.AbstractFileSystem

    def __init__(self, fs: fsspec.AbstractFileSystem) -> None:
        self.fs = fs

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in GUARDED_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, guarded(cls.__dict__[name]))

    @abstractmethod
    def list_from(self, dir_path: str, start_name: str = "") -> list[FileStatus]:
        """Files directly in `dir_path` whose name >= `start_name`, sorted by name; [] if the
        directory is missing."""

    def list_range(self, dir_path: str, start_name: str, end_name: str | None) -> list[FileStatus]:
        """`list_from(dir_path, start_name)` without the files named `end_name` or later
        (None: no end)."""
        listing = self.list_from(dir_path, start_name)
        return listing if end_name is None else [f for f in listing if f.name < end_name]

    @abstractmethod
    def read(self, path: str, max_size: int | None = None) -> bytes:
        """The whole content of the regular file `path`; FileNotFoundError if it is missing,
        CorruptLogError if it is not a regular file or holds more than `max_size` bytes."""

    @abstractmethod
    def write(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """Write `data` to `path` so that readers see all of it or nothing.

        With `overwrite=False` this is a put-if-absent: FileExistsError if `path` exists,
        also when a concurrent writer took it first. With `overwrite=True` the file is replaced
        (atomically where the filesystem allows it).
        """

    def write_parquet(
        self, path: str, tables: Iterable[pa.Table], schema: pa.Schema, **options: Any
    ) -> int:
        """Write `tables` (a row group each) as a parquet file of `schema` replacing `path`,
        whole-file atomically; its size. `options` go to `pyarrow.parquet.ParquetWriter`.
        """
        sink = pa.BufferOutputStream()
        write_row_groups(sink, tables, schema, options)
        data = sink.getvalue()
        self.write(path, data.to_pybytes(), overwrite=True)
        return int(data.size)

    @abstractmethod
    def exists(self, path: str) -> bool:
        """Whether `path` exists."""

    @abstractmethod
    def delete(self, path: str) -> None:
        """Remove `path`; a missing file is not an error."""

    def delete_many(self, paths: Sequence[str]) -> None:
        """Remove each of `paths`, taken literally (never as a pattern); missing files are fine.

        Every delete of a table's files goes through here or `delete`: fsspec's `rm` expands
        `*`, `?` and `[...]`, so a key holding them could delete other files.
        """
        for path in paths:
            self.delete(path)

    def list_recursive(self, root: str) -> Iterator[FileStatus]:
        """Every file under the directory `root`, at any depth, with `name` its path relative
        to `root`. Symbolic links are not followed."""
        prefix = root.rstrip("/") + "/"
        self.fs.invalidate_cache(root)
        for path, info in self.fs.find(root, detail=True).items():
            if info.get("type") == "file" and path.startswith(prefix):
                size = int(info.get("size") or 0)
                yield FileStatus(path, path[len(prefix) :], size, info_mtime_ms(self.fs, info))

    def join(self, *parts: str) -> str:
        """Join path parts with `/`."""
        head, *tail = parts
        pieces = [head.rstrip("/")] + [p.strip("/") for p in tail if p.strip("/")]
        return "/".join(pieces)

    def _forget(self, path: str) -> None:
        """Drop what the filesystem cached about `path`: its own entry and its directory's
        listing (adlfs answers `exists` and `info` from the listing of the parent, and its
        `invalidate_cache(path)` drops only `path`'s: a file deleted since stayed there)."""
        self.fs.invalidate_cache(path)
        self.fs.invalidate_cache(path.rsplit("/", 1)[0])

    # -- data files ----------------------------------------------------------------------

    @functools.cached_property
    def is_local(self) -> bool:
        """Whether paths are OS paths that pyarrow opens natively (memory-mapped, no GIL)."""
        return "file" in protocols_of(self.fs)

    def open_input(
        self, path: str, size: int | None = None
    ) -> contextlib.AbstractContextManager[Any]:
        """`path` ready for `pyarrow.parquet.ParquetFile`: the OS path itself on local disk
        (to memory-map), else an open binary file. Given the `size` the log records, a small
        file (<= WHOLE_READ_SIZE; on local disk by its actual size) is read whole into a buffer
        in one call: a third of the cost of memory-mapping it, one request to an object store."""
        if size is not None and self.is_local:
            with open(path, "rb", buffering=0) as f:
                if os.fstat(f.fileno()).st_size <= WHOLE_READ_SIZE:
                    return contextlib.nullcontext(pa.py_buffer(f.readall()))
        elif size is not None and 0 <= size <= WHOLE_READ_SIZE:
            return contextlib.nullcontext(pa.py_buffer(self.fs.cat_file(path)))
        if self.is_local:
            return contextlib.nullcontext(path)
        self._forget(path)  # open takes the size from a cached listing: maybe replaced since
        return contextlib.closing(self.fs.open(path, "rb"))

    def open_parquet(self, path: str) -> pq.ParquetFile:
        """The parquet file at `path`, read lazily (on local disk through a 1 MiB buffer rather
        than each column chunk loaded whole: decoding a large checkpoint peaks lower)."""
        if self.is_local:
            return pq.ParquetFile(path, pre_buffer=False, buffer_size=2**20)
        self._forget(path)  # open takes the size from a cached listing: maybe replaced since
        return pq.ParquetFile(self.fs.open(path, "rb"))

    def open_output(self, path: str) -> Any:
        """A new binary file at `path` for a data file writer: on local disk a native stream
        (no GIL), its directories created; no makedirs on object stores (s3fs makes buckets)."""
        if not self.is_local:
            return self.fs.open(path, "wb")
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        return pa.OSFile(path, "wb")

    def can_open(self, location: FileLocation) -> bool:
        """Whether this store's filesystem opens the file at `location` by its `fs_path`."""
        protocols = protocols_of(self.fs)
        protocols |= {canonical_scheme(p) for p in protocols}
        if location.scheme == "file":
            return location.authority == "" and "file" in protocols
        return canonical_scheme(location.scheme) in protocols

    def file_path(
        self, root: FileLocation, path: str, *, table: str, version: int, what: str = "data file"
    ) -> str:
        """The path, in this store's terms, of the file the log names by `path` in the table
        whose root is `root`; UnsupportedStorageError when the store cannot open it."""
        location = resolve_path(root, path)
        if not self.can_open(location):
            raise UnsupportedStorageError(
                f"Table {table} version {version}: the {what} {path} names {location.uri}, "
                f"which the table's filesystem ({_protocol_name(self.fs)}) cannot open. "
                " Read the table where that storage is reachable, or rewrite the file into the "
                "table."
            )
        return location.fs_path


def _protocol_name(fs: fsspec.AbstractFileSystem) -> str:
    protocol = fs.protocol
    return protocol if isinstance(protocol, str) else "/".join(protocol)


for _name in GUARDED_METHODS:
    setattr(LogStore, _name, guarded(LogStore.__dict__[_name]))


class LocalLogStore(LogStore):
    """The local filesystem: put-if-absent by temporary file + fsync + `os.link`."""

    def __init__(self) -> None:
        super().__init__(fsspec.filesystem("file"))

    def list_from(self, dir_path: str, start_name: str = "") -> list[FileStatus]:
        """Files directly in `dir_path` whose name >= `start_name`, sorted by name."""
        return self.list_range(dir_path, start_name, None)

    def list_range(self, dir_path: str, start_name: str, end_name: str | None) -> list[FileStatus]:
        """Files directly in `dir_path` named from `start_name` to before `end_name`; only
        those are stat'ed (a RESTORE to version 500 of a 1,000-commit log: 3 of 550)."""
        try:
            stop = chr(0x10FFFF) if end_name is None else end_name  # above every name
            with os.scandir(dir_path) as scan:
                entries = [e for e in scan if start_name <= e.name < stop]
        except FileNotFoundError:
            return []
        out = []
        for entry in entries:
            try:
                if not entry.is_file():
                    continue
                st = entry.stat()
            except FileNotFoundError:  # removed since the directory was read
                continue
            out.append(FileStatus(entry.path, entry.name, st.st_size, st.st_mtime_ns // 10**6))
        out.sort(key=lambda f: f.name)
        return out

    def read(self, path: str, max_size: int | None = None) -> bytes:
        """The whole content of the regular file `path`.

        Opened without blocking and checked before reading: a FIFO or a device under a log
        name would otherwise hang the reader or exhaust its memory.
        """
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(path)
                raise CorruptLogError(f"{path} is not a regular file; a log file must be one")
            _check_size(path, st.st_size, max_size)
            return f.read()

    def write(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """Write a fsynced temporary file next to `path` (`temporary_name`), then link (or
        replace) it into place."""
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, temporary_name(name))
        try:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if overwrite:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _sync_directory(directory)

    def write_parquet(
        self, path: str, tables: Iterable[pa.Table], schema: pa.Schema, **options: Any
    ) -> int:
        """Encode straight into a temporary file (no copy in memory), fsync it, then replace
        `path` with it."""
        directory, name = os.path.split(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, temporary_name(name))
        try:
            with pa.OSFile(tmp, "wb") as sink:
                write_row_groups(sink, tables, schema, options)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _sync_directory(directory)
        return size

    def exists(self, path: str) -> bool:
        """Whether `path` exists."""
        return os.path.exists(path)

    def delete(self, path: str) -> None:
        """Remove `path` if present."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def list_recursive(self, root: str) -> Iterator[FileStatus]:
        """Every regular file under `root` (symbolic links neither followed nor listed)."""
        stack = [root]
        while stack:
            directory = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        name = entry.path[len(root) + 1 :]
                        yield FileStatus(entry.path, name, st.st_size, st.st_mtime_ns // 10**6)
                except FileNotFoundError:  # removed since the directory was read
                    continue

    def join(self, *parts: str) -> str:
        """Join with the OS path separator."""
        head, *tail = parts
        return os.path.join(head, *(p.strip(os.sep) for p in tail if p.strip(os.sep)))


def _sync_directory(directory: str) -> None:
    """fsync `directory`, so that a name just linked or replaced in it (a commit) outlives a
    power loss: POSIX makes a new directory entry durable only once its directory is synced."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FsspecLogStore(LogStore):
    """Any fsspec filesystem: reads and lists, but refuses a concurrent-safe put-if-absent."""

    def __init__(self, fs: fsspec.AbstractFileSystem, scheme: str) -> None:
        super().__init__(fs)
        self.scheme = scheme

    def list_from(self, dir_path: str, start_name: str = "") -> list[FileStatus]:
        """Files directly in `dir_path` whose name >= `start_name`, sorted by name."""
        self.fs.invalidate_cache(dir_path)
        try:
            infos = self.fs.ls(dir_path, detail=True)
        except FileNotFoundError:
            return []
        out = []
        for info in infos:
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if info["type"] == "file" and name >= start_name:
                mtime = info_mtime_ms(self.fs, info)
                out.append(FileStatus(info["name"], name, int(info["size"]), mtime))
        out.sort(key=lambda f: f.name)
        return out

    def read(self, path: str, max_size: int | None = None) -> bytes:
        """The whole content of `path` (at most `max_size` + 1 bytes are fetched). An empty
        object reads as b"" (Azure refuses any range of one: 416 InvalidRange)."""
        if max_size is None:
            return bytes(self.fs.cat_file(path))
        try:
            data = bytes(self.fs.cat_file(path, start=0, end=max_size + 1))
        except Exception:  # re-raised unless the object is empty
            self._forget(path)
            if self.fs.size(path) != 0:
                raise
            data = b""
        _check_size(path, len(data), max_size)
        return data

    def write(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """Replace `path`; a put-if-absent raises UnsupportedStorageError."""
        if not overwrite:
            raise UnsupportedStorageError(
                f"cannot commit {path!r}: {self.scheme}:// has no atomic put-if-absent, so two "
                f"writers could both write the same version. If only one writer ever commits "
                f'to this table, pass the storage option "{SINGLE_WRITER_OPTION}": "true".'
            )
        self.fs.pipe_file(path, data)

    def exists(self, path: str) -> bool:
        """Whether `path` exists, asked of the storage itself: some filesystems (adlfs, s3fs)
        answer from a cached directory listing, which would hide files written since."""
        self._forget(path)
        return bool(self.fs.exists(path))

    def delete(self, path: str) -> None:
        """Remove `path` if present."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(path)


class SingleWriterLogStore(FsspecLogStore):
    """Any fsspec filesystem the user promised only one writer commits to: exists-check + write."""

    def write(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """Write `path`; FileExistsError if it exists (asked of the storage, not of a cached
        listing) and `overwrite` is False."""
        if not overwrite and self.exists(path):
            raise FileExistsError(path)
        self.fs.pipe_file(path, data)


class MemoryLogStore(FsspecLogStore):
    """fsspec's in-memory filesystem (tests): put-if-absent under a process-wide lock."""

    def __init__(self, fs: fsspec.AbstractFileSystem) -> None:
        super().__init__(fs, "memory")

    def write(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """Write `path`; FileExistsError if it exists and `overwrite` is False."""
        with _memory_lock:
            if not overwrite and self.fs.exists(path):
                raise FileExistsError(path)
            self.fs.pipe_file(path, data)


class ConditionalPutLogStore(FsspecLogStore):
    """An object store whose filesystem creates an object conditionally in one request, and
    raises FileExistsError when it exists: S3 (`If-None-Match: *`), GCS (`ifGenerationMatch=0`)
    and Azure Blob / ADLS Gen2 (`If-None-Match: *`), through `pipe_file(mode="create")`."""

    #: `pipe_file` arguments that keep a commit one request (no multipart upload).
    put_options: ClassVar[dict[str, Any]] = {}

    def write(self, path: str, data: bytes, overwrite: bool = False) -> None:
        """One PUT; with `overwrite=False` conditional on the object not existing.

        A retried PUT whose first attempt landed finds its own object: when the object already
        holds exactly `data`, the write counts as done.
        """
        if overwrite:
            self.fs.pipe_file(path, data, **self.put_options)
            return
        try:
            self.fs.pipe_file(path, data, mode="create", **self.put_options)
        except FileExistsError:
            if self.fs.cat_file(path) != data:
                raise


class GCSLogStore(ConditionalPutLogStore):
    """Google Cloud Storage through gcsfs: put-if-absent by a create with `ifGenerationMatch=0`."""


class AzureLogStore(ConditionalPutLogStore):
    """Azure Blob Storage and ADLS Gen2 through adlfs: put-if-absent by a PUT with
    `If-None-Match: *`; deletes by literal blob name (adlfs reads `?` and `#` as URL syntax)."""

    def delete(self, path: str) -> None:
        """Remove the blob `path` (`container/name`, taken literally)."""
        self.delete_many([path])

    def delete_many(self, paths: Sequence[str]) -> None:
        """Remove the blobs `paths` by literal name through the Azure SDK; missing ones are
        fine. (adlfs would delete `t/x.parquet` for a stray `t/x.parquet#`.)"""
        by_container: dict[str, list[str]] = {}
        for path in paths:
            container, _, name = path.partition("/")
            by_container.setdefault(container, []).append(name)
        fsspec.asyn.sync(self.fs.loop, delete_blobs, self.fs.service_client, by_container)
        for path in paths:
            self._forget(path)


class S3LogStore(ConditionalPutLogStore):
    """S3 through s3fs: put-if-absent by a conditional PUT, listings straight from S3."""

    put_options: ClassVar[dict[str, Any]] = {"chunksize": _MAX_SINGLE_PUT}

    def __init__(self, fs: fsspec.AbstractFileSystem, page_size: int = 1000) -> None:
        super().__init__(fs, "s3")
        self.page_size = page_size

    def list_from(self, dir_path: str, start_name: str = "") -> list[FileStatus]:
        """Files directly in `dir_path` whose name >= `start_name`, sorted by name.

        One uncached `ListObjectsV2` per page, starting after `start_name` minus its last
        character (StartAfter is exclusive), so older files are not listed at all.
        """
        listed = self._list_objects(dir_path, delimiter=True, start_name=start_name)
        return sorted((f for f in listed if f.name >= start_name), key=lambda f: f.name)

    def list_recursive(self, root: str) -> Iterator[FileStatus]:
        """Every object whose key starts with `root/`: one flat `ListObjectsV2` per page, keys
        taken literally (`a//b` and `x[1]` are keys like any other)."""
        return self._list_objects(root, delimiter=False)

    def _list_objects(
        self, dir_path: str, delimiter: bool, start_name: str = ""
    ) -> Iterator[FileStatus]:
        """The objects under `dir_path/` (directly under it with `delimiter`), page by page,
        each named by its key relative to `dir_path`; nothing when the bucket is missing."""
        bucket, key, _ = self.fs.split_path(dir_path)
        prefix = key.strip("/") + "/" if key.strip("/") else ""
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": self.page_size}
        if delimiter:
            kwargs["Delimiter"] = "/"
        if start_name:
            kwargs["StartAfter"] = prefix + start_name[:-1]
        while True:
            try:
                page = self.fs.call_s3("list_objects_v2", **kwargs)
            except FileNotFoundError:  # no such bucket
                return
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix) :]
                if name:
                    path = f"{bucket}/{obj['Key']}"
                    yield FileStatus(path, name, obj["Size"], _to_ms(obj["LastModified"]))
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def delete(self, path: str) -> None:
        """Remove the object `path` (one DeleteObject of that literal key)."""
        self.delete_many([path])

    def delete_many(self, paths: Sequence[str]) -> None:
        """Remove the objects `paths` by literal key (`object_keys.delete_objects`)."""
        delete_objects(self.fs, paths)
        for path in paths:
            self.fs.invalidate_cache(path)


def _check_size(path: str, size: int, max_size: int | None) -> None:
    if max_size is not None and size > max_size:
        raise CorruptLogError(
            f"{path} holds more than {max_size} bytes, more than such a log file can be"
        )


def get_log_store(
    uri: str, storage_options: Mapping[str, Any] | None = None
) -> tuple[LogStore, str]:
    """Resolve a table URI into (log store, table root path in that filesystem's terms).

    Local tables are plain paths (relative ones are made absolute), `file:///abs` or
    `file:/abs` (percent-escapes decoded). The root never ends with a slash.
    """
    options = dict(storage_options or {})
    single_writer = truthy(options.pop(SINGLE_WRITER_OPTION, False))
    options.pop(LOG_COMPACTION_OPTION, None)  # read by the log segment, not by fsspec
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    if not scheme and uri.startswith("file:"):
        scheme = "file"
    if scheme in ("", "file"):
        return LocalLogStore(), _local_root(uri)
    if scheme in ("s3", "s3a"):
        fs, root = url_to_fs(uri, **s3fs_options(options))
        check_s3_addressable(uri, root)
        return S3LogStore(fs), root.rstrip("/")
    fs, root = url_to_fs(uri, **options)
    if scheme == "memory":
        return MemoryLogStore(fs), root.rstrip("/")
    if scheme in ("gs", "gcs"):
        check_gcs_literal(uri, fs)
        return GCSLogStore(fs, scheme), root.rstrip("/")
    if scheme in ("az", "abfs", "abfss"):
        check_addressable(uri, root.rstrip("/"), fs._strip_protocol)
        return AzureLogStore(fs, scheme), root.rstrip("/")
    store_cls = SingleWriterLogStore if single_writer else FsspecLogStore
    return store_cls(fs, scheme), root.rstrip("/")


def _local_root(uri: str) -> str:
    """The absolute OS path of a local table URI or path."""
    if uri.startswith("file:"):
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"file URI with a remote host is not supported: {uri!r}")
        if parts.query or parts.fragment or uri.endswith(("?", "#")):  # dropped: another table
            raise InvalidArgumentError(
                f"Table {uri}: a '?' or '#' in a file URI starts a query or fragment, so the "
                f"table would be {unquote(parts.path)!r}. Write '?' as %3F and '#' as %23."
            )
        uri = unquote(parts.path)
    return os.path.abspath(uri)


def _to_ms(value: Any) -> int:
    """Milliseconds since the epoch of a datetime, a number of seconds or an ISO 8601 string."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if isinstance(value, dt.datetime):  # exact: a float timestamp() * 1000 can be 1 ms early
        if value.tzinfo is None:
            value = value.astimezone()  # a naive listing time is local, as timestamp() takes it
        return int((value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1))
    return int(float(value) * 1000)


def info_mtime_ms(fs: fsspec.AbstractFileSystem, info: Mapping[str, Any]) -> int:
    """The modification time of a listing entry, whichever key its filesystem uses."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        if info.get(key) is not None:
            return _to_ms(info[key])
    return _to_ms(fs.modified(info["name"]))
