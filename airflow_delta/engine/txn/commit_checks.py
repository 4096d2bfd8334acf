"""Checks of a commit's actions and schema that need no transaction state: column names,
partition values, append-only tables."""

from __future__ import annotations

from collections.abc import Sequence

from airflow_delta.engine.errors import InvalidCommitError
from airflow_delta.engine.protocol.actions import Action, AddFile, Metadata, RemoveFile
from airflow_delta.engine.protocol.config import TableConfig

_INVALID_NAME_CHARS = set(" ,;{}()\n\t=")


def check_file_actions(actions: Sequence[Action], metadata: Metadata, table: str) -> None:
    """InvalidCommitError for removes on an append-only table and for adds whose partition
    values do not name the table's partition columns."""
    columns = set(metadata.physical_partition_columns)
    if TableConfig(metadata.configuration).append_only:
        removing = [a.path for a in actions if isinstance(a, RemoveFile) and a.data_change]
        if removing:
            raise InvalidCommitError(
                f"Table {table} is append-only (delta.appendOnly=true): this commit "
                f"removes data files (e.g. {removing[0]}). Only appends are allowed; unset "
                "delta.appendOnly to delete or overwrite."
            )
    for a in actions:
        if isinstance(a, AddFile) and set(a.partition_values) != columns:
            raise InvalidCommitError(
                f"Table {table}: file {a.path} has partition values for "
                f"{sorted(a.partition_values)} but the table is partitioned by "
                f"{sorted(columns)}"
            )


def check_names(names: list[str], column_mapping: bool, table: str) -> None:
    """InvalidCommitError for duplicate column names, and for names with characters parquet
    and Hive paths cannot hold (unless column mapping renames them)."""
    lowered = [n.lower() for n in names]
    duplicates = sorted({n for n in names if lowered.count(n.lower()) > 1})
    if duplicates:
        raise InvalidCommitError(
            f"Table {table}: found duplicate column(s) in the schema: {', '.join(duplicates)}"
        )
    if not column_mapping:
        bad = [n for n in names if _INVALID_NAME_CHARS & set(n)]
        if bad:
            raise InvalidCommitError(
                f"Table {table}: column names {bad} contain invalid characters among "
                "' ,;{}()\\n\\t='; rename them or enable column mapping."
            )
