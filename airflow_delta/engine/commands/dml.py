"""DELETE and UPDATE by predicate, run in this process on pyarrow (delta-spark's DeleteCommand
and UpdateCommand, with its deletion vectors).

Both follow one plan:

1. a transaction (on the table's latest snapshot, or one the caller started) selects the
   candidate files with `filter_files_arrow(predicate)`: partition values exactly, data columns
   by the files' stats (data skipping). It records the predicate and the files it read, so the
   conflict checks see a concurrent write to what the command read;
2. when the predicate uses partition columns only (or there is none), every row of a candidate
   matches: DELETE removes the candidates whole without reading them;
3. otherwise the predicate's columns of each candidate are read (`FileReader`, the rows its
   deletion vector deletes left out) and the predicate evaluated per row by the engine's
   expressions (Spark's semantics: a NULL result does not match);
4. each file holding a matching row (a touched file):
   - every live row matches: the file is removed whole (UPDATE writes its rows updated);
   - on a table with deletion vectors (`delta.enableDeletionVectors=true` and the
     deletionVectors feature) the file stays with a new deletion vector: its old DV's rows and
     the matching ones (`DeletionVectorWriter`: inline when small, else one
     `deletion_vector_<uuid>.bin` per command); UPDATE writes the updated rows to a new file;
   - on other tables the file is rewritten (`write_tasks`, the engine's file writer): DELETE
     keeps the other rows, UPDATE every row, the assignments applied to the matching ones;
5. the commit (operation DELETE or UPDATE) carries delta-spark's metrics. When nothing matches
   nothing is committed (the result is skipped, with the metrics), unless the commit
   properties carry app transactions, which then land in an empty commit.

UPDATE assignments (`set`: column -> SQL) take what the engine's expressions evaluate: column
references, literals (`5`, `'x'`, `NULL`, `DATE '2024-01-01'`, `TIMESTAMP '...'`), conditions
(for boolean columns) and value expressions (arithmetic, CAST, CASE, common functions), cast to
the column's type. A function the engine does not know raises `UnsupportedCommandError` before
anything is written, as does, for UPDATE, a CHECK constraint or invariant it does not evaluate:
run those on Spark. The updated rows are checked against the others
(`expressions/constraints.RowChecks`, ConstraintViolationError naming the row). Tables with
column mapping are read and written by their physical names.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.commands.command_transaction import (
    check_writable,
    command_transaction,
    commit_command,
    dml_operation,
)
from airflow_delta.engine.commands.data_files import (
    ChangeRows,
    with_change_type,
    write_change_tasks,
)
from airflow_delta.engine.commands.data_reader import FileReader, repeat_scalar
from airflow_delta.engine.commands.deletion_vector_files import (
    DeletionVectorWriter,
    deletion_vectors_enabled,
    with_deletion_vector,
)
from airflow_delta.engine.commands.row_ids import RowTracking
from airflow_delta.engine.errors import (
    CorruptLogError,
    IdentityColumnError,
    InvalidArgumentError,
    InvalidPredicateError,
    UnsupportedCommandError,
)
from airflow_delta.engine.expressions.constraints import RowChecks
from airflow_delta.engine.expressions.generated import (
    GeneratedColumn,
    generate_checked,
    parse_generated_columns,
)
from airflow_delta.engine.expressions.parser import parse_value
from airflow_delta.engine.expressions.predicates import PartitionPredicate
from airflow_delta.engine.expressions.tokens import assigned_columns
from airflow_delta.engine.expressions.tree import Expr
from airflow_delta.engine.protocol import columnar
from airflow_delta.engine.protocol.action_types import add_files_from_arrow, stats_num_records
from airflow_delta.engine.protocol.actions import Action, AddFile, Operation
from airflow_delta.engine.protocol.features import (
    change_data_feed_enabled,
)
from airflow_delta.engine.protocol.identity import generated_columns, identity_columns
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.transaction import OptimisticTransaction

log = logging.getLogger(__name__)

RowIndexes = npt.NDArray[np.uint64]

#: Updated rows (of files that keep their other rows under a deletion vector) per writing task.
ROWS_PER_TASK = 1_000_000


# -- the plan ---------------------------------------------------------------------------------


@dataclass
class _Touched:
    """A candidate file holding rows the predicate matches."""

    index: int  # in the candidate files
    rows: int  # rows the data file holds (its deletion vector not applied)
    dv: Mapping[str, Any] | None  # its deletion vector (DV_TYPE row)
    matched: RowIndexes | None  # the live rows that match (None: every live row)

    @property
    def live(self) -> int:
        """Rows its deletion vector keeps."""
        return self.rows - int(self.dv["cardinality"] or 0) if self.dv else self.rows

    @property
    def count(self) -> int:
        """Live rows that match."""
        return self.live if self.matched is None else len(self.matched)

    @property
    def whole(self) -> bool:
        """Whether every live row matches."""
        return self.count == self.live


@dataclass
class _Plan:
    """One DELETE or UPDATE: its transaction, the table's Arrow schema, the row predicate (None:
    every row), the candidate files and how it changes them."""

    operation: Operation
    txn: OptimisticTransaction
    schema: pa.Schema
    predicate: PartitionPredicate | None
    files: pa.StructArray
    reader: FileReader
    dvs: DeletionVectorWriter | None  # None: the table does not take deletion vectors
    started: float
    change_data: bool  # the table has the change data feed enabled: write cdc files
    tracking: RowTracking | None  # row tracking's columns: rewritten rows keep their row ids
    timings: dict[str, int] = field(default_factory=dict)

    def rows_only_by_partition(self) -> bool:
        """Whether the predicate selects whole files (partition columns only, or none)."""
        partitions = set(self.txn.metadata.partition_columns)
        return self.predicate is None or self.predicate.columns <= partitions


@dataclass
class _Changes:
    """What a command does to the touched files."""

    removed: list[AddFile] = field(default_factory=list)  # removed whole or rewritten
    with_dv: list[tuple[AddFile, AddFile]] = field(default_factory=list)  # (old, with new DV)
    tasks: list[Callable[[], pa.Table | ChangeRows]] = field(default_factory=list)  # to write
    copied: int = 0  # unchanged rows written again


def _plan(
    name: str,
    table: str | OptimisticTransaction,
    predicate: str | None,
    storage_options: Mapping[str, str] | None,
    commit_properties: CommitProperties | None,
) -> _Plan | CommitResult:
    """The plan of a DELETE or UPDATE (`name`), or the skipped result of one whose app
    transactions the table already holds."""
    started = time.monotonic()
    txn = command_transaction(name, table, storage_options, commit_properties)
    operation = dml_operation(name, predicate)
    if txn.already_committed():
        return txn.result(None, operation)
    check_writable(name, txn)
    schema = _table_schema(name, txn)
    parsed = txn.parse_file_predicate(predicate)  # once, for the files and for the rows
    rows = None if predicate is None else PartitionPredicate(predicate, parsed.root, parsed.used)
    files = _candidates(txn, parsed)
    use_dvs = deletion_vectors_enabled(txn)
    tracking = RowTracking.of(txn.metadata)
    txn.row_ids_preserved = tracking is not None  # rewritten rows carry their row ids
    return _Plan(
        operation,
        txn,
        schema,
        rows,
        files,
        FileReader(txn, schema),
        DeletionVectorWriter(txn.location) if use_dvs else None,
        started,
        change_data_feed_enabled(txn.protocol, txn.metadata),
        tracking,
    )


def _table_schema(name: str, txn: OptimisticTransaction) -> pa.Schema:
    """The table's columns as Arrow fields; UnsupportedCommandError for a table whose data
    needs more than this reader and writer."""
    metadata = txn.metadata
    problems = []
    if name == "UPDATE":
        try:
            RowChecks.of(metadata)
        except InvalidPredicateError as exc:
            problems.append(f"a CHECK constraint or invariant ({exc})")
    if problems:
        raise UnsupportedCommandError(
            f"{name} of {txn.table}: the in-process {name} does not handle "
            + ", ".join(problems)
            + "; run it on Spark."
        )
    return pa.schema([pa.field(f.name, f.type) for f in metadata.schema])


def _column_types(txn: OptimisticTransaction) -> dict[str, str]:
    """The table's columns of primitive types (those expressions use): name -> Delta type."""
    fields = json.loads(txn.metadata.schema_string or '{"fields": []}')["fields"]
    return {f["name"]: f["type"] for f in fields if isinstance(f["type"], str)}


