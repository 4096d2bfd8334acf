"""DeltaLog: the entry point to a table's transaction log."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa

from airflow_delta.engine.errors import (
    CorruptLogError,
    DeltaConcurrentModificationException,
    TableAlreadyExistsError,
    TableNotFoundError,
    VersionNotFoundError,
)
from airflow_delta.engine.log.checkpoints import (
    DEFAULT_CHECKPOINT_PART_SIZE,
    CheckpointResult,
    checkpoint_pieces,
    read_checkpoint,
    read_last_checkpoint,
    write_checkpoint,
)
from airflow_delta.engine.log.log_store import FileStatus, get_log_store
from airflow_delta.engine.log.replay import parse_log_batch
from airflow_delta.engine.log.snapshot import LogSegment, Snapshot, build_log_segment
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.actions import CommitInfo, Metadata, Operation
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.features import check_checkpoint_support
from airflow_delta.engine.protocol.log_json import parse_json
from airflow_delta.engine.protocol.schema import schema_to_json
from airflow_delta.engine.txn.transaction import CommitProperties, OptimisticTransaction

log = logging.getLogger(__name__)

Timestamp = datetime | date | str | int | float


def to_epoch_ms(ts: Timestamp) -> int:
    """Milliseconds since the epoch of a datetime, ISO-8601 string or number of ms.

    Naive datetimes and strings without an offset are taken as UTC.
    """
    if isinstance(ts, int | float):
        return int(ts)
    if isinstance(ts, str):
        text = ts.strip().replace("Z", "+00:00")
        try:
            ts = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not an ISO-8601 timestamp: {ts!r}") from None
    if not isinstance(ts, datetime):
        ts = datetime(ts.year, ts.month, ts.day)
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    return int(ts.timestamp() * 1000)


class DeltaLog:
    """A table's `_delta_log`: snapshots, time travel, checkpoints and history."""

    def __init__(self, table_uri: str, storage_options: Mapping[str, str] | None = None):
        self.table_uri = table_uri
        self.storage_options = dict(storage_options or {})
        self.store, self.table_path = get_log_store(table_uri, self.storage_options)
        self.log_path = self.store.join(self.table_path, "_delta_log")

    @classmethod
    def for_table(cls, uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaLog:
        """The DeltaLog of the table at `uri` (local path, file://, s3://, memory://)."""
        return cls(uri, storage_options)

    # -- snapshots ---------------------------------------------------------------------

    def _list(self, start_name: str = "") -> list[FileStatus]:
        try:
            listing = self.store.list_from(self.log_path, start_name)
        except NotADirectoryError:
            listing = []
        if not listing and not start_name:
            what = "does not exist" if not self.store.exists(self.log_path) else "is empty"
            raise TableNotFoundError(
                f"{self.table_uri} is not a Delta table: {self.log_path} {what}. "
                "Check the path, or create the table first."
            )
        return listing

    def _segment_from_hint(self) -> LogSegment | None:
        """The latest log segment found by listing from `_last_checkpoint`, if it is sound."""
        hint = read_last_checkpoint(self.store, self.log_path)
        if hint is None:
            return None
        listing = self.store.list_from(self.log_path, filenames.version_prefix(hint["version"]))
        try:
            segment = build_log_segment(self.table_uri, self.log_path, listing)
        except (CorruptLogError, TableNotFoundError, VersionNotFoundError):
            return None
        if segment.checkpoint_version is None:
            log.info(
                "Ignoring _last_checkpoint of %s: checkpoint %s not found",
                self.table_uri,
                hint["version"],
            )
            return None
        return segment

    def _load(self, segment: LogSegment | None, version: int | None) -> Snapshot:
        """Load a snapshot, falling back to older checkpoints when one cannot be read."""
        excluded: set[int] = set()
        listing: list[FileStatus] | None = None
        while True:
            if segment is None:
                listing = listing if listing is not None else self._list()
                segment = build_log_segment(
                    self.table_uri, self.log_path, listing, version, frozenset(excluded)
                )
            batch = None
            if segment.checkpoint_version is not None:
                try:
                    batch = read_checkpoint(self.store, self.log_path, segment.checkpoint_files)
                except (CorruptLogError, FileNotFoundError) as exc:
                    log.warning(
                        "Checkpoint %s of %s is unreadable (%s); replaying from an older one",
                        segment.checkpoint_version,
                        self.table_uri,
                        exc,
                    )
                    excluded.add(segment.checkpoint_version)
                    segment = None
                    continue
            return Snapshot.load(self, segment, batch)

    def update(self) -> Snapshot:
        """The latest snapshot of the table."""
        return self._load(self._segment_from_hint(), None)

    def snapshot_at(
        self, version: int | None = None, timestamp: Timestamp | None = None
    ) -> Snapshot:
        """The snapshot at `version`, or the latest committed at or before `timestamp`."""
        if version is not None and timestamp is not None:
            raise ValueError("pass either version or timestamp, not both")
        if timestamp is not None:
            version = self.version_at_timestamp(timestamp)
        if version is None:
            return self.update()
        if version < 0:
            raise VersionNotFoundError(f"Cannot time travel table {self.table_uri} to {version}")
        return self._load(None, version)

    def commit_timestamps(self) -> list[tuple[int, int]]:
        """(version, timestamp ms) of every commit file, made strictly increasing.

        Uses inCommitTimestamp from the versions where the table enabled it, and the commit
        file's modification time before that (adjusted to be monotonic, as Delta does).
        """
        commits = [
            (p.version, f)
            for f in self._list()
            if (p := filenames.parse_log_file_name(f.name)) and p.kind == "commit"
        ]
        if not commits:
            raise TableNotFoundError(f"{self.table_uri} has no commit files")
        config = TableConfig(self.update().metadata.configuration)
        ict_from = (
            config.in_commit_timestamp_enablement_version or 0
            if config.in_commit_timestamps_enabled
            else None
        )
        out: list[tuple[int, int]] = []
        prev = -1
        for version, f in commits:
            ts = f.modification_time
            if ict_from is not None and version >= ict_from:
                ts = self._in_commit_timestamp(f) or ts
            ts = max(ts, prev + 1)
            out.append((version, ts))
            prev = ts
        return out

    def _in_commit_timestamp(self, f: FileStatus) -> int | None:
        first = self.store.read(f.path).split(b"\n", 1)[0]
        try:
            line = parse_json(first, f.path)
        except CorruptLogError:
            return None
        info = line.get("commitInfo") if isinstance(line, dict) else None
        ict = info.get("inCommitTimestamp") if isinstance(info, dict) else None
        return ict if isinstance(ict, int) and not isinstance(ict, bool) else None

    def version_at_timestamp(self, timestamp: Timestamp) -> int:
        """The latest version committed at or before `timestamp`."""
        ts = to_epoch_ms(timestamp)
        stamps = self.commit_timestamps()
        eligible = [v for v, t in stamps if t <= ts]
        if not eligible:
            first_v, first_ts = stamps[0]
            raise VersionNotFoundError(
                f"Cannot time travel table {self.table_uri} to {timestamp}: it is before the "
                f"earliest available commit (version {first_v} at "
                f"{datetime.fromtimestamp(first_ts / 1000, UTC).isoformat()})."
            )
        return eligible[-1]

    def latest_version(self, start: int = 0) -> int:
        """The newest commit version, listing only from `start` (-1 when none)."""
        listing = self.store.list_from(self.log_path, filenames.version_prefix(start))
        versions = [
            p.version
            for f in listing
            if (p := filenames.parse_log_file_name(f.name)) and p.kind == "commit"
        ]
        return max(versions, default=start - 1)

    def commit_info(self, version: int) -> CommitInfo | None:
        """The commitInfo of commit `version` (None when the commit has none)."""
        path = self.store.join(self.log_path, filenames.delta_file(version))
        return parse_log_batch(self.store.read(path), path).commit_info

    # -- transactions ------------------------------------------------------------------

    def start_transaction(
        self, snapshot: Snapshot | None = None, properties: CommitProperties | None = None
    ) -> OptimisticTransaction:
        """A transaction on `snapshot` (default: the latest; version -1 for a new table)."""
        if snapshot is None:
            try:
                snapshot = self.update()
            except TableNotFoundError:
                snapshot = Snapshot.empty(self)
        return OptimisticTransaction(self, snapshot, properties)

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
        metadata = Metadata(
            id=str(uuid.uuid4()),
            schema_string=None,
            partition_columns=list(partition_columns),
            configuration=dict(configuration or {}),
            name=name,
            description=description,
            created_time=int(time.time() * 1000),
        )
        txn.update_metadata_for_new_table(metadata.with_schema(json.loads(schema_to_json(schema))))
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

    # -- checkpoints and history -------------------------------------------------------

    def checkpoint(
        self, snapshot: Snapshot | None = None, part_size: int = DEFAULT_CHECKPOINT_PART_SIZE
    ) -> CheckpointResult:
        """Write a classic (or multi-part, above `part_size` actions) checkpoint of `snapshot`."""
        snapshot = snapshot or self.update()
        check_checkpoint_support(snapshot.protocol, self.table_uri)
        txns = list(snapshot.set_transactions.values())
        domains = list(snapshot.domain_metadata.values())
        pieces = checkpoint_pieces(
            snapshot.protocol, snapshot.metadata, txns, domains, snapshot.file_actions_in_batches()
        )
        max_rows = 2 + len(txns) + len(domains) + snapshot.max_file_actions()
        result = write_checkpoint(
            self.store, self.log_path, snapshot.version, pieces, max_rows, part_size
        )
        log.info(
            "Checkpointed table %s at version %s (%s parts, %s actions)",
            self.table_uri,
            result.version,
            result.parts,
            result.num_actions,
        )
        return result

    def history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """commitInfo of each commit plus its `version`, newest first."""
        commits = sorted(
            (
                (p.version, f)
                for f in self._list()
                if (p := filenames.parse_log_file_name(f.name)) and p.kind == "commit"
            ),
            reverse=True,
        )
        if limit is not None:
            commits = commits[:limit]
        out = []
        for version, f in commits:
            info: dict[str, Any] = {}
            for line in self.store.read(f.path).splitlines():
                if b'"commitInfo"' in line:
                    parsed = parse_json(line, f"{f.path}: the commitInfo line")
                    found = parsed.get("commitInfo") if isinstance(parsed, dict) else None
                    if found is not None and not isinstance(found, dict):
                        raise CorruptLogError(f"{f.path}: commitInfo is not a JSON object")
                    info = dict(found or {})
                    break
            info.setdefault("timestamp", f.modification_time)
            out.append({**info, "version": version})
        return out

    def __repr__(self) -> str:
        return f"DeltaLog({self.table_uri!r})"
