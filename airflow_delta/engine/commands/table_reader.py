"""Reading a table's rows without Spark: `read_table`, `to_pandas` and `to_pyarrow_dataset`.

A downstream Python task reads a Delta table as Arrow (or pandas) with the engine alone:

1. the snapshot: the latest, a `version`, or the latest committed at or before a `timestamp`
   (`history.version_at_timestamp`, as `DeltaLog.snapshot_at`), or a `Snapshot` given;
2. data skipping: `filter` (SQL over any columns, a list of them ANDed; the engine's predicate
   language: comparisons, IN, BETWEEN, IS [NOT] NULL, AND/OR/NOT, literals) keeps the active
   files whose partition values may match exactly, and drops those whose statistics prove
   that no row matches (`expressions.skipping`);
3. the files left are read on a thread pool (`FileReader`), only the columns asked for and the
   ones the filter uses: partition columns typed from the schema and parsed from the log's
   serialized values, column mapping's physical names (`name` and `id` modes, nested fields
   included) read as the logical names, columns of other writers' view and large types and
   widened types read as the table's Arrow types, a column a file lacks as nulls, the rows a
   file's deletion vector deletes left out. A missing file is the snapshot's
   `missing_data_file` error;
4. the filter applied to the rows (`PartitionPredicate.evaluate_rows`), Spark SQL's semantics:
   a row matches when the filter is TRUE (NULL does not match). A filter over partition
   columns only is exact on the files, and rows are not evaluated again.

The result holds exactly the matching rows, in file order, with the table's logical schema
(the asked columns in the order asked, else the schema's order).

`to_pyarrow_dataset` is lazy where pyarrow alone reads the table right: a `FileSystemDataset` of
the active files (each fragment's partition expression from its partition values, the schema
the table's logical one), for tables without column mapping whose files have no deletion
vectors. Otherwise it is an `InMemoryDataset` of `read_table`'s result (the whole table is
read when it is made). Scanning the lazy dataset reports a missing file as pyarrow does.

>>> read_table("s3://lake/orders", ["id", "amount"], "day = DATE '2024-06-01' AND amount > 10")
... # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from airflow_delta.engine.commands.data_reader import FileReader, spelt_as
from airflow_delta.engine.errors import InvalidArgumentError, naming_table
from airflow_delta.engine.expressions.predicates import PartitionPredicate
from airflow_delta.engine.expressions.skipping import parse_file_predicates
from airflow_delta.engine.log import history
from airflow_delta.engine.log.history import Timestamp
from airflow_delta.engine.log.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.columnar import concat_tables
from airflow_delta.engine.protocol.schema import parse_partition_value

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Filter", "TableScan", "read_table", "snapshot_of", "to_pandas", "to_pyarrow_dataset"]

Filter: TypeAlias = str | Sequence[str] | None


def read_table(
    table: str | Snapshot,
    columns: Sequence[str] | None = None,
    filter: Filter = None,
    *,
    version: int | None = None,
    timestamp: Timestamp | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The rows of a Delta table (a URI, or a `Snapshot`) that satisfy `filter`, as Arrow.

    `columns` (names, case-insensitive; default every column) and `filter` (SQL over any
    columns, or a list of conditions, ANDed; a NULL result does not match) select what is
    read; files are pruned by partition values and statistics first. `version` or
    `timestamp` time travel (on a Snapshot's table too). Raises InvalidPredicateError for a
    filter the engine cannot evaluate, InvalidArgumentError for an unknown column,
    CorruptLogError for a missing data file.

    >>> read_table("/data/orders", ["order_id"], "status = 'new'", version=3)  # doctest: +SKIP
    """
    snapshot = snapshot_of(table, version, timestamp, storage_options)
    return TableScan.of(snapshot, columns, filter).to_table()


