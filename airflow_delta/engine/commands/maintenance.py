"""Table maintenance: VACUUM, symlink manifests and expired-log cleanup.

VACUUM deletes the data files no retained version references. Only files found by listing the
table root are ever deleted, never paths taken from the log, so a log entry such as
`../elsewhere.parquet` or an absolute URI can at most protect a file, never get one deleted.
Hidden paths (a component starting with `_` or `.`, except partition directories and
`_change_data`) are not listed: `_delta_log`, `_symlink_format_manifest` and any other
engine's metadata stay untouched.

Symlink manifests list each partition's data files for Presto, Trino and Athena. Expired-log
cleanup deletes the log files older than `delta.logRetentionDuration` that no version needs.
Post-commit hooks run the last two after commits; `DeltaLog` runs all three on demand.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    CorruptLogError,
    DeltaProtocolError,
    InvalidArgumentError,
    VacuumRetentionError,
)
from airflow_delta.engine.log.log_segment import complete_checkpoints
from airflow_delta.engine.log.log_store import LocalLogStore, LogStore, is_temporary
from airflow_delta.engine.log.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.actions import Action, AddFile, RemoveFile
from airflow_delta.engine.protocol.columnar import array_from_pylist, scalar
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.features import (
    CHECKPOINT_WRITER_FEATURES,
    MAX_WRITER_VERSION,
    writer_features,
)
from airflow_delta.engine.protocol.paths import FileLocation, relative_key, resolve_path, table_root
from airflow_delta.engine.protocol.schema import escape_partition_value, partition_path

log = logging.getLogger(__name__)

DAY_MS = 86_400_000
# -- vacuum ------------------------------------------------------------------------------------
HOUR_MS = 3_600_000
#: Hidden-looking directories Delta still vacuums: change data files age out like data files.
_VACUUMED_HIDDEN_DIRS = frozenset({"_change_data"})
#: The prefix of a directory under the table root where a writer stages files before moving
#: them into the table (Spark's parquet writer: `spark/native_write.py`). Vacuum sweeps what a
#: killed writer left there once it is older than the retention period.
STAGING_DIR_PREFIX = "_spark-write-"
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
    location: TableLocation,
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

    >>> vacuum(TableLocation.of("s3://bucket/events"), dry_run=True)  # doctest: +SKIP
    VacuumResult(files_deleted=['part-00000-....parquet'], bytes_deleted=1024, ...)
    """
    snapshot = load_snapshot(location)
    table = location.uri
    _check_vacuum_support(snapshot)
    configured_ms = snapshot.config.deleted_file_retention_ms
    if retention_hours is None:
        retention_ms = configured_ms
    elif not 0 <= retention_hours < math.inf:
        raise InvalidArgumentError(
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
    store, root = location.store, location.table_path
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
    for files in (snapshot.files(stats=False), tombstones):
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
    """Every non-hidden file under `root`, recursively (one flat listing on object stores),
    and every file under a writer's staging directory (STAGING_DIR_PREFIX: hidden-looking, as
    are the `_temporary` directories Spark writes in it, but only a killed writer leaves
    files there).

    Symbolic links are not followed: a link to a directory elsewhere is not a file here.
    """
    for f in store.list_recursive(root):
        parts = f.name.split("/")
        staged = len(parts) > 1 and parts[0].startswith(STAGING_DIR_PREFIX)
        if staged or not any(hidden(part) for part in parts):
            yield _Listed(f.name, f.path, f.size, f.modification_time)


# -- symlink manifests -------------------------------------------------------------------------

#: The directory, under the table root, that holds the symlink manifests.
MANIFEST_LOCATION = "_symlink_format_manifest"
MANIFEST_NAME = "manifest"


@dataclass(frozen=True)
class ManifestUpdate:
    """What one manifest generation did: manifest files written and deleted (store paths)."""

    written: list[str]
    deleted: list[str]
    full: bool


def generate_symlink_manifest(
    location: TableLocation, snapshot: Snapshot | None = None
) -> ManifestUpdate:
    """Rewrite every manifest of `snapshot` (default: the latest) and delete stale ones.

    Each partition's manifest, `_symlink_format_manifest/<partition dir>/manifest` (or
    `_symlink_format_manifest/manifest` for an unpartitioned table), lists the absolute URIs of
    its active data files, one per line. Manifests of partitions without files are deleted.

    >>> generate_symlink_manifest(TableLocation.of("s3://bucket/events"))  # doctest: +SKIP
    """
    snapshot = snapshot or load_snapshot(location)
    check_manifest_support(snapshot)
    wanted = _manifest_contents(location, snapshot, None)
    existing = _existing_manifests(location)
    written = _write_manifests(location, wanted)
    deleted = _delete_manifests(location, sorted(set(existing) - set(wanted)))
    log.info(
        "Generated symlink manifests of table %s at version %s: %s written, %s deleted",
        location.uri,
        snapshot.version,
        len(written),
        len(deleted),
    )
    return ManifestUpdate(written, deleted, full=True)


def generate_incremental_manifest(
    location: TableLocation,
    read_snapshot: Snapshot,
    snapshot: Snapshot,
    actions: Sequence[Action],
) -> ManifestUpdate:
    """Update the manifests of the partitions `actions` touched, as of `snapshot`.

    `read_snapshot` is the snapshot the committing transaction read; it supplies the
    partition of a RemoveFile that does not carry its partition values. Falls back to a full
    generation when no manifest exists yet, the table is unpartitioned, the partitioning
    changed, or the partition of a removed file cannot be told.
    """
    check_manifest_support(snapshot)
    columns = snapshot.partition_columns
    root = location.store.join(location.table_path, MANIFEST_LOCATION)
    touched = None
    if (
        columns
        and read_snapshot.version >= 0
        and read_snapshot.partition_columns == columns
        and location.store.exists(root)
    ):
        touched = _touched_partitions(read_snapshot, columns, actions)
    if touched is None:
        return generate_symlink_manifest(location, snapshot)
    wanted = _manifest_contents(location, snapshot, touched)
    written = _write_manifests(location, wanted)
    deleted = _delete_manifests(location, sorted(touched - set(wanted)))
    log.info(
        "Updated symlink manifests of table %s at version %s: %s written, %s deleted",
        location.uri,
        snapshot.version,
        len(written),
        len(deleted),
    )
    return ManifestUpdate(written, deleted, full=False)


def check_manifest_support(snapshot: Snapshot) -> None:
    """Raise DeltaProtocolError when a symlink manifest would make readers return wrong data."""
    table = snapshot.table_uri
    configuration = snapshot.metadata.configuration
    mode = configuration.get("delta.columnMapping.mode", "none")
    if mode.lower() != "none":
        raise DeltaProtocolError(
            f"Cannot generate symlink manifests for table {table}: it uses column mapping "
            f"(delta.columnMapping.mode={mode}). Readers of symlink manifests (Presto, Trino, "
            "Athena) read the data files by their physical column names and would return wrong "
            "or empty columns. Read the table through a Delta Lake connector instead, and unset "
            "delta.compatibility.symlinkFormatManifest.enabled."
        )
    dv_files = snapshot.files(stats=False).field("deletionVector")
    dv_enabled = configuration.get("delta.enableDeletionVectors", "false").lower() == "true"
    if dv_enabled or dv_files.null_count != len(dv_files):
        why = (
            "delta.enableDeletionVectors=true"
            if dv_enabled
            else f"{len(dv_files) - dv_files.null_count} active files have deletion vectors"
        )
        raise DeltaProtocolError(
            f"Cannot generate symlink manifests for table {table}: it uses deletion vectors "
            f"({why}). Readers of symlink manifests (Presto, Trino, Athena) ignore deletion "
            "vectors and would return deleted rows. Set delta.enableDeletionVectors=false and "
            "rewrite the files that have deletion vectors (REORG TABLE ... APPLY (PURGE)), or "
            "read the table through a Delta Lake connector."
        )


def table_root_uri(location: TableLocation) -> str:
    """The table root as the URI manifests use: `file:/abs/path`, `s3://bucket/key`, ..."""
    return location.root.uri


def absolute_file_uri(root_uri: str, path: str) -> str:
    """The absolute URI of a data file whose log `path` is relative (URL-encoded) or absolute,
    resolved by `resolve_path`. Percent-escapes are decoded, as Hadoop's `Path.toString` shows
    them: `b=x%253Dy/f.parquet` under `file:/t` is `file:/t/b=x%3Dy/f.parquet`.
    """
    root = resolve_path(FileLocation("file", "", "/"), root_uri)
    return resolve_path(root, path).uri


def _partition_dir(values: Mapping[str, str | None], columns: Sequence[str]) -> str:
    return partition_path({c: values.get(c) for c in columns}, columns)


def _touched_partitions(
    read_snapshot: Snapshot, columns: Sequence[str], actions: Sequence[Action]
) -> set[str] | None:
    """Partition dirs of the committed file actions; None when one cannot be told."""
    touched: set[str] = set()
    unknown: set[str] = set()
    for action in actions:
        if isinstance(action, AddFile):
            touched.add(_partition_dir(action.partition_values, columns))
        elif isinstance(action, RemoveFile):
            if action.partition_values is not None:
                touched.add(_partition_dir(action.partition_values, columns))
            else:
                unknown.add(unquote(action.path))
    if unknown:
        files = read_snapshot.files(stats=False)
        paths = [unquote(p) for p in files.field("path").to_pylist()]
        values = files.field("partitionValues").to_pylist()
        for path, pairs in zip(paths, values, strict=True):
            if path in unknown:
                unknown.discard(path)
                touched.add(_partition_dir(dict(pairs or ()), columns))
    return None if unknown else touched


def _manifest_contents(
    location: TableLocation, snapshot: Snapshot, partitions: set[str] | None
) -> dict[str, bytes]:
    """Manifest bytes by partition dir ("" when unpartitioned), for `partitions` (None: all)."""
    columns = snapshot.partition_columns
    files = snapshot.files(stats=False)
    root_uri = table_root_uri(location)
    paths = files.field("path").to_pylist()
    if columns:
        values = files.field("partitionValues").to_pylist()
        dirs = [_partition_dir(dict(pairs or ()), columns) for pairs in values]
    else:
        dirs = [""] * len(paths)
    grouped: dict[str, list[str]] = {}
    for directory, path in zip(dirs, paths, strict=True):
        if partitions is None or directory in partitions:
            grouped.setdefault(directory, []).append(absolute_file_uri(root_uri, path))
    return {d: "".join(f"{uri}\n" for uri in sorted(uris)).encode() for d, uris in grouped.items()}


def _manifest_path(location: TableLocation, partition_dir: str) -> str:
    store = location.store
    return store.join(location.table_path, MANIFEST_LOCATION, partition_dir, MANIFEST_NAME)


def _existing_manifests(location: TableLocation) -> list[str]:
    """The partition dirs that hold a manifest now."""
    root = location.store.join(location.table_path, MANIFEST_LOCATION)
    return [
        f.name.rpartition("/")[0]
        for f in location.store.list_recursive(root)
        if f.name.rsplit("/", 1)[-1] == MANIFEST_NAME
    ]


def _write_manifests(location: TableLocation, contents: Mapping[str, bytes]) -> list[str]:
    """Replace each manifest whole (atomically where the filesystem allows)."""
    written = []
    for partition_dir, data in sorted(contents.items()):
        path = _manifest_path(location, partition_dir)
        location.store.write(path, data, overwrite=True)
        written.append(path)
    return written


def _delete_manifests(location: TableLocation, partition_dirs: Sequence[str]) -> list[str]:
    """Delete the manifests of `partition_dirs`, and their emptied local directories."""
    store = location.store
    root = store.join(location.table_path, MANIFEST_LOCATION)
    deleted = []
    for partition_dir in partition_dirs:
        path = _manifest_path(location, partition_dir)
        if not store.exists(path):
            continue
        store.delete(path)
        deleted.append(path)
        if isinstance(store, LocalLogStore):
            _remove_empty_dirs(root, partition_dir)
    return deleted


def _remove_empty_dirs(root: str, partition_dir: str) -> None:
    """Remove the directories of `partition_dir` under `root`, deepest first, while empty."""
    parts = [p for p in partition_dir.split("/") if p]
    while parts:
        try:
            os.rmdir(os.path.join(root, *parts))
        except OSError:  # not empty (or already gone): its parents are not empty either
            return
        parts.pop()


# -- expired log cleanup -----------------------------------------------------------------------


def truncate_day(epoch_ms: int) -> int:
    """The start (UTC midnight) of the day of `epoch_ms`.

    >>> truncate_day(86_400_000 + 5)
    86400000
    """
    return epoch_ms - epoch_ms % DAY_MS


def cleanup_expired_logs(
    location: TableLocation, config: TableConfig | None = None, now_ms: int | None = None
) -> list[str]:
    """Delete expired commit, checksum, checkpoint and compaction files; their names.

    A file goes when its modification time is before the cutoff AND its version is below the
    boundary. The cutoff is `delta.logRetentionDuration` (of `config`, default the latest
    snapshot's; 30 days unless set) before now, truncated to the start of that day as Delta
    does, so a writer's snapshot has at least a whole retention period before the commits after
    it can go (a writer that lags further is stopped by its commit's stale check). The boundary
    is the newest complete checkpoint at or below the oldest commit still within retention (the
    newest checkpoint when every commit has expired). Every version from the boundary on keeps
    its checkpoint and the commits after it, so it stays readable; nothing is deleted when the
    table has no checkpoint. `_last_checkpoint` and `_sidecars/` are never touched (a v2
    checkpoint's sidecars are left in place even when it is deleted). Temporary files that
    writers killed mid-write left behind go once older than the cutoff.

    >>> cleanup_expired_logs(TableLocation.of("/data/events"))  # doctest: +SKIP
    ['00000000000000000000.json', ...]
    """
    config = config or load_snapshot(location).config
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = truncate_day(now_ms - config.log_retention_ms)
    listing = location.store.list_from(location.log_path)
    parsed = [(p, f) for f in listing if (p := filenames.parse_log_file_name(f.name))]
    commits = [p.version for p, _ in parsed if p.kind == "commit"]
    retained = [
        p.version for p, f in parsed if p.kind == "commit" and f.modification_time >= cutoff
    ]
    oldest_needed = min(retained, default=max(commits, default=-1))
    checkpoints = [v for v in complete_checkpoints(listing) if v <= oldest_needed]
    boundary = max(checkpoints, default=0)
    expired = [
        f
        for p, f in parsed
        if (p.end_version if p.kind == "compaction" else p.version) < boundary  # type: ignore[operator]
        and f.modification_time < cutoff
    ]
    # the temporary files of writers killed mid-write, as old as expired commits
    expired += [f for f in listing if is_temporary(f.name) and f.modification_time < cutoff]
    location.store.delete_many([f.path for f in expired])  # in name order: oldest first
    log.info(
        "Deleted %s expired log files of table %s (versions below %s, older than %s ms)",
        len(expired),
        location.uri,
        boundary,
        cutoff,
    )
    return [f.name for f in expired]
