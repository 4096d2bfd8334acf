"""VACUUM: delete the data files that no retained version of a table references.

Only files found by listing the table root are ever deleted, never paths taken from the log, so
a log entry such as `../elsewhere.parquet` or an absolute URI can at most protect a file, never
get one deleted. Hidden paths (a component starting with `_` or `.`, except partition
directories and `_change_data`) are not listed: `_delta_log`, `_symlink_format_manifest` and
any other engine's metadata stay untouched.
"""

from __future__ import annotations

import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    CorruptLogError,
    DeltaProtocolError,
    VacuumRetentionError,
)
from airflow_delta.engine.log.log_store import LogStore
from airflow_delta.engine.protocol.columnar import array_from_pylist, scalar
from airflow_delta.engine.protocol.features import (
    CHECKPOINT_WRITER_FEATURES,
    MAX_WRITER_VERSION,
    writer_features,
)
from airflow_delta.engine.protocol.paths import FileLocation, relative_key, resolve_path, table_root
from airflow_delta.engine.protocol.schema import escape_partition_value

if TYPE_CHECKING:
    from airflow_delta.engine.delta_log import DeltaLog
    from airflow_delta.engine.log.snapshot import Snapshot

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
#: Hidden-looking directories Delta still vacuums: change data files age out like data files.
_VACUUMED_HIDDEN_DIRS = frozenset({"_change_data"})
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUES = {c: i for i, c in enumerate(_Z85)}


@dataclass(frozen=True)
class VacuumResult:
    """What a VACUUM deleted (or, in a dry run, would delete).

    :param files_deleted: the files, as paths relative to the table root, sorted.
    :param bytes_deleted: their total size.
    :param dry_run: True when nothing was actually deleted.
    :param retention_hours: the retention the run used.
    """

    files_deleted: list[str]
    bytes_deleted: int
    dry_run: bool
    retention_hours: float


@dataclass(frozen=True)
class _Listed:
    relative: str
    path: str
    size: int
    modification_time: int


def vacuum(
    delta_log: DeltaLog,
    retention_hours: float | None = None,
    dry_run: bool = False,
    enforce_retention_duration: bool = True,
    now_ms: int | None = None,
) -> VacuumResult:
    """Delete the files under the table root that no retained version needs.

    A file is deleted when it is older than the retention (by modification time) and is
    neither an active file of the latest version, nor a file removed within the retention
    (so time travel within it keeps working), nor a deletion-vector file of either. The
    retention defaults to `delta.deletedFileRetentionDuration` (7 days); a shorter one raises
    VacuumRetentionError unless `enforce_retention_duration` is False.

    >>> vacuum(DeltaLog.for_table("s3://bucket/events"), dry_run=True)  # doctest: +SKIP
    VacuumResult(files_deleted=['part-00000-....parquet'], bytes_deleted=1024, ...)
    """
    snapshot = delta_log.update()
    table = delta_log.table_uri
    _check_vacuum_support(snapshot)
    configured_ms = snapshot.config.deleted_file_retention_ms
    if retention_hours is None:
        retention_ms = configured_ms
    elif not 0 <= retention_hours < math.inf:
        raise ValueError(
            f"Cannot vacuum table {table}: retention hours must be a number >= 0, got "
            f"{retention_hours}"
        )
    else:
        retention_ms = round(retention_hours * HOUR_MS)
    if enforce_retention_duration and retention_ms < configured_ms:
        raise VacuumRetentionError(
            f"Cannot vacuum table {table} with a retention of {retention_ms / HOUR_MS:g} hours: "
            f"the table keeps deleted files for {configured_ms / HOUR_MS:g} hours "
            "(delta.deletedFileRetentionDuration). A shorter retention can delete files that "
            "running writers or readers of older versions still need, and corrupt the table. "
            "If no operation is running on the table, force it with "
            "enforce_retention_duration=False (CLI: --force); otherwise use at least "
            f"{configured_ms / HOUR_MS:g} hours."
        )
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now_ms - retention_ms
    store, root = delta_log.store, delta_log.table_path
    referenced = _referenced(table, table_root(table, root), snapshot, cutoff)
    hidden = _hidden_name_test(snapshot.partition_columns)
    listed = 0
    doomed: list[_Listed] = []
    for f in _list_files(store, root, hidden):
        listed += 1
        if f.modification_time < cutoff and f.relative not in referenced:
            doomed.append(f)
    doomed.sort(key=lambda f: f.relative)
    if not dry_run:
        store.delete_many([f.path for f in doomed])
    size = sum(f.size for f in doomed)
    log.info(
        "Vacuum of table %s at version %s (retention %s hours, dry run %s): %s of %s files "
        "(%s bytes) %s",
        table,
        snapshot.version,
        retention_ms / HOUR_MS,
        dry_run,
        len(doomed),
        listed,
        size,
        "to delete" if dry_run else "deleted",
    )
    return VacuumResult([f.relative for f in doomed], size, dry_run, retention_ms / HOUR_MS)


def _check_vacuum_support(snapshot: Snapshot) -> None:
    """Refuse tables whose writer features might keep files this engine cannot see."""
    protocol = snapshot.protocol
    unknown = sorted(writer_features(protocol) - CHECKPOINT_WRITER_FEATURES)
    if protocol.min_writer_version > MAX_WRITER_VERSION or unknown:
        what = ", ".join(unknown) or f"writer version {protocol.min_writer_version}"
        raise DeltaProtocolError(
            f"Cannot vacuum table {snapshot.table_uri}: it uses writer features this engine "
            f"does not know ({what}), which may need files vacuum would delete. Vacuum it with "
            "an engine that supports them."
        )


