"""Arrow arrays from Python values without pyarrow's pandas shim.

pyarrow imports pandas (150-250 ms) the first time any Python object is converted to arrow
(`pa.array`, `pa.scalar`, a Python scalar passed to a compute function, `to_numpy`). For a
short-lived process that loads a snapshot or makes one commit, that import costs more than the
whole log replay. These builders go through numpy and raw buffers instead, which never touch
the shim; the engine's load and commit paths use only them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa


def _validity(values: Sequence[Any]) -> tuple[pa.Buffer | None, int]:
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    nulls = len(values) - int(valid.sum())
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _int_dtype(type_: pa.DataType) -> np.dtype:
    return np.dtype(f"{'i' if pa.types.is_signed_integer(type_) else 'u'}{type_.bit_width // 8}")


def _offsets(lengths: Sequence[int]) -> pa.Buffer:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.py_buffer(offsets)


def array_from_pylist(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """An array of `type_` from Python values (dicts for structs and maps, None for null).

    Supports the types of the Delta log: strings, integers, booleans, structs, lists and
    maps. Values of the wrong Python type raise TypeError or ValueError.
    """
    n = len(values)
    validity, nulls = _validity(values)
    if pa.types.is_string(type_):
        encoded = [b"" if v is None else v.encode() for v in values]
        buffers = [validity, _offsets([len(e) for e in encoded]), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(type_, n, buffers, null_count=nulls)
    if pa.types.is_integer(type_):
        data = np.fromiter(
            (0 if v is None else int(v) for v in values), dtype=_int_dtype(type_), count=n
        )
        return pa.Array.from_buffers(type_, n, [validity, pa.py_buffer(data)], null_count=nulls)
    if pa.types.is_boolean(type_):
        bits = np.fromiter((bool(v) for v in values), dtype=bool, count=n)
        data = pa.py_buffer(np.packbits(bits, bitorder="little"))
        return pa.Array.from_buffers(type_, n, [validity, data], null_count=nulls)
    if pa.types.is_struct(type_):
        children = []
        for f in type_:
            column = [None if v is None else _field(v, f.name) for v in values]
            children.append(array_from_pylist(column, f.type))
        return pa.Array.from_buffers(type_, n, [validity], null_count=nulls, children=children)
    if pa.types.is_map(type_):
        items = [() if v is None else _map_items(v) for v in values]
        keys = array_from_pylist([k for row in items for k, _ in row], type_.key_type)
        vals = array_from_pylist([x for row in items for _, x in row], type_.item_type)
        entries = pa.StructArray.from_arrays(
            [keys, vals], fields=[type_.key_field, type_.item_field]
        )
        offsets = _offsets([len(row) for row in items])
        return pa.Array.from_buffers(
            type_, n, [validity, offsets], null_count=nulls, children=[entries]
        )
    if pa.types.is_list(type_):
        rows = [() if v is None else _list(v) for v in values]
        flat = array_from_pylist([x for row in rows for x in row], type_.value_type)
        offsets = _offsets([len(row) for row in rows])
        return pa.Array.from_buffers(
            type_, n, [validity, offsets], null_count=nulls, children=[flat]
        )
    raise TypeError(f"unsupported type for array_from_pylist: {type_}")


def _field(row: Any, name: str) -> Any:
    if not isinstance(row, dict):
        raise TypeError(f"expected a JSON object, found {row!r}")
    return row.get(name)


def _map_items(value: Any) -> list[tuple[Any, Any]]:
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, list):  # arrow's own Python form of a map
        return [tuple(kv) for kv in value]
    raise TypeError(f"expected a JSON object, found {value!r}")


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a JSON array, found {value!r}")
    return value


def scalar(value: Any, type_: pa.DataType) -> pa.Scalar:
    """A scalar of `type_` (for compute functions), built without the pandas shim."""
    return array_from_pylist([value], type_)[0]


def bool_mask(values: np.ndarray) -> pa.BooleanArray:
    """A boolean array from a numpy bool array."""
    data = pa.py_buffer(np.packbits(values.astype(bool, copy=False), bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, data])


def contiguous(col: pa.ChunkedArray) -> pa.Array:
    """`col` as one array: its only chunk as is, or the chunks concatenated (a copy)."""
    if col.num_chunks == 1:
        return col.chunk(0)
    return col.combine_chunks()


def concat_tables(tables: Sequence[pa.Table]) -> pa.Table:
    """`tables` (one schema) end to end, their rows kept even when they have no columns (which
    `pa.concat_tables` counts as none: a read of partition columns alone)."""
    if tables and not tables[0].num_columns:
        batches = [b for t in tables for b in t.to_batches()]
        return pa.Table.from_batches(batches, tables[0].schema)
    return pa.concat_tables(tables)


def concat(arrays: Sequence[pa.Array], type_: pa.DataType) -> pa.Array:
    """The arrays of `type_` end to end; copies only when more than one is non-empty."""
    parts = [a for a in arrays if len(a)]
    if len(parts) > 1:
        return pa.concat_arrays(parts)
    return parts[0] if parts else pa.nulls(0, type_)


def int_values(arr: pa.Array) -> np.ndarray:
    """A non-null integer array as a numpy view, without the pandas shim."""
    values = np.frombuffer(arr.buffers()[1], dtype=_int_dtype(arr.type))
    return values[arr.offset : arr.offset + len(arr)]


def int_array(values: np.ndarray) -> pa.Array:
    """A non-null int32/int64 Arrow array over a numpy array's buffer (no copy, no shim)."""
    if values.dtype == np.int32:
        type_, data = pa.int32(), np.ascontiguousarray(values)
    else:
        type_, data = pa.int64(), np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of the sorted `values` (np.unique without its sort or hash)."""
    if len(values) < 2:
        return values
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def bool_values(arr: pa.Array) -> np.ndarray:
    """A non-null boolean Arrow array (such as `is_valid()`'s) as a numpy bool array."""
    data = arr.buffers()[1]
    if data is None or not len(arr):
        return np.zeros(len(arr), dtype=bool)
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    return bits[arr.offset : arr.offset + len(arr)].astype(bool)


def lazy_nulls(n: int, type_: pa.DataType) -> pa.Array:
    """`n` nulls of `type_` over zero-filled numpy buffers, which the OS maps lazily: a column
    a checkpoint does not have (deletion vectors, row ids...) costs no resident memory."""
    if not n or not (
        pa.types.is_primitive(type_)
        or pa.types.is_string(type_)
        or pa.types.is_binary(type_)
        or pa.types.is_struct(type_)
        or pa.types.is_list(type_)
        or pa.types.is_map(type_)
    ):
        return pa.nulls(n, type_)
    validity = pa.py_buffer(np.zeros((n + 7) // 8, dtype=np.uint8))
    if pa.types.is_struct(type_):
        children = [lazy_nulls(n, f.type) for f in type_]
        return pa.Array.from_buffers(type_, n, [validity], null_count=n, children=children)
    if pa.types.is_list(type_) or pa.types.is_map(type_):
        offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int32))
        child_type = (
            type_.value_type
            if pa.types.is_list(type_)
            else pa.struct([type_.key_field, type_.item_field])
        )
        children = [pa.nulls(0, child_type)]
        return pa.Array.from_buffers(type_, n, [validity, offsets], null_count=n, children=children)
    if pa.types.is_string(type_) or pa.types.is_binary(type_):
        offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int32))
        return pa.Array.from_buffers(type_, n, [validity, offsets, pa.py_buffer(b"")], null_count=n)
    width = type_.bit_width
    data = pa.py_buffer(np.zeros((n * width + 7) // 8, dtype=np.uint8))
    return pa.Array.from_buffers(type_, n, [validity, data], null_count=n)


def concat_consuming(arrays: list[pa.Array], type_: pa.DataType) -> pa.Array:
    """`concat` for large arrays: empties the list `arrays`, then copies a struct field by
    field, so that each field of the inputs is freed once copied (when nothing else holds the
    inputs, memory peaks at the result plus one field, not at twice the result). A field null
    in every input stays `lazy_nulls`."""
    parts = [a for a in arrays if len(a)]
    arrays.clear()
    if len(parts) <= 1 or not pa.types.is_struct(type_):
        return concat(parts, type_)
    n = sum(len(p) for p in parts)
    mask = (
        pa.concat_arrays([p.is_null() for p in parts]) if any(p.null_count for p in parts) else None
    )
    fields: list[list[pa.Array] | None] = [
        [p.field(i) for p in parts] for i in range(type_.num_fields)
    ]
    del parts
    children = []
    for i, f in enumerate(type_):
        pieces, fields[i] = fields[i] or [], None
        if all(p.null_count == len(p) for p in pieces):
            children.append(lazy_nulls(n, f.type))
        else:
            children.append(concat_consuming(pieces, f.type))
    return pa.StructArray.from_arrays(children, fields=list(type_), mask=mask)


def struct_child(array: Any, name: str) -> Any:
    """The child field `name` of a struct (chunked) array, picked by position: `pc.struct_field`
    reads a name such as ".x" or "[0]" as a field path and fails (or picks another field)."""
    import pyarrow.compute as pc

    index = array.type.get_field_index(name)
    return pc.struct_field(array, [index] if index >= 0 else name)