def _candidates(txn: OptimisticTransaction, predicate: PartitionPredicate) -> pa.StructArray:
    """The active files that may hold rows satisfying `predicate` (parsed by
    `txn.parse_file_predicate`), recorded as read as `txn.filter_files_arrow` records them:
    the parsed predicate serves the rows too (a 2,000-value IN list is not parsed twice)."""
    files = txn.matching_files(predicate)
    txn.read_predicates.append(predicate)
    txn.track_files_read(files)
    return files


# -- finding the touched files ----------------------------------------------------------------


def _scan(plan: _Plan) -> list[_Touched]:
    """The candidate files holding matching rows, with the rows that match."""
    started = time.monotonic()
    files = plan.files
    dvs = pc.struct_field(files, "deletionVector").to_pylist()
    if plan.rows_only_by_partition():
        rows = _physical_rows(plan)
        touched = [_Touched(i, int(rows[i]), dvs[i], None) for i in range(len(files))]
        touched = [t for t in touched if t.live]
    else:
        paths = pc.struct_field(files, "path").to_pylist()
        values = pc.struct_field(files, "partitionValues").to_pylist()
        assert plan.predicate is not None
        predicate = plan.predicate
        columns = sorted(predicate.columns)

        def match(i: int) -> _Touched | None:
            data = plan.reader.read_file(paths[i], values[i], columns)
            found = predicate.evaluate_rows({c: data.column(c) for c in columns}, data.num_rows)
            found &= plan.reader.kept(dvs[i], data.num_rows)
            matched = np.flatnonzero(found).astype(np.uint64)
            return _Touched(i, data.num_rows, dvs[i], matched) if len(matched) else None

        with ThreadPoolExecutor(_threads(len(files))) as pool:
            touched = [t for t in pool.map(match, range(len(files))) if t is not None]
    plan.timings["scanTimeMs"] = _ms_since(started)
    return touched


