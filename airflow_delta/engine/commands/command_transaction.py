"""The transaction a table command (DELETE, UPDATE, OPTIMIZE, RESTORE) runs in, and its
commit."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

from airflow_delta.engine.errors import InvalidArgumentError, TableNotFoundError
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.actions import Action, Operation
from airflow_delta.engine.protocol.features import check_writer_support
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.transaction import OptimisticTransaction, start_transaction

log = logging.getLogger(__name__)


def command_transaction(
    name: str,
    table: str | OptimisticTransaction,
    storage_options: Mapping[str, str] | None,
    commit_properties: CommitProperties | None,
) -> OptimisticTransaction:
    """`table` itself when the caller started the transaction (its commit properties are the
    transaction's: ValueError when `commit_properties` are given beside it), else a new
    transaction on the latest snapshot of the table at the URI `table`."""
    if isinstance(table, OptimisticTransaction):
        if commit_properties is not None:
            raise InvalidArgumentError(
                f"{name} of {table.table}: pass commit_properties to the transaction you give, "
                "not beside it"
            )
        return table
    location = TableLocation.of(table, storage_options)
    return start_transaction(location, properties=commit_properties)


def commit_command(
    txn: OptimisticTransaction, actions: Sequence[Action], operation: Operation, where: str = ""
) -> CommitResult:
    """Commit a command's `actions` as `operation` (its metrics included); skipped (version
    None) when there is nothing to commit and no app transaction to record. The log says what
    landed, and where the command ran (`where`, e.g. " on Spark")."""
    if not actions and not txn.properties.app_transactions:
        log.info("%s of %s matched no row: nothing to commit", operation.name, txn.table)
        return txn.result(None, operation)
    result = txn.commit(list(actions), operation)
    metrics = operation.metrics or {}
    log.info(
        "%s of %s%s committed version %s: %s",
        operation.name,
        txn.table,
        where,
        result.version,
        {k: v for k, v in metrics.items() if not k.endswith("TimeMs")},
    )
    return result


def dml_operation(name: str, predicate: str | None) -> Operation:
    """A DELETE or UPDATE as delta-spark records it: DELETE's predicate a JSON list of
    conditions, UPDATE's the condition (absent without one)."""
    if name == "DELETE":
        return Operation(name, {"predicate": json.dumps([predicate] if predicate else [])})
    return Operation(name, {"predicate": predicate} if predicate else {})


def check_writable(name: str, txn: OptimisticTransaction) -> None:
    """TableNotFoundError when `txn`'s table does not exist, DeltaProtocolError when this
    engine cannot write it: what a command (`name`) checks before any work."""
    if txn.read_version < 0:
        raise TableNotFoundError(
            f"{name} of {txn.table}: no Delta table there. Create it first (write_delta or "
            "DeltaLog.create_table)."
        )
    check_writer_support(txn.protocol, txn.table, txn.metadata)
