"""Reading data files with pyarrow: the file a log path names, and its columns as the table's types.

Every engine reader of data files goes through here, so they agree with each other and with
the Spark data plane:

- `LogStore.file_path` (in the log store, the only module that touches fsspec) resolves a log
  `path` (or a deletion vector's) through `paths.resolve_path`, the one resolution of the
  protocol's URI references against the table root, and refuses a file the table's
  filesystem cannot open (another scheme, a `file:` URI of another host) with
  `UnsupportedStorageError` naming the table, the version and the path;
- `conform` takes a column as a parquet file holds it to the table's Arrow type when the two
  differ only in layout: other writers store Arrow view types (`string_view`, `binary_view`,
  `list_view`: deltalake 1.6's MERGE and UPDATE do) or large types (`large_string`,
  `large_binary`, `large_list`), at any depth of lists, structs and maps, and dictionary
  encoded columns. The values are the same; the table's type is the regular one;
- `FileReader` reads the data files of a snapshot (a transaction's, or one given) as the
  table's columns, with their partition values, leaving out the rows their deletion vectors
  delete when asked (the in-process MERGE, DELETE, UPDATE and OPTIMIZE and the Spark-free
  `table_reader` read through it). `ColumnLayout` says where each column is found: with column
  mapping (`name` and `id` modes) a data column is its physical name in the files (in `id`
  mode also its parquet field id), nested fields included, and a partition column its
  physical name in `partitionValues`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.commands.deletion_vector_files import DeletionVectorReader
from airflow_delta.engine.errors import CorruptLogError, DeltaProtocolError, naming_table
from airflow_delta.engine.log.log_store import LogStore
from airflow_delta.engine.log.snapshot import Snapshot
from airflow_delta.engine.protocol import columnar
from airflow_delta.engine.protocol.actions import Metadata, Protocol
from airflow_delta.engine.protocol.features import reader_features
from airflow_delta.engine.protocol.paths import FileLocation
from airflow_delta.engine.protocol.schema import delta_field_metadata, parse_partition_value
from airflow_delta.engine.txn.transaction import OptimisticTransaction

ArrowColumn: TypeAlias = pa.Array | pa.ChunkedArray

#: Average size of the local files `FileReader.read` reads on several threads. Smaller files
#: are read on one: their reading is mostly Python per file (it holds the GIL), and threads
#: would only contend for it (OPTIMIZE of 2,000 files of 11 KB: a quarter more CPU).
THREADED_FILE_SIZE = 1024**2

_STRING = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
_BINARY = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
_LIST = (
    pa.types.is_list,
    pa.types.is_large_list,
    pa.types.is_list_view,
    pa.types.is_large_list_view,
)


# -- types ---------------------------------------------------------------------------------


def _family(t: pa.DataType) -> str | None:
    for name, tests in (("string", _STRING), ("binary", _BINARY), ("list", _LIST)):
        if any(test(t) for test in tests):
            return name
    if pa.types.is_fixed_size_list(t):
        return "fixed_size_list"
    if pa.types.is_struct(t):
        return "struct"
    if pa.types.is_map(t):
        return "map"
    return None


def _fields(t: pa.DataType) -> list[pa.Field]:
    return [t.field(i) for i in range(t.num_fields)]


def same_family(given: pa.DataType, target: pa.DataType) -> bool:
    """Whether values of type `given` are values of `target` stored in another Arrow layout:
    view and large variants of string, binary and list types at any depth (list, struct and
    map children; struct fields by name, in order), and dictionary encoding."""
    if given == target:
        return True
    if pa.types.is_dictionary(given):
        return same_family(given.value_type, target)
    family = _family(given)
    if family is None or family != _family(target):
        return False
    if family in ("string", "binary"):
        return True
    if family == "list":
        return same_family(given.value_type, target.value_type)
    if family == "fixed_size_list":
        return given.list_size == target.list_size and same_family(
            given.value_type, target.value_type
        )
    if family == "map":
        return same_family(given.key_type, target.key_type) and same_family(
            given.item_type, target.item_type
        )
    ours, theirs = _fields(given), _fields(target)
    return len(ours) == len(theirs) and all(
        a.name == b.name and same_family(a.type, b.type) for a, b in zip(ours, theirs, strict=True)
    )


def plain_type(t: pa.DataType) -> pa.DataType:
    """`t` with every view and large string, binary and list type, at any depth, replaced by
    the regular one (dictionary encoding is kept, of plain values)."""
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, plain_type(t.value_type), t.ordered)
    family = _family(t)
    if family == "string":
        return pa.string()
    if family == "binary":
        return pa.binary()
    if family == "list":
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)))
    if family == "fixed_size_list":
        return pa.list_(t.value_field.with_type(plain_type(t.value_type)), t.list_size)
    if family == "map":
        return pa.map_(
            t.key_field.with_type(plain_type(t.key_type)),
            t.item_field.with_type(plain_type(t.item_type)),
            t.keys_sorted,
        )
    if family == "struct":
        return pa.struct([f.with_type(plain_type(f.type)) for f in _fields(t)])
    return t


def conform(column: ArrowColumn, target: pa.DataType) -> ArrowColumn:
    """`column` as `target` when its type is `target` in another layout (`same_family`); any
    other column is returned as it is, for the caller to cast or refuse."""
    if column.type == target or not same_family(column.type, target):
        return column
    return _cast_layout(column, target)


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with each column that `schema` names conformed to the schema's type."""
    for i, name in enumerate(table.column_names):
        index = schema.get_field_index(name)
        if index >= 0:
            field = schema.field(index)
            column = conform(table.column(i), field.type)
            if column.type != table.schema.field(i).type:
                table = table.set_column(i, table.schema.field(i).with_type(column.type), column)
    return table