def _physical_rows(plan: _Plan) -> npt.NDArray[np.int64]:
    """Rows each candidate file holds: its stats' numRecords, else its parquet footer."""
    counts = stats_num_records(pc.struct_field(plan.files, "stats"))
    if not len(counts):
        return np.zeros(0, dtype=np.int64)
    filled = pc.fill_null(counts.cast(pa.int64()), columnar.scalar(-1, pa.int64()))
    rows = np.array(columnar.int_values(filled), dtype=np.int64)  # no pandas shim
    missing = np.flatnonzero(rows < 0)
    if len(missing):
        paths = pc.struct_field(plan.files, "path").to_pylist()
        txn = plan.txn
        store = txn.location.store

        def footer(i: int) -> int:
            path = store.file_path(
                txn.location.root, paths[i], table=txn.table, version=txn.read_version
            )
            try:
                with store.open_input(path) as f:
                    return int(pq.ParquetFile(f).metadata.num_rows)
            except FileNotFoundError:
                raise txn.snapshot.missing_data_file(paths[i]) from None

        with ThreadPoolExecutor(_threads(len(missing))) as pool:
            rows[missing] = list(pool.map(footer, missing.tolist()))
    return rows


# -- changing them ------------------------------------------------------------------------------


def _live_rows(plan: _Plan, file: AddFile, touched: _Touched) -> tuple[pa.Table, npt.NDArray[Any]]:
    """The live rows of a touched file (every column; on a row-tracking table and each row's
    id and commit version), and per live row whether it matches."""
    data = plan.reader.read_file(file.path, file.partition_values, plan.schema.names)
    if data.num_rows != touched.rows:
        raise CorruptLogError(
            f"{plan.operation.name} of {plan.txn.table}: data file {file.path} holds "
            f"{data.num_rows} rows; its stats or an earlier read said {touched.rows}"
        )
    keep = plan.reader.kept(touched.dv, touched.rows)
    matched = keep.copy()
    if touched.matched is not None:
        matched[:] = False
        matched[touched.matched.astype(np.int64)] = True
    live = data.filter(columnar.bool_mask(keep))
    if plan.tracking is not None:
        live = plan.tracking.attach(live, plan.tracking.of_file(plan.reader, file))
    return live, matched[keep]


