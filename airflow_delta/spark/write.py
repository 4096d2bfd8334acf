"""TransactionalWrite on Spark: a DataFrame becomes parquet data files and their AddFiles.

`write_files` (TransactionalWrite.writeFiles) normalises the DataFrame to the table schema,
checks the table's constraints (NOT NULL, `delta.invariants`, CHECK `delta.constraints.*`) and
any extra ones (a replaceWhere predicate) with one Spark SQL CASE column, and writes the rows
from the executors in a single `mapInArrow` job. Each task (`spark/write_tasks.py`) writes its
own files through the engine's `DataFileWriter` (`engine/commands/data_files.py`: Hive-style
partition directories, files rolled at the target size, Delta stats computed in the same pass)
and returns one row per file. As in Spark's own writer and delta-spark, each task writes the
partitions its rows fall in (rows sorted by partition value within the task, no shuffle);
optimized writes (`delta.autoOptimize.optimizeWrite` or the session conf OPTIMIZE_WRITE_CONF)
first shuffle the rows by partition value, for one file per partition value and size. The
driver only collects those rows: no driver-side filesystem access and no SparkContext or RDD,
so a local session, a standalone cluster and Spark Connect behave alike. A plain write
(`write_delta`, or a MERGE, UPDATE or DELETE rewrite: no constraint, computed column, column
mapping, row tracking column or change data; flat primitive columns; a local table:
`native_write.native_refusal`) goes through Spark's own parquet writer instead, its stats
read from the files' footers (`spark/native_write.py`), when the session conf
`spark.airflow_delta.write.native` asks for it: `true`, or `auto` (the default) from a
`local[...]` session (`false`: never). `write_change_files` is
the variant for
rows that carry their change (the Spark MERGE on a change-data-feed table): each task also
writes `_change_data` files, through a second `DataFileWriter` of change data.

`write_delta` runs a whole write (append, overwrite, replaceWhere, dynamic partition overwrite,
error/ignore, schema merge/overwrite, idempotent writes) as one commit of the engine.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_delta.engine.commands.data_files import (
    CHANGE_DATA_DIR,
    CHANGE_TYPE_COLUMN,
    DEFAULT_TARGET_FILE_SIZE,
    WritePlan,
    add_files,
    cdc_files,
)
from airflow_delta.engine.commands.data_reader import spelt_as
from airflow_delta.engine.commands.row_ids import RowTracking
from airflow_delta.engine.commands.write import partitions_predicate, write_metrics
from airflow_delta.engine.delta_log import DeltaLog
from airflow_delta.engine.errors import (
    InvalidArgumentError,
    MetadataChangedException,
    SchemaMismatchError,
    TableAlreadyExistsError,
)
from airflow_delta.engine.expressions.constraints import replace_where_constraint
from airflow_delta.engine.expressions.tokens import quote_identifier
from airflow_delta.engine.protocol.actions import AddCDCFile, AddFile, Metadata, Operation
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.features import check_writer_support
from airflow_delta.engine.protocol.identity import check_no_explicit_identity
from airflow_delta.engine.protocol.schema import merged_schema_json
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.transaction import OptimisticTransaction
from airflow_delta.spark.constraints import (
    Constraint,
    fill_generated_columns,
    identity_high_water_marks,
    table_constraints,
)
from airflow_delta.spark.native_write import native_enabled, native_refusal, write_native
from airflow_delta.spark.read import physical_name, plain_type
from airflow_delta.spark.time_zones import check_replace_where
from airflow_delta.spark.write_tasks import (
    VIOLATION_COLUMN,
    collect_files,
    is_data_row,
    run_tasks,
    violation_column,
    write_task,
)

log = logging.getLogger(__name__)

#: Session conf asking every write to shuffle its rows by partition value first (delta-spark's
#: name; it overrides the table property `delta.autoOptimize.optimizeWrite`).
OPTIMIZE_WRITE_CONF = "spark.databricks.delta.optimizeWrite.enabled"

_SAVE_MODES = {
    "append": "Append",
    "overwrite": "Overwrite",
    "error": "ErrorIfExists",
    "errorifexists": "ErrorIfExists",
    "ignore": "Ignore",
}


# --------------------------------------------------------------------------- schema


def _nullable_json(delta_type: Any) -> Any:
    """A Delta (Spark JSON) type with every field, element and map value made nullable."""
    if not isinstance(delta_type, dict):
        return delta_type
    kind = delta_type["type"]
    if kind == "struct":
        fields = [
            {**f, "type": _nullable_json(f["type"]), "nullable": True} for f in delta_type["fields"]
        ]
        return {**delta_type, "fields": fields}
    if kind == "array":
        element = _nullable_json(delta_type["elementType"])
        return {**delta_type, "elementType": element, "containsNull": True}
    if kind == "map":
        value = _nullable_json(delta_type["valueType"])
        return {**delta_type, "valueType": value, "valueContainsNull": True}
    return delta_type


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


NUMERIC_ORDER = (
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.FloatType,
    T.DoubleType,
)

_INTEGRAL_DIGITS: dict[type[T.DataType], int] = {
    T.ByteType: 3,
    T.ShortType: 5,
    T.IntegerType: 10,
    T.LongType: 20,
}


def _can_up_cast(src: T.DataType, dst: T.DataType) -> bool:
    """Whether every value of `src` is kept by a cast to `dst` (Spark's upcast rules)."""
    if isinstance(src, T.NullType) or src.simpleString() == dst.simpleString():
        return True
    if type(src) in NUMERIC_ORDER and type(dst) in NUMERIC_ORDER:
        return NUMERIC_ORDER.index(type(src)) <= NUMERIC_ORDER.index(type(dst))
    if type(src) in _INTEGRAL_DIGITS and isinstance(dst, T.DecimalType):
        return dst.precision - dst.scale >= _INTEGRAL_DIGITS[type(src)]
    if isinstance(src, T.DecimalType) and isinstance(dst, T.DecimalType):
        return dst.scale >= src.scale and dst.precision - dst.scale >= src.precision - src.scale
    if isinstance(src, T.DateType):
        return isinstance(dst, T.TimestampType | T.TimestampNTZType)
    if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
        # by name, in any order; a nullable field the data lacks is NULL (`_conformed`)
        theirs = {f.name.lower(): f for f in dst.fields}
        ours = {f.name.lower(): f for f in src.fields}
        return (
            set(ours) <= set(theirs)
            and all(_can_up_cast(f.dataType, theirs[n].dataType) for n, f in ours.items())
            and all(theirs[n].nullable for n in set(theirs) - set(ours))
        )
    if isinstance(src, T.ArrayType) and isinstance(dst, T.ArrayType):
        return _can_up_cast(src.elementType, dst.elementType)
    if isinstance(src, T.MapType) and isinstance(dst, T.MapType):
        return _can_up_cast(src.keyType, dst.keyType) and _can_up_cast(src.valueType, dst.valueType)
    return False


def _conformed(value: Column, src: T.DataType, dst: T.DataType) -> Column:
    """`value` (of type `src`) as `dst`, which `_can_up_cast` allows: struct fields matched by
    name at any depth (inside arrays and map values too), those it lacks NULL."""
    if src.simpleString() == dst.simpleString():
        return value
    if isinstance(src, T.StructType) and isinstance(dst, T.StructType):
        ours = {f.name.lower(): f for f in src.fields}
        fields = []
        for f in dst.fields:
            given = ours.get(f.name.lower())
            field = F.lit(None) if given is None else value.getField(given.name)
            typed = _conformed(field, T.NullType() if given is None else given.dataType, f.dataType)
            fields.append(typed.alias(f.name))
        return F.when(value.isNull(), F.lit(None)).otherwise(F.struct(*fields)).cast(dst)
    if isinstance(src, T.ArrayType) and isinstance(dst, T.ArrayType):
        return F.transform(value, lambda x: _conformed(x, src.elementType, dst.elementType))
    if isinstance(src, T.MapType) and isinstance(dst, T.MapType):
        keys = F.transform_keys(value, lambda k, _: _conformed(k, src.keyType, dst.keyType))
        return F.transform_values(keys, lambda _, v: _conformed(v, src.valueType, dst.valueType))
    return value.cast(dst)


def normalize_data(
    df: DataFrame, schema_json: Mapping[str, Any], table: str, keep: Sequence[str] = ()
) -> DataFrame:
    """`df` with the table's columns, in the table's order, names and types (then the columns
    named in `keep`, as they are).

    Columns match case-insensitively; a missing nullable column becomes typed nulls; a type
    that widens safely is cast. Raises SchemaMismatchError naming every extra column, missing
    non-nullable column and unsafe type change.
    """
    target = T.StructType.fromJson(dict(schema_json))
    given: dict[str, T.StructField] = {}
    problems: list[str] = []
    fields = [f for f in df.schema.fields if f.name not in keep]
    for f in fields:
        if f.name.lower() in given:
            problems.append(f"columns {given[f.name.lower()].name!r} and {f.name!r} clash")
        given[f.name.lower()] = f
    known = {f.name.lower() for f in target.fields}
    extra = [f.name for f in fields if f.name.lower() not in known]
    if extra:
        problems.append(
            f"columns not in the table schema: {', '.join(extra)} "
            "(pass merge_schema=True to add them)"
        )
    columns: list[Column] = []
    for f in target.fields:
        source = given.get(f.name.lower())
        if source is None:
            if not f.nullable:
                problems.append(f"missing non-nullable column: {f.name}")
            columns.append(F.lit(None).cast(f.dataType).alias(f.name))
        elif not _can_up_cast(source.dataType, f.dataType):
            ours, theirs = ({"type": "struct", "fields": [x.jsonValue()]} for x in (f, source))
            new = merged_schema_json(ours, theirs) != ours  # nested fields the table lacks
            problems.append(
                f"column {source.name}: cannot safely cast {source.dataType.simpleString()} "
                f"to {f.dataType.simpleString()}"
                + " (pass merge_schema=True to add its new nested fields)"
                * new
            )
        elif source.dataType.simpleString() == f.dataType.simpleString():
            columns.append(F.col(quote_identifier(source.name)).alias(f.name))
        else:
            value = F.col(quote_identifier(source.name))
            columns.append(_conformed(value, source.dataType, f.dataType).alias(f.name))
    computed = ("delta.generationExpression", "delta.identity.start")  # filled after this
    missing = [
        f.name
        for f in target.fields
        if f.name.lower() not in given and f.nullable and not set(computed) & set(f.metadata)
    ]
    if missing and not problems:
        log.warning(
            "Writing to table %s: the DataFrame has no column %s; written as NULL.",
            table,
            ", ".join(missing),
        )
    if problems:
        raise SchemaMismatchError(
            f"The DataFrame does not match the schema of table {table}:\n - "
            + "\n - ".join(problems)
            + f"\nTable schema: {target.simpleString()}\nDataFrame schema: "
            + df.schema.simpleString()
        )
    return df.select(*columns, *(F.col(quote_identifier(c)) for c in keep))


def _check_writable(txn: OptimisticTransaction) -> None:
    """Refuse tables whose features the Spark writer cannot honour (before writing anything)."""
    check_writer_support(txn.protocol, txn.table, txn.metadata)


def _physical_names(schema_json: Mapping[str, Any], table: str) -> dict[str, str]:
    """Top-level column -> its column mapping physical name."""
    return {
        f["name"]: physical_name(f["name"], f.get("metadata") or {}, table)
        for f in schema_json["fields"]
    }


def _to_physical(
    data: DataFrame, schema_json: Mapping[str, Any], table: str, keep: Sequence[str]
) -> DataFrame:
    """`data` (the table's columns, logical names, then the columns named in `keep`) with the
    physical names of column mapping, nested struct fields included (Spark casts structs by
    position)."""
    target = T.StructType.fromJson(dict(schema_json))

    def rename(f: T.StructField) -> str:
        return physical_name(f.name, f.metadata, table)

    columns = [
        F.col(quote_identifier(f.name)).cast(plain_type(f.dataType, rename)).alias(rename(f))
        for f in target.fields
    ]
    extra = [F.col(quote_identifier(c)) for c in data.columns if c in (VIOLATION_COLUMN, *keep)]
    return data.select(*columns, *extra)


def write_files(
    txn: OptimisticTransaction,
    df: DataFrame,
    partition_by: Sequence[str] | None = None,
    *,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    storage_options: Mapping[str, Any] | None = None,
    constraints: Sequence[Constraint] = (),
    native: bool = True,
) -> list[AddFile]:
    """Write `df` to data files of the transaction's table; their AddFiles (not committed).

    `partition_by`, when given, must be the table's partition columns. `constraints` are
    checked on every row besides the table's own (raises ConstraintViolationError). Storage
    options default to the transaction's table's. `native` (the default) lets a plain write go
    through Spark's parquet writer (`spark/native_write.py`) when the session asks for it.

    On a table with row tracking enabled, `df` may carry its two materialized columns (as
    `scan_files(..., row_tracking=...)` gives them, NULL for a fresh row or a new commit
    version): a rewrite then keeps its rows' ids, and the transaction records so.
    """
    adds, _ = _write_files(
        txn, df, partition_by, target_file_size, storage_options, constraints,
        change_data=False, native=native,
    )  # fmt: skip
    return adds


def write_change_files(
    txn: OptimisticTransaction,
    df: DataFrame,
    *,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[list[AddFile], list[AddCDCFile]]:
    """`write_files` of a change-data-feed write: `df` holds the table's columns and
    CHANGE_TYPE_COLUMN, each row written by its change type (`write_tasks`: NULL to the data
    files, `insert` and `update_postimage` to the data and the change data files, `delete` and
    `update_preimage` to the change data files); the AddFiles and the cdc actions (not
    committed). Constraints, identity and generated columns apply to the data rows."""
    return _write_files(
        txn, df, None, target_file_size, storage_options, (), change_data=True, native=False
    )


def _write_files(
    txn: OptimisticTransaction,
    df: DataFrame,
    partition_by: Sequence[str] | None,
    target_file_size: int,
    storage_options: Mapping[str, Any] | None,
    constraints: Sequence[Constraint],
    *,
    change_data: bool,
    native: bool,
) -> tuple[list[AddFile], list[AddCDCFile]]:
    txn.has_written = True
    metadata = txn.metadata
    if metadata is None:
        raise ValueError(
            f"Table {txn.table} does not exist: set its metadata with "
            "update_metadata_for_new_table before writing files"
        )
    _check_writable(txn)
    columns = tuple(metadata.partition_columns)
    if partition_by is not None and [c.lower() for c in partition_by] != [
        c.lower() for c in columns
    ]:
        raise SchemaMismatchError(
            f"Table {txn.table} is partitioned by {list(columns)}, not by {list(partition_by)}"
        )
    schema_json = json.loads(metadata.schema_string or "{}")
    tracking = RowTracking.of(metadata)
    # rows moved by a rewrite carry their row ids: written to the materialized columns
    tracked = tracking.names if tracking and set(tracking.names) <= set(df.columns) else []
    keep = [CHANGE_TYPE_COLUMN] if change_data else []
    given = normalize_data(df, schema_json, txn.table, keep + tracked)
    data, generated, handed_out = fill_generated_columns(given, metadata, txn.table)
    checks = (*table_constraints(metadata), *generated, *constraints)
    if checks:  # the rows written to data files only
        violation = violation_column(checks)
        violation = F.when(is_data_row(), violation) if change_data else violation
        data = data.withColumn(VIOLATION_COLUMN, violation)
    data = _partitioned(data, schema_json, columns, _optimize_write(df, txn))
    plan = WritePlan.for_table(txn.location, metadata, storage_options, target_file_size)
    if native and not change_data and not checks and native_enabled(df):
        refusal = native_refusal(txn, plan, target_file_size)
        if refusal is None:
            return write_native(txn, data, plan), []
        log.debug("Writing to %s through Python tasks: %s", txn.table, refusal)
    column_mapping = metadata.column_mapping_mode != "none"
    physical_names = _physical_names(schema_json, txn.table) if column_mapping else {}
    if column_mapping:
        data = _to_physical(data, schema_json, txn.table, keep + tracked)
    change_plan = (
        WritePlan.for_table(txn.location, metadata, storage_options, target_file_size, True)
        if change_data
        else None
    )
    task = functools.partial(write_task, plan, change_plan, checks, physical_names)
    rows = [r.asDict() for r in collect_files(run_tasks(data, task), txn)]
    changed = [r["path"].startswith(f"{CHANGE_DATA_DIR}/") for r in rows]
    adds = add_files([r for r, c in zip(rows, changed, strict=True) if not c])
    cdcs = cdc_files([r for r, c in zip(rows, changed, strict=True) if c])

    txn.identity_high_water_marks.update(
        identity_high_water_marks(metadata, adds, handed_out, txn.table)
    )
    txn.row_ids_preserved = txn.row_ids_preserved or bool(tracked)
    return adds, cdcs


def _optimize_write(df: DataFrame, txn: OptimisticTransaction) -> bool:
    """Whether the write shuffles its rows by partition value first: the session conf
    OPTIMIZE_WRITE_CONF when set, else the table's `delta.autoOptimize.optimizeWrite`."""
    value = df.sparkSession.conf.get(OPTIMIZE_WRITE_CONF, None)
    if value is None or not str(value).strip():
        return bool(TableConfig(txn.metadata.configuration, txn.table).optimize_write)
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"Spark conf {OPTIMIZE_WRITE_CONF}={value!r}: use 'true' or 'false'")
    return text == "true"


def _partitioned(
    data: DataFrame, schema_json: Mapping[str, Any], columns: Sequence[str], shuffle: bool
) -> DataFrame:
    """`data` with "" partition values as NULLs, sorted by partition value within each task
    (`shuffle`: first moved to a task per partition value)."""
    types = {f["name"]: f["type"] for f in schema_json["fields"]}
    for c in columns:
        if types[c] == "string":  # "" is a null partition value: group it with the nulls
            data = data.withColumn(c, F.nullif(F.col(quote_identifier(c)), F.lit("")))
    if columns:
        keys = [F.col(quote_identifier(c)) for c in columns]
        data = (data.repartition(*keys) if shuffle else data).sortWithinPartitions(*keys)
    return data


# --------------------------------------------------------------------------- write_delta


def _column_names(names: Sequence[str], df: DataFrame) -> list[str]:
    """`names` spelt as the DataFrame's columns (matched case-insensitively)."""
    columns, unknown = spelt_as(df.columns, names)
    if unknown:
        raise SchemaMismatchError(
            f"partition columns {unknown} are not columns of the DataFrame ({df.columns})"
        )
    return columns


def _prepare_metadata(
    txn: OptimisticTransaction,
    df: DataFrame,
    partition_by: Sequence[str] | None,
    replace_schema: bool,
    merge_schema: bool,
    configuration: Mapping[str, str] | None,
) -> None:
    """Create the table's metadata, or replace or widen its schema, as the write asks."""
    exists = txn.read_version >= 0
    if (
        exists
        and not replace_schema
        and partition_by is not None
        and [c.lower() for c in partition_by] != [c.lower() for c in txn.metadata.partition_columns]
    ):
        raise SchemaMismatchError(
            f"Table {txn.table} is partitioned by {txn.metadata.partition_columns}, not by "
            f"{list(partition_by)}; overwrite with overwrite_schema=True to change it"
        )
    if not exists or replace_schema:
        schema = _nullable_json(df.schema.jsonValue())
        columns = _column_names(partition_by or [], df)
        if exists:
            txn.update_metadata(
                dataclasses.replace(txn.metadata, partition_columns=columns).with_schema(schema)
            )
        else:
            metadata = Metadata.for_new_table(schema, columns, configuration)
            txn.update_metadata_for_new_table(metadata)
    elif merge_schema:
        schema = json.loads(txn.metadata.schema_string or "{}")
        widened = merged_schema_json(schema, _nullable_json(df.schema.jsonValue()))
        if widened != schema:  # new columns and nested fields
            txn.update_metadata(txn.metadata.with_schema(widened))


WriteMode = Literal["append", "overwrite", "error", "errorifexists", "ignore"]


def write_delta(
    df: DataFrame,
    table: str | DeltaLog | OptimisticTransaction,
    *,
    mode: WriteMode = "append",
    partition_by: Sequence[str] | None = None,
    replace_where: str | None = None,
    partition_overwrite_mode: Literal["static", "dynamic"] = "static",
    merge_schema: bool = False,
    overwrite_schema: bool = False,
    configuration: Mapping[str, str] | None = None,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    commit_properties: CommitProperties | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> CommitResult:
    """Write `df` to the Delta table `table` in one commit (creating the table if needed).

    `table` is a URI (opened with `storage_options`), a `DeltaLog`, or a transaction already
    started on it (its snapshot is the one written against, so a caller that checked it first
    does not load a second one). `mode`: "append", "overwrite" (all files, the files matching
    `replace_where`, or with `partition_overwrite_mode="dynamic"` the partitions `df` writes
    to), "error"/"errorifexists" or "ignore" (skip) when the table exists. `merge_schema` adds
    `df`'s new columns and nested fields; `overwrite_schema` (overwrite only) replaces the
    schema and the partitioning. `configuration` holds the table properties of a new table.
    `commit_properties` sets user metadata, isolation level, commit attempts, post-commit
    hooks and app transactions (`SetTransaction(app_id, version)`: the write is skipped when
    that application already committed that version or a later one).

    Returns the commit's `CommitResult` (version None when skipped).
    """
    save_mode = _save_mode(
        table_name(table), mode, replace_where, partition_overwrite_mode, overwrite_schema
    )
    options = WriteOptions(
        mode, save_mode, partition_by, replace_where, partition_overwrite_mode, merge_schema,
        overwrite_schema, configuration, target_file_size, storage_options,
    )  # fmt: skip
    for rerun in range(IDENTITY_RERUNS + 1):
        txn = _open_transaction(table, commit_properties, storage_options)
        try:
            return _write_once(txn, df, options)
        except MetadataChangedException:
            # identity values handed out against a mark a concurrent insert moved: write again
            if isinstance(table, OptimisticTransaction) or not txn.identity_high_water_marks:
                raise
            if rerun == IDENTITY_RERUNS:
                raise
            _remove_written(txn)
            log.info(
                "Identity insert into %s lost to a concurrent one: writing it again", txn.table
            )
    raise AssertionError("unreachable")


#: How often write_delta writes an identity insert again after a concurrent one won.
IDENTITY_RERUNS = 10


@dataclass(frozen=True)
class WriteOptions:
    """write_delta's options, as one write attempt takes them."""

    mode: str
    save_mode: str
    partition_by: Sequence[str] | None
    replace_where: str | None
    partition_overwrite_mode: str
    merge_schema: bool
    overwrite_schema: bool
    configuration: Mapping[str, str] | None
    target_file_size: int
    storage_options: Mapping[str, Any] | None


def _remove_written(txn: OptimisticTransaction) -> None:
    """Delete the data files of a write whose commit failed (never committed)."""
    location = txn.location
    paths = [a.path for a in txn.committed_actions if isinstance(a, AddFile)]
    location.store.delete_many(
        [location.store.file_path(location.root, p, table=txn.table, version=-1) for p in paths]
    )


def _write_once(txn: OptimisticTransaction, df: DataFrame, options: WriteOptions) -> CommitResult:
    """One attempt of write_delta on `txn`."""
    (mode, save_mode, partition_by, replace_where, partition_overwrite_mode, merge_schema) = (
        options.mode, options.save_mode, options.partition_by, options.replace_where,
        options.partition_overwrite_mode, options.merge_schema,
    )  # fmt: skip
    overwrite_schema, configuration = options.overwrite_schema, options.configuration
    target_file_size, storage_options = options.target_file_size, options.storage_options
    skip = Operation("WRITE", {"mode": save_mode})
    if txn.already_committed():
        return txn.result(None, skip)
    if txn.read_version >= 0 and save_mode == "ErrorIfExists":
        raise TableAlreadyExistsError(
            f"Table {txn.table} already exists (version {txn.read_version}) and mode is {mode!r}"
        )
    if txn.read_version >= 0 and save_mode == "Ignore":
        return txn.result(None, skip)
    _prepare_metadata(txn, df, partition_by, overwrite_schema, merge_schema, configuration)
    check_no_explicit_identity(txn.metadata, df.columns, txn.table)
    columns = list(txn.metadata.partition_columns)
    dynamic = partition_overwrite_mode == "dynamic" and bool(columns)
    overwrite = save_mode == "Overwrite"
    if replace_where is not None and overwrite:
        check_replace_where(df.sparkSession, txn, replace_where)
    removed = (  # removed whole: replace_where may use partition columns only
        txn.filter_files(replace_where, data_skipping=False) if overwrite and not dynamic else []
    )
    adds = write_files(
        txn,
        df,
        target_file_size=target_file_size,
        storage_options=storage_options,
        constraints=_replace_where_constraints(txn, replace_where),
    )
    if dynamic:
        predicate = partitions_predicate(txn.metadata, adds)
        removed = txn.filter_files(predicate) if predicate is not None else []
    now = int(time.time() * 1000)
    actions: list[Any] = [*(f.remove(now) for f in removed), *adds]
    parameters: dict[str, Any] = {"mode": save_mode, "partitionBy": columns}
    if replace_where is not None:
        parameters["predicate"] = replace_where
    if dynamic:
        parameters["partitionOverwriteMode"] = "dynamic"
    metrics = write_metrics(adds, removed if overwrite else None)
    txn.changes_from_files = True  # whole files replaced: CDF readers infer deletes and inserts
    return txn.commit(actions, Operation("WRITE", parameters, metrics))


def table_name(table: str | DeltaLog | OptimisticTransaction) -> str:
    """The URI of the table `table` is or opens."""
    if isinstance(table, OptimisticTransaction):
        return table.table
    return table.table_uri if isinstance(table, DeltaLog) else str(table)


def _save_mode(
    table: str,
    mode: str,
    replace_where: str | None,
    partition_overwrite_mode: str,
    overwrite_schema: bool,
) -> str:
    """Spark's SaveMode for `mode`, after checking the options that go with it
    (InvalidArgumentError naming `table` when they do not)."""
    save_mode = _SAVE_MODES.get(str(mode).lower())
    where = f"write_delta into {table}"
    if save_mode is None:
        raise InvalidArgumentError(
            f"{where}: unknown mode {mode!r}: use one of {sorted(_SAVE_MODES)}"
        )
    if partition_overwrite_mode not in ("static", "dynamic"):
        raise InvalidArgumentError(
            f"{where}: partition_overwrite_mode must be 'static' or 'dynamic', not "
            f"{partition_overwrite_mode!r}"
        )
    dynamic = partition_overwrite_mode == "dynamic"
    if save_mode != "Overwrite" and (replace_where or overwrite_schema or dynamic):
        raise InvalidArgumentError(
            f"{where}: replace_where, overwrite_schema and dynamic partition overwrite need "
            "mode='overwrite'"
        )
    if (replace_where is not None) + overwrite_schema + dynamic > 1:
        raise InvalidArgumentError(
            f"{where}: replace_where, overwrite_schema and partition_overwrite_mode='dynamic' "
            "exclude each other"
        )
    return save_mode


def _open_transaction(
    table: str | DeltaLog | OptimisticTransaction,
    properties: CommitProperties | None,
    storage_options: Mapping[str, Any] | None,
) -> OptimisticTransaction:
    """The transaction a write commits with: `table` itself, or one started on it."""
    if isinstance(table, OptimisticTransaction):
        if properties is not None and properties is not table.properties:
            raise InvalidArgumentError(
                f"write_delta into {table.table}: pass commit_properties to the transaction "
                "you give, not beside it"
            )
        return table
    delta_log = table if isinstance(table, DeltaLog) else DeltaLog.for_table(table, storage_options)
    return delta_log.start_transaction(properties=properties)


def _replace_where_constraints(
    txn: OptimisticTransaction, replace_where: str | None
) -> list[Constraint]:
    """The check that every written row satisfies `replace_where` (none without one)."""
    if replace_where is None:
        return []
    names = [f["name"] for f in json.loads(txn.metadata.schema_string or "{}")["fields"]]
    return [replace_where_constraint(replace_where, names)]
