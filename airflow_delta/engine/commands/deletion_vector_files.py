"""Deletion vectors in storage: the rows a file's DV deletes, and new DVs written.

The codec is `protocol/deletion_vectors.py`; this module does the I/O, through the table's log
store (the only user of fsspec):

- `read_deletion_vector` returns the sorted row indexes (uint64) a descriptor marks deleted,
  from the log itself (`'i'`), a file next to the data (`'u'`) or at an absolute path (`'p'`),
  checking the checksum and the cardinality the log records;
- `DeletionVectorWriter` gives each new DV a descriptor: inline when its bitmap holds at most
  `MAX_INLINE_BYTES`, otherwise a frame of one `deletion_vector_<uuid>.bin` at the table root,
  which every DV of one command shares (written once by `finish()`, before the commit).
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from airflow_delta.engine.errors import CorruptLogError, DeltaProtocolError
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.actions import AddFile, DeletionVectorDescriptor
from airflow_delta.engine.protocol.deletion_vectors import (
    FILE_FORMAT_VERSION,
    MAX_INLINE_BYTES,
    deleted_row_indexes,
    dv_bytes_from_file,
    dv_file_name,
    file_descriptor,
    frame_dv,
    inline_descriptor,
    inline_dv_bytes,
    relative_dv_path,
    serialize_row_indexes,
)
from airflow_delta.engine.protocol.features import writer_features

if TYPE_CHECKING:
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

RowIndexes = npt.NDArray[np.uint64]


class DeletionVectorReader:
    """Reads the DVs of one table version; each DV file is read once and kept."""

    def __init__(self, location: TableLocation, version: int) -> None:
        self.location = location
        self.version = version
        self._contents: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def read(self, dv: Mapping[str, Any] | DeletionVectorDescriptor) -> RowIndexes:
        """The sorted row indexes the DV `dv` (a descriptor, or its log JSON / ADD_TYPE row)
        deletes; CorruptLogError when its file is missing or it disagrees with the log."""
        if isinstance(dv, DeletionVectorDescriptor):
            dv = dv.to_json_dict()
        storage, where = dv["storageType"], dv["pathOrInlineDv"]
        size = int(dv.get("sizeInBytes") or 0)
        table = self.location.uri
        if storage == "i":
            data = inline_dv_bytes(where, size)
        elif storage in ("u", "p"):
            path = self._path(storage, where)
            data = dv_bytes_from_file(self._content(path), int(dv.get("offset") or 1), size, path)
        else:
            raise DeltaProtocolError(
                f"Table {table}: unknown deletion vector storage type {storage!r}"
            )
        deleted = deleted_row_indexes(data)
        if len(deleted) != int(dv.get("cardinality") or 0):
            raise CorruptLogError(
                f"Table {table} version {self.version}: deletion vector {storage}{where} "
                f"deletes {len(deleted)} rows, the log says {dv.get('cardinality')}"
            )
        return deleted

    def _path(self, storage: str, where: str) -> str:
        if storage == "u":
            return self.location.root.child(relative_dv_path(where)).fs_path
        return self.location.store.file_path(
            self.location.root,
            where,
            table=self.location.uri,
            version=self.version,
            what="deletion vector file",
        )

    def _content(self, path: str) -> bytes:
        with self._lock:
            if path in self._contents:
                return self._contents[path]
        try:
            content = self.location.store.read(path)
        except FileNotFoundError:
            raise CorruptLogError(
                f"Table {self.location.uri} version {self.version}: the deletion vector file "
                f"{path} is missing (deleted by a VACUUM with too short a retention, or copied "
                "without it). Restore it, or read an older version."
            ) from None
        with self._lock:
            self._contents[path] = content
        return content


class DeletionVectorWriter:
    """New DVs of one command: inline when small, else frames of one shared DV file.

    `add` returns each DV's descriptor at once (the file's offsets are known as frames are
    appended); `finish` writes the file, if any DV went to it, before the commit that refers to
    it; `abort` removes it when the command fails after that.
    """

    def __init__(self, location: TableLocation, max_inline_bytes: int = MAX_INLINE_BYTES) -> None:
        self.location = location
        self.max_inline_bytes = max_inline_bytes
        self.uuid = uuid.uuid4()
        self.frames: list[bytes] = []
        self.size = 1  # the version byte
        self.written: str | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        """The store path of this command's DV file."""
        return self.location.root.child(dv_file_name(self.uuid)).fs_path

    def add(self, rows: npt.ArrayLike) -> DeletionVectorDescriptor:
        """The descriptor of a new DV deleting the row indexes `rows` (union them with a file's
        existing DV first: a DV replaces the file's previous one)."""
        indexes = np.unique(np.asarray(rows, dtype=np.uint64))
        bitmap = serialize_row_indexes(indexes)
        if len(bitmap) <= self.max_inline_bytes:
            return inline_descriptor(bitmap, len(indexes))
        frame = frame_dv(bitmap)
        with self._lock:
            offset = self.size
            self.frames.append(frame)
            self.size += len(frame)
        return file_descriptor(self.uuid, offset, bitmap, len(indexes))

    def finish(self) -> None:
        """Write the DV file (put-if-absent: its name is new) when a DV went to it."""
        if self.frames and self.written is None:
            content = b"".join([bytes([FILE_FORMAT_VERSION]), *self.frames])
            self.location.store.write(self.path, content, overwrite=False)
            self.written = self.path

    def abort(self) -> None:
        """Remove the DV file, if written (best effort: VACUUM removes it otherwise)."""
        if self.written is not None:
            with contextlib.suppress(OSError):
                self.location.store.delete(self.written)