def _with_deletion_vector(plan: _Plan, file: AddFile, touched: _Touched) -> AddFile:
    """`file` with a new deletion vector: the rows of its old one and the matching rows."""
    assert plan.dvs is not None and touched.matched is not None
    old = plan.reader.deletion_vectors.read(touched.dv) if touched.dv else touched.matched[:0]
    return with_deletion_vector(file, plan.dvs.add(np.union1d(old, touched.matched)))


def _commit(plan: _Plan, changes: _Changes, metrics: dict[str, int]) -> CommitResult:
    """Write the changed rows and the deletion vectors, then commit them with the metrics."""
    started = time.monotonic()
    txn = plan.txn
    not_null = [f.name for f in txn.metadata.schema if not f.nullable]
    if plan.dvs is not None:
        plan.dvs.finish()
    try:
        adds, cdcs = write_change_tasks(txn, changes.tasks, not_null, plan.operation.name)
    except BaseException:
        if plan.dvs is not None:
            plan.dvs.abort()
        raise
    now = int(time.time() * 1000)
    actions: list[Action] = [*adds, *(new for _, new in changes.with_dv), *cdcs]
    actions += [f.remove(now) for f in changes.removed]
    actions += [old.remove(now) for old, _ in changes.with_dv]
    updated_dvs = sum(1 for old, _ in changes.with_dv if old.deletion_vector is not None)
    removed_dvs = sum(1 for f in changes.removed if f.deletion_vector is not None)
    metrics |= {
        "numRemovedFiles": len(changes.removed),
        "numAddedFiles": len(adds),
        "numCopiedRows": changes.copied,
        "numAddedChangeFiles": len(cdcs),
        "numAddedBytes": sum(a.size for a in adds),
        "numRemovedBytes": sum(f.size for f in changes.removed),
        "numDeletionVectorsAdded": len(changes.with_dv),
        "numDeletionVectorsRemoved": removed_dvs + updated_dvs,
        "numDeletionVectorsUpdated": updated_dvs,
        "scanTimeMs": plan.timings.get("scanTimeMs", 0),
        "rewriteTimeMs": _ms_since(started),
        "executionTimeMs": _ms_since(plan.started),
    }
    operation = Operation(plan.operation.name, plan.operation.parameters, metrics)
    return commit_command(txn, actions, operation)


# -- DELETE -----------------------------------------------------------------------------------