def _referenced(table: str, root: FileLocation, snapshot: Snapshot, cutoff: int) -> set[str]:
    """Root-relative keys of the active files, the tombstones removed at or after `cutoff`,
    and the deletion-vector files of both."""
    tombstones = snapshot.tombstones()
    removed_at = pc.fill_null(tombstones.field("deletionTimestamp"), scalar(0, pa.int64()))
    tombstones = tombstones.filter(pc.greater_equal(removed_at, scalar(cutoff, pa.int64())))
    referenced: set[str] = set()
    dv_paths: list[str] = []
    for files in (snapshot.files(), tombstones):
        referenced.update(referenced_keys(root, files.field("path")))
        dvs = files.field("deletionVector")
        if dvs.null_count == len(dvs):
            continue
        for dv in dvs.drop_null().to_pylist():
            try:
                dv_path = deletion_vector_path(dv["storageType"], dv["pathOrInlineDv"])
            except ValueError as exc:
                raise CorruptLogError(
                    f"Cannot vacuum table {table}: the deletion vector {dv} does not name a "
                    f"file ({exc}), so vacuum cannot tell which files it needs. Repair the "
                    "log entry first."
                ) from None
            if dv_path:
                dv_paths.append(dv_path)
    referenced.update(referenced_keys(root, array_from_pylist(dv_paths, pa.string())))
    return referenced


#: A log path that is its own root-relative key: relative, no escape, no dot or empty segment.
_PLAIN_PATH = r"^[^/:%]([^%:]*[^/%:])?$"
_ODD_SEGMENT = r"(^|/)\.{1,2}(/|$)|//"


def referenced_keys(root: FileLocation, paths: pa.Array) -> set[str]:
    """The keys under `root` (relative, in its filesystem's terms) that the log `paths` name,
    resolved by `resolve_path`. Where other engines read a path another way, every reading is
    protected: a path with an empty segment (`a//b`) protects its literal key and the key with
    the segment collapsed (the file Hadoop-based readers open); an absolute-path reference
    without a scheme (`/x.parquet`, as DuckDB's writer puts its files at the table root)
    protects the file it names and the file under the root (where delta-rs and DuckDB read it).
    Plain relative paths (most of them) are taken as they are, without per-path work.
    """
    paths = paths.drop_null() if paths.null_count else paths
    plain = pc.and_(
        pc.match_substring_regex(paths, _PLAIN_PATH),
        pc.invert(pc.match_substring_regex(paths, _ODD_SEGMENT)),
    )
    keys = set(paths.filter(plain).to_pylist())
    for path in paths.filter(pc.invert(plain)).to_pylist():
        locations = [resolve_path(root, path)]
        if path.startswith("/") and not path.startswith("//"):
            locations.append(resolve_path(root, path.lstrip("/")))
        candidates = {
            spelling
            for location in locations
            for spelling in (location, replace(location, path=re.sub("/{2,}", "/", location.path)))
        }
        for candidate in candidates:
            key = relative_key(root, candidate)
            if key is not None:
                keys.add(key)
    return keys


def deletion_vector_path(storage_type: str, path_or_inline_dv: str) -> str | None:
    """The file of a deletion vector: a root-relative URL path ('u'), an absolute URI ('p'),
    or None when it is stored inline ('i').

    >>> deletion_vector_path("u", "ab^-aqEH.-t@S}K{vb[*k^")
    'ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin'
    """
    if storage_type == "p":
        return path_or_inline_dv
    if storage_type != "u":
        return None
    prefix, encoded = path_or_inline_dv[:-20], path_or_inline_dv[-20:]
    name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
    return f"{prefix}/{name}" if prefix else name


def z85_decode(text: str) -> bytes:
    """Decode Z85 (ZeroMQ's base 85), as the Delta protocol encodes deletion-vector UUIDs."""
    if len(text) % 5:
        raise ValueError(f"Z85 text length must be a multiple of 5, got {len(text)}: {text!r}")
    out = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for char in text[start : start + 5]:
            if char not in _Z85_VALUES:
                raise ValueError(f"not a Z85 character: {char!r} in {text!r}")
            value = value * 85 + _Z85_VALUES[char]
        out += value.to_bytes(4, "big")
    return bytes(out)


def _hidden_name_test(partition_columns: Sequence[str]) -> Callable[[str], bool]:
    """The test Delta's vacuum uses for hidden file and directory names."""
    partition_prefixes = tuple(f"{escape_partition_value(c)}=" for c in partition_columns)

    def hidden(name: str) -> bool:
        return (
            name.startswith((".", "_"))
            and name not in _VACUUMED_HIDDEN_DIRS
            and not (partition_prefixes and name.startswith(partition_prefixes))
        )

    return hidden


def _list_files(store: LogStore, root: str, hidden: Callable[[str], bool]) -> Iterator[_Listed]:
    """Every non-hidden file under `root`, recursively (one flat listing on object stores).

    Symbolic links are not followed: a link to a directory elsewhere is not a file here.
    """
    for f in store.list_recursive(root):
        if not any(hidden(part) for part in f.name.split("/")):
            yield _Listed(f.name, f.path, f.size, f.modification_time)
