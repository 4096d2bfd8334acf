"""DELETE and UPDATE by predicate on Spark (delta-spark's DeleteCommand and UpdateCommand,
with its deletion vectors): for the predicates and assignments the in-process commands
(`engine/commands/dml.py`) do not evaluate, such as arithmetic and function calls.

    result = delete(spark, "/data/events", "upper(country) = 'FR' AND day < '2024-01-01'")
    print(result.version, result.metrics["numDeletedRows"])  # a CommitResult

Both run in one transaction of the engine:

1. the conjuncts of the predicate that the engine parses select the candidate files through
   `filter_files_arrow` (partition values, and data skipping by the files' stats). It records
   them as the transaction's read predicate (the predicate implies them, so a concurrent write
   that may hold matching rows conflicts) and the files as read; with no such conjunct the
   whole table is read;
2. one Spark job counts, per candidate file, its live rows and the rows the predicate matches
   (Spark SQL over the table's columns; a NULL result does not match); on a table with
   deletion vectors it also collects the matching rows' indexes in the file (physical
   positions, `_metadata.row_index`). A predicate over partition columns only (or none) that
   the engine parses whole matches every row of the candidates: their stats count the rows,
   and no job runs (unless a file has no stats);
3. the files holding matching rows (touched) change. A file whose every live row matches is
   removed (DELETE does not read it again). Of the others, on a table with deletion vectors
   (`delta.enableDeletionVectors=true` and the deletionVectors feature) each stays with a new
   deletion vector: its old DV's rows and the matching ones (`spark/deletion_vectors.py`, the
   engine's `DeletionVectorWriter`); on other tables each is rewritten: DELETE keeps the other
   rows, UPDATE every row. UPDATE writes the matching rows updated (every row of a rewritten
   file), the assignments applied (cast to the column's type; generated columns recomputed,
   identity columns never set). The rows are written by `write_files` (table constraints,
   generated and identity columns); on a change-data-feed table each deleted row, and each
   updated row before and after, also goes to `_change_data` files in the same tasks
   (`write_change_files`);
4. the commit (operation DELETE or UPDATE) carries delta-spark's metrics under the names the
   in-process commands use. When nothing matches nothing is committed (the result is skipped,
   with the metrics), unless the commit properties carry app transactions, which then land in
   an empty commit.

Existing deletion vectors are applied when reading; the files written here carry none. On a
table with row tracking enabled the rows read carry their row ids and commit versions
(`scan_files(row_tracking=...)`), which `write_files` stores in the new files: copied rows
keep both, updated rows keep their id and take the commit's version, as in process; a file
given a deletion vector keeps its baseRowId. Only DataFrame APIs are used, so a Spark Connect
session works too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_delta.engine.commands.command_transaction import (
    check_writable,
    command_transaction,
    commit_command,
    dml_operation,
)
from airflow_delta.engine.commands.data_files import CHANGE_TYPE_COLUMN
from airflow_delta.engine.commands.deletion_vector_files import deletion_vectors_enabled
from airflow_delta.engine.commands.dml import update_assignments
from airflow_delta.engine.commands.row_ids import RowTracking
from airflow_delta.engine.delta_log import DeltaLog
from airflow_delta.engine.errors import (
    IdentityColumnError,
    InvalidArgumentError,
    InvalidPredicateError,
)
from airflow_delta.engine.expressions.tokens import quote_identifier, split_conjuncts
from airflow_delta.engine.protocol.action_types import add_files_from_arrow, live_num_records
from airflow_delta.engine.protocol.actions import Action, AddCDCFile, AddFile, Operation
from airflow_delta.engine.protocol.features import change_data_feed_enabled
from airflow_delta.engine.protocol.identity import generated_columns, identity_columns
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.transaction import OptimisticTransaction
from airflow_delta.spark.constraints import store_assignment_errors, stored_value
from airflow_delta.spark.deletion_vectors import (
    DeletionVectorChanges,
    RowIndexes,
    changed_row_indexes,
    deletion_vector_metrics,
    index_lists,
)
from airflow_delta.spark.read import scan_files
from airflow_delta.spark.sql_errors import spark_expressions, spark_predicate
from airflow_delta.spark.time_zones import zone_safe
from airflow_delta.spark.write import table_name, write_change_files, write_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["delete", "pruning_predicates", "update"]

log = logging.getLogger(__name__)

_FILE = "__delta_dml_file"
_ROW = "__delta_dml_row_index"
_MATCHED = "__delta_dml_matched"
_BEFORE = "__delta_dml_preimage"

Table = str | DeltaLog | OptimisticTransaction


@dataclass
class _Scan:
    """One DELETE or UPDATE on Spark: its transaction, the candidate files, the row condition
    and, per touched file (by log path), its live rows and the rows that match; on a table with
    deletion vectors (`dvs`), the indexes of the matching rows of the files keeping rows."""

    spark: SparkSession
    operation: Operation
    txn: OptimisticTransaction
    files: pa.StructArray
    matched: Column
    counts: dict[str, tuple[int, int]]
    indexes: dict[str, RowIndexes]
    dvs: bool
    started: float
    scan_ms: int

    def touched(self, whole: bool | None = None) -> pa.StructArray:
        """The touched files; only those whose every live row matches (`whole=True`) or
        those with rows left (`whole=False`)."""
        paths = [p for p, (n, m) in self.counts.items() if whole is None or (n == m) == bool(whole)]
        return self.files.filter(pc.is_in(self.files.field("path"), pa.array(paths, pa.string())))

    def rows(self, files: pa.StructArray) -> DataFrame:
        """The live rows of `files`, with `_MATCHED`: whether the predicate holds; on a table
        with row tracking enabled, with each row's id and commit version (`write_files` keeps
        them)."""
        tracking = RowTracking.of(self.txn.metadata)
        names = tracking.names if tracking is not None else None
        data = scan_files(self.spark, self.txn.snapshot, files, row_tracking=names)
        return data.withColumn(_MATCHED, self.matched)


def pruning_predicates(txn: OptimisticTransaction, predicate: str | None) -> list[str]:
    """The conjuncts of `predicate` that the engine parses (to select candidate files by
    partition values and stats); the others are left to Spark.

    Example: `pruning_predicates(txn, "p = 'a' AND upper(s) = 'X'")` -> `["p = 'a'"]`.
    """
    found = []
    for conjunct in split_conjuncts(predicate) if predicate else []:
        try:
            txn.parse_file_predicate(conjunct)
        except InvalidPredicateError:
            continue
        found.append(conjunct)
    return found


def _start(
    name: str,
    spark: SparkSession,
    table: Table,
    predicate: str | None,
    storage_options: Mapping[str, str] | None,
    commit_properties: CommitProperties | None,
) -> _Scan | CommitResult:
    """The scan of a DELETE or UPDATE (`name`), or the skipped result of one whose app
    transactions the table already holds."""
    started = time.monotonic()
    if isinstance(table, DeltaLog):
        storage_options, table = table.storage_options, table.table_uri
    txn = command_transaction(name, table, storage_options, commit_properties)
    operation = dml_operation(name, predicate)
    if txn.already_committed():
        return txn.result(None, operation)
    check_writable(name, txn)
    pruning = zone_safe(spark, txn, pruning_predicates(txn, predicate))
    files = txn.filter_files_arrow(pruning or None)
    dvs = deletion_vectors_enabled(txn)
    counts = _whole_files(txn, files, predicate, pruning)
    indexes: dict[str, RowIndexes] = {}
    with spark_predicate(predicate, txn.table, txn.read_version):
        matched = F.coalesce(F.expr(predicate), F.lit(False)) if predicate else F.lit(True)
        if counts is None:
            counts, indexes = _matching_rows(spark, txn, files, matched, dvs)
    scan_ms = _ms_since(started)
    return _Scan(spark, operation, txn, files, matched, counts, indexes, dvs, started, scan_ms)


def _whole_files(
    txn: OptimisticTransaction, files: pa.StructArray, predicate: str | None, pruning: list[str]
) -> dict[str, tuple[int, int]] | None:
    """Per candidate file with live rows, (live rows, live rows) when the predicate matches
    every row of the candidates (None, or partition columns only, parsed whole by the engine)
    and the stats count every file's rows; else None."""
    if predicate is not None:
        if len(pruning) != len(split_conjuncts(predicate)):
            return None
        partitions = {c.lower() for c in txn.metadata.partition_columns}
        if not {c.lower() for c in txn.parse_file_predicate(pruning).columns} <= partitions:
            return None
    records = live_num_records(files)
    if records.null_count:
        return None
    live = records.to_pylist()
    paths = files.field("path").to_pylist()
    return {path: (n, n) for path, n in zip(paths, live, strict=True) if n > 0}