def delete(
    table: str | OptimisticTransaction,
    predicate: str | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> CommitResult:
    """Delete the rows of the Delta table `table` (a URI, or a transaction started on it) that
    satisfy `predicate` (SQL over any of its columns; None deletes every row), in this process.

    Files whose rows all match are removed whole; on a table with deletion vectors enabled the
    other touched files get a deletion vector, else they are rewritten without the deleted
    rows. Returns the commit's CommitResult, delta-spark's metrics in `result.metrics`
    (numDeletedRows, numRemovedFiles, numAddedFiles, numCopiedRows, numDeletionVectorsAdded,
    ...); skipped (version None) when no row matched. Raises InvalidPredicateError for a
    predicate the engine does not parse, UnsupportedCommandError for a table it cannot
    rewrite, and the Delta conflict exceptions when a concurrent commit wrote what it read.

    Example: `delete("s3://bucket/events", "day < '2024-01-01' AND user_id = 42")
    .metrics["numDeletedRows"]`.
    """
    plan = _plan("DELETE", table, predicate, storage_options, commit_properties)
    if isinstance(plan, CommitResult):
        return plan
    touched = _scan(plan)
    files = add_files_from_arrow(plan.files.take(_indexes(touched)))
    changes = _Changes()
    # change data files only when a file keeps rows: else readers take the removes as deletes
    # (readers other than delta-spark do not apply a removed file's deletion vector)
    cdf = plan.change_data and any(not t.whole or t.dv for t in touched)
    for file, t in zip(files, touched, strict=True):
        rewrite = not t.whole and plan.dvs is None
        if rewrite or t.whole:
            changes.removed.append(file)
        else:
            changes.with_dv.append((file, _with_deletion_vector(plan, file, t)))
        if rewrite or cdf:
            changes.tasks.append(functools.partial(_rows_left, plan, file, t, rewrite, cdf))
        if rewrite:
            changes.copied += t.live - t.count
    metrics = {"numDeletedRows": sum(t.count for t in touched)}
    return _commit(plan, changes, metrics)


def _rows_left(
    plan: _Plan, file: AddFile, touched: _Touched, rewrite: bool, cdf: bool
) -> pa.Table | ChangeRows:
    """The rows a touched file keeps when it is rewritten; with `cdf`, and the deleted rows
    as changes."""
    data, matched = _live_rows(plan, file, touched)
    left = data.filter(columnar.bool_mask(~matched)) if rewrite else None
    if not cdf:
        assert left is not None
        return left
    return ChangeRows(left, with_change_type(data.filter(columnar.bool_mask(matched)), "delete"))


# -- UPDATE -----------------------------------------------------------------------------------


def update(
    table: str | OptimisticTransaction,
    set: Mapping[str, str],
    predicate: str | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> CommitResult:
    """Set columns of the rows of the Delta table `table` (a URI, or a transaction started on
    it) that satisfy `predicate` (SQL over any of its columns; None updates every row), in this
    process. `set` maps columns to SQL expressions over the row's columns: column references,
    literals, conditions and value expressions (see the module docstring).

    On a table with deletion vectors enabled a touched file keeps its other rows under a
    deletion vector and the updated rows go to a new file; otherwise touched files are
    rewritten whole. Returns the commit's CommitResult, delta-spark's metrics in
    `result.metrics` (numUpdatedRows, numCopiedRows, numRemovedFiles, numAddedFiles,
    numDeletionVectorsAdded, ...); skipped (version None) when no row matched.

    Example: `update(uri, {"status": "'closed'", "closed_on": "DATE '2024-06-30'"},
    "status = 'open' AND opened_on < '2024-01-01'")`.
    """
    if (
        not isinstance(set, Mapping)
        or not set
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in set.items())
    ):
        name = table.table if isinstance(table, OptimisticTransaction) else table
        raise InvalidArgumentError(
            f"UPDATE of {name}: the assignments (set) must map column names to SQL "
            f"expressions, got {set!r}"
        )
    plan = _plan("UPDATE", table, predicate, storage_options, commit_properties)
    if isinstance(plan, CommitResult):
        return plan
    assign = _assigner(plan, set)
    assign(plan.schema.empty_table(), None)  # every assignment fits its column: fail early
    touched = _scan(plan)
    files = add_files_from_arrow(plan.files.take(_indexes(touched)))
    changes = _Changes()
    updated: list[tuple[int, Callable[[], pa.Table | ChangeRows]]] = []  # (rows, task): updated
    for file, t in zip(files, touched, strict=True):
        rewrite = not t.whole and plan.dvs is None
        if rewrite or t.whole:
            changes.removed.append(file)
        else:
            changes.with_dv.append((file, _with_deletion_vector(plan, file, t)))
        task = functools.partial(_rows_updated, plan, file, t, assign, rewrite)
        if rewrite:
            changes.tasks.append(task)  # a file's rows, rewritten by one writer
            changes.copied += t.live - t.count
        else:
            updated.append((t.count, task))
    changes.tasks += _combined(updated)
    metrics = {"numUpdatedRows": sum(t.count for t in touched)}
    return _commit(plan, changes, metrics)


Assign = Callable[[pa.Table, "npt.NDArray[np.bool_] | None"], pa.Table]


def _rows_updated(
    plan: _Plan, file: AddFile, touched: _Touched, assign: Assign, rewrite: bool
) -> pa.Table | ChangeRows:
    """The rows a touched file contributes: all its live rows when it is rewritten (the
    matching ones updated), else only the matching rows, updated; on a change-data-feed
    table with the matching rows before and after as changes."""
    data, matched = _live_rows(plan, file, touched)
    mask = columnar.bool_mask(matched)
    output = assign(data, matched) if rewrite else assign(data.filter(mask), None)
    if plan.tracking is not None:  # updated rows keep their ids, take the new commit version
        before = data if rewrite else data.filter(mask)
        output = plan.tracking.updated(output, before, matched if rewrite else None)
    if not plan.change_data:
        return output
    before = with_change_type(data.filter(mask), "update_preimage")
    after = with_change_type(output.filter(mask) if rewrite else output, "update_postimage")
    return ChangeRows(output, pa.concat_tables([before, after]))


def _check_computed_columns(plan: _Plan, assigned: set[str]) -> list[GeneratedColumn]:
    """Refuse an UPDATE that sets an identity column (Delta refuses it); the generated columns
    the UPDATE sets or that are computed from a column it sets (recomputed and checked as
    delta-spark does), UnsupportedCommandError when the engine does not evaluate one's
    expression."""
    metadata, table = plan.txn.metadata, plan.txn.table
    for column in identity_columns(metadata):
        if column.name in assigned:
            raise IdentityColumnError(
                f"UPDATE of {table}: identity column {column.name} cannot be updated."
            )
    touched = {}
    for name, expression in generated_columns(metadata).items():
        words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expression)}
        if any(c == name or c.lower() in words for c in assigned):
            touched[name] = expression
    try:
        return parse_generated_columns(touched, _column_types(plan.txn))
    except InvalidPredicateError as exc:
        raise UnsupportedCommandError(
            f"UPDATE of {table}: it sets columns a generated column is computed from, and the "
            f"engine does not evaluate its expression ({exc}). Run it on Spark, which "
            "recomputes it."
        ) from None


