"""DeltaLog: the entry point to a table's transaction log.

A facade over the engine's parts: snapshots and time travel (`engine.log`), transactions
(`engine.txn`), reading rows without Spark (`engine.commands.table_reader`) and maintenance
(`engine.commands.maintenance`). No engine module imports it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_delta.engine.commands import maintenance
from airflow_delta.engine.commands.maintenance import ManifestUpdate, VacuumResult
from airflow_delta.engine.errors import (
    DeltaConcurrentModificationException,
    InvalidArgumentError,
    SchemaMismatchError,
    TableAlreadyExistsError,
    VersionNotFoundError,
)
from airflow_delta.engine.log import history, log_segment
from airflow_delta.engine.log.checkpoints import DEFAULT_CHECKPOINT_PART_SIZE, CheckpointResult
from airflow_delta.engine.log.history import Timestamp, to_epoch_ms
from airflow_delta.engine.log.log_store import LogStore
from airflow_delta.engine.log.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.actions import CommitInfo, Metadata, Operation
from airflow_delta.engine.protocol.schema import table_schema_json
from airflow_delta.engine.txn.commit_types import CommitProperties
from airflow_delta.engine.txn.transaction import OptimisticTransaction, start_transaction

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow.dataset as ds

__all__ = ["DeltaLog", "Timestamp", "to_epoch_ms"]

log = logging.getLogger(__name__)


class DeltaLog:
    """A table's `_delta_log`: snapshots, time travel, transactions, checkpoints, history and
    maintenance."""

    def __init__(self, table_uri: str, storage_options: Mapping[str, str] | None = None):
        self.location = TableLocation.of(table_uri, storage_options)

    @classmethod
    def for_table(cls, uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaLog:
        """The DeltaLog of the table at `uri` (local path, file://, s3://, memory://)."""
        return cls(uri, storage_options)

    @property
    def table_uri(self) -> str:
        return self.location.uri

    @property
    def storage_options(self) -> dict[str, str]:
        return dict(self.location.storage_options)

    @property
    def store(self) -> LogStore:
        return self.location.store

    @property
    def table_path(self) -> str:
        return self.location.table_path

    @property
    def log_path(self) -> str:
        return self.location.log_path

    # -- snapshots and time travel -------------------------------------------------------

    def update(self) -> Snapshot:
        """The latest snapshot of the table."""
        return load_snapshot(self.location)

    def snapshot_at(
        self, version: int | None = None, timestamp: Timestamp | None = None
    ) -> Snapshot:
        """The snapshot at `version`, or the latest committed at or before `timestamp`."""
        if version is not None and timestamp is not None:
            raise InvalidArgumentError(
                f"Reading {self.table_uri}: pass either version or timestamp, not both "
                f"(got version={version!r}, timestamp={timestamp!r})"
            )
        if timestamp is not None:
            version = self.version_at_timestamp(timestamp)
        return load_snapshot(self.location, version)

    def commit_timestamps(self) -> list[tuple[int, int]]:
        """(version, timestamp ms) of every commit file, made strictly increasing."""
        return history.commit_timestamps(self.location)

    def version_at_timestamp(self, timestamp: Timestamp) -> int:
        """The latest version committed at or before `timestamp`."""
        return history.version_at_timestamp(self.location, timestamp)

    def latest_version(self, start: int = 0) -> int:
        """The newest commit version, listing only from `start` (`start - 1` when none)."""
        return log_segment.latest_version(self.location, start)

    def commit_info(self, version: int) -> CommitInfo | None:
        """The commitInfo of commit `version` (None when the commit has none);
        VersionNotFoundError when the table has no such commit file."""
        try:
            return log_segment.read_commit_info(self.location, version)
        except FileNotFoundError:
            raise VersionNotFoundError(
                f"Table {self.location.uri} has no commit {version}: it was never written or "
                f"log cleanup removed it (the latest version is {self.update().version})"
            ) from None

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """commitInfo of each commit plus its `version`, newest first."""
        return history.history(self.location, limit)

    # -- reading rows (no Spark) ---------------------------------------------------------

    def read_table(
        self,
        columns: Sequence[str] | None = None,
        filter: str | Sequence[str] | None = None,
        *,
        version: int | None = None,
        timestamp: Timestamp | None = None,
    ) -> pa.Table:
        """The rows that satisfy `filter` (SQL over any columns; NULL does not match) of the
        latest version, `version` or the one at `timestamp`, as Arrow (see
        `engine.commands.table_reader.read_table`).

        >>> DeltaLog.for_table("/data/orders").read_table(["id"], "amount > 10")  # doctest: +SKIP
        """
        from airflow_delta.engine.commands.table_reader import read_table

        return read_table(self.snapshot_at(version, timestamp), columns, filter)

    def to_pandas(
        self,
        columns: Sequence[str] | None = None,
        filter: str | Sequence[str] | None = None,
        *,
        version: int | None = None,
        timestamp: Timestamp | None = None,
    ) -> pd.DataFrame:
        """`read_table(...)` as a pandas DataFrame."""
        return self.read_table(columns, filter, version=version, timestamp=timestamp).to_pandas()

    def to_pyarrow_dataset(
        self, *, version: int | None = None, timestamp: Timestamp | None = None
    ) -> ds.Dataset:
        """The table at the latest version, `version` or `timestamp` as a pyarrow Dataset: lazy
        unless it uses column mapping or deletion vectors (see
        `engine.commands.table_reader.to_pyarrow_dataset`)."""
        from airflow_delta.engine.commands.table_reader import to_pyarrow_dataset

        return to_pyarrow_dataset(self.snapshot_at(version, timestamp))

    # -- transactions ------------------------------------------------------------------

    def start_transaction(
        self, snapshot: Snapshot | None = None, properties: CommitProperties | None = None
    ) -> OptimisticTransaction:
        """A transaction on `snapshot` (default: the latest; version -1 for a new table)."""
        return start_transaction(self.location, snapshot, properties)

    @classmethod
    def create_table(
        cls,
        uri: str,
        schema: pa.Schema,
        partition_columns: Sequence[str] = (),
        configuration: Mapping[str, str] | None = None,
        storage_options: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> DeltaLog:
        """Create a table at `uri`: commit version 0 with its protocol and metadata.

        The protocol is (1, 2) unless the configuration needs table features. With
        `delta.columnMapping.mode` set, every field gets a column mapping id and physical name.
        """
        delta_log = cls(uri, storage_options)
        txn = delta_log.start_transaction()
        if txn.read_version >= 0:
            raise TableAlreadyExistsError(
                f"Cannot create table {uri}: a Delta table exists there (version "
                f"{txn.read_version})."
            )
        try:
            schema_json = table_schema_json(schema)
        except ValueError as exc:
            raise SchemaMismatchError(f"Cannot create table {uri}: {exc}") from None
        metadata = Metadata.for_new_table(
            schema_json,
            partition_columns,
            configuration,
            name=name,
            description=description,
        )
        txn.update_metadata_for_new_table(metadata)
        operation = Operation(
            "CREATE TABLE",
            {
                "isManaged": "false",
                "description": description,
                "partitionBy": json.dumps(list(partition_columns)),
                "properties": json.dumps(dict(configuration or {})),
            },
        )
        try:
            txn.commit([], operation)
        except DeltaConcurrentModificationException:
            raise TableAlreadyExistsError(
                f"Cannot create table {uri}: another writer created it concurrently."
            ) from None
        return delta_log

    # -- checkpoints and maintenance ----------------------------------------------------

    def checkpoint(
        self, snapshot: Snapshot | None = None, part_size: int = DEFAULT_CHECKPOINT_PART_SIZE
    ) -> CheckpointResult:
        """Write a classic (or multi-part, above `part_size` actions) checkpoint of `snapshot`."""
        return (snapshot or self.update()).write_checkpoint(part_size)

    def vacuum(
        self,
        retention_hours: float | None = None,
        dry_run: bool = False,
        enforce_retention_duration: bool = True,
        now_ms: int | None = None,
    ) -> VacuumResult:
        """Delete the files under the table root that no retained version needs (see
        `engine.commands.maintenance.vacuum`)."""
        return maintenance.vacuum(
            self.location, retention_hours, dry_run, enforce_retention_duration, now_ms
        )

    def generate_symlink_manifest(self, snapshot: Snapshot | None = None) -> ManifestUpdate:
        """Rewrite every symlink manifest of `snapshot` (default: the latest)."""
        return maintenance.generate_symlink_manifest(self.location, snapshot)

    def cleanup_expired_logs(
        self, snapshot: Snapshot | None = None, now_ms: int | None = None
    ) -> list[str]:
        """Delete the expired log files no version needs; their names."""
        config = (snapshot or self.update()).config
        return maintenance.cleanup_expired_logs(self.location, config, now_ms)

    def __repr__(self) -> str:
        return f"DeltaLog({self.table_uri!r})"