def _matching_rows(
    spark: SparkSession,
    txn: OptimisticTransaction,
    files: pa.StructArray,
    matched: Column,
    with_indexes: bool,
) -> tuple[dict[str, tuple[int, int]], dict[str, RowIndexes]]:
    """Per candidate file holding matching rows, (live rows, matching rows), and with
    `with_indexes`, per one of them keeping rows, the matching rows' indexes in the file: one
    Spark job."""
    if not len(files):
        return {}, {}
    keys = {"row_index_column": _ROW} if with_indexes else {}
    rows = scan_files(spark, txn.snapshot, files, file_id_column=_FILE, **keys)
    counted = [F.count(F.lit(1)).alias("rows"), F.count(F.when(matched, 1)).alias("matched")]
    if with_indexes:
        counted.append(changed_row_indexes(matched, _ROW).alias("indexes"))
    per_file = rows.groupBy(_FILE).agg(*counted).where(F.col("matched") > 0)
    if with_indexes:  # not those of files removed whole
        partial = F.col("matched") < F.col("rows")
        per_file = per_file.withColumn("indexes", F.when(partial, F.col("indexes")))
    found = per_file.toArrow()
    candidates = files.field("path").to_pylist()
    paths = [candidates[i] for i in found.column(_FILE).to_pylist()]
    counts = zip(found.column("rows").to_pylist(), found.column("matched").to_pylist(), strict=True)
    by_path = {p: (int(n), int(m)) for p, (n, m) in zip(paths, counts, strict=True)}
    if not with_indexes:
        return by_path, {}
    lists = zip(paths, index_lists(found.column("indexes")), strict=True)
    return by_path, {p: rows for p, rows in lists if rows is not None}


