"""Post-commit hooks: work that follows a successful commit and can never undo it.

Besides the hook protocol: symlink manifests for Presto/Trino/Athena (GenerateSymlinkManifest)
and the cleanup of expired log files (LogCleanupHook). A hook's failure is logged ("Error when
executing post-commit hook [name] for commit [version]") and handed to the hook's
`handle_error`; the commit stays committed.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from airflow_delta.engine.errors import DeltaProtocolError
from airflow_delta.engine.log.log_store import LocalLogStore
from airflow_delta.engine.log.snapshot import complete_checkpoints
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.actions import Action, AddFile, RemoveFile
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.paths import FileLocation, resolve_path, table_root
from airflow_delta.engine.protocol.schema import partition_path

if TYPE_CHECKING:
    from airflow_delta.engine.delta_log import DeltaLog
    from airflow_delta.engine.log.snapshot import Snapshot
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

log = logging.getLogger(__name__)

DAY_MS = 86_400_000


class PostCommitHook:
    """Something to run after a commit; `name` identifies it in logs and results."""

    name: str = "hook"

    def run(
        self,
        txn: OptimisticTransaction,
        committed_version: int,
        committed_actions: Sequence[Action],
    ) -> None:
        raise NotImplementedError

    def handle_error(self, error: Exception, version: int) -> None:
        """Called with the error a failed run raised; the default only logs it."""
        log.warning("Post-commit hook %s failed for version %s: %s", self.name, version, error)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


class CheckpointHook(PostCommitHook):
    """Write a checkpoint of the committed version (in addition to the interval checkpoints)."""

    name = "checkpoint"

    def run(
        self,
        txn: OptimisticTransaction,
        committed_version: int,
        committed_actions: Sequence[Action],
    ) -> None:
        txn.delta_log.checkpoint(txn.delta_log.snapshot_at(version=committed_version))


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


class GenerateSymlinkManifest(PostCommitHook):
    """Keep `_symlink_format_manifest/` in step with the table, for Presto, Trino and Athena.

    After a commit only the manifests of the partitions its AddFiles and RemoveFiles touched
    are rewritten (a full generation when no manifest exists yet). Registered by the
    transaction when `delta.compatibility.symlinkFormatManifest.enabled` is true.
    """

    name = "symlink_manifest"

    def run(
        self,
        txn: OptimisticTransaction,
        committed_version: int,
        committed_actions: Sequence[Action],
    ) -> None:
        snapshot = txn.delta_log.snapshot_at(version=committed_version)
        generate_incremental_manifest(txn.delta_log, txn.snapshot, snapshot, committed_actions)


def generate_symlink_manifest(
    delta_log: DeltaLog, snapshot: Snapshot | None = None
) -> ManifestUpdate:
    """Rewrite every manifest of `snapshot` (default: the latest) and delete stale ones.

    Each partition's manifest, `_symlink_format_manifest/<partition dir>/manifest` (or
    `_symlink_format_manifest/manifest` for an unpartitioned table), lists the absolute URIs of
    its active data files, one per line. Manifests of partitions without files are deleted.

    >>> generate_symlink_manifest(DeltaLog.for_table("s3://bucket/events"))  # doctest: +SKIP
    """
    snapshot = snapshot or delta_log.update()
    check_manifest_support(snapshot)
    wanted = _manifest_contents(delta_log, snapshot, None)
    existing = _existing_manifests(delta_log)
    written = _write_manifests(delta_log, wanted)
    deleted = _delete_manifests(delta_log, sorted(set(existing) - set(wanted)))
    log.info(
        "Generated symlink manifests of table %s at version %s: %s written, %s deleted",
        delta_log.table_uri,
        snapshot.version,
        len(written),
        len(deleted),
    )
    return ManifestUpdate(written, deleted, full=True)


def generate_incremental_manifest(
    delta_log: DeltaLog,
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
    root = delta_log.store.join(delta_log.table_path, MANIFEST_LOCATION)
    touched = None
    if (
        columns
        and read_snapshot.version >= 0
        and read_snapshot.partition_columns == columns
        and delta_log.store.exists(root)
    ):
        touched = _touched_partitions(read_snapshot, columns, actions)
    if touched is None:
        return generate_symlink_manifest(delta_log, snapshot)
    wanted = _manifest_contents(delta_log, snapshot, touched)
    written = _write_manifests(delta_log, wanted)
    deleted = _delete_manifests(delta_log, sorted(touched - set(wanted)))
    log.info(
        "Updated symlink manifests of table %s at version %s: %s written, %s deleted",
        delta_log.table_uri,
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
    dv_files = snapshot.files().field("deletionVector")
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


def table_root_uri(delta_log: DeltaLog) -> str:
    """The table root as the URI manifests use: `file:/abs/path`, `s3://bucket/key`, ..."""
    return table_root(delta_log.table_uri, delta_log.table_path).uri


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
        files = read_snapshot.files()
        paths = [unquote(p) for p in files.field("path").to_pylist()]
        values = files.field("partitionValues").to_pylist()
        for path, pairs in zip(paths, values, strict=True):
            if path in unknown:
                unknown.discard(path)
                touched.add(_partition_dir(dict(pairs or ()), columns))
    return None if unknown else touched


def _manifest_contents(
    delta_log: DeltaLog, snapshot: Snapshot, partitions: set[str] | None
) -> dict[str, bytes]:
    """Manifest bytes by partition dir ("" when unpartitioned), for `partitions` (None: all)."""
    columns = snapshot.partition_columns
    files = snapshot.files()
    root_uri = table_root_uri(delta_log)
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


def _manifest_path(delta_log: DeltaLog, partition_dir: str) -> str:
    store = delta_log.store
    return store.join(delta_log.table_path, MANIFEST_LOCATION, partition_dir, MANIFEST_NAME)


def _existing_manifests(delta_log: DeltaLog) -> list[str]:
    """The partition dirs that hold a manifest now."""
    root = delta_log.store.join(delta_log.table_path, MANIFEST_LOCATION)
    return [
        f.name.rpartition("/")[0]
        for f in delta_log.store.list_recursive(root)
        if f.name.rsplit("/", 1)[-1] == MANIFEST_NAME
    ]


def _write_manifests(delta_log: DeltaLog, contents: Mapping[str, bytes]) -> list[str]:
    """Replace each manifest whole (atomically where the filesystem allows)."""
    written = []
    for partition_dir, data in sorted(contents.items()):
        path = _manifest_path(delta_log, partition_dir)
        delta_log.store.write(path, data, overwrite=True)
        written.append(path)
    return written


def _delete_manifests(delta_log: DeltaLog, partition_dirs: Sequence[str]) -> list[str]:
    """Delete the manifests of `partition_dirs`, and their emptied local directories."""
    store = delta_log.store
    root = store.join(delta_log.table_path, MANIFEST_LOCATION)
    deleted = []
    for partition_dir in partition_dirs:
        path = _manifest_path(delta_log, partition_dir)
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


class LogCleanupHook(PostCommitHook):
    """Delete log files older than `delta.logRetentionDuration` that no version needs.

    Does nothing when `delta.enableExpiredLogCleanup` is false. Meant to run after a
    checkpoint, as Delta does: only a newer checkpoint lets older log files go.
    """

    name = "log_cleanup"

    def run(
        self,
        txn: OptimisticTransaction,
        committed_version: int,
        committed_actions: Sequence[Action],
    ) -> None:
        config = TableConfig(txn.metadata.configuration)
        if config.enable_expired_log_cleanup:
            _cleanup_expired_logs(txn.delta_log, config, None)


def cleanup_expired_logs(
    delta_log: DeltaLog, snapshot: Snapshot | None = None, now_ms: int | None = None
) -> list[str]:
    """Delete expired commit, checksum, checkpoint and compaction files; their names.

    A file goes when its modification time is before the cutoff AND its version is below the
    boundary. The cutoff is `delta.logRetentionDuration` (of `snapshot`, default the latest; 30
    days unless set) before now, truncated to the start of that day as Delta does, so a
    writer's snapshot has at least a whole retention period before the commits after it can
    go (a writer that lags further is stopped by its commit's stale check). The boundary is
    the newest complete checkpoint at or below the oldest commit still within retention (the
    newest checkpoint when every commit has expired). Every version from the boundary on keeps
    its checkpoint and the commits after it, so it stays readable; nothing is deleted when the
    table has no checkpoint. `_last_checkpoint` and `_sidecars/` are never touched (a v2
    checkpoint's sidecars are left in place even when it is deleted).

    >>> cleanup_expired_logs(DeltaLog.for_table("/data/events"))  # doctest: +SKIP
    ['00000000000000000000.json', ...]
    """
    snapshot = snapshot or delta_log.update()
    return _cleanup_expired_logs(delta_log, snapshot.config, now_ms)


def truncate_day(epoch_ms: int) -> int:
    """The start (UTC midnight) of the day of `epoch_ms`.

    >>> truncate_day(86_400_000 + 5)
    86400000
    """
    return epoch_ms - epoch_ms % DAY_MS


def _cleanup_expired_logs(
    delta_log: DeltaLog, config: TableConfig, now_ms: int | None
) -> list[str]:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = truncate_day(now_ms - config.log_retention_ms)
    listing = delta_log.store.list_from(delta_log.log_path)
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
    delta_log.store.delete_many([f.path for f in expired])  # in name order: oldest first
    log.info(
        "Deleted %s expired log files of table %s (versions below %s, older than %s ms)",
        len(expired),
        delta_log.table_uri,
        boundary,
        cutoff,
    )
    return [f.name for f in expired]


#: The hooks a user can ask for by name, in the order they run best in.
POST_COMMIT_HOOKS: dict[str, type[PostCommitHook]] = {
    CheckpointHook.name: CheckpointHook,
    GenerateSymlinkManifest.name: GenerateSymlinkManifest,
    LogCleanupHook.name: LogCleanupHook,
}


def post_commit_hook(name: str) -> PostCommitHook:
    """The hook called `name` ("checkpoint", "symlink_manifest" or "log_cleanup").

    >>> post_commit_hook("checkpoint").name
    'checkpoint'
    """
    try:
        return POST_COMMIT_HOOKS[name]()
    except KeyError:
        raise ValueError(
            f"Unknown post-commit hook {name!r}: use one of {', '.join(POST_COMMIT_HOOKS)}"
        ) from None
