"""Snapshot: the state of a table at one version, replayed from its log segment; loading one
(falling back to an older checkpoint when one is unreadable) and checkpointing it."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from functools import cached_property

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    CorruptLogError,
    InvalidArgumentError,
    VersionNotFoundError,
    naming_table,
)
from airflow_delta.engine.log.checkpoints import (
    DEFAULT_CHECKPOINT_PART_SIZE,
    CheckpointResult,
    checkpoint_pieces,
    read_checkpoint,
    write_checkpoint,
)
from airflow_delta.engine.log.json_commits import decode_commits
from airflow_delta.engine.log.log_segment import (
    LogSegment,
    build_log_segment,
    list_log,
    read_commit_info,
    segment_from_hint,
)
from airflow_delta.engine.log.log_store import FileStatus
from airflow_delta.engine.log.replay import (
    FileActions,
    InMemoryLogReplay,
    LogBatch,
)
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.action_types import add_files_from_arrow, live_num_records
from airflow_delta.engine.protocol.actions import (
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    SetTransaction,
)
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.features import check_checkpoint_support, check_reader_support

log = logging.getLogger(__name__)


def _unexpired(replay: InMemoryLogReplay) -> dict[str, SetTransaction]:
    """The app transactions of the replay, without those older than the table's
    `delta.setTransactionRetentionDuration` (by `lastUpdated`; entries without it stay)."""
    metadata = replay.current_metadata
    retention = TableConfig(metadata.configuration if metadata else {}).set_transaction_retention_ms
    if retention is None:
        return dict(replay.transactions)
    oldest = int(time.time() * 1000) - retention
    return {
        app: txn
        for app, txn in replay.transactions.items()
        if txn.last_updated is None or txn.last_updated >= oldest
    }


class Snapshot:
    """The state of a table at one version: protocol, metadata, transactions and files."""

    def __init__(self, location: TableLocation, segment: LogSegment, replay: InMemoryLogReplay):
        self.location = location
        self.log_segment = segment
        self.version = segment.version
        self._replay = replay
        self.protocol: Protocol = replay.current_protocol_version  # type: ignore[assignment]
        self.metadata: Metadata = replay.current_metadata  # type: ignore[assignment]
        self.set_transactions: dict[str, SetTransaction] = _unexpired(replay)
        self.domain_metadata: dict[str, DomainMetadata] = dict(replay.domain_metadata)
        self.commit_info = replay.last_commit_info

    @classmethod
    def empty(cls, location: TableLocation) -> Snapshot:
        """The state before version 0 (version -1): no protocol, metadata or files."""
        segment = LogSegment(location.log_path, -1, (), (), None, 0)
        return cls(location, segment, InMemoryLogReplay(min_file_retention_timestamp=0))

    @classmethod
    def load(
        cls, location: TableLocation, segment: LogSegment, checkpoint_batch: LogBatch | None = None
    ) -> Snapshot:
        """Replay `segment` (its checkpoint already read into `checkpoint_batch` if any)."""
        table = location.uri
        replay = InMemoryLogReplay(min_file_retention_timestamp=0)
        if checkpoint_batch is not None and segment.checkpoint_version is not None:
            replay.append(segment.checkpoint_version, checkpoint_batch)
        store = location.store
        commits = [(store.read(f.path), f.path) for f in segment.deltas]
        batches = decode_commits(commits, replay.current_metadata, replay.current_protocol_version)
        for f, batch in zip(segment.deltas, batches, strict=True):
            name = filenames.parse_log_file_name(f.name)
            assert name is not None  # the segment holds log files only
            # a compaction file x.y replays commits x to y at once
            replay.append(name.end_version or name.version, batch, first=name.version)
        if replay.current_protocol_version is None:
            raise CorruptLogError(
                f"Table {table} version {segment.version}: no protocol action found in the log "
                "(the log is corrupt or truncated)."
            )
        check_reader_support(replay.current_protocol_version, table)
        if replay.current_metadata is None:
            raise CorruptLogError(
                f"Table {table} version {segment.version}: No metadata found in the log "
                "(the log is corrupt or truncated)."
            )
        metadata = replay.current_metadata
        _check_partition_columns(metadata, table, segment.version)
        config = TableConfig(metadata.configuration, table)
        now_ms = int(time.time() * 1000)
        replay.min_file_retention_timestamp = now_ms - config.deleted_file_retention_ms
        return cls(location, segment, replay)

    # -- table-level properties --------------------------------------------------------

    @property
    def table_uri(self) -> str:
        return self.location.uri

    @cached_property
    def config(self) -> TableConfig:
        return TableConfig(self.metadata.configuration, self.table_uri)

    @cached_property
    def schema(self) -> pa.Schema:
        return self.metadata.schema

    @property
    def partition_columns(self) -> list[str]:
        return list(self.metadata.partition_columns)

    @property
    def transactions(self) -> dict[str, int]:
        """The latest committed version of every application id (SetTransaction)."""
        return {app: txn.version for app, txn in self.set_transactions.items()}

    @property
    def min_file_retention_timestamp(self) -> int:
        return self._replay.min_file_retention_timestamp

    @cached_property
    def timestamp(self) -> int:
        """Commit timestamp (ms) of this version: inCommitTimestamp when enabled, else mtime."""
        config = self.config
        enabled_at = config.in_commit_timestamp_enablement_version or 0
        if not config.in_commit_timestamps_enabled or not 0 <= enabled_at <= self.version:
            return self.log_segment.last_commit_timestamp
        commit_info = self.commit_info
        if commit_info is None and not self.log_segment.deltas:
            # Loaded at a checkpoint version: the checkpoint has no commitInfo, the commit does.
            with contextlib.suppress(FileNotFoundError):
                commit_info = read_commit_info(self.location, self.version)
        ict = commit_info.in_commit_timestamp if commit_info is not None else None
        if ict is None:
            return self.log_segment.last_commit_timestamp
        return int(ict)

    # -- files ---------------------------------------------------------------------------

    def files(self, stats: bool = True) -> pa.StructArray:
        """The active AddFiles as ADD_TYPE structs (columnar; no per-file objects).

        With `stats=False` the files of the checkpoint come without their stats (null), which
        are most of a large table's memory: for callers that need only paths, sizes,
        partition values or deletion vectors. Stats are read when a caller first asks.
        """
        return self._replay.active_files(stats)

    def file_actions_in_batches(self) -> Iterator[FileActions]:
        """The active AddFiles and the tombstones within retention, in pieces: what a
        checkpoint holds. A checkpoint's file actions not read yet are streamed, not kept."""
        return self._replay.file_actions_in_batches()

    def max_file_actions(self) -> int:
        """An upper bound of the rows `file_actions_in_batches` yields."""
        return self._replay.max_file_actions()

    def all_files(self) -> list[AddFile]:
        """The active AddFiles as objects."""
        return add_files_from_arrow(self.files())

    def tombstones(self) -> pa.StructArray:
        """RemoveFiles still within the deleted-file retention period."""
        return self._replay.get_tombstones()

    @property
    def num_files(self) -> int:
        return len(self.files(stats=False))

    @cached_property
    def size_in_bytes(self) -> int:
        return int(pc.sum(self.files(stats=False).field("size")).as_py() or 0)

    @cached_property
    def num_records(self) -> int | None:
        """Rows in the table: stats.numRecords minus deletion-vector cardinality, summed.

        None when some active file has no numRecords stat.
        """
        files = self.files()
        if not len(files):
            return 0
        counts = live_num_records(files)
        return None if counts.null_count else int(pc.sum(counts).as_py())

    def missing_data_file(self, path: str) -> CorruptLogError:
        """The error for an active file of this version that is not in storage."""
        hint = ""
        if path.startswith("/") and not path.startswith("//"):
            hint = (
                " The path starts with '/' and has no scheme: by the protocol (an absolute-path "
                "URI reference) it names that file on the table's filesystem, not a file under "
                "the table root. DuckDB's delta writer (whose readers, like delta-rs, resolve "
                "it under the root) writes such paths for files it puts at the root; rewrite "
                "those files with another engine."
            )
        return CorruptLogError(
            f"Table {self.table_uri} version {self.version}: the data file {path} is missing "
            "(deleted by a VACUUM with too short a retention, or the table was copied without "
            "it). Restore the file from a backup, or read or write a version that does not "
            f"reference it.{hint}"
        )

    # -- checkpoints -------------------------------------------------------------------------

    def write_checkpoint(self, part_size: int = DEFAULT_CHECKPOINT_PART_SIZE) -> CheckpointResult:
        """Write a checkpoint of this version: a v2 checkpoint when the table has the
        v2Checkpoint feature, else a classic one (multi-part above `part_size` actions)."""
        check_checkpoint_support(self.protocol, self.table_uri)
        v2 = "v2Checkpoint" in (self.protocol.writer_features or [])
        txns = list(self.set_transactions.values())
        domains = list(self.domain_metadata.values())
        pieces = checkpoint_pieces(
            self.protocol, self.metadata, txns, domains, self.file_actions_in_batches()
        )
        max_rows = 2 + len(txns) + len(domains) + self.max_file_actions()
        location = self.location
        result = write_checkpoint(
            location.store, location.log_path, self.version, pieces, max_rows, part_size, v2
        )
        log.info(
            "Checkpointed table %s at version %s (%s parts, %s actions)",
            self.table_uri,
            result.version,
            result.parts,
            result.num_actions,
        )
        return result

    def __repr__(self) -> str:
        return f"Snapshot(table={self.table_uri!r}, version={self.version})"


