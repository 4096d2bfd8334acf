"""The rules every written row must keep, as Spark SQL: NOT NULL, `delta.invariants`, CHECK
constraints (`delta.constraints.*`), and the columns the table fills itself: identity columns
(values handed out from the high-water mark) and generated columns (`delta.generationExpression`,
computed with `F.expr` where the row has no value, checked with `<=>` where it has one).

`fill_generated_columns` turns a DataFrame normalised to the table schema into the rows to
write plus the constraints of its generated columns; `identity_high_water_marks` reads the
values handed out back from the written files' stats, for the commit's metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_delta.engine.errors import DeltaProtocolError
from airflow_delta.engine.expressions.constraints import (  # re-exported: their former home
    Constraint as Constraint,
)
from airflow_delta.engine.expressions.constraints import (
    referenced_columns as referenced_columns,
)
from airflow_delta.engine.expressions.constraints import (
    table_constraints as table_constraints,
)
from airflow_delta.engine.expressions.tokens import quote_identifier
from airflow_delta.engine.protocol.actions import AddFile, Metadata
from airflow_delta.engine.protocol.identity import (
    IdentityColumn,
    generated_columns,
    identity_columns,
)
from airflow_delta.engine.protocol.identity import (
    check_no_explicit_identity as check_no_explicit_identity,  # re-exported: its former home
)


def fill_generated_columns(
    data: DataFrame, metadata: Metadata, table: str
) -> tuple[DataFrame, list[Constraint]]:
    """`data` (the table's columns) with the NULLs of its identity columns replaced by values
    from their high-water marks and those of its generated columns computed; the constraints
    that every row's generated columns equal their expressions.

    Identity values are dense: `first + step * (n - 1)` for the n-th NULL row, numbered by one
    window over the rows (the rows to number pass through one task). DeltaProtocolError when
    Spark cannot evaluate a generation expression.
    """
    target = T.StructType.fromJson(json.loads(metadata.schema_string or "{}"))
    types = {f.name: f.dataType for f in target.fields}
    for column in identity_columns(metadata):
        value = F.col(quote_identifier(column.name))
        order = Window.partitionBy(value.isNull()).orderBy(F.monotonically_increasing_id())
        number = F.row_number().over(order).cast("long") - F.lit(1)
        generated = F.lit(column.first_value()) + F.lit(column.step) * number
        data = data.withColumn(column.name, F.coalesce(value, generated))
    checks = []
    names = list(types)
    for name, expression in generated_columns(metadata).items():
        sql_type = types[name].simpleString()
        computed = f"CAST(({expression}) AS {sql_type})"
        try:
            data = data.withColumn(
                name, F.coalesce(F.col(quote_identifier(name)), F.expr(computed))
            )
        except Exception as exc:  # a parse or analysis error of Spark's
            raise DeltaProtocolError(
                f"Table {table}: the generation expression of column {name} ({expression}) "
                f"cannot be evaluated by Spark ({type(exc).__name__}: {str(exc)[:300]}); "
                "nothing was written. Write to it with delta-spark."
            ) from None
        checks.append(
            Constraint(
                f"Generated Column ({name})",
                f"{quote_identifier(name)} <=> {computed}",
                f"Table {table}: generated column {name} ({name} = {expression})",
                (name, *[c for c in referenced_columns(expression, names) if c != name]),
            )
        )
    return data, checks


def identity_high_water_marks(
    metadata: Metadata, adds: Sequence[AddFile], count: Callable[[str], int], table: str
) -> dict[str, int]:
    """Identity column -> its new high-water mark, for the columns whose written values go
    beyond the current one: the extreme (in the step's direction) of the written files'
    stats, else (no stats for the column) from `count(column)`, the number of values handed
    out."""
    marks = {}
    for column in identity_columns(metadata):
        extreme = _stats_extreme(column, adds)
        if extreme is None and any(a.num_records for a in adds):
            generated = count(column.name)
            extreme = column.last_value(generated, table) if generated else None
        if extreme is not None and column.beyond(extreme, column.high_water_mark):
            column.last_value(1, table)  # the first value itself must fit a long
            marks[column.name] = extreme
    return marks


def _stats_extreme(column: IdentityColumn, adds: Sequence[AddFile]) -> int | None:
    """The largest (step > 0) or smallest value of `column` in `adds`' stats; None when a
    file with rows has no such stat."""
    key = "maxValues" if column.step > 0 else "minValues"
    values = []
    for add in adds:
        if not add.num_records:
            continue
        stats = add.parsed_stats
        value = (stats.get(key) or {}).get(column.name)
        if value is None:
            if stats.get("nullCount", {}).get(column.name) == add.num_records:
                continue  # all NULL: nothing handed out here
            return None
        values.append(int(value))
    if not values:
        return None
    return max(values) if column.step > 0 else min(values)
