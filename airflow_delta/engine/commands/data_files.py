"""TransactionalWrite's data files: rows become parquet files with Delta stats, on pyarrow.

Every writer of this project writes through `DataFileWriter`: the Spark tasks of
`spark/write.py` (inside `mapInArrow`, one writer per task), and the in-process commands
(MERGE, DELETE, UPDATE) through `write_tasks`, which runs writers on a thread per core. A
writer takes rows sorted by partition, writes them through fsspec under Hive-style partition
directories (`part-<task>-<uuid>.c<n>.snappy.parquet`, rolled at the target file size),
computes each file's stats from the rows it is given, and returns one row (`FILE_ROW_SCHEMA`)
per file; `add_files` turns those rows into AddFiles.

Stats follow Delta: numRecords, and minValues/maxValues/nullCount for the first
`delta.dataSkippingNumIndexedCols` (default 32) leaf data columns. Min/max cover numbers,
decimals, strings, dates and timestamps (not booleans, binary, arrays or maps, which get a
nullCount only). A string min is cut to its first 32 characters; a longer string max is cut to
32 characters and its last character incremented (so the bound stays above every value).
Timestamps are written in UTC with milliseconds; a max with sub-millisecond digits is rounded
up. A float column holding NaN gets no min/max, and an infinite bound is left out.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.commands.file_stats import FileStats, footer_statistics, stats_leaves
from airflow_delta.engine.errors import ConstraintViolationError, InvalidArgumentError
from airflow_delta.engine.expressions.tokens import quote_identifier
from airflow_delta.engine.log.log_store import get_log_store
from airflow_delta.engine.log.storage_errors import missing_bucket_error
from airflow_delta.engine.log.store_guard import protocols_of
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol import columnar
from airflow_delta.engine.protocol.actions import AddCDCFile, AddFile, Metadata
from airflow_delta.engine.protocol.column_mapping import (
    COLUMN_MAPPING_ID,
    COLUMN_MAPPING_PHYSICAL_NAME,
)
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.schema import (
    delta_field_metadata,
    is_variant,
    partition_path,
    serialize_partition_value,
)

if TYPE_CHECKING:
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

DEFAULT_TARGET_FILE_SIZE = 128 * 1024**2
#: Uncompressed Arrow bytes buffered before they are written as one parquet row group.
ROW_GROUP_BYTES = 64 * 1024**2
#: Rows of a new data file sampled to decide which columns get dictionary encoding.
DICTIONARY_SAMPLE_ROWS = 10_000
#: The directory of change data files, and the column naming each row's change.
CHANGE_DATA_DIR = "_change_data"
CHANGE_TYPE_COLUMN = "_change_type"

#: One row per written file, as `DataFileWriter.finish` returns them.
FILE_ROW_SCHEMA = pa.schema(
    [
        ("path", pa.string()),
        ("partitionValues", pa.string()),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("stats", pa.string()),
    ]
)
# Characters other than letters, digits and `_.-~` kept as they are in a relative file URI.
#: Characters a data file's path keeps unescaped in the log (as delta-spark writes them).
PATH_SAFE = "/=!$&'()*+,;@"


def file_field(f: pa.Field, column_mapping: bool) -> pa.Field:
    """A table schema field as data files hold it: nullable at every depth, no Delta metadata;
    with column mapping, named by its physical name and carrying its id as parquet field id."""
    metadata = delta_field_metadata(f) if column_mapping else {}
    name = metadata.get(COLUMN_MAPPING_PHYSICAL_NAME, f.name)
    field_id = metadata.get(COLUMN_MAPPING_ID)
    return pa.field(
        name,
        _file_type(f.type, column_mapping),
        metadata={b"PARQUET:field_id": str(field_id).encode()} if field_id is not None else None,
    )


def _file_type(t: pa.DataType, column_mapping: bool) -> pa.DataType:
    if is_variant(t):  # kept whole, marker included (one leaf of the stats); as delta-spark
        return pa.struct([f.with_nullable(False) for f in t])  # writes them: required binaries
    if pa.types.is_struct(t):
        return pa.struct([file_field(f, column_mapping) for f in t])
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.remove_metadata().with_type(_file_type(t.key_type, column_mapping)),
            pa.field("value", _file_type(t.item_type, column_mapping)),
        )
    if pa.types.is_list(t):
        return pa.list_(pa.field(t.value_field.name, _file_type(t.value_type, column_mapping)))
    return t


# --------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class WritePlan:
    """Where and how data files of one table are written (pickled into Spark tasks).

    `data_schema` holds the data columns as the files store them (`file_field`), then, on a
    table with row tracking enabled, its materialized row-id and row-commit-version columns
    (`row_tracking_columns`: int64, no stats; null for rows that take the file's baseRowId +
    row index and defaultRowCommitVersion); `partition_columns` name the partition columns in
    the written rows (physical names under column mapping), with their Delta types in
    `partition_types`.
    """

    uri: str
    root: str
    storage_options: dict[str, Any]
    data_schema: pa.Schema
    partition_columns: tuple[str, ...]
    partition_types: tuple[str, ...]
    target_file_size: int
    num_indexed_cols: int
    change_data: bool = False
    row_tracking_columns: tuple[str, ...] = ()

    @property
    def stats_schema(self) -> pa.Schema:
        """The columns whose stats the files carry: the data columns (not row tracking's)."""
        hidden = set(self.row_tracking_columns)
        return pa.schema([f for f in self.data_schema if f.name not in hidden])

    @classmethod
    def for_table(
        cls,
        location: TableLocation,
        metadata: Metadata,
        storage_options: Mapping[str, Any] | None = None,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
        change_data: bool = False,
    ) -> WritePlan:
        """The plan of writing data files of `metadata`'s table at `location`; storage
        options default to the location's. With `change_data`, change data files instead:
        `_change_data/<partition directories>/cdc-*.parquet`, the data columns and
        CHANGE_TYPE_COLUMN, no stats."""
        columns = metadata.partition_columns
        column_mapping = metadata.column_mapping_mode != "none"
        schema = metadata.schema
        types = {f["name"]: f["type"] for f in json.loads(metadata.schema_string or "{}")["fields"]}
        options = location.storage_options if storage_options is None else storage_options
        config = TableConfig(metadata.configuration, location.uri)
        tracking = () if change_data else config.materialized_row_tracking_columns
        return cls(
            uri=location.uri,
            root=location.table_path,
            storage_options=dict(options),
            data_schema=pa.schema(
                [file_field(f, column_mapping) for f in schema if f.name not in columns]
                + ([pa.field(CHANGE_TYPE_COLUMN, pa.string())] if change_data else [])
                + [pa.field(name, pa.int64()) for name in tracking]
            ),
            partition_columns=tuple(metadata.physical_partition_columns),
            partition_types=tuple(types[c] for c in columns),
            target_file_size=target_file_size,
            num_indexed_cols=0 if change_data else config.num_indexed_cols,
            change_data=change_data,
            row_tracking_columns=tracking,
        )


@dataclass
class _OpenFile:
    relative: str
    values: dict[str, str | None]
    sink: Any
    writer: pq.ParquetWriter
    stats: FileStats
    #: Its floating-point leaves without footer min/max (`footer_statistics`).
    unbounded: frozenset[str]


class DataFileWriter:
    """Writes rows to data files, a file per partition at a time, rolling at the target size,
    with each file's stats computed from the rows it is given; `task` numbers the file names
    (the Spark partition id, or the slice of an in-process write)."""

    def __init__(self, plan: WritePlan, task: int = 0) -> None:
        self.plan = plan
        self.store = get_log_store(plan.uri, plan.storage_options)[0]
        self.prefix = f"{'cdc' if plan.change_data else 'part'}-{task:05d}-{uuid.uuid4()}"
        self.leaves = stats_leaves(plan.stats_schema, plan.num_indexed_cols)
        self.footer = footer_statistics(plan.data_schema)
        self.row_group_bytes = min(ROW_GROUP_BYTES, plan.target_file_size)
        self.values: dict[str, str | None] | None = None
        self.pending: list[pa.Table] = []
        self.pending_bytes = 0
        self.current: _OpenFile | None = None
        self.written: list[str] = []
        self.rows: list[dict[str, Any]] = []

    def add(self, values: dict[str, str | None], table: pa.Table) -> None:
        """Append rows of the partition `values` (serialized partition values)."""
        if values != self.values:
            self._flush()
            self._close()
            self.values = values
        self.pending.append(table)
        self.pending_bytes += table.nbytes
        if self.pending_bytes >= self.row_group_bytes:
            self._flush()

    def finish(self) -> list[dict[str, Any]]:
        """Close the last file; one row (`FILE_ROW_SCHEMA`) per file written."""
        self._flush()
        self._close()
        return self.rows

    def abort(self) -> None:
        """Best effort: remove every file this writer wrote (the write failed)."""
        if self.current is not None:
            for close in (self.current.writer.close, self.current.sink.close):
                with contextlib.suppress(Exception):
                    close()
        with contextlib.suppress(Exception):
            self.store.delete_many(self.written)

    def _flush(self) -> None:
        """Write the buffered rows as one row group, and roll the file at the target size."""
        if not self.pending:
            return
        table = pa.concat_tables(self.pending)
        self.pending, self.pending_bytes = [], 0
        nan = self._nan_leaves(table)
        if self.current is not None and not nan <= self.current.unbounded:
            self._close()  # the open file's footer bounds would hide these NaNs
        if self.current is None:
            self.current = self._open(dictionary_columns(table), nan)
        self.current.writer.write_table(table, row_group_size=table.num_rows)
        self.current.stats.update(table)
        if self.current.sink.tell() >= self.plan.target_file_size:
            self._close()

    def _nan_leaves(self, table: pa.Table) -> frozenset[str]:
        """The floating-point leaves (`footer_statistics`) holding a NaN in `table`."""
        found = []
        for path, names in self.footer.floats.items():
            column: Any = table.column(names[0])
            for name in names[1:]:
                column = pc.struct_field(column, name)
            if pc.any(pc.is_nan(column)).as_py():
                found.append(path)
        return frozenset(found)

    def _open(self, use_dictionary: bool | list[str], unbounded: frozenset[str]) -> _OpenFile:
        assert self.values is not None
        name = f"{self.prefix}.c{len(self.written):03d}.snappy.parquet"
        directory = partition_path(self.values, self.plan.partition_columns)
        if self.plan.change_data:
            directory = f"{CHANGE_DATA_DIR}/{directory}" if directory else CHANGE_DATA_DIR
        relative = f"{directory}/{name}" if directory else name
        path = f"{self.plan.root}/{relative}"
        sink = self.store.open_output(path)
        self.written.append(path)
        writer = pq.ParquetWriter(
            sink,
            self.plan.data_schema,
            compression="snappy",
            use_dictionary=use_dictionary,
            write_statistics=self.footer.written(unbounded),
        )
        return _OpenFile(relative, self.values, sink, writer, FileStats(self.leaves), unbounded)

    def _close(self) -> None:
        if self.current is None:
            return
        current, self.current = self.current, None
        current.writer.close()
        size = current.sink.tell()
        try:
            current.sink.close()  # an object store's upload
        except Exception as exc:  # re-raised: TableNotFoundError when the bucket is missing
            path = f"{self.plan.root}/{current.relative}"
            missing = missing_bucket_error(protocols_of(self.store.fs), path, exc)
            if missing is None:
                raise
            raise missing from None
        self.rows.append(
            {
                "path": quote(current.relative, safe=PATH_SAFE),
                "partitionValues": json.dumps(current.values),
                "size": size,
                "modificationTime": int(time.time() * 1000),
                "stats": current.stats.to_json(),
            }
        )


def dictionary_columns(table: pa.Table) -> bool | list[str]:
    """The columns worth dictionary encoding in a file that starts with `table`: those whose
    first DICTIONARY_SAMPLE_ROWS values are less than half distinct (True for all when the
    table has nested columns). The parquet writer would fall back to plain encoding for the
    others anyway, after hashing their first megabyte of values for nothing."""
    if any(pa.types.is_nested(t) for t in table.schema.types):
        return True
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    return [
        name
        for name, column in zip(sample.column_names, sample.columns, strict=True)
        if pa.types.is_boolean(column.type)
        or pc.count_distinct(column, mode="all").as_py() * 2 <= max(len(column), 1)
    ]


_FALSE = columnar.scalar(False, pa.bool_())


def _holds_variant(t: pa.DataType) -> bool:
    if is_variant(t):
        return True
    if pa.types.is_struct(t):
        return any(_holds_variant(f.type) for f in t)
    if pa.types.is_list(t):
        return _holds_variant(t.value_type)
    if pa.types.is_map(t):
        return _holds_variant(t.item_type)
    return False


def _fill_variants(array: pa.Array, target: pa.DataType) -> pa.Array:
    """`array` with the two binaries of every variant in it (at any depth) empty, not null,
    where the variant is null, so that it casts to `target`, the file type (whose binaries are
    required). Column by column, never row by row."""
    mask = array.is_null() if array.null_count else None
    if is_variant(target):
        binaries = [pc.fill_null(array.field(i).cast(pa.binary()), b"") for i in range(2)]
        return pa.StructArray.from_arrays(binaries, fields=list(target), mask=mask)
    if pa.types.is_struct(target):
        children = [_fill_variants(array.field(i), f.type) for i, f in enumerate(target)]
        return pa.StructArray.from_arrays(children, names=[f.name for f in target], mask=mask)
    if pa.types.is_list(target) and _holds_variant(target):
        values = _fill_variants(array.values, target.value_type)
        return pa.ListArray.from_arrays(array.offsets, values, mask=mask)
    if pa.types.is_map(target) and _holds_variant(target):
        items = _fill_variants(array.items, target.item_type)
        return pa.MapArray.from_arrays(array.offsets, array.keys, items, mask=mask)
    return array


def physical_columns(table: pa.Table, metadata: Metadata) -> pa.Table:
    """`table` (the table's columns by their logical names, and any column of the writer's
    own) with column mapping's physical names, nested struct fields included (by position, as
    Spark casts). Unchanged without column mapping."""
    if metadata.column_mapping_mode == "none":
        return table
    fields = {f.name: f for f in metadata.schema}
    names, columns = [], []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if name not in fields:
            names.append(name)
            columns.append(column)
            continue
        target = file_field(fields[name], True)
        chunks = column.chunks or [pa.array([], column.type)]
        names.append(target.name)
        columns.append(pa.chunked_array([_renamed(c, target.type) for c in chunks]))
    return pa.Table.from_arrays(columns, names=names)


def _renamed(array: pa.Array, target: pa.DataType) -> pa.Array:
    """`array` with the struct field names of `target` at every depth (matched by position);
    its value types are cast later, with the rest of the file's columns."""
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(target) and pa.types.is_struct(array.type) and not is_variant(target):
        children = [_renamed(array.field(i), f.type) for i, f in enumerate(target)]
        return pa.StructArray.from_arrays(children, names=[f.name for f in target], mask=mask)
    if pa.types.is_list(target) and pa.types.is_list(array.type):
        return pa.ListArray.from_arrays(
            array.offsets, _renamed(array.values, target.value_type), mask=mask
        )
    if pa.types.is_map(target) and pa.types.is_map(array.type):
        keys = _renamed(array.keys, target.key_type)
        items = _renamed(array.items, target.item_type)
        return pa.MapArray.from_arrays(array.offsets, keys, items, mask=mask)
    return array


def _file_columns(plan: WritePlan, batch: pa.RecordBatch) -> pa.Table:
    """The data columns of `batch` as the data files hold them (`plan.data_schema`); row
    tracking's columns are null (fresh rows) unless `batch` carries them."""
    data = pa.Table.from_batches([batch])
    for name in plan.row_tracking_columns:
        if name not in data.column_names:
            data = data.append_column(name, pa.nulls(data.num_rows, pa.int64()))
    data = data.select(plan.data_schema.names)
    for i, f in enumerate(plan.data_schema):
        if _holds_variant(f.type):
            chunks = [_fill_variants(c, f.type) for c in data.column(i).chunks]
            data = data.set_column(i, f.name, pa.chunked_array(chunks))
    return data.cast(plan.data_schema)


def partition_runs(
    plan: WritePlan, batch: pa.RecordBatch
) -> Iterator[tuple[dict[str, str | None], pa.Table]]:
    """The data columns of `batch` cut into runs of equal partition values (rows are sorted)."""
    data = _file_columns(plan, batch)
    if not plan.partition_columns:
        yield {}, data
        return
    keys = [batch.column(c) for c in plan.partition_columns]
    change = np.zeros(batch.num_rows, dtype=bool)
    change[0] = True
    for key in keys:
        after, before = key.slice(1), key.slice(0, len(key) - 1)
        # a Python False or to_numpy() would import pandas through pyarrow's shim (0.3 s)
        differs = pc.or_(
            pc.fill_null(pc.not_equal(after, before), _FALSE),
            pc.xor(pc.is_null(after), pc.is_null(before)),
        )
        change[1:] |= columnar.bool_values(differs)
    starts = [*np.flatnonzero(change).tolist(), batch.num_rows]
    columns = list(zip(plan.partition_columns, keys, plan.partition_types, strict=True))
    for start, end in itertools.pairwise(starts):
        values = {}
        for c, key, delta_type in columns:
            try:
                values[c] = serialize_partition_value(key[start].as_py(), delta_type) or None
            except (TypeError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"Cannot write to table {plan.uri}: partition column {c}: {exc}; nothing "
                    "was written. Fix or filter those rows, or partition by another column."
                ) from None
        yield values, data.slice(start, end - start)


def add_files(rows: Sequence[Mapping[str, Any]]) -> list[AddFile]:
    """The AddFiles (data change) of the files described by `rows` (`FILE_ROW_SCHEMA`)."""
    return [
        AddFile(
            path=r["path"],
            partition_values=json.loads(r["partitionValues"]),
            size=r["size"],
            modification_time=r["modificationTime"],
            data_change=True,
            stats=r["stats"],
        )
        for r in rows
    ]


@dataclass(frozen=True)
class ChangeRows:
    """What a writing task gives on a change-data-feed table: the rows to write to data files
    (None: none), and the rows' changes to write to change data files (the table's columns
    plus CHANGE_TYPE_COLUMN; None: none)."""

    data: pa.Table | None
    changes: pa.Table | None = None


def with_change_type(rows: pa.Table, change_type: str) -> pa.Table:
    """`rows` with CHANGE_TYPE_COLUMN set to `change_type` (insert, delete, update_preimage,
    update_postimage) on every row."""
    value = pa.array([change_type], pa.string())
    return rows.append_column(CHANGE_TYPE_COLUMN, pc.take(value, np.zeros(rows.num_rows, int)))


def cdc_files(rows: Sequence[Mapping[str, Any]]) -> list[AddCDCFile]:
    """The cdc actions of the change data files described by `rows` (`FILE_ROW_SCHEMA`)."""
    return [
        AddCDCFile(
            path=r["path"],
            partition_values=json.loads(r["partitionValues"]),
            size=r["size"],
            data_change=False,
        )
        for r in rows
    ]


def _one_partition(rows: pa.Table, columns: Sequence[str]) -> bool:
    """Whether all `rows` have the same values of the partition `columns` (floats, whose NaN
    min_max skips, are not compared)."""
    for name in columns:
        column = rows.column(name)
        if column.null_count == len(column):
            continue
        if column.null_count or pa.types.is_floating(column.type):
            return False
        try:
            bounds = pc.min_max(column)
        except pa.ArrowNotImplementedError:
            return False
        if bounds["min"] != bounds["max"]:
            return False
    return True


def write_tasks(
    txn: OptimisticTransaction,
    tasks: Sequence[Callable[[], pa.Table]],
    not_null: Sequence[str],
    operation: str,
    *,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    max_threads: int | None = None,
) -> list[AddFile]:
    """Run the `tasks` in parallel (a thread per core, at most `max_threads`), each writing the
    rows it gives (the table's columns, logical names) to its own data files of `txn`'s table,
    rolled at `target_file_size`; their AddFiles. A NULL in a `not_null` column fails the write
    (ConstraintViolationError naming the `operation`) and every file written is removed."""
    adds, _ = write_change_tasks(
        txn, tasks, not_null, operation, target_file_size=target_file_size, max_threads=max_threads
    )
    return adds


def write_change_tasks(
    txn: OptimisticTransaction,
    tasks: Sequence[Callable[[], pa.Table | ChangeRows]],
    not_null: Sequence[str],
    operation: str,
    *,
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    max_threads: int | None = None,
) -> tuple[list[AddFile], list[AddCDCFile]]:
    """`write_tasks` whose tasks may also give changes (`ChangeRows`), written to change data
    files by a second writer of the same task; the AddFiles and the cdc actions."""
    if not tasks:
        return [], []
    txn.has_written = True
    metadata = txn.metadata
    plan = WritePlan.for_table(txn.location, metadata, target_file_size=target_file_size)
    change_plan = WritePlan.for_table(
        txn.location, metadata, target_file_size=target_file_size, change_data=True
    )
    writers = [DataFileWriter(plan, task) for task in range(len(tasks))]
    change_writers = [DataFileWriter(change_plan, task) for task in range(len(tasks))]
    fields = json.loads(metadata.schema_string or '{"fields": []}')["fields"]
    types = {f["name"]: f["type"] for f in fields}
    columns = list(metadata.partition_columns)

    def prepared(output: pa.Table) -> pa.Table:
        for c in columns:
            if types[c] == "string":  # "" is a null partition value: group it with the nulls
                column = output.column(c)
                index = output.schema.get_field_index(c)
                output = output.set_column(index, c, pc.if_else(pc.equal(column, ""), None, column))
        if columns and output.nbytes < ROW_GROUP_BYTES and _one_partition(output, columns):
            output = output.combine_chunks()  # one run, one batch (OPTIMIZE: not one per file)
        elif columns:  # sorted by position: pyarrow reads a key such as ".x" as a field path
            keyed = pa.table(
                [output.column(c) for c in columns], names=list(map(str, range(len(columns))))
            )
            keys = [(str(i), "ascending", "at_end") for i in range(len(columns))]
            output = output.take(pc.sort_indices(keyed, sort_keys=keys))
        return physical_columns(output, metadata)

    def write_to(writer: DataFileWriter, output: pa.Table) -> list[dict[str, Any]]:
        for batch in prepared(output).to_batches():
            if batch.num_rows:
                for values, rows in partition_runs(writer.plan, batch):
                    writer.add(values, rows)
        return writer.finish()

    def write(task: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        output = tasks[task]()
        if not isinstance(output, ChangeRows):
            output = ChangeRows(output)
        data, changes = output.data, output.changes
        for name in not_null:
            if data is not None and data.column(name).null_count:
                raise ConstraintViolationError(
                    f"NOT NULL constraint on column {name} ({quote_identifier(name)} IS NOT "
                    f"NULL) violated by a row of the {operation} of {txn.table}",
                    f"NOT NULL({name})",
                    f"{quote_identifier(name)} IS NOT NULL",
                )
        written = write_to(writers[task], data) if data is not None else []
        changed = write_to(change_writers[task], changes) if changes is not None else []
        return written, changed

    try:
        threads = min(len(tasks), os.cpu_count() or 1, max_threads or len(tasks))
        with ThreadPoolExecutor(max(1, threads)) as pool:
            results = list(pool.map(write, range(len(tasks))))
    except BaseException:
        for writer in (*writers, *change_writers):
            writer.abort()
        raise
    return (
        add_files([r for written, _ in results for r in written]),
        cdc_files([r for _, changed in results for r in changed]),
    )
