"""The deletion vectors of the Spark MERGE (`spark/merge.py`) on a table with them enabled, as
the in-process MERGE (`engine/commands/merge_in_process.py`) writes them.

findTouchedFiles collects, per touched file, the target rows a MATCHED or NOT MATCHED BY
SOURCE clause modifies (updated rows are written elsewhere, deleted ones go): their count and
their indexes in the file. A file whose every live row is modified is removed whole; every other
one is re-added with a new deletion vector, its old DV's rows and the modified ones
(`DeletionVectorChanges`, through the engine's DV writer), and only the updated and inserted
rows are written. The metrics are the in-process MERGE's: numTargetFilesRemoved counts the
files removed whole, numTargetDeletionVectorsAdded / Removed / Updated the DVs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_delta.engine.protocol.actions import Action
from airflow_delta.spark.deletion_vectors import (
    DeletionVectorChanges,
    RowIndexes,
    live_row_counts,
)
from airflow_delta.spark.read import scan_files

if TYPE_CHECKING:
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

__all__ = ["file_changes", "with_deletion_vectors"]


def file_changes(
    spark: SparkSession,
    txn: OptimisticTransaction,
    touched: pa.StructArray,
    modified: Mapping[str, tuple[int, RowIndexes | None]],
    file_column: str,
) -> DeletionVectorChanges:
    """What the MERGE does to the `touched` files, given per file (by log path) its modified
    rows (count, indexes in the file). Files without numRecords in their stats have their live
    rows counted by a Spark job (with `file_column` as the scan's file column)."""
    live = live_row_counts(touched)
    missing = [path for path, rows in live.items() if rows is None]
    if missing:
        files = touched.filter(pc.is_in(touched.field("path"), pa.array(missing, pa.string())))
        rows = scan_files(spark, txn.snapshot, files, file_column=file_column)
        for row in rows.groupBy(file_column).agg(F.count(F.lit(1)).alias("n")).collect():
            live[row[file_column]] = int(row["n"])
    changed = {
        path: None if count == live.get(path) else indexes
        for path, (count, indexes) in modified.items()
    }
    return DeletionVectorChanges.of(txn, touched, changed)


def with_deletion_vectors(
    actions: list[Action],
    metrics: dict[str, int],
    touched: pa.StructArray,
    dvs: DeletionVectorChanges,
) -> tuple[list[Action], dict[str, int]]:
    """The MERGE's actions (its adds and the removes of every touched file) with the files
    re-added with their new deletion vectors, and its metrics counting them."""
    readded: list[Action] = [new for _, new in dvs.with_dv]
    metrics = metrics | {
        "numTargetFilesRemoved": len(touched) - len(dvs.with_dv),
        **dvs.metrics("numTarget"),
    }
    return [*actions, *readded], metrics