def live_row_indexes(
    chosen: npt.NDArray[np.bool_], deleted: npt.NDArray[np.uint64], rows: int | None
) -> npt.NDArray[np.uint64]:
    """The indexes in their file of the live rows `chosen` selects (a mask over the rows a
    file's deletion vector kept, in file order), given the rows it deleted (`deleted`, sorted)
    and the file's `rows` (its numRecords; needed only when `deleted` is not empty)."""
    if not len(deleted):
        return np.flatnonzero(chosen).astype(np.uint64)
    if rows is None:
        raise DeltaProtocolError(
            "a data file with a deletion vector has no numRecords in its stats (required)"
        )
    live = np.setdiff1d(np.arange(rows, dtype=np.uint64), deleted, assume_unique=True)
    return live[chosen]


def with_deletion_vector(file: AddFile, descriptor: DeletionVectorDescriptor) -> AddFile:
    """`file` re-added with `descriptor` as its deletion vector (which replaces its old one).
    Its stats stay (they count the file's rows), marked as no longer tight bounds; its row
    ids, commit version and clustering stay."""
    stats = file.stats
    if stats:
        parsed = json.loads(stats)
        parsed["tightBounds"] = False
        stats = json.dumps(parsed, separators=(",", ":"))
    return AddFile(
        path=file.path,
        partition_values=file.partition_values,
        size=file.size,
        modification_time=file.modification_time,
        data_change=True,
        stats=stats,
        tags=file.tags,
        deletion_vector=descriptor,
        base_row_id=file.base_row_id,
        default_row_commit_version=file.default_row_commit_version,
        clustering_provider=file.clustering_provider,
    )


def with_rows_deleted(
    file: AddFile,
    rows: npt.ArrayLike,
    reader: DeletionVectorReader,
    writer: DeletionVectorWriter,
) -> AddFile:
    """`file` re-added with a new deletion vector (from `writer`) deleting the rows of its old
    one (read by `reader`) and `rows`, indexes in the file (physical: counting the rows its old
    DV deletes). For executors that find the rows elsewhere, such as the Spark commands."""
    indexes = np.asarray(rows, dtype=np.uint64)
    if file.deletion_vector is not None:
        indexes = np.union1d(reader.read(file.deletion_vector), indexes)
    return with_deletion_vector(file, writer.add(indexes))


def deletion_vectors_enabled(txn: OptimisticTransaction) -> bool:
    """Whether commands write deletion vectors on `txn`'s table (the deletionVectors feature
    and delta.enableDeletionVectors=true); else they rewrite files."""
    configuration = txn.metadata.configuration
    enabled = configuration.get("delta.enableDeletionVectors", "false").lower() == "true"
    return enabled and "deletionVectors" in writer_features(txn.protocol)
