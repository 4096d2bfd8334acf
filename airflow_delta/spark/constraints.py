"""The rules every written row must keep, as Spark SQL: NOT NULL, `delta.invariants`, CHECK
constraints (`delta.constraints.*`), and the columns the table fills itself: identity columns
(values handed out from the high-water mark) and generated columns (`delta.generationExpression`,
computed with `F.expr` where the row has no value, checked with `<=>` where it has one).

`stored_value` casts an assigned value to its column's type as Delta stores it (a value the type
cannot hold fails the task, whatever `spark.sql.ansi.enabled` says), and
`store_assignment_errors` turns that failure into InvalidArgumentError on the driver.

`fill_generated_columns` turns a DataFrame normalised to the table schema into the rows to
write, the constraints of its generated columns and the last identity values handed out;
`identity_high_water_marks` takes the new high-water marks from the written files' stats (or
those last values), for the commit's metadata.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_delta.engine.errors import DeltaProtocolError, InvalidArgumentError
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
) -> tuple[DataFrame, list[Constraint], dict[str, int]]:
    """`data` (the table's columns) with the NULLs of its identity columns replaced by values
    from their high-water marks (`_hand_out_identity_values`) and those of its generated
    columns computed; the constraints that every row's generated columns equal their
    expressions; and per identity column that handed out values, the last one.

    DeltaProtocolError when Spark cannot evaluate a generation expression.
    """
    target = T.StructType.fromJson(json.loads(metadata.schema_string or "{}"))
    types = {f.name: f.dataType for f in target.fields}
    data, handed_out = _hand_out_identity_values(data, identity_columns(metadata), table)
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
    return data, checks, handed_out


#: Starts the message of a task that met a value its column cannot hold.
_STORE_MARK = "[DELTA_STORE_ASSIGNMENT] "


def stored_value(value: Column, field: T.StructField, command: str) -> Column:
    """`value` (an assignment of `command`, e.g. "UPDATE of <table>") cast to the type of
    column `field`, as delta-spark's ANSI store assignment does whatever
    `spark.sql.ansi.enabled` says: a value the type cannot hold (an int overflow, a decimal
    beyond its precision, a string that is no number) fails the task instead of wrapping or
    becoming NULL; `store_assignment_errors` reports it."""
    cast = value.try_cast(field.dataType)
    problem = F.concat(
        F.lit(
            f"{_STORE_MARK}{command}: column {field.name} "
            f"({field.dataType.simpleString()}) cannot hold the assigned value "
        ),
        F.coalesce(value.try_cast("string"), F.lit("?")),
    )
    return F.when(value.isNotNull() & cast.isNull(), F.raise_error(problem)).otherwise(cast)


@contextlib.contextmanager
def store_assignment_errors(version: int) -> Iterator[None]:
    """Turn the failure of a Spark job that met a value its column cannot hold
    (`stored_value`) into InvalidArgumentError naming the table, the version and the fix."""
    try:
        yield
    except Exception as exc:
        text = str(exc)
        at = text.find(_STORE_MARK)
        if at < 0 or isinstance(exc, InvalidArgumentError):
            raise
        problem = text[at + len(_STORE_MARK) :].splitlines()[0].split(" SQLSTATE:")[0]
        raise InvalidArgumentError(
            f"{problem.rstrip('. ')}; nothing was written (the table stays at version "
            f"{version}). Cast the assignment to the column's type or filter the rows it "
            "cannot hold."
        ) from None


#: The low bits of `monotonically_increasing_id()`: a row's position in its partition (the
#: partition's index is in the bits above).
_ROW_BITS = 33
_POSITION = "__delta_identity_position_"


def _hand_out_identity_values(
    data: DataFrame, columns: Sequence[IdentityColumn], table: str
) -> tuple[DataFrame, dict[str, int]]:
    """`data` with each NULL of the identity `columns` replaced by a value beyond the
    column's high-water mark, and per column that handed out values, the last one.

    The partitions number their NULLs in parallel, each in a range of its own: a NULL's
    position is `monotonically_increasing_id()` evaluated for the NULLs only (the rows around
    them do not count), one job finds each partition's last position, and a NULL's value is
    `first + step * (the positions of the partitions before its own + its position)`: dense.
    The count reads every column, as the write does, so that Spark plans the same shuffles
    for both and adaptive execution splits their output into the same partitions. A
    partition numbering more NULLs when written than when counted (a source that changed in
    between) fails the write rather than handing out a value twice.
    """
    if not columns:
        return data, {}
    nulls = [F.col(quote_identifier(c.name)).isNull() for c in columns]
    positions = [f"{_POSITION}{i}" for i in range(len(columns))]
    numbered = data.select(
        "*",
        *(
            F.when(n, F.monotonically_increasing_id()).alias(p)
            for n, p in zip(nulls, positions, strict=True)
        ),
    )
    every_column = F.struct(*(F.col(quote_identifier(c)) for c in data.columns))
    handed_out = {}
    for column, name in zip(columns, positions, strict=True):
        position = F.col(name)
        part = F.shiftright(position, _ROW_BITS)
        row = position.bitwiseAND((1 << _ROW_BITS) - 1)
        counts = (
            numbered.where(position.isNotNull())
            .groupBy(part.alias("part"))
            # a count Spark cannot answer without reading every column
            .agg(F.max(row) + 1, F.count(F.when(part >= 0, every_column)))
            .collect()
        )
        if not counts:
            continue  # every row brings its own value
        counts.sort(key=lambda r: r[0])
        offsets, total = {}, 0
        for r in counts:  # the positions of the partitions before each one
            offsets[r[0]], total = total, total + r[1]
        handed_out[column.name] = column.last_value(total, table)  # overflow: raises
        value = F.lit(column.first_value()) + F.lit(column.step) * (
            _per_partition(offsets, part) + row
        )
        changed = F.raise_error(
            F.lit(
                f"Table {table}: the rows to write changed while identity column {column.name} "
                "handed out values (is the DataFrame deterministic?); nothing was written. "
                "Write a deterministic DataFrame (for example, cached or saved first)."
            )
        )
        counted = _per_partition({r[0]: r[1] for r in counts}, part)
        value = F.when(position.isNotNull(), F.when(row < counted, value).otherwise(changed))
        numbered = numbered.withColumn(
            column.name, F.coalesce(F.col(quote_identifier(column.name)), value)
        )
    return numbered.drop(*positions), handed_out


def _per_partition(values: dict[int, int], part: Column) -> Column:
    """`values[part]` for each row (NULL for a partition without a value)."""
    size = max(values) + 1
    array = ", ".join(f"{values[i]}L" if i in values else "NULL" for i in range(size))
    return F.try_element_at(F.expr(f"array({array})"), (part + 1).cast("int"))


def identity_high_water_marks(
    metadata: Metadata, adds: Sequence[AddFile], handed_out: Mapping[str, int], table: str
) -> dict[str, int]:
    """Identity column -> its new high-water mark, for the columns whose written values go
    beyond the current one: the extreme (in the step's direction) of the written files'
    stats, else (no stats for the column) the last value `handed_out` (of
    `fill_generated_columns`)."""
    marks = {}
    for column in identity_columns(metadata):
        extreme = _stats_extreme(column, adds)
        if extreme is None and any(a.num_records for a in adds):
            extreme = handed_out.get(column.name)
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