def _commit(
    scan: _Scan,
    written: tuple[list[AddFile], list[AddCDCFile]],
    dvs: DeletionVectorChanges | None,
    metrics: dict[str, int],
) -> CommitResult:
    """Commit the written files, the touched files' removes (and, with `dvs`, those re-added
    with deletion vectors) and the metrics."""
    (adds, cdcs), txn, rewrite_started = written, scan.txn, time.monotonic()
    now = int(time.time() * 1000)
    actions: list[Action] = [*adds, *cdcs]
    if dvs is None:
        removed = add_files_from_arrow(scan.touched())
        actions += [f.remove(now) for f in removed]
        metrics |= deletion_vector_metrics(removed, [])
    else:
        removed = dvs.removed
        actions += dvs.actions(now)
        metrics |= dvs.metrics()
    metrics |= {
        "numRemovedFiles": len(removed),
        "numAddedFiles": len(adds),
        "numAddedChangeFiles": len(cdcs),
        "numAddedBytes": sum(a.size for a in adds),
        "numRemovedBytes": sum(f.size for f in removed),
        "scanTimeMs": scan.scan_ms,
        "rewriteTimeMs": _ms_since(rewrite_started) + metrics.pop("rewriteTimeMs", 0),
        "executionTimeMs": _ms_since(scan.started),
    }
    operation = Operation(scan.operation.name, scan.operation.parameters, metrics)
    return commit_command(txn, actions, operation, " on Spark")


def _write(
    scan: _Scan, output: DataFrame | None, changes: bool, dvs: DeletionVectorChanges | None
) -> tuple[list[AddFile], list[AddCDCFile]]:
    """Write `output` (None: nothing) to data files, or with `changes` to data and change
    data files by CHANGE_TYPE_COLUMN; with `dvs`, their deletion vectors first."""

    def write() -> tuple[list[AddFile], list[AddCDCFile]]:
        if output is None:
            return [], []
        if changes:
            return write_change_files(scan.txn, output)
        return write_files(scan.txn, output), []

    with store_assignment_errors(scan.txn.read_version):
        return write() if dvs is None else dvs.write(write)