def to_pandas(
    table: str | Snapshot,
    columns: Sequence[str] | None = None,
    filter: Filter = None,
    *,
    version: int | None = None,
    timestamp: Timestamp | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """`read_table(...)` as a pandas DataFrame.

    >>> to_pandas("/data/orders", filter="amount > 100").groupby("status").size()
    ... # doctest: +SKIP
    """
    return read_table(
        table, columns, filter, version=version, timestamp=timestamp,
        storage_options=storage_options,
    ).to_pandas()  # fmt: skip


def to_pyarrow_dataset(
    table: str | Snapshot,
    *,
    version: int | None = None,
    timestamp: Timestamp | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> ds.Dataset:
    """The table (a URI or a `Snapshot`, at `version` or `timestamp`) as a pyarrow Dataset.

    Lazy (a `FileSystemDataset` of the active files, partition values as each fragment's
    partition expression) unless the table uses column mapping or a file has a deletion
    vector: then an `InMemoryDataset` of `read_table`'s rows. Filters and projections given
    to the dataset's `to_table`/`scanner` prune fragments by partition and row groups by
    their statistics.

    >>> to_pyarrow_dataset("/data/orders").to_table(filter=ds.field("day") == "2024-06-01")
    ... # doctest: +SKIP
    """
    snapshot = snapshot_of(table, version, timestamp, storage_options)
    scan = TableScan.of(snapshot, None, None)
    files = scan.files
    dvs = pc.struct_field(files, "deletionVector")
    if scan.reader.layout.mapping or dvs.null_count != len(files):
        return ds.InMemoryDataset(scan.to_table())
    return scan.lazy_dataset()


def snapshot_of(
    table: str | Snapshot,
    version: int | None = None,
    timestamp: Timestamp | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Snapshot:
    """The snapshot to read: `table` itself when a Snapshot and no time travel is asked, else
    the one at `version` or at `timestamp` of its table (the latest when neither)."""
    if version is not None and timestamp is not None:
        name = table.table_uri if isinstance(table, Snapshot) else table
        raise InvalidArgumentError(f"Reading {name}: pass either version or timestamp, not both")
    if isinstance(table, Snapshot):
        if storage_options is not None:
            raise InvalidArgumentError(
                f"Reading {table.table_uri}: storage_options go with a table URI; a Snapshot "
                "has its own"
            )
        if timestamp is None and version in (None, table.version):
            return table
        location = table.location
    else:
        location = TableLocation.of(table, storage_options)
    if timestamp is not None:
        version = history.version_at_timestamp(location, timestamp)
    return load_snapshot(location, version)


def _plain(t: pa.DataType) -> pa.DataType:
    """`t` without field metadata at any depth (the log's Delta metadata stays in the log)."""
    if pa.types.is_struct(t):
        return pa.struct([_plain_field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(_plain_field(t.value_field))
    if pa.types.is_map(t):
        return pa.map_(_plain_field(t.key_field), _plain_field(t.item_field), t.keys_sorted)
    return t


def _plain_field(f: pa.Field) -> pa.Field:
    return pa.field(f.name, _plain(f.type), f.nullable)


@dataclass
class TableScan:
    """What one read selects: the snapshot, the columns out, the filter and the files left."""

    snapshot: Snapshot
    columns: list[str]  # schema names, in output order
    predicate: PartitionPredicate  # TRUE without a filter
    files: pa.StructArray  # the active files that may hold matching rows (ADD_TYPE)
    reader: FileReader

    @classmethod
    def of(cls, snapshot: Snapshot, columns: Sequence[str] | None, filter: Filter) -> TableScan:
        """The scan of `snapshot` for `columns` (None: all) and `filter`, its files pruned."""
        schema = pa.schema([_plain_field(f) for f in snapshot.metadata.schema])
        reader = FileReader(snapshot, schema)
        predicate = _predicate(snapshot, reader, filter)
        files = snapshot.files(stats=not predicate.matches_all())
        if not predicate.matches_all():
            with naming_table(snapshot.location.uri, snapshot.version):
                files = files.filter(predicate.evaluate(files))
        names = schema.names if columns is None else _resolve(snapshot, schema, columns)
        return cls(snapshot, names, predicate, files, reader)

    @property
    def schema(self) -> pa.Schema:
        """The schema of the rows out."""
        return pa.schema([self.reader.table.field(c) for c in self.columns])

    def rows_by_partition_only(self) -> bool:
        """Whether every row of a file left matches (no filter, or partition columns only)."""
        return self.predicate.columns <= set(self.reader.partition_columns)

    def to_table(self) -> pa.Table:
        """The matching rows of the files left, in file order."""
        files = self.files
        paths = pc.struct_field(files, "path").to_pylist()
        values = pc.struct_field(files, "partitionValues").to_pylist()
        dvs = pc.struct_field(files, "deletionVector").to_pylist()
        by_rows = not self.rows_by_partition_only()
        used = sorted(self.predicate.columns) if by_rows else []
        needed = self.columns + [c for c in used if c not in self.columns]
        reader, predicate = self.reader, self.predicate

        def one(i: int) -> pa.Table:
            data = reader.read_file(paths[i], values[i], needed)
            keep = reader.kept(dvs[i], data.num_rows) if dvs[i] is not None else None
            if by_rows:
                found = predicate.evaluate_rows({c: data.column(c) for c in used}, data.num_rows)
                keep = found if keep is None else keep & found
            if keep is not None and not keep.all():
                data = data.filter(pa.array(keep))
            return data.select(self.columns)

        with ThreadPoolExecutor(max(1, min(len(paths), 2 * (os.cpu_count() or 1)))) as pool:
            tables = list(pool.map(one, range(len(paths))))
        if not tables:
            return self.schema.empty_table()
        return concat_tables(tables)

    def lazy_dataset(self) -> ds.FileSystemDataset:
        """The files left as a pyarrow dataset, read when scanned (no deletion vectors applied,
        no column mapping resolved, the filter not applied to rows: see `to_pyarrow_dataset`)."""
        store, snapshot = self.reader.store, self.snapshot
        filesystem = (
            pafs.LocalFileSystem()
            if store.is_local
            else pafs.PyFileSystem(pafs.FSSpecHandler(store.fs))
        )
        parquet = ds.ParquetFileFormat(
            read_options=ds.ParquetReadOptions(coerce_int96_timestamp_unit="us")
        )
        paths = pc.struct_field(self.files, "path").to_pylist()
        sizes = pc.struct_field(self.files, "size").to_pylist()
        values = pc.struct_field(self.files, "partitionValues").to_pylist()
        expressions: dict[tuple[tuple[str, Any], ...], ds.Expression] = {}
        fragments = []
        for path, size, partition in zip(paths, sizes, values, strict=True):
            key = tuple(sorted(dict(partition or []).items()))
            if key not in expressions:
                expressions[key] = self._partition_expression(dict(key))
            location = store.file_path(
                self.reader.root, path, table=snapshot.table_uri, version=snapshot.version
            )
            fragments.append(
                parquet.make_fragment(
                    location, filesystem, partition_expression=expressions[key], file_size=size
                )
            )
        return ds.FileSystemDataset(fragments, self.reader.table, parquet, filesystem)

    def _partition_expression(self, given: Mapping[str, str | None]) -> ds.Expression:
        """The expression every row of a file with partition values `given` satisfies."""
        layout = self.reader.layout
        by_lower = {k.lower(): v for k, v in given.items()}
        expression = ds.scalar(True)
        for name, key in layout.partition_keys.items():
            field = self.reader.table.field(name)
            value = parse_partition_value(by_lower.get(key.lower()), layout.delta_types[name])
            column = ds.field(name)
            if value is None:
                expression = expression & column.is_null()
            else:
                expression = expression & (column == pa.scalar(value, field.type))
        return expression


def _predicate(snapshot: Snapshot, reader: FileReader, filter: Filter) -> PartitionPredicate:
    """`filter` parsed over the table's columns (whole schema fields: column mapping's
    physical names key the partition values and the statistics)."""
    fields = json.loads(snapshot.metadata.schema_string or '{"fields": []}')["fields"]
    by_name: dict[str, Any] = {f["name"]: f for f in fields}
    if not reader.layout.mapping:  # the names are the keys, whatever the metadata says
        by_name = {name: f["type"] for name, f in by_name.items()}
    partitions = {name: by_name.get(name, "string") for name in reader.layout.partition_keys}
    data = {name: f for name, f in by_name.items() if name not in partitions}
    with naming_table(snapshot.location.uri, snapshot.version):
        return parse_file_predicates(filter, partitions, data)


def _resolve(snapshot: Snapshot, schema: pa.Schema, columns: Sequence[str]) -> list[str]:
    """The schema names of `columns` (case-insensitive); InvalidArgumentError names an unknown
    one."""
    if isinstance(columns, str):
        raise TypeError(f"columns must be a list of names, not the string {columns!r}")
    names, unknown = spelt_as(schema.names, columns)
    if unknown:
        raise InvalidArgumentError(
            f"Table {snapshot.table_uri} version {snapshot.version} has no column "
            f"{', '.join(map(repr, unknown))} (columns: {', '.join(schema.names)})"
        )
    duplicate = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if duplicate is not None:
        raise InvalidArgumentError(
            f"Table {snapshot.table_uri} version {snapshot.version}: column {duplicate!r} is "
            "asked for twice"
        )
    return names
