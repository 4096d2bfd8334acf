"""Arrow data written to a Delta table in this process, with no Spark: `write_table`, the
engine's counterpart of `airflow_delta.spark.write_delta` for what a task holds in memory (a
pyarrow Table, a RecordBatchReader, pandas or polars through the Arrow stream interface).

    result = write_table("/data/events", arrow_table, mode="append", partition_by=["day"])
    print(result.version, result.metrics["numOutputRows"])  # a CommitResult

One transaction (TransactionalWrite's writeFiles, then the commit):

1. a new table is created in the same commit (version 0 holds its protocol, metadata and files),
   its schema the data's and partitioned by `partition_by`; an existing one keeps its schema:
   the data's columns are matched by name (case-insensitively), a missing nullable column is
   written as NULL, a type that widens safely (integers and floats to wider ones, another Arrow
   layout, timestamps to microseconds) is cast, anything else is SchemaMismatchError naming
   every problem;
2. the rows are checked and completed as every writer of the engine does: identity columns
   handed out (`identity_values.py`), generated columns computed and checked
   (`expressions/generated.py`), invariants and CHECK constraints checked
   (`expressions/constraints.RowChecks`), NOT NULL by the file writer; a rule the engine does
   not evaluate raises UnsupportedCommandError (write with Spark: `write_delta`);
3. `write_tasks` writes the data files in parallel slices (stats, partition directories,
   column mapping, row tracking's columns);
4. the commit: operation WRITE with Delta's parameters and metrics (numFiles, numOutputRows,
   numOutputBytes; an overwrite also numRemovedFiles and numRemovedBytes). `overwrite` removes
   every file the snapshot holds (readers of the change data feed take that from the files);
   an append is blind and never conflicts. App transactions in `commit_properties` make a
   retried write land once.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from airflow_delta.engine.commands.command_transaction import command_transaction
from airflow_delta.engine.commands.data_files import DEFAULT_TARGET_FILE_SIZE, write_tasks
from airflow_delta.engine.commands.data_reader import (
    ArrowColumn,
    conform,
    plain_table,
    same_family,
    spelt_as,
)
from airflow_delta.engine.commands.identity_values import IdentityValues
from airflow_delta.engine.commands.merge import arrow_table
from airflow_delta.engine.errors import (
    InvalidArgumentError,
    InvalidCommitError,
    InvalidPredicateError,
    SchemaMismatchError,
    TableAlreadyExistsError,
    UnsupportedCommandError,
)
from airflow_delta.engine.expressions.constraints import RowChecks, replace_where_constraint
from airflow_delta.engine.expressions.generated import generate_checked, parse_generated_columns
from airflow_delta.engine.expressions.tokens import quote_identifier, quote_string
from airflow_delta.engine.protocol.actions import AddFile, Metadata, Operation
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.features import check_writer_support
from airflow_delta.engine.protocol.identity import check_no_explicit_identity, generated_columns
from airflow_delta.engine.protocol.schema import merged_schema_json, table_schema_json
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.transaction import OptimisticTransaction

#: Rows each writing task takes (the tasks run on a thread per core).
ROWS_PER_TASK = 1_000_000
#: Delta's SaveMode names of the modes.
_SAVE_MODES = {"append": "Append", "overwrite": "Overwrite", "error": "ErrorIfExists"}
_SAVE_MODES["ignore"] = "Ignore"


def write_table(
    table: str | OptimisticTransaction,
    data: Any,
    *,
    mode: str = "append",
    partition_by: Sequence[str] | None = None,
    configuration: Mapping[str, str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    replace_where: str | None = None,
    partition_overwrite_mode: str = "static",
    schema_mode: str | None = None,
) -> CommitResult:
    """Write the Arrow `data` to the Delta table at `table` (a URI, or a transaction already
    started on it) in one commit; its `CommitResult` (version None when skipped: `ignore` on an
    existing table, or app transactions already committed).

    `mode`: `append` (the default; creates the table when absent), `overwrite` (replaces every
    row), `error` (refuses an existing table: TableAlreadyExistsError) or `ignore` (writes
    nothing to an existing table). `partition_by` and `configuration` (table properties) apply
    to a new table; `partition_by` given for an existing one must be its partition columns.
    With `overwrite`, `replace_where` (SQL over partition columns) replaces only the files it
    selects, and every row written must satisfy it (ConstraintViolationError); and
    `partition_overwrite_mode="dynamic"` replaces only the partitions the data writes to.
    `schema_mode="merge"` adds the data's new columns to the table (nullable; existing rows
    read them as NULL); `schema_mode="overwrite"`, with `overwrite`, replaces the schema and the
    partitioning by the data's and `partition_by`.

    Example: `write_table(uri, pa.table({"id": [1, 2]}), mode="overwrite").version`.
    """
    if mode not in _SAVE_MODES:
        raise InvalidArgumentError(
            f"WRITE to {table}: mode must be one of {sorted(_SAVE_MODES)}, not {mode!r}"
        )
    _check_overwrite_options(table, mode, replace_where, partition_overwrite_mode, schema_mode)
    rows = arrow_table(data)
    if rows is None:
        raise TypeError(f"WRITE to {table}: the data must be Arrow data, not {type(data).__name__}")
    rows = plain_table(rows)
    txn = command_transaction("WRITE", table, storage_options, commit_properties)
    columns = list(partition_by or [])
    skipped = Operation("WRITE", {"mode": _SAVE_MODES[mode], "partitionBy": json.dumps(columns)})
    if txn.already_committed():
        return txn.result(None, skipped)
    if not _prepare_metadata(txn, mode, rows.schema, partition_by, configuration, schema_mode):
        return txn.result(None, skipped)
    metadata = txn.metadata
    check_no_explicit_identity(metadata, rows.column_names, txn.table)
    rows = _conformed(rows, metadata.schema, txn)
    identity = IdentityValues(metadata, txn.table)
    fill = _row_filler(txn, identity, replace_where)
    tasks = [
        functools.partial(fill, rows.slice(offset, ROWS_PER_TASK))
        for offset in range(0, rows.num_rows, ROWS_PER_TASK)
    ]
    not_null = [f.name for f in metadata.schema if not f.nullable]
    adds = write_tasks(txn, tasks, not_null, "WRITE", target_file_size=target_file_size)
    txn.identity_high_water_marks.update(identity.marks())
    dynamic = partition_overwrite_mode == "dynamic" and bool(metadata.partition_columns)
    removed = _replaced(txn, adds, replace_where, dynamic) if mode == "overwrite" else []
    now = int(time.time() * 1000)
    parameters = {"mode": _SAVE_MODES[mode], "partitionBy": json.dumps(metadata.partition_columns)}
    if replace_where is not None:
        parameters["predicate"] = replace_where
    if dynamic:
        parameters["partitionOverwriteMode"] = "dynamic"
    metrics = write_metrics(adds, removed if mode == "overwrite" else None)
    operation = Operation("WRITE", parameters, metrics)
    return txn.commit([*(f.remove(now) for f in removed), *adds], operation)


def _prepare_metadata(
    txn: OptimisticTransaction,
    mode: str,
    given: pa.Schema,
    partition_by: Sequence[str] | None,
    configuration: Mapping[str, str] | None,
    schema_mode: str | None,
) -> bool:
    """Create the table's metadata, or check, widen or replace the existing one as the write
    asks; False when the write is skipped (`ignore` on an existing table)."""
    if txn.read_version < 0:
        _create(txn, given, list(partition_by or []), configuration)
        return True
    if mode == "error":
        raise TableAlreadyExistsError(
            f"WRITE to {txn.table}: the table exists (version {txn.read_version}) and mode "
            "is 'error'; use mode='append' or 'overwrite'."
        )
    if mode == "ignore":
        return False
    if schema_mode == "overwrite":
        _replace_schema(txn, given, list(partition_by or []))
    else:
        _check_existing(txn, mode, partition_by)
    if schema_mode == "merge":
        _merge_schema(txn, given)
    return True


def _replaced(
    txn: OptimisticTransaction, adds: Sequence[AddFile], replace_where: str | None, dynamic: bool
) -> list[AddFile]:
    """The files an overwrite removes whole: every file, those `replace_where` selects (by
    partition values), or those of the partitions `adds` wrote to (`dynamic`)."""
    if txn.read_version < 0:
        return []
    txn.changes_from_files = True  # whole files replaced: CDF readers take their rows
    predicate = partitions_predicate(txn.metadata, adds) if dynamic else replace_where
    if dynamic and predicate is None:
        return []  # nothing written: no partition replaced
    return txn.filter_files(predicate, data_skipping=False)


def _create(
    txn: OptimisticTransaction,
    schema: pa.Schema,
    partition_by: list[str],
    configuration: Mapping[str, str] | None,
) -> None:
    """Set the metadata of the table `txn` creates: `schema`, partitioned by `partition_by`."""
    columns = _partition_columns(txn, schema, partition_by)
    schema_json = _schema_json(txn, schema)
    txn.update_metadata_for_new_table(Metadata.for_new_table(schema_json, columns, configuration))


def _schema_json(txn: OptimisticTransaction, schema: pa.Schema) -> dict[str, Any]:
    """`table_schema_json` of the data's `schema`; SchemaMismatchError naming the table when
    Delta cannot hold it."""
    try:
        return table_schema_json(schema)
    except ValueError as exc:
        raise SchemaMismatchError(f"WRITE to {txn.table}: {exc}") from None


def _partition_columns(
    txn: OptimisticTransaction, schema: pa.Schema, partition_by: list[str]
) -> list[str]:
    """`partition_by` spelt as the data's columns (matched without regard to case);
    SchemaMismatchError naming those the data lacks."""
    columns, missing = spelt_as(schema.names, partition_by)
    if missing:
        raise SchemaMismatchError(
            f"WRITE to {txn.table}: partition columns {missing} are not columns of the data "
            f"(columns: {', '.join(schema.names)})"
        )
    return columns


def _check_overwrite_options(
    table: Any,
    mode: str,
    replace_where: str | None,
    partition_overwrite_mode: str,
    schema_mode: str | None,
) -> None:
    if schema_mode not in (None, "merge", "overwrite"):
        raise InvalidArgumentError(
            f"WRITE to {table}: schema_mode must be None, 'merge' or 'overwrite', not "
            f"{schema_mode!r}"
        )
    if schema_mode == "overwrite" and (mode != "overwrite" or replace_where is not None):
        raise InvalidArgumentError(
            f"WRITE to {table}: schema_mode='overwrite' needs mode='overwrite' of the whole "
            "table (no replace_where)"
        )
    if partition_overwrite_mode not in ("static", "dynamic"):
        raise InvalidArgumentError(
            f"WRITE to {table}: partition_overwrite_mode must be 'static' or 'dynamic', not "
            f"{partition_overwrite_mode!r}"
        )
    dynamic = partition_overwrite_mode == "dynamic"
    if (replace_where is not None or dynamic) and mode != "overwrite":
        raise InvalidArgumentError(
            f"WRITE to {table}: replace_where and dynamic partition overwrite need mode='overwrite'"
        )
    if replace_where is not None and dynamic:
        raise InvalidArgumentError(
            f"WRITE to {table}: replace_where and dynamic partition overwrite exclude each other"
        )


def _merge_schema(txn: OptimisticTransaction, given: pa.Schema) -> None:
    """Add the columns and nested fields of `given` the table lacks (nullable) to its schema,
    after its own (`merged_schema_json`)."""
    schema = json.loads(txn.metadata.schema_string or "{}")
    merged = merged_schema_json(schema, _schema_json(txn, given))
    if merged != schema:
        txn.update_metadata(txn.metadata.with_schema(merged))


def _replace_schema(txn: OptimisticTransaction, given: pa.Schema, partition_by: list[str]) -> None:
    """Replace the table's schema and partitioning by `given` and `partition_by` (an overwrite
    of the whole table, so no existing row needs the old ones)."""
    _check_existing(txn, "overwrite", None)
    columns = _partition_columns(txn, given, partition_by)
    replaced = dataclasses.replace(txn.metadata, partition_columns=columns)
    txn.update_metadata(replaced.with_schema(_schema_json(txn, given)))


def _check_existing(
    txn: OptimisticTransaction, mode: str, partition_by: Sequence[str] | None
) -> None:
    """Refuse a write an existing table cannot take, before any file is written."""
    _check_partitioning(txn, partition_by)
    check_writer_support(txn.protocol, txn.table, txn.metadata)
    if mode == "overwrite" and TableConfig(txn.metadata.configuration).append_only:
        raise InvalidCommitError(
            f"WRITE to {txn.table}: the table is append-only (delta.appendOnly=true), so an "
            "overwrite is refused before anything is written; append, or unset the property."
        )


def _check_partitioning(txn: OptimisticTransaction, partition_by: Sequence[str] | None) -> None:
    columns = list(txn.metadata.partition_columns)
    if partition_by is not None and [c.lower() for c in partition_by] != [
        c.lower() for c in columns
    ]:
        raise SchemaMismatchError(
            f"WRITE to {txn.table}: the table is partitioned by {columns}, not by "
            f"{list(partition_by)}"
        )


def _conformed(rows: pa.Table, schema: pa.Schema, txn: OptimisticTransaction) -> pa.Table:
    """`rows` as the table's columns, in its order and types (see the module docstring);
    SchemaMismatchError naming every column that does not fit."""
    given = {n.lower(): n for n in rows.column_names}
    known = {n.lower() for n in schema.names}
    problems = [
        f"column {n} is not in the table" for n in rows.column_names if n.lower() not in known
    ]
    if len(given) != rows.num_columns:
        problems.append("the data has columns whose names differ only in case")
    columns = []
    for field in schema:
        name = given.get(field.name.lower())
        if name is None:
            if not field.nullable:
                problems.append(f"non-nullable column {field.name} is missing")
            columns.append(pa.nulls(rows.num_rows, field.type))
            continue
        column = conform(_with_missing_fields(rows.column(name), field.type), field.type)
        if column.type != field.type:
            if not _widens(column.type, field.type):
                hint = " (schema_mode='merge' adds its new nested fields)"
                new = _has_new_fields(column.type, field.type)
                problems.append(
                    f"column {name}: {column.type} does not widen to {field.type}{hint * new}"
                )
                continue
            column = column.cast(field.type, safe=not pa.types.is_timestamp(field.type))
        columns.append(column)
    if problems:
        version = f" (version {txn.read_version})" if txn.read_version >= 0 else ""
        raise SchemaMismatchError(
            f"WRITE to {txn.table}{version}: the data does not fit the "
            "table's schema:\n - " + "\n - ".join(problems) + f"\nTable schema: {schema}"
        )
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_metadata(None) for f in schema]))


def _with_missing_fields(column: ArrowColumn, target: pa.DataType) -> ArrowColumn:
    """`column` with its struct fields named and ordered as `target`'s and the nullable fields
    of `target` it lacks as NULLs, at any depth of structs and lists (names matched without
    regard to case): the table's nested fields that a write without them leaves NULL. Any
    other column, or one holding a field `target` lacks, is returned as it is."""
    if isinstance(column, pa.ChunkedArray):
        chunks = [_with_missing_fields(c, target) for c in column.chunks]
        return pa.chunked_array(chunks, chunks[0].type) if chunks else column
    given, mask = column.type, column.is_null() if column.null_count else None
    if pa.types.is_list(given) and pa.types.is_list(target):
        values = _with_missing_fields(column.values, target.value_type)
        kind = pa.list_(given.value_field.with_type(values.type))
        filled = pa.ListArray.from_arrays(column.offsets, values, kind, mask=mask)
        return column if kind == given else filled
    if not (pa.types.is_struct(given) and pa.types.is_struct(target)):
        return column
    have = {given.field(i).name.lower(): i for i in range(given.num_fields)}
    wanted = [target.field(i) for i in range(target.num_fields)]
    missing = [f for f in wanted if f.name.lower() not in have]
    if set(have) - {f.name.lower() for f in wanted} or any(not f.nullable for f in missing):
        return column
    children = [
        pa.nulls(len(column), f.type)
        if f.name.lower() not in have
        else _with_missing_fields(column.field(have[f.name.lower()]), f.type)
        for f in wanted
    ]
    fields = [f.with_type(c.type) for f, c in zip(wanted, children, strict=True)]
    filled = pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    return column if filled.type == given else filled


def _has_new_fields(given: pa.DataType, target: pa.DataType) -> bool:
    """Whether `given` holds a struct field that `target` lacks, at any depth of structs and
    lists (names matched without regard to case)."""
    if pa.types.is_list(given) and pa.types.is_list(target):
        return _has_new_fields(given.value_type, target.value_type)
    if not (pa.types.is_struct(given) and pa.types.is_struct(target)):
        return False
    theirs = {f.name.lower(): f.type for f in target}
    return any(
        f.name.lower() not in theirs or _has_new_fields(f.type, theirs[f.name.lower()])
        for f in given
    )


def _widens(given: pa.DataType, target: pa.DataType) -> bool:
    """Whether `given` values store in a `target` column without loss (or, for timestamps,
    with Delta's microsecond precision)."""
    if pa.types.is_null(given) or same_family(given, target):
        return True
    for kind in (pa.types.is_signed_integer, pa.types.is_floating):
        if kind(given) and kind(target):
            return bool(given.bit_width <= target.bit_width)
    if pa.types.is_unsigned_integer(given) and pa.types.is_signed_integer(target):
        return bool(given.bit_width < target.bit_width)  # uint8 as short, as a new table types it
    if pa.types.is_timestamp(given) and pa.types.is_timestamp(target):
        return (given.tz is None) == (target.tz is None)
    return False


def _row_filler(
    txn: OptimisticTransaction, identity: IdentityValues, replace_where: str | None
) -> Callable[[pa.Table], pa.Table]:
    """A function completing and checking a slice of rows before it is written: identity values
    handed out (by `identity`), generated columns computed, invariants, CHECK constraints and
    `replace_where` checked."""
    metadata = txn.metadata
    fields = {f["name"]: f for f in json.loads(metadata.schema_string or "{}")["fields"]}
    extra = [replace_where_constraint(replace_where, list(fields))] if replace_where else []
    try:
        generated = parse_generated_columns(generated_columns(metadata), fields)
        checks = RowChecks.of(metadata, extra)
    except InvalidPredicateError as exc:
        raise UnsupportedCommandError(
            f"WRITE to {txn.table}: the engine does not evaluate a generated column, a "
            f"constraint of the table or replace_where ({exc}); write with Spark "
            "(airflow_delta.spark.write_delta)."
        ) from None
    context = f"Table {txn.table}: nothing written (it stays at version {txn.read_version})"

    def fill(rows: pa.Table) -> pa.Table:
        if identity:
            rows = identity.fill(rows)
        if generated:
            rows = generate_checked(rows, generated, context)
        if checks:
            checks.check(rows, context)
        return rows

    return fill


def write_metrics(adds: Sequence[AddFile], removed: Sequence[AddFile] | None) -> dict[str, int]:
    """Delta's WRITE metrics; the removed files' only for an overwrite."""
    metrics = {
        "numFiles": len(adds),
        "numOutputRows": sum(a.num_records or 0 for a in adds),
        "numOutputBytes": sum(a.size for a in adds),
    }
    if removed is not None:
        metrics["numRemovedFiles"] = len(removed)
        metrics["numRemovedBytes"] = sum(f.size for f in removed)
    return metrics


def partitions_predicate(metadata: Metadata, adds: Sequence[AddFile]) -> str | None:
    """A predicate selecting exactly the partitions `adds` wrote to (None for none)."""
    columns, keys_in_files = metadata.partition_columns, metadata.physical_partition_columns
    keys = sorted({tuple(a.partition_values.get(c) for c in keys_in_files) for a in adds}, key=str)
    terms = [
        " AND ".join(
            f"{quote_identifier(c)} IS NULL"
            if v is None
            else f"{quote_identifier(c)} = {quote_string(v)}"
            for c, v in zip(columns, key, strict=True)
        )
        for key in keys
    ]
    return " OR ".join(f"({t})" for t in terms) if terms else None