def plain_table(table: pa.Table) -> pa.Table:
    """`table` with every column of a view or large type as its `plain_type`."""
    return conform_table(table, pa.schema([f.with_type(plain_type(f.type)) for f in table.schema]))


def spelt_as(names: Sequence[str], wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    """`wanted` spelt as in `names` (matched without regard to case), and those of `wanted`
    that `names` lacks (the caller raises its own error naming them)."""
    by_lower = {n.lower(): n for n in names}
    unknown = [c for c in wanted if c.lower() not in by_lower]
    return [by_lower[c.lower()] for c in wanted if c.lower() in by_lower], unknown


def _cast_layout(column: ArrowColumn, target: pa.DataType) -> ArrowColumn:
    """`column` cast to `target` chunk by chunk; a chunk too large for 32-bit offsets is split."""
    if isinstance(column, pa.ChunkedArray):
        chunks = [piece for chunk in column.chunks for piece in _cast_pieces(chunk, target)]
        return pa.chunked_array(chunks, target)
    pieces = _cast_pieces(column, target)
    return pieces[0] if len(pieces) == 1 else pa.chunked_array(pieces, target)


def _cast_pieces(chunk: pa.Array, target: pa.DataType) -> list[pa.Array]:
    try:
        return [_relayout(chunk, target)]
    except pa.ArrowInvalid:
        if len(chunk) < 2:
            raise
        half = len(chunk) // 2
        return _cast_pieces(chunk.slice(0, half), target) + _cast_pieces(chunk.slice(half), target)


def _has_list_view(t: pa.DataType) -> bool:
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return True
    if pa.types.is_dictionary(t):
        return False
    return any(_has_list_view(t.field(i).type) for i in range(t.num_fields))


def _relayout(array: pa.Array, target: pa.DataType) -> pa.Array:
    """`array` as `target` (`same_family`). Arrow's cast does it, but for list views, which it
    casts to lists wrongly (pyarrow 26 drops values): those are rebuilt from their lengths."""
    if not _has_list_view(array.type):
        return array.cast(target)
    given = array.type
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(given):
        children = [_relayout(array.field(i), f.type) for i, f in enumerate(_fields(target))]
        return pa.StructArray.from_arrays(children, fields=_fields(target), mask=mask)
    if pa.types.is_fixed_size_list(given):
        size = given.list_size
        values = array.values.slice(array.offset * size, len(array) * size)
        values = _relayout(values, target.value_type)
        return pa.FixedSizeListArray.from_arrays(values, type=target, mask=mask)
    if pa.types.is_list_view(given) or pa.types.is_large_list_view(given):
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy()
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        values = array.flatten()
    else:  # list, large list or map: the children of its offsets' range
        offsets = np.asarray(array.offsets)
        start = int(offsets[0])
        values = array.values
        if pa.types.is_map(given):
            values = pa.StructArray.from_arrays([array.keys, array.items], ["k", "v"])
        values = values.slice(start, int(offsets[-1]) - start)
        offsets = offsets - start
    offsets_array = pa.array(offsets, pa.int32())
    if pa.types.is_map(target):
        keys = _relayout(values.field(0), target.key_type)
        items = _relayout(values.field(1), target.item_type)
        return pa.MapArray.from_arrays(offsets_array, keys, items, type=target, mask=mask)
    values = _relayout(values, target.value_type)
    return pa.ListArray.from_arrays(offsets_array, values, type=target, mask=mask)


# -- column mapping ------------------------------------------------------------------------

_PHYSICAL_NAME = "delta.columnMapping.physicalName"
_FIELD_ID = "delta.columnMapping.id"
_PARQUET_FIELD_ID = b"PARQUET:field_id"
_LIST_FAMILIES = ("list", "fixed_size_list")


def _physical_name(field: pa.Field, mapping: bool, table: str) -> str:
    """The name of `field` (of the table's schema, Delta metadata kept) in the data files."""
    if not mapping:
        return str(field.name)
    physical = delta_field_metadata(field).get(_PHYSICAL_NAME)
    if not isinstance(physical, str) or not physical:
        raise CorruptLogError(
            f"Table {table} uses column mapping but column {field.name!r} has no {_PHYSICAL_NAME}"
        )
    return physical


def _logical_type(given: pa.DataType, logical: pa.DataType, table: str) -> pa.DataType:
    """`given` (a column's type in a file of a column-mapped table: physical names of nested
    fields) with each struct field the schema's type `logical` names renamed to its logical
    name, at any depth; fields the schema does not name keep theirs."""
    if pa.types.is_struct(given) and pa.types.is_struct(logical):
        by_physical = {_physical_name(f, True, table).lower(): f for f in _fields(logical)}
        fields = []
        for f in _fields(given):
            match = by_physical.get(f.name.lower())
            if match is None:
                fields.append(f)
            else:
                fields.append(
                    f.with_name(match.name).with_type(_logical_type(f.type, match.type, table))
                )
        return pa.struct(fields)
    if pa.types.is_map(given) and pa.types.is_map(logical):
        return pa.map_(
            given.key_field.with_type(_logical_type(given.key_type, logical.key_type, table)),
            given.item_field.with_type(_logical_type(given.item_type, logical.item_type, table)),
            given.keys_sorted,
        )
    if _family(given) in _LIST_FAMILIES and _family(logical) in _LIST_FAMILIES:
        value = given.value_field.with_type(
            _logical_type(given.value_type, logical.value_type, table)
        )
        if pa.types.is_fixed_size_list(given):
            return pa.list_(value, given.list_size)
        if pa.types.is_large_list(given):
            return pa.large_list(value)
        if pa.types.is_list(given):
            return pa.list_(value)
    return given


def _renamed(column: ArrowColumn, target: pa.DataType) -> ArrowColumn:
    """`column` as `target`: the same type with other names of nested fields."""
    if column.type == target:
        return column
    if isinstance(column, pa.ChunkedArray):
        return pa.chunked_array([_renamed(c, target) for c in column.chunks], target)
    mask = column.is_null() if column.null_count else None
    if pa.types.is_struct(target):
        children = [_renamed(column.field(i), f.type) for i, f in enumerate(_fields(target))]
        return pa.StructArray.from_arrays(children, fields=_fields(target), mask=mask)
    if pa.types.is_map(target):
        keys = _renamed(column.keys, target.key_type)
        items = _renamed(column.items, target.item_type)
        return pa.MapArray.from_arrays(column.offsets, keys, items, type=target, mask=mask)
    if pa.types.is_fixed_size_list(target):
        size = target.list_size
        values = column.values.slice(column.offset * size, len(column) * size)
        values = _renamed(values, target.value_type)
        return pa.FixedSizeListArray.from_arrays(values, type=target, mask=mask)
    values = _renamed(column.values, target.value_type)
    kind = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
    return kind.from_arrays(column.offsets, values, type=target, mask=mask)


@dataclass(frozen=True)
class ColumnLayout:
    """Where each column of a table's schema is found: a partition column in the files'
    `partitionValues` (under `partition_keys`), a data column in the parquet files under
    `in_file` (its physical name with column mapping), or, in column mapping's `id` mode, by
    the parquet field id (`field_ids`) when no column has that name."""

    table: str
    mapping: bool
    fields: dict[str, pa.Field]  # the schema's fields, Delta metadata kept
    delta_types: dict[str, Any]  # name -> the Delta type (JSON)
    partition_keys: dict[str, str]  # partition column (schema name) -> partitionValues key
    in_file: dict[str, str]
    field_ids: dict[str, int]

    @classmethod
    def of(cls, metadata: Metadata, protocol: Protocol, table: str) -> ColumnLayout:
        """The layout of a table's `metadata`; DeltaProtocolError for an unknown column
        mapping mode, CorruptLogError for a mapped column without a physical name. The mode
        counts when the protocol has the columnMapping feature (as in Spark: deltalake 1.6
        records the mode without the feature and writes logical names)."""
        mode = metadata.column_mapping_mode
        if "columnMapping" not in reader_features(protocol):
            mode = "none"
        if mode not in ("none", "name", "id"):
            raise DeltaProtocolError(f"Table {table} has unknown column mapping mode {mode!r}")
        mapping = mode != "none"
        fields = {f.name: f for f in metadata.schema}
        delta = json.loads(metadata.schema_string or '{"fields": []}')["fields"]
        in_file = {name: _physical_name(f, mapping, table) for name, f in fields.items()}
        by_lower = {name.lower(): name for name in fields}
        partition_keys = {}
        for column in metadata.partition_columns:
            name = by_lower.get(column.lower(), column)
            partition_keys[name] = in_file[name] if mapping and name in in_file else column
        ids = {}
        if mode == "id":
            for name, f in fields.items():
                value = delta_field_metadata(f).get(_FIELD_ID)
                if isinstance(value, int):
                    ids[name] = value
        return cls(
            table, mapping, fields, {f["name"]: f["type"] for f in delta}, partition_keys,
            in_file, ids,
        )  # fmt: skip

    def find(self, file: pa.Schema, name: str) -> str | None:
        """The name of column `name` (of the schema) in a file of schema `file`, or None."""
        wanted = self.in_file.get(name, name).lower()
        for f in file:
            if f.name.lower() == wanted:
                return str(f.name)
        field_id = self.field_ids.get(name)
        if field_id is not None:
            for f in file:
                if (f.metadata or {}).get(_PARQUET_FIELD_ID) == str(field_id).encode():
                    return str(f.name)
        return None

    def logical(self, column: ArrowColumn, name: str) -> ArrowColumn:
        """A data column as a file holds it, its nested fields renamed to the logical names."""
        field = self.fields.get(name)
        if not self.mapping or field is None or _family(column.type) is None:
            return column
        column = conform(column, plain_type(column.type))  # no view types left to rename
        return _renamed(column, _logical_type(column.type, field.type, self.table))


# -- data files of a snapshot -------------------------------------------------------------


class FileReader:
    """Reads data files of one snapshot (a transaction's, or one given) as the table's columns
    (partition values included; physical names of column mapping resolved), rows deleted by a
    file's deletion vector left out when asked.

    `table` is the Arrow schema the columns are read as (the table's logical names and types);
    `lengths` holds the rows per file of the last `read`.
    """

    def __init__(self, source: OptimisticTransaction | Snapshot, table: pa.Schema) -> None:
        if isinstance(source, OptimisticTransaction):
            self._txn: OptimisticTransaction | None = source
            snapshot, version = source.snapshot, source.read_version
        else:
            self._txn = None
            snapshot, version = source, source.version
        self.snapshot = snapshot
        self.table_uri = source.location.uri
        self.version = version
        self.table = table
        self.layout = ColumnLayout.of(source.metadata, source.protocol, self.table_uri)
        self.partition_columns = list(self.layout.partition_keys)
        self.store = source.location.store
        self.root = source.location.root
        self.lengths = np.zeros(0, dtype=np.int64)
        self.deletion_vectors = DeletionVectorReader(source.location, version)
        self._last: _Selection | None = None  # of the last file schema read

    @property
    def txn(self) -> OptimisticTransaction:
        """The transaction whose snapshot this reader reads (for readers made from one)."""
        if self._txn is None:
            raise TypeError(f"this reader of {self.table_uri} reads a snapshot, not a transaction")
        return self._txn

    def read(self, files: pa.StructArray, columns: Sequence[str]) -> pa.Table:
        """The `columns` of every row of `files` (ADD_TYPE) that their deletion vectors keep,
        in file order; sets `lengths` (rows kept per file)."""
        paths = pc.struct_field(files, "path").to_pylist()
        values = pc.struct_field(files, "partitionValues").to_pylist()
        dvs = pc.struct_field(files, "deletionVector").to_pylist()
        if not paths:
            self.lengths = np.zeros(0, dtype=np.int64)
            return self.table.empty_table().select(list(columns))
        sizes = pc.struct_field(files, "size")
        small = self.store.is_local and pc.sum(sizes).as_py() < len(paths) * THREADED_FILE_SIZE
        tables, self.lengths = self._scan(
            paths, values, dvs, columns, columnar.int_values(sizes), 1 if small else None
        )
        return columnar.concat_tables(tables)

    def _scan(
        self,
        paths: list[str],
        values: list[Any],
        dvs: list[Any],
        columns: Sequence[str],
        sizes: npt.NDArray[np.int64],
        threads: int | None,
    ) -> tuple[list[pa.Table], npt.NDArray[np.int64]]:
        """`read`'s tables and rows kept per file: each file's columns read as the file holds
        them (on `threads` threads, default one per core), then each run of files with the
        same partition values and file schema made the table's columns once (`_columns`), not
        file by file."""

        where = store_paths(
            self.store, self.root, paths, table=self.table_uri, version=self.version
        )

        size_list = sizes.tolist()

        def raw(i: int) -> tuple[pa.Schema, pa.Table]:
            return self._raw(paths[i], size_list[i], columns, where[i])

        threads = threads or min(len(paths), os.cpu_count() or 1)
        if threads == 1:
            read = [raw(i) for i in range(len(paths))]
        else:
            with ThreadPoolExecutor(threads) as pool:
                read = list(pool.map(raw, range(len(paths))))
        tables, lengths, start = [], [], 0
        while start < len(paths):
            schema, end = read[start][0], start + 1
            while end < len(paths) and values[end] == values[start]:
                if not read[end][0].equals(schema, check_metadata=True):
                    break
                end += 1
            run = columnar.concat_tables([t for _, t in read[start:end]])
            table = self._columns(
                run, self._found(schema, columns), values[start], columns, paths[start]
            )
            rows = [t.num_rows for _, t in read[start:end]]
            if any(dvs[i] is not None for i in range(start, end)):
                masks = [self.kept(dvs[start + k], n) for k, n in enumerate(rows)]
                table = table.filter(columnar.bool_mask(np.concatenate(masks)))
                rows = [int(m.sum()) for m in masks]
            tables.append(table)
            lengths += rows
            start = end
        return tables, np.array(lengths, dtype=np.int64)

    def _raw(
        self, path: str, size: int | None, columns: Sequence[str], where: str | None = None
    ) -> tuple[pa.Schema, pa.Table]:
        """The schema of the data file at `path` (as the log names it, `where` in the store's
        terms when known; `size` as the log records it), and those of `columns` the file holds,
        as it holds them."""
        if where is None:
            where = self.store.file_path(
                self.root, path, table=self.table_uri, version=self.version
            )
        try:
            with self.store.open_input(where, size) as source:
                reader = _parquet_reader(source)
                schema = reader.schema_arrow
                indices = self._selection(schema, columns, reader).indices
                return schema, reader.read_all(column_indices=indices, use_threads=False)
        except FileNotFoundError:
            raise self.snapshot.missing_data_file(path) from None

    def _found(self, file: pa.Schema, columns: Sequence[str]) -> dict[str, str | None]:
        """Where each data column of `columns` is in a file of schema `file` (None: absent)."""
        return self._selection(file, columns).found

    def _selection(
        self, file: pa.Schema, columns: Sequence[str], reader: pq.ParquetReader | None = None
    ) -> _Selection:
        """`_Selection` of `columns` in a file of schema `file` (its leaf columns numbered by
        `reader`, that file's reader); remembered for the last schema seen (files of one
        table mostly share theirs)."""
        wanted, last = tuple(columns), self._last
        if (
            last is not None
            and last.columns == wanted
            and last.schema.equals(file, True)
            and (reader is None or last.indices is not None or not last.partial)
        ):
            return last
        partitions = self.layout.partition_keys
        found = {c: self.layout.find(file, c) for c in wanted if c not in partitions}
        present = {n for n in found.values() if n is not None}
        partial = present != set(file.names)
        indices = None
        if reader is not None and partial:  # the leaves of the top-level columns wanted
            indices = [i for i, p in enumerate(reader.column_paths) if p[0] in present]
        self._last = _Selection(file, wanted, found, partial, indices)
        return self._last

    def kept(self, dv: Mapping[str, Any] | None, rows: int) -> npt.NDArray[np.bool_]:
        """Per row of a file of `rows` rows: whether its deletion vector `dv` keeps it."""
        keep = np.ones(rows, dtype=bool)
        if dv is not None:
            deleted = self.deletion_vectors.read(dv)
            if len(deleted) and int(deleted[-1]) >= rows:
                raise CorruptLogError(
                    f"Table {self.table_uri} version {self.version}: a deletion vector "
                    f"deletes row {int(deleted[-1])} of a file of {rows} rows"
                )
            keep[deleted.astype(np.int64)] = False
        return keep

    def read_file(
        self, path: str, partition: Any, columns: Sequence[str], size: int | None = None
    ) -> pa.Table:
        """The `columns` of every row of the data file at `path` (as the log names it, its
        deletion vector not applied) whose partition values are `partition` (the log's map, as
        key-value pairs). Columns are read as the table's types (`conform`: view and large
        types of other writers; other types cast, as after type widening); a column the file
        lacks is null. `size` (the log's) lets a small file be read whole, in one call."""
        schema, read = self._raw(path, size, columns)
        return self._columns(read, self._found(schema, columns), partition, columns, path)

    def _columns(
        self,
        read: pa.Table,
        found: Mapping[str, str | None],
        partition: Any,
        columns: Sequence[str],
        path: str,
    ) -> pa.Table:
        """The `columns` of rows `read` from data files (of one partition, `partition`; the
        first named `path`) as the table's types, partition values included."""
        layout = self.layout
        given = {k.lower(): v for k, v in dict(partition or []).items()}
        arrays = []
        for name in columns:
            field = self.table.field(name)
            if name in layout.partition_keys:
                raw = given.get(layout.partition_keys[name].lower())
                with naming_table(self.table_uri, self.version):
                    value = parse_partition_value(raw, layout.delta_types[name])
                arrays.append(repeat_scalar(_scalar(value, field.type), read.num_rows))
            elif found[name] is None:
                arrays.append(pa.nulls(read.num_rows, field.type))
            else:
                column = layout.logical(read.column(found[name]), name)
                if _shredded_variant(column.type):
                    raise DeltaProtocolError(
                        f"Table {self.table_uri} version {self.version}: data file {path} holds "
                        f"column {name} as a shredded variant, which this reader cannot read; "
                        "read the table on Spark 4.1 or later (airflow_delta.spark.read_delta)"
                    )
                arrays.append(_as_type(column, field, path))
        if not arrays:  # no column: the rows alone (a table of none would count none)
            return read.select([])
        return pa.Table.from_arrays(
            arrays, schema=pa.schema([self.table.field(c) for c in columns])
        )


#: A relative data file path that resolves to itself under the table root: no scheme, no
#: leading `/`, nothing percent-encoded, no dot segment (see `store_paths`).
_PLAIN_RELATIVE = re.compile(r"(?!\.)(?!.*/\.)[^/%:][^%:]*")


def store_paths(
    store: LogStore, root: FileLocation, paths: Sequence[str], *, table: str, version: int
) -> list[str]:
    """`store.file_path` of each of the data files `paths` (as the log names them): a plain
    relative path (`_PLAIN_RELATIVE`) is joined to the root without a full resolution, the
    same result at a microsecond a file rather than twenty (OPTIMIZE reads thousands)."""
    base = root.child("x")
    if base.path != root.path.rstrip("/") + "/x" or not store.can_open(base):
        return [store.file_path(root, p, table=table, version=version) for p in paths]
    prefix, plain = base.fs_path[:-1], _PLAIN_RELATIVE.fullmatch
    return [
        prefix + p if plain(p) else store.file_path(root, p, table=table, version=version)
        for p in paths
    ]


@dataclass(frozen=True)
class _Selection:
    """The `columns` wanted from files of `schema`: where each data column is (`found`), and
    whether only some of the file's columns are read (`partial`), by `indices` of the file's
    leaf columns (None: all, or not numbered yet)."""

    schema: pa.Schema
    columns: tuple[str, ...]
    found: dict[str, str | None]
    partial: bool
    indices: list[int] | None


def _parquet_reader(source: Any) -> pq.ParquetReader:
    """pyarrow's parquet reader (`ParquetFile`'s, without its per-file Python: OPTIMIZE opens
    thousands) of what `LogStore.open_input` gives: an OS path is memory-mapped, a buffer read
    in place (pre-buffering it would only copy it)."""
    reader = pq.ParquetReader()
    buffered = isinstance(source, pa.Buffer)
    reader.open(source, use_memory_map=isinstance(source, str), pre_buffer=not buffered)
    return reader


def _shredded_variant(t: pa.DataType) -> bool:
    """Whether `t` holds a shredded variant (a struct of `metadata` and `typed_value`)."""
    if pa.types.is_struct(t) and {"metadata", "typed_value"} <= {f.name for f in _fields(t)}:
        return True
    if pa.types.is_dictionary(t):
        return False
    return any(_shredded_variant(t.field(i).type) for i in range(t.num_fields))


def repeat_scalar(value: pa.Scalar, rows: int) -> pa.Array:
    """`value` repeated `rows` times (vectorised, no Python value: no pandas shim)."""
    return pa.repeat(value, rows)


def cast_values(column: ArrowColumn, target: pa.DataType) -> ArrowColumn:
    """`column` as `target`: `conform` for the same type in another layout, else decoded from a
    dictionary and cast (values that do not fit raise pyarrow's error; timestamps are truncated
    to microseconds, as Spark stores them)."""
    if same_family(column.type, target):
        return conform(column, target)
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    return pc.cast(column, target, safe=not pa.types.is_timestamp(target))


def _as_type(column: ArrowColumn, field: pa.Field, path: str) -> ArrowColumn:
    """A column of a data file as the table's type (`cast_values`); an impossible cast names
    the file and column."""
    try:
        return cast_values(column, field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(
            f"data file {path}: cannot read column {field.name} ({column.type}) as "
            f"{field.type}: {exc}"
        ) from None


def _scalar(value: Any, type_: pa.DataType) -> pa.Scalar:
    """A partition value as a scalar of its column's type; strings, integers and booleans
    without pyarrow's pandas shim (`pa.scalar` of a Python value imports pandas: 0.3 s)."""
    plain = pa.types.is_string(type_) or pa.types.is_integer(type_) or pa.types.is_boolean(type_)
    return columnar.scalar(value, type_) if plain else pa.scalar(value, type_)
