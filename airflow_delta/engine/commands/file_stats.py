"""The stats of a data file being written: Delta's (numRecords, and per leaf column min, max
and null count, as `FileStats` gathers them chunk by chunk) and which leaves get min/max in
the parquet footer (`footer_statistics`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.protocol.columnar import struct_child
from airflow_delta.engine.protocol.log_json import stats_json, stats_value
from airflow_delta.engine.protocol.schema import is_variant


def _has_min_max(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
    )


def stats_leaves(schema: pa.Schema, num_indexed: int) -> list[tuple[tuple[str, ...], bool]]:
    """(path, has min/max) of the leaf columns that get stats: the first `num_indexed` (-1: all)."""
    leaves: list[tuple[tuple[str, ...], bool]] = []

    def walk(fields: pa.Schema | pa.StructType, prefix: tuple[str, ...]) -> None:
        for f in fields:
            if is_variant(f.type):  # one leaf: its nullCount, never min/max (not comparable)
                leaves.append(((*prefix, f.name), False))
            elif pa.types.is_struct(f.type):
                walk(f.type, (*prefix, f.name))
            else:
                leaves.append(((*prefix, f.name), _has_min_max(f.type)))

    walk(schema, ())
    return leaves if num_indexed < 0 else leaves[:num_indexed]


class FooterStatistics(NamedTuple):
    """Which parquet leaf columns (dotted paths, as the parquet writer names them) of a file
    get footer min/max. pyarrow leaves NaN out of a float column's min/max, and Spark's and
    DuckDB's row-group filters then skip a NaN that `x > 1` must keep: a floating-point leaf
    reached through structs only gets them in a file without NaN; one inside a list or a map
    never does."""

    #: The leaves that always get them.
    plain: list[str]
    #: The floating-point leaves reached through structs: path -> the names leading to it.
    floats: dict[str, tuple[str, ...]]
    #: Whether the schema has floating-point leaves never checked for NaN (in lists or maps).
    unchecked: bool

    def written(self, nan: frozenset[str]) -> list[str] | bool:
        """`write_statistics` of a file whose floating-point leaves `nan` hold a NaN: True
        (every leaf, the writer's fast path) when no leaf goes without."""
        if not nan and not self.unchecked:
            return True
        return [*self.plain, *(p for p in self.floats if p not in nan)]


def footer_statistics(schema: pa.Schema) -> FooterStatistics:
    """The `FooterStatistics` of files of `schema`."""
    plain: list[str] = []
    floats: dict[str, tuple[str, ...]] = {}
    unchecked = False

    def walk(t: pa.DataType, path: str, names: tuple[str, ...] | None) -> None:
        nonlocal unchecked
        if pa.types.is_struct(t):
            for f in t:
                walk(f.type, f"{path}.{f.name}", None if names is None else (*names, f.name))
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            walk(t.value_type, f"{path}.list.element", None)
        elif pa.types.is_map(t):
            walk(t.key_type, f"{path}.key_value.key", None)
            walk(t.item_type, f"{path}.key_value.value", None)
        elif not pa.types.is_floating(t):
            plain.append(path)
        elif names is not None and not pa.types.is_float16(t):
            floats[path] = names
        else:
            unchecked = True

    for f in schema:
        walk(f.type, f.name, (f.name,))
    return FooterStatistics(plain, floats, unchecked)


class FileStats:
    """numRecords and per-leaf min, max and null count of one data file, chunk by chunk."""

    def __init__(self, leaves: list[tuple[tuple[str, ...], bool]]) -> None:
        self.leaves = leaves
        self.rows = 0
        self.mins: dict[tuple[str, ...], Any] = {}
        self.maxs: dict[tuple[str, ...], Any] = {}
        self.nulls: dict[tuple[str, ...], int] = {}
        self.nan: set[tuple[str, ...]] = set()

    def update(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for path, has_min_max in self.leaves:
            column: Any = table.column(path[0])
            for name in path[1:]:
                column = struct_child(column, name)  # nulls of the parents included
            self.nulls[path] = self.nulls.get(path, 0) + column.null_count
            if not has_min_max:
                continue
            if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
                self.nan.add(path)
            bounds = pc.min_max(column)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            if low is not None:
                self.mins[path] = min(self.mins.get(path, low), low)
                self.maxs[path] = max(self.maxs.get(path, high), high)

    def to_json(self) -> str:
        mins: dict[str, Any] = {}
        maxs: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for path, _ in self.leaves:
            _put(nulls, path, self.nulls.get(path, 0))
            if path in self.nan or path not in self.mins:
                continue
            _put(mins, path, stats_value(self.mins[path], upper=False))
            _put(maxs, path, stats_value(self.maxs[path], upper=True))
        stats = {"numRecords": self.rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
        return stats_json(stats)


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set `tree[path[0]][path[1]]...` to `value` (None: leave it out)."""
    if value is None:
        return
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value