def _deletion_vectors(scan: _Scan) -> DeletionVectorChanges | None:
    """On a table with deletion vectors, what happens to the touched files: those keeping rows
    get a new DV (their matching rows deleted), the others are removed; else None."""
    if not scan.dvs:
        return None
    return DeletionVectorChanges.of(scan.txn, scan.touched(), scan.indexes)


def _copied(scan: _Scan) -> int:
    """The live rows written again: the unchanged rows of the rewritten files (none with
    deletion vectors)."""
    return 0 if scan.dvs else sum(n - m for n, m in scan.counts.values())


# -- DELETE -----------------------------------------------------------------------------------


def delete(
    spark: SparkSession,
    table: Table,
    predicate: str | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> CommitResult:
    """Delete the rows of the Delta table `table` (a URI, a DeltaLog, or a transaction started
    on it) that satisfy `predicate` (Spark SQL over its columns; None deletes every row), on
    Spark.

    Files whose rows all match are removed whole; on a table with deletion vectors enabled the
    other touched files get a deletion vector (no data file is written), else they are
    rewritten without the deleted rows. Returns the commit's CommitResult, delta-spark's
    metrics in `result.metrics` (numDeletedRows, numRemovedFiles, numAddedFiles, numCopiedRows,
    numAddedChangeFiles, numDeletionVectorsAdded, ...); skipped (version None) when no row
    matched.

    Example: `delete(spark, "s3://bucket/events", "lower(email) LIKE '%@example.com'")`.
    """
    scan = _start("DELETE", spark, table, predicate, storage_options, commit_properties)
    if isinstance(scan, CommitResult):
        return scan
    started = time.monotonic()
    dvs = _deletion_vectors(scan)
    partial = scan.touched(whole=False)
    touched = scan.touched()
    # change data files only when a file keeps rows (else readers take the removes as deletes;
    # readers other than delta-spark do not apply a removed file's deletion vector)
    with_dvs = pc.struct_field(touched, "deletionVector").null_count < len(touched)
    changes = change_data_feed_enabled(scan.txn.protocol, scan.txn.metadata) and bool(
        len(partial) or with_dvs
    )
    output = None
    if changes:
        rows = scan.rows(touched)
        change = F.when(F.col(_MATCHED), F.lit("delete")).alias(CHANGE_TYPE_COLUMN)
        output = rows.select(*_table_columns(rows), change)
        if dvs is not None:  # the other rows stay in place
            rows = rows.where(F.col(_MATCHED))
        output = rows.select(*_table_columns(rows), change)
    elif len(partial) and dvs is None:
        rows = scan.rows(partial)
        output = rows.where(~F.col(_MATCHED)).select(*_table_columns(rows))
    written = _write(scan, output, changes, dvs)
    metrics = {
        "numDeletedRows": sum(m for _, m in scan.counts.values()),
        "numCopiedRows": _copied(scan),
        "rewriteTimeMs": _ms_since(started),
    }
    return _commit(scan, written, dvs, metrics)


def _table_columns(rows: DataFrame) -> list[Column]:
    """The table's columns of `rows` (the internal ones left out)."""
    return [F.col(quote_identifier(c)) for c in rows.columns if c != _MATCHED]


# -- UPDATE -----------------------------------------------------------------------------------


def update(
    spark: SparkSession,
    table: Table,
    set: Mapping[str, str],
    predicate: str | None = None,
    *,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> CommitResult:
    """Set columns of the rows of the Delta table `table` (a URI, a DeltaLog, or a
    transaction started on it) that satisfy `predicate` (Spark SQL over its columns; None
    updates every row), on Spark. `set` maps columns to Spark SQL expressions over the row's
    columns (any: arithmetic, function calls, CASE, ...), cast to the column's type.

    On a table with deletion vectors enabled a touched file keeps its other rows under a
    deletion vector and only the updated rows are written; otherwise every touched file is
    rewritten. Returns the commit's CommitResult, delta-spark's metrics in `result.metrics`
    (numUpdatedRows, numCopiedRows, numRemovedFiles, numAddedFiles, numAddedChangeFiles,
    numDeletionVectorsAdded, ...); skipped (version None) when no row matched. Raises
    InvalidArgumentError (a ValueError) for an unknown column and IdentityColumnError for an
    identity column in `set`.

    Example: `update(spark, uri, {"amount": "amount * 2", "name": "upper(name)"},
    "day = '2024-06-30'")`.
    """
    if not set or not all(isinstance(k, str) and isinstance(v, str) for k, v in set.items()):
        raise InvalidArgumentError(
            f"UPDATE of {table_name(table)}: the assignments (set) must map column names to SQL "
            f"expressions, got {set!r}"
        )
    scan = _start("UPDATE", spark, table, predicate, storage_options, commit_properties)
    if isinstance(scan, CommitResult):
        return scan
    started = time.monotonic()
    txn = scan.txn
    assigned = _assignments(txn, set)
    changes = change_data_feed_enabled(txn.protocol, txn.metadata)
    touched = scan.touched()
    dvs = _deletion_vectors(scan)
    output = None
    if len(touched):
        rows = scan.rows(touched)
        if dvs is not None:  # the other rows stay in place
            rows = rows.where(F.col(_MATCHED))
        fix = "Fix the assignments (set): Spark SQL over the table's columns."
        with spark_expressions(f"UPDATE of {txn.table}", txn.read_version, fix):
            output = _updated_rows(rows, txn, assigned, changes)
    written = _write(scan, output, changes and output is not None, dvs)
    metrics = {
        "numUpdatedRows": sum(m for _, m in scan.counts.values()),
        "numCopiedRows": _copied(scan),
        "rewriteTimeMs": _ms_since(started),
    }
    return _commit(scan, written, dvs, metrics)


def _assignments(txn: OptimisticTransaction, set: Mapping[str, str]) -> dict[str, str]:
    """`set` by the table's column names (matched without regard to case, backquotes taken
    off); InvalidArgumentError for an unknown or twice assigned column, IdentityColumnError
    for an identity column."""
    assigned = update_assignments(txn.table, [f.name for f in txn.metadata.schema], set)
    for identity in identity_columns(txn.metadata):
        if identity.name in assigned:
            raise IdentityColumnError(
                f"UPDATE of {txn.table}: identity column {identity.name} cannot be updated; "
                "leave it out of the assignments."
            )
    return assigned


def _updated_rows(
    rows: DataFrame, txn: OptimisticTransaction, assigned: Mapping[str, str], changes: bool
) -> DataFrame:
    """The rows of the touched files, the assignments applied to the matching ones; generated
    columns of the updated rows NULL (`write_files` computes them), and so is their row
    commit version on a table with row tracking (they keep their row ids). With `changes`, with
    CHANGE_TYPE_COLUMN: NULL for a copied row, `update_postimage` for an updated one, and an
    `update_preimage` row (the row as it was) besides each."""
    generated = set(generated_columns(txn.metadata)) - set(assigned)
    tracking = RowTracking.of(txn.metadata)
    if tracking is not None:  # the new commit's version (a NULL takes the file's default)
        generated.add(tracking.commit_version)
    updating = F.col(_MATCHED)
    extra: list[Column] = []
    if changes:
        twice = F.array(F.lit(True), F.lit(False))
        before = F.when(F.col(_MATCHED), twice).otherwise(F.array(F.lit(False)))
        rows = rows.withColumn(_BEFORE, F.explode(before))
        updating = F.col(_MATCHED) & ~F.col(_BEFORE)
        change = F.when(F.col(_BEFORE), F.lit("update_preimage")).when(
            F.col(_MATCHED), F.lit("update_postimage")
        )
        extra.append(change.alias(CHANGE_TYPE_COLUMN))
    columns = []
    for field in rows.schema.fields:
        if field.name in (_MATCHED, _BEFORE):
            continue
        current = F.col(quote_identifier(field.name))
        if field.name in assigned:
            value = stored_value(F.expr(assigned[field.name]), field, f"UPDATE of {txn.table}")
            current = F.when(updating, value).otherwise(current)
        elif field.name in generated:
            current = F.when(updating, F.lit(None).cast(field.dataType)).otherwise(current)
        columns.append(current.alias(field.name))
    return rows.select(*columns, *extra)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
