"""The exception taxonomy of the engine.

Every exception of the engine is defined here. Every error names the table and, where one is
involved, the version, and says what to do next. Conflict exceptions keep the names Delta gives
them, so a user who searches for the message finds Delta's own documentation.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager


class DeltaError(Exception):
    """Base class of every error raised by airflow-delta."""


class TableNotFoundError(DeltaError):
    """The location holds no Delta table (no `_delta_log`, or no commit in it)."""


class CorruptLogError(DeltaError):
    """The transaction log cannot be replayed into a valid snapshot."""


class DeltaProtocolError(DeltaError):
    """The table needs a protocol version or table feature this engine cannot honour."""


class VersionNotFoundError(DeltaError):
    """Time travel asked for a version or timestamp the log cannot reconstruct."""


class ChangeDataFeedError(DeltaError):
    """Changes were asked for versions that did not record change data (the change data feed
    was not enabled then)."""


class UnsupportedStorageError(DeltaError):
    """The filesystem cannot make commits atomic, and single-writer mode was not chosen."""


class StorageAccessError(DeltaError, PermissionError):
    """The storage found no credentials, or refused the ones given (the message says where
    credentials come from for that storage)."""


class CommitFailedError(DeltaError):
    """A commit was retried the maximum number of times without succeeding."""


class DeltaConcurrentModificationException(DeltaError):
    """Base class of the conflicts found when a concurrent commit won our version."""


class ConcurrentAppendException(DeltaConcurrentModificationException):
    """Files were added to the data this transaction read by a concurrent commit."""


class ConcurrentDeleteReadException(DeltaConcurrentModificationException):
    """A file this transaction read was removed by a concurrent commit."""


class ConcurrentDeleteDeleteException(DeltaConcurrentModificationException):
    """A file this transaction removes was also removed by a concurrent commit."""


class MetadataChangedException(DeltaConcurrentModificationException):
    """The table metadata was changed by a concurrent commit."""


class ProtocolChangedException(DeltaConcurrentModificationException):
    """The table protocol was changed by a concurrent commit."""


class ConcurrentTransactionException(DeltaConcurrentModificationException):
    """A concurrent commit wrote the same application transaction or metadata domain."""


class TableAlreadyExistsError(DeltaError):
    """create_table was asked for a location that already holds a Delta table."""


class InvalidCommitError(DeltaError):
    """A commit breaks a rule of the table or of the protocol (append-only, partition values,
    duplicate application transactions, a first version without protocol and metadata)."""


class ConstraintViolationError(DeltaError):
    """A row breaks a NOT NULL, invariant, CHECK or replaceWhere constraint; nothing committed."""

    def __init__(self, message: str, constraint: str = "", expression: str = "") -> None:
        super().__init__(message)
        self.constraint = constraint
        self.expression = expression


class InvalidTablePropertyError(InvalidCommitError):
    """A `delta.*` table property this engine acts on has a value it cannot accept (checked
    before any commit file is written)."""


class StaleCommitError(DeltaConcurrentModificationException):
    """A commit landed at a version whose predecessors expired-log cleanup had removed: no
    reader would ever see it, so it was withdrawn; retry on a fresh snapshot."""


class TransactionStateError(DeltaError):
    """A transaction was used out of order: committed twice, its metadata changed after data
    was written or more than once, hooks run before the commit."""


class InvalidPredicateError(DeltaError, ValueError):
    """A predicate that does not parse, or does not fit the table's columns (`table`: the
    table and version it was parsed for, once known)."""

    def __init__(
        self, text: str, problem: str, position: int | None = None, table: str = ""
    ) -> None:
        self.text, self.problem, self.position, self.table = text, problem, position, table
        message = (
            f"{table}: predicate '{text}' {problem}" if table else f"Predicate '{text}' {problem}"
        )
        if position is not None:
            shown = re.sub(r"\s", " ", text)
            message += f"\n  {shown}\n  {' ' * position}^"
        super().__init__(message)


class MultipleSourceRowMatchingTargetRowInMergeError(DeltaError):
    """Several source rows matched one target row that a MATCHED clause updates or deletes."""


class UnsupportedMergeError(DeltaError):
    """The in-process executor cannot run this MERGE; the Spark MERGE can (nothing written)."""


class UnsupportedCommandError(DeltaError):
    """The in-process DELETE or UPDATE cannot run this (an expression beyond the engine's
    evaluator, a table whose data needs more than pyarrow); nothing was written."""


class InvalidArgumentError(DeltaError, ValueError):
    """A command or reader was called with arguments it cannot take (an unknown column, a
    version that is not earlier, a bad size, ...); nothing was read or written. The message
    names the table and what to pass instead."""


class VacuumRetentionError(DeltaError, ValueError):
    """VACUUM was asked for a retention shorter than the table's deleted-file retention."""


class SchemaMismatchError(DeltaError, ValueError):
    """The DataFrame's columns do not fit the table schema (or its partitioning)."""


class RestoreMissingFilesError(DeltaError):
    """RESTORE would re-add data files (or deletion vectors) that are gone from storage."""


class IdentityColumnError(DeltaError, ValueError):
    """A write gave values for a GENERATED ALWAYS identity column, or an update changed an
    identity column's values (nothing written)."""


@contextmanager
def naming_table(table: str, version: int) -> Iterator[None]:
    """Give a CorruptLogError or InvalidPredicateError raised inside without the table's name
    (a protocol-level parser's: a malformed partition value, a predicate) the table and the
    version it was read from."""
    try:
        yield
    except CorruptLogError as exc:
        if table in str(exc):
            raise
        raise CorruptLogError(f"Table {table} version {version}: {exc}") from None
    except InvalidPredicateError as exc:
        if exc.table:
            raise
        where = f"Table {table}" + (f" version {version}" if version >= 0 else "")
        raise InvalidPredicateError(exc.text, exc.problem, exc.position, where) from None
