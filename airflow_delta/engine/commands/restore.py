"""RESTORE: bring a table back to an earlier version (delta-spark's RestoreTableCommand).

The restore is one commit on the latest snapshot:

- the files of the target version that are not active now are added again (dataChange=true,
  with their stats and deletion vectors), and the active files not in the target version are
  removed (dataChange=true); files are matched by path and deletion vector, so a file whose
  deletion vector changed since is swapped back to its old one;
- before anything is committed, the data files (and deletion vector files) to add again are
  looked up in storage. When some are gone (a VACUUM removed them) the restore is refused with
  RestoreMissingFilesError naming the table, the version and the fix; with
  `ignore_missing_files=True` it goes on without them (their rows are not restored); a data
  file whose deletion vector file is gone is left out too (re-added bare it would bring back
  its deleted rows, re-added with its vector no reader could scan it);
  delta-spark and delta-rs re-add missing files when told to ignore them, which leaves a table
  no reader can scan; here they are left out;
- the metadata of the target version is restored when it differs from the current one; the
  protocol is never downgraded (the current protocol, plus any feature the target version's
  protocol had, as delta-spark without `restore.protocolDowngradeAllowed`);
- the commit (operation RESTORE, parameters version and timestamp) carries delta-spark's
  metrics: tableSizeAfterRestore, numOfFilesAfterRestore, numRemovedFiles, numRestoredFiles,
  removedFilesSize, restoredFilesSize. A RESTORE always commits, even when the files already
  match (history then shows the rollback).

Conflicts: the restore reads the whole table and is checked as Serializable (unless the commit
properties ask for another level), so any concurrent commit that adds or removes files, or
changes the metadata or protocol, fails it (delta-spark fails a RESTORE on any concurrent
commit): a restore that retried past a concurrent append would not leave the target version.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.commands.command_transaction import command_transaction
from airflow_delta.engine.commands.file_removes import remove_files
from airflow_delta.engine.errors import (
    CorruptLogError,
    InvalidArgumentError,
    RestoreMissingFilesError,
    TableNotFoundError,
)
from airflow_delta.engine.log.checkpoints import read_checkpoint
from airflow_delta.engine.log.history import version_at_timestamp
from airflow_delta.engine.log.log_segment import segment_at
from airflow_delta.engine.log.replay import file_keys
from airflow_delta.engine.log.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.protocol.action_types import add_files_from_arrow
from airflow_delta.engine.protocol.actions import Action, Operation
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.deletion_vectors import relative_dv_path
from airflow_delta.engine.protocol.features import (
    reader_features,
    required_protocol,
    writer_features,
)
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.conflicts import IsolationLevel
from airflow_delta.engine.txn.transaction import OptimisticTransaction

log = logging.getLogger(__name__)

#: Storage look-ups in flight while checking that the files to restore exist.
EXISTS_THREADS = 16


def restore(
    table: str | OptimisticTransaction,
    version: int | None = None,
    timestamp: str | datetime | date | None = None,
    *,
    ignore_missing_files: bool = False,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> CommitResult:
    """Restore the table `table` (a URI, or a transaction on it) to `version` (an int), or to
    the latest version at or before `timestamp` (ISO 8601 text, a datetime or a date: UTC).

    Returns the commit's CommitResult, delta-spark's RESTORE metrics in `result.metrics`.
    Raises InvalidArgumentError for a version that is not older than the latest,
    VersionNotFoundError when the log cannot rebuild it, RestoreMissingFilesError when its data
    files are gone (unless `ignore_missing_files`), and a Delta conflict exception when a
    concurrent commit changed the table.

    Example: `restore("s3://bucket/events", version=41).metrics["numRestoredFiles"]`.
    """
    started = time.monotonic()
    txn = _transaction(table, storage_options, commit_properties)
    uri = txn.table
    if (version is None) == (timestamp is None) or type(version) not in (int, type(None)):
        raise InvalidArgumentError(
            f"RESTORE of {uri}: pass either version or timestamp (one of them; a version is a "
            f"commit number, an int), not version={version!r}, timestamp={timestamp!r}"
        )
    if txn.already_committed():  # a retry of a restore that landed: nothing to do again
        landed = {"version": version} if timestamp is None else {"timestamp": str(timestamp)}
        return txn.result(None, Operation("RESTORE", landed))
    if txn.read_version < 0:
        raise TableNotFoundError(f"RESTORE of {uri}: no Delta table there.")
    if version is None:
        assert timestamp is not None
        version = version_at_timestamp(txn.location, timestamp)
    if not 0 <= version < txn.read_version:
        asked = f"version {version}"
        if timestamp is not None:  # the table as of the timestamp is its latest version
            asked = f"the table's version at {timestamp} ({version})"
        fix = (
            f"restore a version from 0 to {txn.read_version - 1}, or a timestamp before the "
            "latest commit."
            if txn.read_version > 0
            else "the table has only version 0, so there is nothing earlier to restore."
        )
        raise InvalidArgumentError(
            f"RESTORE of {uri}: {asked} is not an earlier version of the table "
            f"(latest: {txn.read_version}); {fix}"
        )
    target = _snapshot_at(txn, version)
    current = txn.filter_files_arrow()  # reads (and records) the whole table
    to_add, to_remove = _differences(target, current)
    missing = _missing(txn, target, to_add)  # data file path -> the missing file's name
    if missing and not ignore_missing_files:
        raise RestoreMissingFilesError(
            f"RESTORE of {uri} to version {version}: {len(missing)} data or deletion vector "
            f"file(s) of that version are gone from storage (e.g. {min(missing.values())}), "
            "probably removed by a VACUUM. Restore a later version, put the files back from a "
            "backup, or pass ignore_missing_files=True to restore without them (rows lost)."
        )
    if missing:  # a file whose deletion vector is gone is left out too, never re-added bare
        gone = pa.array(sorted(missing), pa.string())
        to_add = to_add.filter(pc.invert(pc.is_in(pc.struct_field(to_add, "path"), gone)))
    actions = _actions(txn, target, to_add, to_remove)
    metrics = _metrics(current, to_add, to_remove, len(missing), started)
    parameters: dict[str, Any] = {"version": version}
    if timestamp is not None:
        parameters["timestamp"] = str(timestamp)
    txn.changes_from_files = True  # as delta-spark: CDF readers take its adds and removes
    result = txn.commit(actions, Operation("RESTORE", parameters, metrics))
    log.info(
        "RESTORE of %s to version %s committed version %s: %s files restored, %s removed",
        uri,
        version,
        result.version,
        metrics["numRestoredFiles"],
        metrics["numRemovedFiles"],
    )
    return result


def _transaction(
    table: str | OptimisticTransaction,
    storage_options: Mapping[str, str] | None,
    commit_properties: CommitProperties | None,
) -> OptimisticTransaction:
    """The transaction of the restore, Serializable unless its properties choose a level."""
    txn = command_transaction("RESTORE", table, storage_options, commit_properties)
    if txn.properties.isolation_level is None:
        txn.properties = replace(txn.properties, isolation_level=IsolationLevel.SERIALIZABLE)
    return txn


def _snapshot_at(txn: OptimisticTransaction, version: int) -> Snapshot:
    """The snapshot of `version`, its log listed from the checkpoint the table's interval puts
    at or below it (`segment_at`), not whole; an unreadable checkpoint leaves the search for
    an older one to `load_snapshot`."""
    location = txn.location
    interval = TableConfig(txn.metadata.configuration, txn.table).checkpoint_interval
    segment = segment_at(location, version, interval)
    batch = None
    if segment.checkpoint_version is not None:
        try:
            batch = read_checkpoint(location.store, location.log_path, segment.checkpoint_files)
        except (CorruptLogError, FileNotFoundError):
            return load_snapshot(location, version)
    return Snapshot.load(location, segment, batch)


def _differences(
    target: Snapshot, current: pa.StructArray
) -> tuple[pa.StructArray, pa.StructArray]:
    """The files of `target` not among the `current` ones (ADD_TYPE, stats included), and the
    `current` files not in `target`, matched by `file_keys`; the target's stats are read only
    when some of its files are to be added again."""
    target_files = target.files(stats=False)
    target_keys, current_keys = file_keys(target_files), file_keys(current)
    to_remove = current.filter(pc.invert(pc.is_in(current_keys, value_set=target_keys)))
    restored = pc.invert(pc.is_in(target_keys, value_set=current_keys))
    if pc.any(restored).as_py():
        target_files = target.files()
        restored = pc.invert(pc.is_in(file_keys(target_files), value_set=current_keys))
    return target_files.filter(restored), to_remove


def _missing(txn: OptimisticTransaction, target: Snapshot, files: pa.StructArray) -> dict[str, str]:
    """The files of `files` (by their log path) whose data file or deletion vector file is not
    in storage, each with the name of the file that is gone (its log path for a data file)."""
    store, root = txn.location.store, txn.location.root
    wanted: dict[str, tuple[str, list[str]]] = {}  # storage path -> (name, the files needing it)
    paths = pc.struct_field(files, "path").to_pylist()
    for path in paths:
        where = store.file_path(root, path, table=txn.table, version=target.version)
        wanted.setdefault(where, (path, []))[1].append(path)
    dvs = pc.struct_field(files, "deletionVector").to_pylist()
    for path, dv in zip(paths, dvs, strict=True):
        if dv is None or dv["storageType"] not in ("u", "p"):
            continue
        if dv["storageType"] == "u":
            where = root.child(relative_dv_path(dv["pathOrInlineDv"])).fs_path
        else:
            where = store.file_path(
                root, dv["pathOrInlineDv"], table=txn.table, version=target.version,
                what="deletion vector file",
            )  # fmt: skip
        wanted.setdefault(where, (where, []))[1].append(path)
    if not wanted:
        return {}
    where_all = list(wanted)
    local = os.cpu_count() or 1
    threads = max(1, min(len(where_all), EXISTS_THREADS if not store.is_local else local))
    with ThreadPoolExecutor(threads) as pool:
        found = list(pool.map(store.exists, where_all))
    missing: dict[str, str] = {}
    for where, ok in zip(where_all, found, strict=True):
        name, needing = wanted[where]
        for path in needing if not ok else ():
            missing.setdefault(path, name)
    return missing


def _actions(
    txn: OptimisticTransaction, target: Snapshot, to_add: pa.StructArray, to_remove: pa.StructArray
) -> list[Action]:
    """The restore's file actions (the re-added files and the removes); the target's metadata
    and the merged protocol go to the transaction when they differ from the current ones."""
    actions: list[Action] = []
    if target.metadata != txn.snapshot.metadata:
        txn.update_metadata(target.metadata)
    old = target.protocol
    merged = required_protocol(txn.protocol, writer_features(old) | reader_features(old))
    merged = replace(
        merged,
        min_reader_version=max(merged.min_reader_version, old.min_reader_version),
        min_writer_version=max(merged.min_writer_version, old.min_writer_version),
    )
    if merged != txn.protocol:
        txn.new_protocol = merged
    now = int(time.time() * 1000)
    actions += [replace(f, data_change=True) for f in add_files_from_arrow(to_add)]
    actions += remove_files(to_remove, now)
    return actions


def _metrics(
    current: pa.StructArray,
    to_add: pa.StructArray,
    to_remove: pa.StructArray,
    missing: int,
    started: float,
) -> dict[str, Any]:
    def size(files: pa.StructArray) -> int:
        return int(pc.sum(pc.struct_field(files, "size")).as_py() or 0) if len(files) else 0

    restored, removed = size(to_add), size(to_remove)
    return {
        "tableSizeAfterRestore": size(current) - removed + restored,
        "numOfFilesAfterRestore": len(current) - len(to_remove) + len(to_add),
        "numRemovedFiles": len(to_remove),
        "numRestoredFiles": len(to_add),
        "removedFilesSize": removed,
        "restoredFilesSize": restored,
        "numMissingFilesSkipped": missing,
        "executionTimeMs": int((time.monotonic() - started) * 1000),
    }
