"""LogSegment and Snapshot: which log files make up a version, and the state they replay to."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from airflow_delta.engine.log.log_store import FileStatus
from airflow_delta.engine.log.replay import (
    FileActions,
    InMemoryLogReplay,
    LogBatch,
    parse_log_batch,
)
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.actions import (
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    SetTransaction,
    add_files_from_arrow,
    stats_num_records,
)
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.features import check_reader_support

if TYPE_CHECKING:
    from airflow_delta.engine.delta_log import DeltaLog


@dataclass(frozen=True)
class LogSegment:
    """The newest complete checkpoint at or below `version`, and the commits after it."""

    log_path: str
    version: int
    deltas: tuple[FileStatus, ...]
    checkpoint_files: tuple[FileStatus, ...]
    checkpoint_version: int | None
    last_commit_timestamp: int


def complete_checkpoints(listing: list[FileStatus]) -> dict[int, list[FileStatus]]:
    """Complete checkpoints by version; multi-part ones with a missing part are ignored."""
    single: dict[int, list[FileStatus]] = {}
    multi: dict[tuple[int, int], dict[int, FileStatus]] = {}
    for f in listing:
        parsed = filenames.parse_log_file_name(f.name)
        if parsed is None or parsed.kind != "checkpoint":
            continue
        if parsed.num_parts is None:
            single.setdefault(parsed.version, [f])
        else:
            multi.setdefault((parsed.version, parsed.num_parts), {})[parsed.part] = f  # type: ignore[index]
    complete = dict(single)
    for (version, num_parts), parts in multi.items():
        if version not in complete and set(parts) == set(range(1, num_parts + 1)):
            complete[version] = [parts[i] for i in range(1, num_parts + 1)]
    return complete


def build_log_segment(
    table: str,
    log_path: str,
    listing: list[FileStatus],
    version: int | None = None,
    exclude_checkpoints: frozenset[int] = frozenset(),
) -> LogSegment:
    """Choose the files that reconstruct `version` (the latest when None) from a listing."""
    commits: dict[int, FileStatus] = {}
    for f in listing:
        parsed = filenames.parse_log_file_name(f.name)
        if parsed is not None and parsed.kind == "commit":
            commits[parsed.version] = f
    checkpoints = {
        v: files
        for v, files in complete_checkpoints(listing).items()
        if v not in exclude_checkpoints
    }
    latest = max([*commits, *checkpoints], default=-1)
    if latest < 0:
        raise TableNotFoundError(
            f"{table} is not a Delta table: {log_path} holds no commit or checkpoint. "
            "Check the path, or create the table first."
        )
    target = latest if version is None else version
    if target > latest or target < 0:
        raise VersionNotFoundError(
            f"Cannot time travel table {table} to version {target}: "
            f"available versions end at {latest}."
        )
    cp_version = max((v for v in checkpoints if v <= target), default=None)
    start = 0 if cp_version is None else cp_version + 1
    missing = [v for v in range(start, target + 1) if v not in commits]
    if missing:
        present = sorted(v for v in commits if v <= target)
        if cp_version is None and 0 not in commits:
            earliest = _earliest(commits, checkpoints)
            if version is not None:
                raise VersionNotFoundError(
                    f"Cannot time travel table {table} to version {target}: its history was "
                    f"cleaned up; the earliest recoverable version is {earliest}."
                )
            raise CorruptLogError(
                f"Table {table}: commits before version {earliest} are missing and no "
                "checkpoint covers them."
            )
        raise CorruptLogError(
            f"Table {table}: versions are not contiguous: missing {_ranges(missing)} between "
            f"{'checkpoint ' + str(cp_version) if cp_version is not None else 'version 0'} and "
            f"version {target} (commits present: {_ranges(present)}). The log is corrupt; "
            "restore the missing commit files."
        )
    deltas = tuple(commits[v] for v in range(start, target + 1))
    cp_files = tuple(checkpoints[cp_version]) if cp_version is not None else ()
    last = commits.get(target) or cp_files[-1]
    return LogSegment(log_path, target, deltas, cp_files, cp_version, last.modification_time)


def _earliest(commits: dict[int, FileStatus], checkpoints: dict[int, list[FileStatus]]) -> int:
    return min(checkpoints, default=min(commits, default=0))


def _ranges(versions: list[int]) -> str:
    """`[0, 2, 3, 4]` as `0, 2-4`."""
    out: list[str] = []
    for v in versions:
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


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

    def __init__(self, delta_log: DeltaLog, segment: LogSegment, replay: InMemoryLogReplay):
        self.delta_log = delta_log
        self.log_segment = segment
        self.version = segment.version
        self._replay = replay
        self.protocol: Protocol = replay.current_protocol_version  # type: ignore[assignment]
        self.metadata: Metadata = replay.current_metadata  # type: ignore[assignment]
        self.set_transactions: dict[str, SetTransaction] = _unexpired(replay)
        self.domain_metadata: dict[str, DomainMetadata] = dict(replay.domain_metadata)
        self.commit_info = replay.last_commit_info

    @classmethod
    def empty(cls, delta_log: DeltaLog) -> Snapshot:
        """The state before version 0 (version -1): no protocol, metadata or files."""
        segment = LogSegment(delta_log.log_path, -1, (), (), None, 0)
        return cls(delta_log, segment, InMemoryLogReplay(min_file_retention_timestamp=0))

    @classmethod
    def load(
        cls, delta_log: DeltaLog, segment: LogSegment, checkpoint_batch: LogBatch | None = None
    ) -> Snapshot:
        """Replay `segment` (its checkpoint already read into `checkpoint_batch` if any)."""
        table = delta_log.table_uri
        replay = InMemoryLogReplay(min_file_retention_timestamp=0)
        if checkpoint_batch is not None:
            replay.append(segment.checkpoint_version, checkpoint_batch)
        store = delta_log.store
        for f in segment.deltas:
            version = filenames.parse_log_file_name(f.name).version  # type: ignore[union-attr]
            replay.append(version, parse_log_batch(store.read(f.path), f.path))
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
        config = TableConfig(replay.current_metadata.configuration, table)
        now_ms = int(time.time() * 1000)
        replay.min_file_retention_timestamp = now_ms - config.deleted_file_retention_ms
        return cls(delta_log, segment, replay)

    # -- table-level properties --------------------------------------------------------

    @property
    def table_uri(self) -> str:
        return self.delta_log.table_uri

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
                commit_info = self.delta_log.commit_info(self.version)
        ict = commit_info and commit_info.in_commit_timestamp
        if ict is None:
            return self.log_segment.last_commit_timestamp
        return int(ict)

    # -- files ---------------------------------------------------------------------------

    def files(self) -> pa.StructArray:
        """The active AddFiles as ADD_TYPE structs (columnar; no per-file objects)."""
        return self._replay.active_files()

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
        return len(self.files())

    @cached_property
    def size_in_bytes(self) -> int:
        return int(pc.sum(self.files().field("size")).as_py() or 0)

    @cached_property
    def num_records(self) -> int | None:
        """Rows in the table: stats.numRecords minus deletion-vector cardinality, summed.

        None when some active file has no numRecords stat.
        """
        files = self.files()
        if not len(files):
            return 0
        counts = stats_num_records(files.field("stats"))
        if counts.null_count:
            return None
        total = pc.sum(counts).as_py()
        deleted = pc.sum(pc.struct_field(files.field("deletionVector"), "cardinality")).as_py()
        return int(total - (deleted or 0))

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

    def __repr__(self) -> str:
        return f"Snapshot(table={self.table_uri!r}, version={self.version})"
