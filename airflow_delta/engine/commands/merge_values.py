"""How a MERGE compares and converts values across the source's and the table's types: join
keys compared exactly as Spark compares them (`joinable`) and joined (`match_keys`), and the
in-process MERGE's assignments turned into columns of the table's types: source columns cast
within their type family (`castable`, `cast_to_field`), and SQL literals (`sql_literal`)."""

from __future__ import annotations

import decimal
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.commands.data_reader import cast_values, same_family
from airflow_delta.engine.errors import (
    InvalidArgumentError,
    InvalidPredicateError,
    UnsupportedMergeError,
)
from airflow_delta.engine.expressions.tokens import tokenize

_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")


def joinable(target: pa.DataType, source: pa.DataType) -> bool:
    """Whether keys of these types join exactly as Spark compares them (no floats)."""
    if pa.types.is_integer(target) and pa.types.is_integer(source):
        return True
    comparable = (
        pa.types.is_string(target)
        or pa.types.is_binary(target)
        or pa.types.is_boolean(target)
        or pa.types.is_date(target)
        or pa.types.is_timestamp(target)
        or pa.types.is_decimal(target)
    )
    return bool(comparable and target == source)


#: The most source rows `match_keys` looks target keys up in (building the lookup's hash set
#: takes about 0.2 us a row, on one core).
LOOKUP_ROWS = 100_000


def match_keys(
    target: pa.Table, source: pa.Table, keys: list[tuple[str, str]], eligible: np.ndarray
) -> pa.Table:
    """(row, srow): the target row index and source row index of every matching pair of an
    `eligible` target row (NULL keys match nothing).

    One key column of at most `LOOKUP_ROWS` unique source values is a hash lookup of each
    target key in the source's (`index_in`): Arrow's hash join needs its query engine
    (`pyarrow.acero`), whose first import in a process costs 0.1-0.2 s, more than such a
    lookup. The join is faster on bigger sources (it builds its hash table on every core)."""
    left = [_key(target.column(t)) for t, _ in keys]
    right = [_key(source.column(s)) for _, s in keys]
    one = len(keys) == 1 and left[0].type == right[0].type
    if one and source.num_rows <= LOOKUP_ROWS and _unique(right[0]):
        found = pc.index_in(left[0], value_set=right[0].combine_chunks(), skip_nulls=True)
        srow = pc.fill_null(found, -1).to_numpy().astype(np.int64)
        row = np.flatnonzero((srow >= 0) & eligible)
        return pa.table({"row": row, "srow": srow[row]})
    names = [f"k{i}" for i in range(len(keys))]
    rows = pa.array(np.arange(target.num_rows, dtype=np.int64))
    srows = pa.array(np.arange(source.num_rows, dtype=np.int64))
    first = pa.table([*left, rows], names=[*names, "row"])
    if not eligible.all():
        first = first.filter(pa.array(eligible))
    second = pa.table([*right, srows], names=[*names, "srow"])
    joined = first.join(second, keys=names, join_type="inner", use_threads=True)
    return joined.select(["row", "srow"])


def _key(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A join key as compared: integers of every width as int64."""
    if pa.types.is_integer(column.type) and column.type != pa.int64():
        return pc.cast(column, pa.int64())
    return column


def _unique(keys: pa.ChunkedArray) -> bool:
    """Whether no non-NULL key repeats."""
    distinct = pc.count_distinct(keys, mode="only_valid").as_py()
    return bool(distinct == len(keys) - keys.null_count)


def castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a MERGE may store `source` values in a `target` column (same family)."""
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
    if any(f(source) for f in numeric) and any(f(target) for f in numeric):
        return True
    if pa.types.is_timestamp(target):
        return bool(pa.types.is_timestamp(source) or pa.types.is_date(source))
    return bool(pa.types.is_null(source) or same_family(source, target))


def cast_to_field(
    column: pa.ChunkedArray | pa.Array, field: pa.Field, where: str
) -> pa.ChunkedArray | pa.Array:
    """`column` cast to `field`'s type (`cast_values`); a cast across type families or one that
    loses values is an error naming the column."""
    given = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if not same_family(column.type, field.type) and not castable(given, field.type):
        raise InvalidArgumentError(
            f"MERGE into {where}: cannot store {given} values in column {field.name} ({field.type})"
        )
    try:
        return cast_values(column, field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise InvalidArgumentError(
            f"MERGE into {where}: cannot cast column {field.name} from {column.type} to "
            f"{field.type}: {exc}"
        ) from None


def _string_value(text: str) -> str | None:
    """The value of `text` when it is one string literal (quotes and escapes as Spark SQL
    reads them), else None."""
    try:
        tokens = tokenize(text)
    except InvalidPredicateError:
        return None
    return tokens[0].value if len(tokens) == 2 and tokens[0].kind == "string" else None


def sql_literal(sql: str, type_: pa.DataType, table: str) -> pa.Scalar | None:
    """A SQL literal (NULL, TRUE/FALSE, a number, a 'string') as a scalar of `type_`."""
    text = sql.strip()
    lowered = text.lower()
    if lowered == "null":
        return None
    value: Any
    if lowered in ("true", "false"):
        value = lowered == "true"
    elif _NUMBER.fullmatch(text):
        value = decimal.Decimal(text) if "." in text else int(text)
        if pa.types.is_floating(type_):
            value = float(value)
    elif (string := _string_value(text)) is not None:
        value = string
    else:
        raise UnsupportedMergeError(
            f"MERGE into {table}: the in-process MERGE evaluates column references and "
            f"literals only, not {sql!r}"
        )
    try:
        return pc.cast(pa.scalar(value), type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise UnsupportedMergeError(
            f"MERGE into {table}: the in-process MERGE cannot use {sql} as {type_}: {exc}"
        ) from None
