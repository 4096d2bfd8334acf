"""Data skipping: which files may hold a row that satisfies a predicate over any column.

`FilePredicate` is a `PartitionPredicate` whose text may also use the table's data columns.
Its `evaluate(files)` is True for a file unless the file provably holds no matching row:
conditions on partition columns are evaluated exactly on `partitionValues`, conditions on data
columns on the file's statistics (`add.stats`: `numRecords`, `minValues`, `maxValues`,
`nullCount`), read for the columns used only, vectorised by pyarrow's JSON reader with an
explicit schema.

The rules, as Delta's (PROTOCOL.md, "Per-file Statistics"), always erring towards keeping:

- no stats, no stats for the column, or stats that do not parse: keep the file;
- `c op v` for =, <, <=, >, >= against `minValues`/`maxValues`; `c != v` only when min = max = v
  for exact types (integers, dates, booleans); IN as the OR of its equalities (a range test for
  long lists); BETWEEN as its two comparisons; a comparison with NULL never matches;
- a string max may be truncated by the writer (Delta appends a tie-breaker character): a max
  `M` admits `v` when `M >= v` or `v` starts with `M` less its last character;
- floating point: a NaN min or max counts as no stats, and since writers may leave NaN out of
  the statistics, conditions NaN satisfies in Spark's ordering (>, >=, !=, = NaN) keep the file;
- timestamps: stats hold milliseconds, so min and max are widened by 1 ms;
- decimals and binary: no min/max test (only null counts);
- `IS NULL` needs `nullCount > 0`, `IS NOT NULL` needs `nullCount < numRecords`, and a file
  whose column is all NULL (`nullCount == numRecords`) matches no comparison;
- AND, OR and NOT follow SQL's three-valued logic: a file is kept for `p` when `p` may be TRUE
  for a row, and for `NOT p` when `p` may be FALSE for a row; NOT is pushed through AND/OR and
  negates comparisons (safe with a non-NULL literal); anything else keeps the file, such as a
  condition over a computed value (`amount * 2 > 10`, `upper(s) = 'X'`) on a data column.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.expressions.coercion import type_family
from airflow_delta.engine.expressions.parser import PartitionColumns, UsedColumns, parse
from airflow_delta.engine.expressions.predicates import (
    TRUE,
    PartitionPredicate,
    numpy_mask,
    partition_arrays,
)
from airflow_delta.engine.expressions.tree import (
    And,
    Apply,
    Cast,
    Column,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Not,
    Or,
    compare,
)
from airflow_delta.engine.protocol import columnar
from airflow_delta.engine.protocol.schema import arrow_type

Mask = npt.NDArray[np.bool_]

_FLIPPED = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "<=>": "<=>"}
_NEGATED = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_JSON_TYPES = {
    "integer": pa.int64(),
    "floating": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "date": pa.string(),
    "timestamp": pa.string(),
    "timestamp_ntz": pa.string(),
}
_EXACT = frozenset({"integer", "date", "boolean"})
_MAX_IN_VALUES = 64
_MAX_READS = 64  # JSON reads spent finding the files whose stats do not parse
_MS = 1000  # microseconds
# scalars for compute functions: a Python value would import pandas (pyarrow's shim, 0.3 s)
_TRUE = columnar.scalar(True, pa.bool_())
_FALSE = columnar.scalar(False, pa.bool_())

_NOT_TEXT = "is not SQL text: pass a str, or a list of them"


class FilePredicate(PartitionPredicate):
    """A predicate over partition and data columns; `evaluate` keeps the files that may match."""

    def __init__(
        self, text: str, root: Expr, used: UsedColumns, data_columns: frozenset[str]
    ) -> None:
        super().__init__(text, root, used)
        self.data_columns = data_columns

    def evaluate(self, files: pa.StructArray) -> pa.BooleanArray:
        """For each file (ADD_TYPE), whether it may hold a row that satisfies the predicate.

        Partition columns are read from `partitionValues`, data columns from `stats`.
        """
        used = self.used
        partition = {k: v for k, v in used.items() if k not in self.data_columns}
        data = {k: v for k, v in used.items() if k in self.data_columns}
        scope = _Scope(
            partition_arrays(files, partition),
            read_stats(pc.struct_field(files, "stats"), data),
            self.data_columns,
            len(files),
        )
        return columnar.bool_mask(_may(self.root, False, scope))


def parse_file_predicates(
    predicate: str | Sequence[str] | None,
    partition_columns: PartitionColumns,
    data_columns: PartitionColumns,
) -> PartitionPredicate:
    """One predicate (the AND of a list) over the table's columns.

    A `PartitionPredicate` when only partition columns are used, else a `FilePredicate`.
    Raises InvalidPredicateError for an unknown column or a malformed predicate.
    """
    if predicate is None:
        return TRUE
    if not isinstance(predicate, str | list | tuple):
        raise InvalidPredicateError(repr(predicate), _NOT_TEXT)
    texts = [predicate] if isinstance(predicate, str) else list(predicate)
    for item in texts:
        if not isinstance(item, str):
            raise InvalidPredicateError(
                repr(item), "is not SQL text: pass a str (or a list of them)"
            )
    parsed = [PartitionPredicate(t, *parse(t, partition_columns, data_columns)) for t in texts]
    combined = PartitionPredicate.all_of(parsed)
    data = frozenset(combined.columns - set(partition_columns))
    if not data:
        return combined
    return FilePredicate(combined.text, combined.root, combined.used, data)


# --------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class ColumnStats:
    """One column's statistics over the files; None where unknown for every file."""

    family: str
    min: pa.Array | None
    max: pa.Array | None
    null_count: pa.Array | None


