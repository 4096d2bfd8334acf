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
- `FileReader` reads the data files of a transaction's snapshot as the table's columns, with
  their partition values, leaving out the rows their deletion vectors delete when asked (the
  in-process MERGE, DELETE and UPDATE read through it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.commands.deletion_vector_files import DeletionVectorReader
from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.protocol.schema import parse_partition_value
from airflow_delta.engine.txn.transaction import OptimisticTransaction

ArrowColumn: TypeAlias = pa.Array | pa.ChunkedArray

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


# -- data files of a snapshot -------------------------------------------------------------


class FileReader:
    """Reads data files of one transaction's snapshot as the table's columns (partition values
    included), rows deleted by a file's deletion vector left out when asked.

    `table` is the Arrow schema the columns are read as (the table's logical types);
    `lengths` holds the rows per file of the last `read`.
    """

    def __init__(self, txn: OptimisticTransaction, table: pa.Schema) -> None:
        self.txn = txn
        self.table = table
        self.partition_columns = list(txn.metadata.partition_columns)
        self.store = txn.location.store
        self.root = txn.location.root
        self.lengths = np.zeros(0, dtype=np.int64)
        self.deletion_vectors = DeletionVectorReader(txn.location, txn.read_version)
        fields = json.loads(txn.metadata.schema_string or '{"fields": []}')["fields"]
        self._delta_types = {f["name"]: f["type"] for f in fields}

    def read(self, files: pa.StructArray, columns: Sequence[str]) -> pa.Table:
        """The `columns` of every row of `files` (ADD_TYPE) that their deletion vectors keep,
        in file order; sets `lengths` (rows kept per file)."""
        paths = pc.struct_field(files, "path").to_pylist()
        values = pc.struct_field(files, "partitionValues").to_pylist()
        dvs = pc.struct_field(files, "deletionVector").to_pylist()

        def one(i: int) -> pa.Table:
            table = self.read_file(paths[i], values[i], columns)
            if dvs[i] is None:
                return table
            return table.filter(pa.array(self.kept(dvs[i], table.num_rows)))

        with ThreadPoolExecutor(min(len(paths), os.cpu_count() or 1) or 1) as pool:
            tables = list(pool.map(one, range(len(paths))))
        self.lengths = np.array([t.num_rows for t in tables], dtype=np.int64)
        if not tables:
            return self.table.empty_table().select(list(columns))
        return pa.concat_tables(tables)

    def kept(self, dv: Mapping[str, Any] | None, rows: int) -> npt.NDArray[np.bool_]:
        """Per row of a file of `rows` rows: whether its deletion vector `dv` keeps it."""
        keep = np.ones(rows, dtype=bool)
        if dv is not None:
            deleted = self.deletion_vectors.read(dv)
            if len(deleted) and int(deleted[-1]) >= rows:
                raise CorruptLogError(
                    f"Table {self.txn.table} version {self.txn.read_version}: a deletion vector "
                    f"deletes row {int(deleted[-1])} of a file of {rows} rows"
                )
            keep[deleted.astype(np.int64)] = False
        return keep

    def read_file(self, path: str, partition: Any, columns: Sequence[str]) -> pa.Table:
        """The `columns` of every row of the data file at `path` (as the log names it, its
        deletion vector not applied) whose partition values are `partition` (the log's map, as
        key-value pairs). Columns are read as the table's types (`conform`: view and large
        types of other writers; other types cast, as after type widening)."""
        location = self.store.file_path(
            self.root, path, table=self.txn.table, version=self.txn.read_version
        )
        data = [c for c in columns if c not in self.partition_columns]
        try:
            with self.store.open_input(location) as f:
                file = pq.ParquetFile(f, memory_map=self.store.is_local)
                names = {n.lower(): n for n in file.schema_arrow.names}
                present = [names[c.lower()] for c in data if c.lower() in names]
                read = file.read(columns=present, use_threads=False)
        except FileNotFoundError:
            raise self.txn.snapshot.missing_data_file(path) from None
        given = dict(partition or [])
        arrays = []
        for name in columns:
            field = self.table.field(name)
            found = names.get(name.lower())
            if name in self.partition_columns:
                value = parse_partition_value(given.get(name), self._delta_types[name])
                arrays.append(repeat_scalar(pa.scalar(value, field.type), read.num_rows))
            elif found is None:
                arrays.append(pa.nulls(read.num_rows, field.type))
            else:
                arrays.append(_as_type(read.column(found), field, path))
        return pa.Table.from_arrays(
            arrays, schema=pa.schema([self.table.field(c) for c in columns])
        )


def repeat_scalar(value: pa.Scalar, rows: int) -> pa.Array:
    """`value` repeated `rows` times (vectorised)."""
    return pa.array([value.as_py()], value.type).take(np.zeros(rows, dtype=np.int64))


def _as_type(column: ArrowColumn, field: pa.Field, path: str) -> ArrowColumn:
    """A column of a data file as the table's type: `conform`, else a cast (timestamps are
    truncated to microseconds, as in Spark); an impossible cast names the file and column."""
    if same_family(column.type, field.type):
        return conform(column, field.type)
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    try:
        return pc.cast(column, field.type, safe=not pa.types.is_timestamp(field.type))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(
            f"data file {path}: cannot read column {field.name} ({column.type}) as "
            f"{field.type}: {exc}"
        ) from None