def _regenerated(
    plan: _Plan, rows: pa.Table, mask: Any, generated: list[GeneratedColumn], assigned: set[str]
) -> pa.Table:
    """`rows` with the generated columns of the updated rows (`mask`) recomputed where the
    UPDATE does not set them, and checked where it does: ConstraintViolationError."""
    for column in generated:
        if column.name not in assigned:
            index = rows.schema.get_field_index(column.name)
            given = rows.column(index)
            nulls = pa.nulls(1, given.type)[0]
            rows = rows.set_column(index, rows.field(index), pc.if_else(mask, nulls, given))
    txn = plan.txn
    context = f"Table {txn.table}: nothing written (it stays at version {txn.read_version}); UPDATE"
    return generate_checked(rows, generated, context, columnar.bool_values(mask))


def _assigner(plan: _Plan, assignments: Mapping[str, str]) -> Assign:
    """A function (rows, mask) -> the rows with the assignments applied where `mask` holds
    (every row without a mask); InvalidArgumentError for an unknown column,
    UnsupportedCommandError for an expression the engine does not evaluate."""
    table = plan.txn.table
    types = _column_types(plan.txn)
    parsed: dict[str, tuple[Expr, list[str]]] = {}
    for column, sql in update_assignments(table, plan.schema.names, assignments).items():
        try:
            expr, used = parse_value(sql, types)
        except InvalidPredicateError as exc:
            raise UnsupportedCommandError(
                f"UPDATE of {table}: the in-process UPDATE does not evaluate {sql!r} ({exc}); "
                "run it on Spark."
            ) from None
        parsed[column] = (expr, list(used))
    generated = _check_computed_columns(plan, set(parsed))
    checks = RowChecks.of(plan.txn.metadata)  # evaluated: `_table_schema` checked them
    context = (
        f"Table {table}: nothing written (it stays at version {plan.txn.read_version}); UPDATE"
    )

    def assign(data: pa.Table, mask: npt.NDArray[np.bool_] | None) -> pa.Table:
        columns = []
        for f in plan.schema:
            column: Any = data.column(f.name)
            if f.name in parsed:
                expr, used = parsed[f.name]
                value = expr.evaluate({c: data.column(c) for c in used})
                value = _stored(value, f, data.num_rows, table)
                if mask is not None:
                    value = pc.if_else(columnar.bool_mask(mask), value, column)
                column = value
            columns.append(column)
        rows = pa.Table.from_arrays(columns, schema=plan.schema)
        if generated:
            every = columnar.bool_mask(np.ones(data.num_rows, dtype=bool))
            selected = every if mask is None else columnar.bool_mask(mask)
            rows = _regenerated(plan, rows, selected, generated, set(parsed))
        if checks:
            checks.check(rows, context, mask)
        return rows

    return assign