@dataclass(frozen=True)
class FileStats:
    num_records: pa.Array | None
    columns: Mapping[str, ColumnStats]


def read_stats(stats: pa.Array, used: UsedColumns) -> FileStats:
    """The statistics of the columns `used` (name -> (stats key, Delta type)) for each file.

    One JSON read for all columns; when it fails, one per column, and for a column whose
    statistics do not parse, the files whose lines fail are found by bisection (a bounded
    number of reads) and have no stats for it (they are kept).
    """
    lines = _json_lines(stats)
    specs = {name: (key, *_spec(delta_type)) for name, (key, delta_type) in used.items()}
    read = _read(lines.data, len(stats), {key: t for key, _, t in specs.values()})
    if read is None:  # some column's stats do not parse: read each apart
        read = _read_tolerant(lines, {})
        parts = {name: _read_tolerant(lines, {key: t}) for name, (key, _, t) in specs.items()}
    else:
        parts = dict.fromkeys(specs, read)
    columns = {
        name: _column_stats(parts[name], key, family, used[name][1])
        for name, (key, family, _) in specs.items()
    }
    return FileStats(read.get("numRecords"), columns)


def _spec(delta_type: str) -> tuple[str, pa.DataType | None]:
    type_ = arrow_type(delta_type)
    family = "timestamp" if pa.types.is_timestamp(type_) else type_family(type_) or ""
    if family == "timestamp" and type_.tz is None:
        family = "timestamp_ntz"
    return family, _JSON_TYPES.get(family)


@dataclass(frozen=True)
class _Lines:
    """JSON lines, one per file: `data[starts[i]:starts[i + 1]]` is file `i`'s line."""

    data: bytes
    starts: npt.NDArray[np.int64]

    def rows(self, first: int, end: int) -> bytes:
        return self.data[int(self.starts[first]) : int(self.starts[end])]


def _json_lines(stats: pa.Array) -> _Lines:
    """The stats strings as JSON lines ('{}' for a file without stats)."""
    stats = pc.replace_substring(stats.cast(pa.large_string()), "\n", " ")
    stats = pc.replace_substring(stats, "\r", " ")
    nothing = columnar.scalar("", pa.string()).cast(pa.large_string())
    empty = pc.fill_null(pc.equal(pc.utf8_trim_whitespace(stats), nothing), _TRUE)
    stats = pc.if_else(empty, columnar.scalar("{}", pa.string()).cast(pa.large_string()), stats)
    newline = columnar.scalar("\n", pa.string()).cast(pa.large_string())
    lines = pc.binary_join_element_wise(stats, nothing, newline)  # each ends with a newline
    _, offsets_buffer, data = lines.buffers()
    if data is None or not len(lines):
        return _Lines(b"", np.zeros(1, dtype=np.int64))
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[lines.offset :][: len(lines) + 1]
    raw: bytes = data.to_pybytes()
    return _Lines(raw[int(offsets[0]) : int(offsets[-1])], offsets - offsets[0])


