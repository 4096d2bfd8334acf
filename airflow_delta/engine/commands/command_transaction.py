"""The transaction a table command (DELETE, UPDATE, OPTIMIZE, RESTORE) runs in."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.txn.commit_types import CommitProperties
from airflow_delta.engine.txn.transaction import OptimisticTransaction, start_transaction


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
            raise ValueError(
                f"{name} of {table.table}: pass commit_properties to the transaction you give, "
                "not beside it"
            )
        return table
    location = TableLocation.of(table, storage_options)
    return start_transaction(location, properties=commit_properties)