def _check_partition_columns(metadata: Metadata, table: str, version: int) -> None:
    """CorruptLogError when the metadata partitions by a column its schema lacks."""
    if not metadata.partition_columns:
        return
    with naming_table(table, version):
        names = {n.lower() for n in metadata.schema.names}
    strays = [c for c in metadata.partition_columns if c.lower() not in names]
    if strays:
        raise CorruptLogError(
            f"Table {table} version {version}: partition columns {strays} are not columns of "
            "the table's schema (the log is corrupt; restore a version whose metadata holds them)"
        )


def load_snapshot(location: TableLocation, version: int | None = None) -> Snapshot:
    """The snapshot at `version` (the latest when None).

    The latest is found by listing from `_last_checkpoint`; an unreadable checkpoint makes
    the load fall back to an older one (or to version 0) instead of failing.
    """
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise InvalidArgumentError(
            f"Table {location.uri}: a version is a commit number (an int), not {version!r}"
        )
    if version is not None and version < 0:
        raise VersionNotFoundError(f"Cannot time travel table {location.uri} to {version}")
    segment = segment_from_hint(location) if version is None else None
    excluded: set[int] = set()
    listing: list[FileStatus] | None = None
    while True:
        if segment is None:
            listing = listing if listing is not None else list_log(location)
            segment = build_log_segment(
                location.uri,
                location.log_path,
                listing,
                version,
                frozenset(excluded),
                location.use_log_compaction,
            )
        batch = None
        if segment.checkpoint_version is not None:
            try:
                batch = read_checkpoint(location.store, location.log_path, segment.checkpoint_files)
            except (CorruptLogError, FileNotFoundError) as exc:
                log.warning(
                    "Checkpoint %s of %s is unreadable (%s); replaying from an older one",
                    segment.checkpoint_version,
                    location.uri,
                    exc,
                )
                excluded.add(segment.checkpoint_version)
                segment = None
                continue
        return Snapshot.load(location, segment, batch)