def _read_tolerant(lines: _Lines, columns: Mapping[str, pa.DataType | None]) -> dict[str, pa.Array]:
    """`_read` of every line, the lines that fail read as '{}' (no stats).

    A failing range is split in halves, at most `_MAX_READS` reads in all; once they are spent,
    a failing range has no stats.
    """
    budget = [_MAX_READS]
    pieces: list[dict[str, pa.Array]] = []
    pending = [(0, len(lines.starts) - 1)]
    while pending:
        first, end = pending.pop()
        budget[0] -= 1
        part = _read(lines.rows(first, end), end - first, columns)
        if part is None and end - first > 1 and budget[0] > 0:
            middle = (first + end) // 2
            pending += [(middle, end), (first, middle)]  # popped first half first
            continue
        pieces.append(part or _read(b"{}\n" * (end - first), end - first, columns) or {})
    if not pieces or any(set(p) != set(pieces[0]) for p in pieces):
        return {}
    return {key: pa.concat_arrays([p[key] for p in pieces]) for key in pieces[0]}


def _read(
    lines: bytes, rows: int, columns: Mapping[str, pa.DataType | None]
) -> dict[str, pa.Array] | None:
    """numRecords and the min/max/nullCount structs of `columns` (key -> JSON type)."""
    bounded = [(k, t) for k, t in columns.items() if t is not None]
    fields = [("numRecords", pa.int64())]
    if bounded:
        fields += [("minValues", pa.struct(bounded)), ("maxValues", pa.struct(bounded))]
    if columns:
        fields.append(("nullCount", pa.struct([(k, pa.int64()) for k in columns])))
    options = pa_json.ParseOptions(
        explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore"
    )
    block = max(1 << 20, len(lines) + 1)
    try:
        table = pa_json.read_json(
            io.BytesIO(lines),
            read_options=pa_json.ReadOptions(use_threads=False, block_size=block),
            parse_options=options,
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != rows:
        return None
    return {name: columnar.contiguous(table.column(name)) for name in table.column_names}


def _column_stats(
    read: Mapping[str, pa.Array], key: str, family: str, delta_type: str
) -> ColumnStats:
    def field(struct: str) -> pa.Array | None:
        array = read.get(struct)
        if array is None or array.type.get_field_index(key) < 0:
            return None
        return columnar.struct_child(array, key)

    null_count = field("nullCount")
    low, high = field("minValues"), field("maxValues")
    if low is None or high is None:
        return ColumnStats(family, None, None, null_count)
    try:
        low, high = _typed(low, family, delta_type, -_MS), _typed(high, family, delta_type, _MS)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return ColumnStats(family, None, None, null_count)
    if family == "floating":  # a NaN bound says nothing: no stats for that file
        nan = pc.fill_null(pc.or_kleene(pc.is_nan(low), pc.is_nan(high)), _FALSE)
        low = pc.if_else(nan, pa.nulls(1, low.type)[0], low)
        high = pc.if_else(nan, pa.nulls(1, high.type)[0], high)
    return ColumnStats(family, low, high, null_count)


def _typed(values: pa.Array, family: str, delta_type: str, widen: int) -> pa.Array:
    """Bounds read from JSON in the column's Arrow type; timestamps widened by 1 ms."""
    type_ = arrow_type(delta_type)
    if family == "date":
        return values.cast(type_)
    if family in ("timestamp", "timestamp_ntz"):
        try:
            parsed = values.cast(type_)
        except pa.ArrowInvalid:  # a zone where none is expected, or the other way round
            other = pa.timestamp("us") if family == "timestamp" else pa.timestamp("us", "UTC")
            parsed = values.cast(other)
        micros = pc.add(parsed.cast(pa.timestamp("us")).cast(pa.int64()), widen)
        return micros.cast(pa.timestamp("us")).cast(type_)
    return values.cast(type_)


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class _Scope:
    partition: dict[str, pa.Array]
    stats: FileStats
    data_columns: frozenset[str]
    rows: int

    def all(self, value: bool) -> Mask:
        return np.full(self.rows, value)


def _may(node: Expr, negated: bool, scope: _Scope) -> Mask:
    """Whether `node` may be TRUE (FALSE when `negated`) for some row of each file."""
    if not _columns(node) & scope.data_columns:
        result = node.evaluate(scope.partition)
        wanted = columnar.scalar(not negated, pa.bool_())
        if isinstance(result, pa.Scalar):
            return scope.all(result.as_py() is (not negated))
        return _mask(pc.fill_null(pc.equal(result, wanted), _FALSE))
    if isinstance(node, Not):
        return _may(node.operand, not negated, scope)
    if isinstance(node, And | Or):
        left, right = _may(node.left, negated, scope), _may(node.right, negated, scope)
        conjunction = isinstance(node, And) != negated
        return left & right if conjunction else left | right
    if isinstance(node, Compare):
        return _may_compare(node, negated, scope)
    if isinstance(node, In):
        return _may_in(node, negated, scope)
    if isinstance(node, IsNull):
        column = _data_column(node.operand, scope)
        if column is None:
            return scope.all(True)
        return _may_null(column[0].name, node.negated == negated, scope)
    if isinstance(node, Column | Cast) and (column := _data_column(node, scope)) is not None:
        wanted = columnar.scalar(not negated, pa.bool_())
        return _may_op(column[0].name, "=", wanted, column[1], scope)
    return scope.all(True)


def _may_compare(node: Compare, negated: bool, scope: _Scope) -> Mask:
    op, column, other = node.op, _data_column(node.left, scope), node.right
    if column is None:
        op, column, other = _FLIPPED[op], _data_column(node.right, scope), node.left
    if column is None or not isinstance(other, Const):
        return scope.all(True)
    name, cast = column[0].name, column[1]
    if op == "<=>":
        if not other.scalar.is_valid:
            return _may_null(name, not negated, scope)
        if not negated:
            return _may_op(name, "=", other.scalar, cast, scope)
        return _may_op(name, "!=", other.scalar, cast, scope) | _may_null(name, True, scope)
    if not other.scalar.is_valid:
        return scope.all(False)  # a comparison with NULL is never TRUE nor FALSE
    return _may_op(name, _NEGATED[op] if negated else op, other.scalar, cast, scope)


def _may_in(node: In, negated: bool, scope: _Scope) -> Mask:
    column = _data_column(node.operand, scope)
    if column is None or node.others:
        return scope.all(True)
    name, cast = column[0].name, column[1]
    values = node.value_set if node.value_set is not None else pa.nulls(0)
    if negated:  # FALSE needs a non-NULL value outside the list, and no NULL in it
        if node.has_null:
            return scope.all(False)
        mask = _may_null(name, False, scope)
        if len(values) > _MAX_IN_VALUES:
            return mask
        for value in values:
            mask &= _may_op(name, "!=", value, cast, scope)
        return mask
    if not len(values):
        return scope.all(False)
    if len(values) > _MAX_IN_VALUES:
        exact = _may_hold_one_of(name, values, cast, scope)
        if exact is not None:
            return exact
        if pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py():
            return _may_null(name, False, scope)  # min_max leaves NaN out
        low, high = pc.min_max(values).values()
        above = _may_op(name, ">=", low, cast, scope)
        return above & _may_op(name, "<=", high, cast, scope)
    mask = scope.all(False)
    for value in values:
        mask |= _may_op(name, "=", value, cast, scope)
    return mask


#: Families whose bounds order as numbers (dates as days, timestamps as microseconds).
_NUMERIC = frozenset({"integer", "floating", "date", "timestamp", "timestamp_ntz"})


def _may_hold_one_of(
    name: str, values: pa.Array, cast: pa.DataType | None, scope: _Scope
) -> Mask | None:
    """`name IN values` for a long list, exactly and vectorised: a file may match when one of
    the values lies within its [min, max] (a binary search of each file's min in the sorted
    values). None when the column's bounds are not numbers or dates, or a value is NaN."""
    column = scope.stats.columns.get(name)
    if column is None or column.min is None or column.max is None:
        return None
    if column.family not in _NUMERIC:
        return None
    try:
        low, high = column.min, column.max
        if cast is not None:
            low, high = low.cast(cast), high.cast(cast)
        values = values.drop_null().cast(low.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py():
        return None
    keys = np.sort(_as_numbers(values))  # duplicates do not matter to searchsorted
    if not len(keys):
        return scope.all(False)
    lows, highs = _as_numbers(low), _as_numbers(high)
    first = np.minimum(np.searchsorted(keys, lows, side="left"), len(keys) - 1)
    within = (keys[first] >= lows) & (keys[first] <= highs)
    known = _mask(pc.and_(low.is_valid(), high.is_valid()))
    return _may_null(name, False, scope) & (within | ~known)


def _as_numbers(values: pa.Array) -> np.ndarray:
    """Bounds or values as a numpy array that orders as they do (null slots hold any value)."""
    if pa.types.is_date32(values.type):
        values = values.cast(pa.int32())
    floating = pa.types.is_floating(values.type)
    numbers = values.cast(pa.float64() if floating else pa.int64())
    data = np.frombuffer(numbers.buffers()[1], dtype=np.float64 if floating else np.int64)
    return data[numbers.offset : numbers.offset + len(numbers)]


def _may_null(name: str, is_null: bool, scope: _Scope) -> Mask:
    """Whether each file may hold a NULL (`is_null`) or a non-NULL value of column `name`."""
    column = scope.stats.columns.get(name)
    if column is None or column.null_count is None:
        return scope.all(True)
    if is_null:
        zero = columnar.scalar(0, column.null_count.type)
        return _mask(pc.fill_null(pc.greater(column.null_count, zero), _TRUE))
    records = scope.stats.num_records
    if records is None:
        return scope.all(True)
    return _mask(pc.fill_null(pc.less(column.null_count, records), _TRUE))


def _may_op(name: str, op: str, value: pa.Scalar, cast: pa.DataType | None, scope: _Scope) -> Mask:
    """Whether each file may hold a value `v` of column `name` with `v op value` TRUE."""
    column = scope.stats.columns.get(name)
    if column is None:
        return scope.all(True)
    not_all_null = _may_null(name, False, scope)
    if column.min is None or column.max is None or column.family not in _JSON_TYPES:
        return not_all_null
    if column.family == "floating" and _nan_may_match(op, value):
        return not_all_null
    low, high = column.min, column.max
    if cast is not None:
        try:
            low, high = low.cast(cast), high.cast(cast)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return not_all_null
    if op == "!=":
        if column.family not in _EXACT:
            return not_all_null
        same = pc.and_(pc.equal(low, value), pc.equal(high, value))
        return not_all_null & ~_mask(pc.fill_null(same, _FALSE))
    result = None
    if op in ("=", "<", "<="):
        result = compare("<=" if op == "=" else op, low, value)
    if op in ("=", ">", ">="):
        above = _above(">=" if op == "=" else op, high, value, column.family)
        result = above if result is None else pc.and_kleene(result, above)
    return not_all_null & _mask(pc.fill_null(result, _TRUE))


def _above(op: str, high: pa.Array, value: pa.Scalar, family: str) -> pa.Array:
    """`high op value` for a max; a string max may be a truncated prefix of the real one."""
    result = compare(op, high, value)
    if family != "string":
        return result
    text = value.as_py()
    prefixes = columnar.array_from_pylist([text[:i] for i in range(len(text) + 1)], pa.string())
    stem = pc.utf8_slice_codeunits(high, 0, -1)
    return pc.or_kleene(result, pc.is_in(stem, value_set=prefixes))


def _nan_may_match(op: str, value: pa.Scalar) -> bool:
    """Whether NaN satisfies `NaN op value` in Spark's ordering (NaN above everything)."""
    is_nan = value.is_valid and value.as_py() != value.as_py()
    return op in (">", ">=", "!=") or (op in ("=", "<=") and is_nan)


def _data_column(node: Expr, scope: _Scope) -> tuple[Column, pa.DataType | None] | None:
    """The data column `node` reads (possibly cast to a wider type), if that is all it does."""
    if isinstance(node, Column) and node.name in scope.data_columns:
        return node, None
    if isinstance(node, Cast) and isinstance(node.operand, Column):
        column = node.operand
        family = type_family(column.type)
        if column.name in scope.data_columns and family not in ("string", "binary"):
            return column, node.type
    return None


def _columns(node: Expr) -> set[str]:
    """The columns `node` references."""
    if isinstance(node, Column):
        return {node.name}
    if isinstance(node, Const):
        return set()
    if isinstance(node, Cast | Not | IsNull):
        return _columns(node.operand)
    if isinstance(node, Compare | And | Or):
        return _columns(node.left) | _columns(node.right)
    if isinstance(node, Apply):
        return set().union(*(_columns(arg) for arg in node.args))
    found = _columns(node.operand)
    for other in node.others:
        found |= _columns(other)
    return found


def _mask(values: pa.Array) -> Mask:
    return numpy_mask(values)
