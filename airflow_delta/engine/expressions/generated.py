"""Generated columns (`delta.generationExpression`) computed and checked in process, as
delta-spark does and as `airflow_delta.spark.constraints.fill_generated_columns` does on Spark:
a row's generated column is `CAST((expression) AS type)` where the row gives NULL (or no value),
and a row that gives a value must give that one (compared with `<=>`: NULL matches NULL only).

`parse_generated_columns` parses the expressions once per statement (one `current_timestamp()`);
one that the engine does not evaluate raises InvalidPredicateError, so that the caller refuses
the write in process and leaves it to Spark. `fill_generated` returns the rows to write and,
per generated column, the rows whose given value breaks its expression; `generate_checked`
raises ConstraintViolationError for the first such row instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import ConstraintViolationError
from airflow_delta.engine.expressions.parser import PartitionColumns, parse_value
from airflow_delta.engine.expressions.predicates import numpy_mask
from airflow_delta.engine.expressions.tree import Expr, Result, compare


@dataclass(frozen=True)
class GeneratedColumn:
    """One generated column: its expression as the schema holds it, and parsed (cast to the
    column's type)."""

    name: str
    expression: str
    value: Expr
    columns: tuple[str, ...]  # the columns the expression reads


def parse_generated_columns(
    generated: Mapping[str, str],
    columns: PartitionColumns,
    *,
    now: dt.datetime | None = None,
) -> list[GeneratedColumn]:
    """The generated columns (`generated`: name -> expression) of a table with `columns` (name
    -> Delta type or schema field); InvalidPredicateError for an expression not evaluated.

    >>> [c.columns for c in parse_generated_columns({"y": "year(ts)"},
    ...     {"ts": "timestamp", "y": "integer"})]
    [('ts',)]
    """
    now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    found = []
    for name, expression in generated.items():
        spec = columns[name]
        delta_type = spec["type"] if isinstance(spec, dict) else spec
        if not isinstance(delta_type, str):
            delta_type = "complex"  # refused by the CAST below
        value, used = parse_value(f"CAST(({expression}) AS {delta_type})", columns, now=now)
        found.append(GeneratedColumn(name, expression, value, tuple(used)))
    return found


def fill_generated(
    rows: pa.Table, generated: Sequence[GeneratedColumn]
) -> tuple[pa.Table, dict[str, npt.NDArray[np.bool_]]]:
    """`rows` (the table's columns, by name) with each generated column's NULLs computed, and
    per generated column the rows whose given value differs from its expression (a constraint
    violation; all False when none does). Expressions read the rows as given."""
    violations = {}
    for column in generated:
        computed = column.value.evaluate({c: rows.column(c) for c in column.columns})
        index = rows.schema.get_field_index(column.name)
        field = rows.schema.field(index)
        given = rows.column(index)
        computed = _as_column(computed, field.type, rows.num_rows)
        filled = pc.coalesce(given, computed)
        violations[column.name] = ~numpy_mask(_null_safe_equal(filled, computed))
        rows = rows.set_column(index, field, filled)
    return rows, violations


def generate_checked(
    rows: pa.Table,
    generated: Sequence[GeneratedColumn],
    context: str,
    mask: npt.NDArray[np.bool_] | None = None,
) -> pa.Table:
    """`fill_generated`'s rows; ConstraintViolationError naming `context` (the table, its
    version and the statement) when a row (of `mask`, else any) gives a generated column
    another value than its expression's."""
    rows, violations = fill_generated(rows, generated)
    for column in generated:
        broken = violations[column.name] if mask is None else violations[column.name] & mask
        if broken.any():
            expression = f"{column.name} = {column.expression}"
            raise ConstraintViolationError(
                f"{context}: generated column {column.name} ({expression}) violated by a row "
                "with another value.\nGive it its expression's value, or leave it out: it is "
                "computed.",
                f"Generated Column ({column.name})",
                expression,
            )
    return rows


def _as_column(value: Result, type_: pa.DataType, count: int) -> pa.Array | pa.ChunkedArray:
    """An expression's value as `count` values of the column's type."""
    if isinstance(value, pa.Scalar):
        if not value.is_valid:
            return pa.nulls(count, type_)
        value = pa.array([value.as_py()], value.type).take(np.zeros(count, dtype=np.int32))
    return pc.cast(value, type_)


def _null_safe_equal(left: Result, right: Result) -> Result:
    """`left <=> right` as Spark compares (NULL equals NULL only; NaN equals NaN)."""
    both_valid = pc.and_(pc.is_valid(left), pc.is_valid(right))
    both_null = pc.and_(pc.is_null(left), pc.is_null(right))
    return pc.if_else(both_valid, compare("=", left, right), both_null)
