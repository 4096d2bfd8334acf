"""Isolation levels and the logical conflict checks run when a concurrent commit won our version.

The checks follow delta-spark's ConflictChecker, in its order: protocol, metadata, concurrent
appends the transaction should have read (per isolation level), files it read that were deleted,
files it deletes that were deleted, application transactions and metadata domains.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from airflow_delta.engine.expressions.predicates import PartitionPredicate
from airflow_delta.engine.log.replay import LogBatch, file_keys
from airflow_delta.engine.protocol.action_types import ADD_TYPE, REMOVE_TYPE
from airflow_delta.engine.protocol.actions import CommitInfo
from airflow_delta.engine.protocol.features import check_reader_support, check_writer_support


class IsolationLevel(StrEnum):
    """How strictly a transaction is checked against the commits that won before it."""

    SERIALIZABLE = "Serializable"
    WRITE_SERIALIZABLE = "WriteSerializable"
    SNAPSHOT_ISOLATION = "SnapshotIsolation"

    @classmethod
    def parse(cls, text: str) -> IsolationLevel:
        for level in cls:
            if level.value.lower() == text.strip().lower():
                return level
        raise ValueError(
            f"Unknown isolation level {text!r}; use one of "
            f"{', '.join(level.value for level in cls)}"
        )


#: delta.isolationLevel when a table does not set it (Delta's default).
DEFAULT_ISOLATION_LEVEL = IsolationLevel.WRITE_SERIALIZABLE


@dataclass
class CurrentTransactionInfo:
    """What the committing transaction read and wrote, as the conflict checks need it."""

    table: str
    read_version: int
    isolation_level: IsolationLevel
    read_predicates: list[PartitionPredicate] = field(default_factory=list)
    read_files: pa.StructArray = field(default_factory=lambda: pa.nulls(0, ADD_TYPE))
    read_whole_table: bool = False
    read_app_ids: set[str] = field(default_factory=set)
    metadata_changed: bool = False
    removed_files: pa.StructArray = field(default_factory=lambda: pa.nulls(0, REMOVE_TYPE))
    domains: set[str] = field(default_factory=set)


@dataclass
class WinningCommitSummary:
    """The actions of one commit that won a version this transaction wanted."""

    version: int
    batch: LogBatch

    @property
    def commit_info(self) -> CommitInfo | None:
        return self.batch.commit_info

    @property
    def is_blind_append(self) -> bool:
        info = self.commit_info
        return bool(info and info.info.get("isBlindAppend"))

    def describe(self) -> str:
        info = self.commit_info.info if self.commit_info else {}
        summary = {k: info[k] for k in ("operation", "txnId", "engineInfo") if k in info}
        return f"version {self.version} {json.dumps(summary)}"


class ConflictChecker:
    """Checks one winning commit against the current transaction; raises the Delta exception."""

    def __init__(self, current: CurrentTransactionInfo, winner: WinningCommitSummary) -> None:
        self.current = current
        self.winner = winner

    def check_conflicts(self) -> None:
        self.check_protocol_compatibility()
        self.check_no_metadata_updates()
        self.check_for_added_files_that_should_have_been_read_by_current_txn()
        self.check_for_deleted_files_against_current_txn_read_files()
        self.check_for_deleted_files_against_current_txn_deleted_files()
        self.check_for_updated_application_transaction_ids_that_current_txn_depends_on()
        self.check_for_conflicting_domain_metadata()

    def _fail(self, cls: type[DeltaConcurrentModificationException], message: str) -> None:
        raise cls(
            f"{message} Table: {self.current.table}. This transaction read version "
            f"{self.current.read_version}; conflicting commit: {self.winner.describe()}."
        )

    def check_protocol_compatibility(self) -> None:
        protocol = self.winner.batch.protocol
        if protocol is None:
            return
        check_reader_support(protocol, self.current.table)
        check_writer_support(protocol, self.current.table, self.winner.batch.metadata)
        self._fail(
            ProtocolChangedException,
            "The protocol version of the Delta table has been changed by a concurrent update. "
            "Please try the operation again.",
        )

    def check_no_metadata_updates(self) -> None:
        if self.winner.batch.metadata is not None:
            self._fail(
                MetadataChangedException,
                "The metadata of the Delta table has been changed by a concurrent update. "
                "Please try the operation again.",
            )

    def check_for_added_files_that_should_have_been_read_by_current_txn(self) -> None:
        level = self.current.isolation_level
        if level is IsolationLevel.SNAPSHOT_ISOLATION or not self.current.read_predicates:
            return
        if (
            level is IsolationLevel.WRITE_SERIALIZABLE
            and not self.current.metadata_changed
            and self.winner.is_blind_append
        ):
            return  # WriteSerializable lets blind appends of others go by
        # As delta-spark: every add of a winner counts (a compaction rewrites data we read).
        adds = self.winner.batch.add_array()
        if not len(adds):
            return
        for predicate in self.current.read_predicates:
            hits = adds.filter(predicate.evaluate(adds))
            if len(hits):
                where = _partition_text(hits[0].as_py()["partitionValues"])
                self._fail(
                    ConcurrentAppendException,
                    f"Files were added to {where} by a concurrent update (the transaction read "
                    f"with predicate '{predicate.text}'). Please try the operation again.",
                )

    def check_for_deleted_files_against_current_txn_read_files(self) -> None:
        removed = self.winner.batch.remove_array()
        if not len(removed):
            return
        read = self.current.read_files
        overlap = _common_keys(read, removed)
        if overlap is None and self.current.read_whole_table:
            overlap = removed.field("path")[0].as_py()
        if overlap is not None:
            self._fail(
                ConcurrentDeleteReadException,
                "This transaction attempted to read one or more files that were deleted "
                f"(for example {overlap}) by a concurrent update. Please try the operation again.",
            )

    def check_for_deleted_files_against_current_txn_deleted_files(self) -> None:
        removed = self.winner.batch.remove_array()
        overlap = _common_keys(self.current.removed_files, removed)
        if overlap is not None:
            self._fail(
                ConcurrentDeleteDeleteException,
                "This transaction attempted to delete one or more files that were deleted "
                f"(for example {overlap}) by a concurrent update. Please try the operation again.",
            )

    def check_for_updated_application_transaction_ids_that_current_txn_depends_on(self) -> None:
        for txn in self.winner.batch.txns:
            if txn.app_id in self.current.read_app_ids:
                self._fail(
                    ConcurrentTransactionException,
                    f"A concurrent commit wrote application transaction '{txn.app_id}' "
                    f"(version {txn.version}) that this transaction read. Two writers are "
                    "running the same idempotent write; only one may commit it.",
                )

    def check_for_conflicting_domain_metadata(self) -> None:
        for domain in self.winner.batch.domains:
            if domain.domain in self.current.domains:
                self._fail(
                    ConcurrentTransactionException,
                    f"A concurrent commit changed metadata domain '{domain.domain}' that this "
                    "transaction also changes. Please try the operation again.",
                )


def _common_keys(files: pa.StructArray, removed: pa.StructArray) -> str | None:
    """The path of a file present in both (by canonical path + deletion vector), or None."""
    if not len(files) or not len(removed):
        return None
    hit = pc.is_in(file_keys(files), value_set=file_keys(removed))
    if not pc.any(hit).as_py():
        return None
    path: str = files.filter(hit).field("path")[0].as_py()
    return path


def _partition_text(values: list[tuple[str, str | None]] | None) -> str:
    if not values:
        return "the table"
    return "partition [" + ", ".join(f"{k}={v}" for k, v in values) + "]"