def update_assignments(
    table: str, names: Sequence[str], assignments: Mapping[str, str]
) -> dict[str, str]:
    """`assignments` keyed by the table's column `names` (matched without regard to case,
    backquotes taken off); InvalidArgumentError naming an unknown or twice-assigned column."""
    assigned, bad = assigned_columns(names, assignments)
    if bad is not None:
        raise InvalidArgumentError(
            f"UPDATE of {table}: {bad[0]!r} {bad[1]} the table (columns: {', '.join(names)})"
        )
    return assigned


def _stored(value: Any, target: pa.Field, rows: int, table: str) -> Any:
    """An assignment's value (array or scalar) as `rows` values of the column `target`."""
    if isinstance(value, pa.Scalar) and not value.is_valid:
        return pa.nulls(rows, target.type)
    if value.type == target.type:
        return repeat_scalar(value, rows) if isinstance(value, pa.Scalar) else value
    try:
        if isinstance(value, pa.Scalar):  # cast once: a literal that does not fit fails early
            return repeat_scalar(value.cast(target.type, safe=True), rows)
        return pc.cast(value, target.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidArgumentError(
            f"UPDATE of {table}: cannot store {value.type} values in column {target.name} "
            f"({target.type}): {exc}"
        ) from None


def _combined(
    tasks: list[tuple[int, Callable[[], pa.Table | ChangeRows]]],
) -> list[Callable[[], pa.Table | ChangeRows]]:
    """`tasks` (each with the rows it gives) as tasks of about ROWS_PER_TASK rows each: the
    updated rows of many files go to few new files."""
    groups: list[list[Callable[[], pa.Table | ChangeRows]]] = []
    size = ROWS_PER_TASK
    for rows, task in tasks:
        if size + rows > ROWS_PER_TASK and size:
            groups.append([])
            size = 0
        groups[-1].append(task)
        size += rows
    return [functools.partial(_concatenated, group) for group in groups]


def _concatenated(tasks: list[Callable[[], pa.Table | ChangeRows]]) -> pa.Table | ChangeRows:
    outputs = [task() for task in tasks]
    if not any(isinstance(o, ChangeRows) for o in outputs):
        return pa.concat_tables(outputs)
    parts = [o if isinstance(o, ChangeRows) else ChangeRows(o) for o in outputs]
    data = [p.data for p in parts if p.data is not None]
    changes = [p.changes for p in parts if p.changes is not None]
    return ChangeRows(
        pa.concat_tables(data) if data else None,
        pa.concat_tables(changes) if changes else None,
    )


# -- helpers ----------------------------------------------------------------------------------


def _indexes(touched: list[_Touched]) -> pa.Array:
    """The touched files' indexes in the candidates, as an Arrow array for `take`."""
    return columnar.int_array(np.array([t.index for t in touched], dtype=np.int64))


def _threads(tasks: int) -> int:
    return max(1, min(tasks, os.cpu_count() or 1))


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
