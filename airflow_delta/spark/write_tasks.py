"""The writing tasks of `write_files`: each `mapInArrow` task checks its rows against the
table's constraints and writes them through the engine's `DataFileWriter`, returning one row
per file written; the driver collects those rows (`collect_files`).

With a change plan (a write to a change-data-feed table that carries CHANGE_TYPE_COLUMN),
each row also goes, by its change type, to the task's second writer, of change data files:
NULL (a copied row) to the data files only, `insert` and `update_postimage` to both,
`delete` and `update_preimage` to the change data files only.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from airflow_delta.engine.commands.data_files import (
    CHANGE_TYPE_COLUMN,
    FILE_ROW_SCHEMA,
    DataFileWriter,
    WritePlan,
    partition_runs,
)
from airflow_delta.engine.errors import ConstraintViolationError, InvalidArgumentError
from airflow_delta.engine.expressions.constraints import violated_by
from airflow_delta.engine.txn.transaction import OptimisticTransaction
from airflow_delta.spark.constraints import Constraint

VIOLATION_COLUMN = "__airflow_delta_violation__"
FILE_ROW_DDL = "path string, partitionValues string, size long, modificationTime long, stats string"
#: The change types whose rows are also written to data files (the others only to change data).
DATA_CHANGE_TYPES = ("insert", "update_postimage")

#: The `path` of the row a writing task returns instead of files when a row breaks a constraint
#: (its `stats` hold the violation as JSON): no task fails, so Spark logs no stack trace and
#: retries nothing.
_VIOLATION_PATH = "<<airflow-delta-violation>>"


def is_data_row() -> Column:
    """Whether a row of a write with CHANGE_TYPE_COLUMN goes to the data files."""
    change = F.col(CHANGE_TYPE_COLUMN)
    return change.isNull() | change.isin(*DATA_CHANGE_TYPES)


def violation_column(checks: Sequence[Constraint]) -> Column:
    """The index of the first constraint a row violates (null when it violates none)."""
    violated = [~F.coalesce(F.expr(c.expression), F.lit(False)) for c in checks]
    case = F.when(violated[0], F.lit(0))
    for i, condition in enumerate(violated[1:], start=1):
        case = case.when(condition, F.lit(i))
    return case


def _violation(
    checks: Sequence[Constraint], batch: pa.RecordBatch, physical_names: Mapping[str, str]
) -> dict[str, str] | None:
    """The first row of `batch` that violates a constraint, as ConstraintViolationError's
    arguments; None when every row holds."""
    flags = batch.column(VIOLATION_COLUMN)
    if flags.null_count == len(flags):
        return None
    row = pc.indices_nonzero(pc.is_valid(flags))[0].as_py()
    check = checks[flags[row].as_py()]
    values = batch.slice(row, 1).to_pylist()[0]
    message = violated_by(check, values, physical_names)
    return {"message": message, "constraint": check.name, "expression": check.expression}


def _split(batch: pa.RecordBatch, changes: bool) -> list[pa.RecordBatch]:
    """The rows of `batch` for each writer: all of them, or (`changes`) the data rows and the
    change rows."""
    if not changes:
        return [batch]
    change = batch.column(CHANGE_TYPE_COLUMN)
    data = pc.or_(pc.is_null(change), pc.is_in(change, pa.array(DATA_CHANGE_TYPES)))
    return [batch.filter(pc.fill_null(data, True)), batch.filter(pc.is_valid(change))]


def write_task(
    plan: WritePlan,
    change_plan: WritePlan | None,
    checks: Sequence[Constraint],
    physical_names: Mapping[str, str],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: check and write a task's rows (and, with `change_plan`, their
    changes); yield its files' rows."""
    context = TaskContext.get()
    task = context.partitionId() if context else 0
    writers = [DataFileWriter(p, task) for p in (plan, change_plan) if p is not None]
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            violation = _violation(checks, batch, physical_names) if checks else None
            if violation is not None:
                for writer in writers:
                    writer.abort()
                row = {"path": _VIOLATION_PATH, "stats": json.dumps(violation)}
                yield pa.RecordBatch.from_pylist([row], schema=FILE_ROW_SCHEMA)
                return
            try:
                for writer, rows in zip(writers, _split(batch, len(writers) > 1), strict=True):
                    if rows.num_rows:
                        for values, table in partition_runs(writer.plan, rows):
                            writer.add(values, table)
            except InvalidArgumentError as exc:  # a partition value Delta cannot hold
                for writer in writers:
                    writer.abort()
                row = {"path": _VIOLATION_PATH, "stats": json.dumps({"argument": str(exc)})}
                yield pa.RecordBatch.from_pylist([row], schema=FILE_ROW_SCHEMA)
                return
        files = [r for writer in writers for r in writer.finish()]
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    if files:
        yield pa.RecordBatch.from_pylist(files, schema=FILE_ROW_SCHEMA)


Task = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]


def run_tasks(data: DataFrame, task: Task) -> DataFrame:
    """`data.mapInArrow(task, FILE_ROW_DDL)` for any column names. PySpark's mapInArrow
    resolves each column by its name (`df[name]`), which fails for a name holding a dot or a
    backtick (`a.b` is field `b` of `a`): the columns then go to the job under positional
    names, and `task` sees its batches under the table's names again."""
    names = data.columns
    if not any("." in n or "`" in n for n in names):
        return data.mapInArrow(task, FILE_ROW_DDL)
    positional = data.toDF(*[f"__airflow_delta_column_{i}" for i in range(len(names))])
    return positional.mapInArrow(functools.partial(_renamed, names, task), FILE_ROW_DDL)


def _renamed(
    names: list[str], task: Task, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    return task(b.rename_columns(names) for b in batches)


def collect_files(data: DataFrame, txn: OptimisticTransaction) -> list[Row]:
    """Run the write job: the rows of the files written. A row that broke a constraint in a
    task becomes ConstraintViolationError naming the table (the files of the other tasks are
    removed: nothing is committed)."""
    rows = data.collect()
    violations = [r for r in rows if r["path"] == _VIOLATION_PATH]
    if not violations:
        return rows
    location = txn.location
    written = [
        location.store.file_path(location.root, r["path"], table=txn.table, version=-1)
        for r in rows
        if r["path"] != _VIOLATION_PATH
    ]
    location.store.delete_many(written)
    found = json.loads(violations[0]["stats"])
    if "argument" in found:
        stays = f"it stays at version {txn.read_version}" if txn.read_version >= 0 else ""
        where = f"nothing was written ({stays or 'the table was not created'})"
        raise InvalidArgumentError(found["argument"].replace("nothing was written", where))
    raise ConstraintViolationError(
        f"Table {txn.table}: nothing written (it stays at version {txn.read_version}): "
        f"{found['message']}\nFix or filter the rows that break it, or change the constraint.",
        found["constraint"],
        found["expression"],
    )
