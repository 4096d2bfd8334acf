"""The rules a table's rows must keep beyond their types, as its metadata states them (Spark
SQL): NOT NULL of non-nullable columns, `delta.invariants` in field metadata (nested ones too)
and CHECK constraints (`delta.constraints.<name>` table properties). The Spark writer checks
them with Spark SQL (`airflow_delta.spark.constraints`), the in-process commands with the
engine's evaluator (`RowChecks`); both name a violating row with `violated_by`.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import ConstraintViolationError
from airflow_delta.engine.expressions.parser import parse_value
from airflow_delta.engine.expressions.predicates import numpy_mask
from airflow_delta.engine.expressions.tokens import quote_identifier
from airflow_delta.engine.expressions.tree import Expr
from airflow_delta.engine.protocol.actions import Metadata
from airflow_delta.engine.protocol.schema import delta_field_metadata


@dataclass(frozen=True)
class Constraint:
    """A rule checked on every written row: a row for which `expression` (Spark SQL) is not
    true fails the write. `message` opens the error, which then shows the row's `columns`."""

    name: str
    expression: str
    message: str
    columns: tuple[str, ...] = ()


_SQL_STRINGS = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_SQL_NAMES = re.compile(r"`((?:[^`]|``)+)`|([A-Za-z_][A-Za-z0-9_]*)")


def referenced_columns(expression: str, names: Sequence[str]) -> tuple[str, ...]:
    """The top-level columns an expression names (all of them when it names none)."""
    by_lower = {n.lower(): n for n in names}
    found: list[str] = []
    for quoted, bare in _SQL_NAMES.findall(_SQL_STRINGS.sub("''", expression)):
        name = by_lower.get((quoted.replace("``", "`") or bare).lower())
        if name is not None and name not in found:
            found.append(name)
    return tuple(found) or tuple(names)


def _invariants(fields: pa.StructType | pa.Schema, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(column path, expression) of every `delta.invariants` in a schema, nested ones too."""
    for f in fields:
        path = prefix + f.name
        invariant = delta_field_metadata(f).get("delta.invariants")
        if invariant:
            yield path, json.loads(invariant)["expression"]["expression"]
        if pa.types.is_struct(f.type):
            yield from _invariants(f.type, path + ".")


def table_constraints(metadata: Metadata) -> list[Constraint]:
    """NOT NULL of the non-nullable top-level columns, invariants and CHECK constraints."""
    schema = metadata.schema
    names = schema.names
    checks = [
        Constraint(
            f"NOT NULL({f.name})",
            f"{quote_identifier(f.name)} IS NOT NULL",
            f"NOT NULL constraint on column {f.name} ({quote_identifier(f.name)} IS NOT NULL)",
            (f.name,),
        )
        for f in schema
        if not f.nullable
    ]
    checks += [
        Constraint(
            f"EXPRESSION({expression})",
            expression,
            f"Invariant ({expression}) on column {path}",
            referenced_columns(expression, names),
        )
        for path, expression in _invariants(schema)
    ]
    prefix = "delta.constraints."
    checks += [
        Constraint(
            key[len(prefix) :],
            expression,
            f"CHECK constraint {key[len(prefix) :]} ({expression})",
            referenced_columns(expression, names),
        )
        for key, expression in metadata.configuration.items()
        if key.lower().startswith(prefix)
    ]
    return checks


def shown_value(value: Any) -> str:
    """A value of a row as SQL shows it (`'text'`, `2024-01-01`, `1.50`, `true`, `null`)."""
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = "'" + value.replace("'", "''") + "'"
    elif isinstance(value, dt.date | dt.datetime | dt.time):
        text = value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    elif isinstance(value, bytes):
        text = "X'" + value.hex().upper() + "'"
    else:
        text = str(value)
    return text if len(text) <= 100 else text[:100] + "..."


def replace_where_constraint(predicate: str, names: Sequence[str]) -> Constraint:
    """The check that every row an overwrite with replaceWhere `predicate` writes satisfies
    it (`names`: the table's columns), with delta-spark's message."""
    return Constraint(
        "replaceWhere",
        predicate,
        "Written data does not conform to partial table overwrite condition or "
        f"constraint '{predicate}'.\nCHECK replaceWhere ({predicate})",
        referenced_columns(predicate, names),
    )


def violated_by(check: Constraint, row: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """The message of `check` broken by `row` (column -> value; a column under another name in
    `row` is given in `names`), showing the check's columns as SQL values."""
    shown = "".join(f"\n - {c} : {shown_value(row[names.get(c, c)])}" for c in check.columns)
    return f"{check.message} violated by row with values:{shown}"


@dataclass(frozen=True)
class RowChecks:
    """A table's invariants and CHECK constraints parsed by the engine's evaluator, to check
    the rows an in-process command writes (NOT NULL is the writer's own check)."""

    checks: tuple[tuple[Constraint, Expr, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, metadata: Metadata, extra: Sequence[Constraint] = ()) -> RowChecks:
        """The table's checks and the `extra` ones; InvalidPredicateError for one the evaluator
        does not evaluate (a function it lacks, a nested column): Spark checks those."""
        fields = json.loads(metadata.schema_string or '{"fields": []}')["fields"]
        columns = {f["name"]: f["type"] for f in fields if isinstance(f["type"], str)}
        parsed = []
        for check in [*table_constraints(metadata), *extra]:
            if check.name.startswith("NOT NULL("):
                continue
            expr, used = parse_value(check.expression, columns)
            parsed.append((check, expr, tuple(used)))
        return cls(tuple(parsed))

    def __bool__(self) -> bool:
        return bool(self.checks)

    def check(
        self, rows: pa.Table, context: str, mask: npt.NDArray[np.bool_] | None = None
    ) -> None:
        """ConstraintViolationError naming `context` (the table, its version, the command) for
        the first row of `rows` (of `mask`, else any) for which a check is not true."""
        for check, expr, used in self.checks:
            value = expr.evaluate({c: rows.column(c) for c in used})
            if isinstance(value, pa.Scalar):
                value = pa.repeat(value, rows.num_rows)
            broken = ~numpy_mask(pc.fill_null(value, False))
            if mask is not None:
                broken &= mask
            if broken.any():
                row = rows.slice(int(np.flatnonzero(broken)[0]), 1).to_pylist()[0]
                raise ConstraintViolationError(
                    f"{context}: {violated_by(check, row, {})}\nFix or filter the rows that "
                    "break it, or change the constraint.",
                    check.name,
                    check.expression,
                )
