"""findTouchedFiles of a MERGE on Spark: the candidate rows joined with the source find the
files holding rows a MATCHED or NOT MATCHED BY SOURCE clause modifies (`spark/merge.py`).

`TouchedFilesSearch` is the part of `DeltaMergeBuilder` that searches; `Found` is what it
found. The search either groups the matches per target row (exact: finds the target rows
several source rows matched) or counts each joined row once (the caller then checks that no
target row matched twice, see `DeltaMergeBuilder._changed_files`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_delta.engine.commands.merge import (
    MATCHED,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    MergeClause,
)
from airflow_delta.engine.errors import DeltaError, MultipleSourceRowMatchingTargetRowInMergeError
from airflow_delta.spark.deletion_vectors import RowIndexes, changed_row_indexes, index_lists
from airflow_delta.spark.read import TableLayout, scan_files, spark_uri

#: The columns the MERGE adds to its rows: a target row's file key and id, the source side's
#: flag, and the index of the clause a joined row takes.
FILE = "__delta_merge_file"
ROW = "__delta_merge_row_id"
SOURCE = "__delta_merge_source_row"
ACTION = "__delta_merge_clause"
#: The clause of a MERGE that deletes every matched row.
DELETE_ALL = MergeClause(MATCHED, "delete", None, {})


@dataclass
class Found:
    """What findTouchedFiles found: the touched files (log paths), the target rows each
    modifying clause changes, whether a touched file holds a row several source rows matched
    and no clause modifies (or an unconditional DELETE deletes), whether an untouched file
    holds a matched row, and per touched file (count, indexes of its modified rows: with
    deletion vectors only)."""

    paths: list[str] = field(default_factory=list)
    per_clause: list[int] = field(default_factory=list)
    duplicates: bool = False
    untouched_matches: bool = False
    modified: dict[str, tuple[int, RowIndexes | None]] = field(default_factory=dict)


class TouchedFilesSearch:
    """The search for touched files of `DeltaMergeBuilder` (which sets these attributes)."""

    source_alias: str
    target_alias: str
    condition: str
    target_uri: str
    #: Whether the MERGE writes deletion vectors (each modified row's index is needed).
    _dvs: bool

    if TYPE_CHECKING:  # the engine's MergeBuilder's

        def _multiple_matches(
            self, rows: int
        ) -> MultipleSourceRowMatchingTargetRowInMergeError: ...

    def _join(self, source: DataFrame, target: DataFrame, how: str) -> DataFrame:
        return source.alias(self.source_alias).join(
            target.alias(self.target_alias), F.expr(self.condition), how
        )

    def _identified_rows(
        self, spark: Any, snapshot: Any, files: pa.StructArray, target: DataFrame
    ) -> tuple[DataFrame, Callable[[Any], str]]:
        """The candidate rows with a file key (`FILE`) and a row id (`ROW`) unique in the
        query, and the function mapping a file key to the file's log path.

        A plain scan (`target`, the candidate files' scan, with no partition values and no
        deletion vectors: no join inside) takes Spark's own file name and a generated id, both
        computed while the file is read; otherwise, and when the MERGE writes deletion vectors
        (which need each row's index in its file), the scan attaches the log path and the row
        index itself.
        """
        plain = (
            not self._dvs
            and not snapshot.metadata.partition_columns
            and (pc.struct_field(files, "deletionVector").null_count == len(files))
        )
        if not plain or not len(files):
            rows = scan_files(spark, snapshot, files, file_column=FILE, row_index_column=ROW)
            return rows, lambda key: key
        layout = TableLayout.of(spark, snapshot)
        by_uri = {
            _file_uri(spark_uri(layout.resolve(path))): path
            for path in pc.struct_field(files, "path").to_pylist()
        }

        def log_path(key: Any) -> str:
            key = _file_uri(key)
            if key not in by_uri:
                raise DeltaError(
                    f"MERGE into {self.target_uri}: rows of an unexpected data file {key!r}"
                )
            return by_uri[key]

        rows = target.select(
            "*",
            F.input_file_name().alias(FILE),
            F.monotonically_increasing_id().alias(ROW),
        )
        return rows, log_path

    def _find_touched_files(
        self,
        source: DataFrame,
        identified: tuple[DataFrame, Callable[[Any], str]],
        clauses: list[MergeClause],
        exact: bool = True,
    ) -> Found:
        """The touched files, the target rows each clause modifies, whether a touched file
        holds a row matched by several source rows that no clause modifies (copied once) or
        that an unconditional DELETE deletes (recorded as one change), whether an untouched
        file holds a row some source row matched, and per touched file its modified rows
        (with deletion vectors, and their indexes in the file).

        Raises MultipleSourceRowMatchingTargetRowInMergeError when a modified target row
        matched several source rows (unless the only MATCHED clause is an unconditional
        DELETE, as in Delta). Not `exact`: the matches are not grouped per target row, so
        every count assumes each target row matched at most one source row (the caller
        checks it).
        """
        target, log_path = identified
        by_source = any(c.kind == NOT_MATCHED_BY_SOURCE for c in clauses)
        joined = self._join(source, target, "right" if by_source else "inner")
        matched = F.col(SOURCE).isNotNull()
        rows = joined.select(FILE, ROW, matched.alias(SOURCE), first_clause(clauses, matched))
        if not exact:  # each joined row taken for one target row
            once = F.col(SOURCE).cast("long").alias("matches")
            modifies = F.col(ACTION).isNotNull().cast("long").alias("modified")
            per_row = rows.select(FILE, ROW, once, modifies, ACTION)
            return self._found(*self._per_file(per_row, len(clauses)), log_path, clauses)
        # only target rows that matched can match several times: group those alone
        per_row = (
            rows.where(F.col(SOURCE))
            .groupBy(FILE, ROW)
            .agg(
                F.count(F.lit(1)).alias("matches"),
                F.count(ACTION).alias("modified"),
                F.max(ACTION).alias(ACTION),
            )
        )
        if by_source:
            unmatched = rows.where(~F.col(SOURCE) & F.col(ACTION).isNotNull()).select(
                FILE,
                ROW,
                F.lit(0).cast("long").alias("matches"),
                F.lit(1).cast("long").alias("modified"),
                ACTION,
            )
            columns = [FILE, ROW, "matches", "modified", ACTION]
            per_row = per_row.select(*columns).unionByName(unmatched)
        return self._found(*self._per_file(per_row, len(clauses)), log_path, clauses)

    def _found(
        self,
        per_file: list[dict[str, Any]],
        indexes: list[RowIndexes | None],
        log_path: Callable[[Any], str],
        clauses: list[MergeClause],
    ) -> Found:
        """What the search found, from the counts per file of `_per_file`."""
        untouched_matches = any(r["modified"] == 0 and r["matched"] > 0 for r in per_file)
        modified = [(r, i) for r, i in zip(per_file, indexes, strict=True) if r["modified"] > 0]
        delete_only = [c for c in clauses if c.kind == MATCHED] == [DELETE_ALL]
        conflicts = sum(r["conflicts"] for r, _ in modified)
        if conflicts and not delete_only:
            raise self._multiple_matches(conflicts)
        return Found(
            [log_path(r[FILE]) for r, _ in modified],
            [sum(r[f"c{i}"] for r, _ in modified) for i in range(len(clauses))],
            any(r["copies"] for r, _ in modified) or conflicts > 0,
            untouched_matches,
            {log_path(r[FILE]): (int(r["modified"]), i) for r, i in modified},
        )

    def _per_file(
        self, per_row: DataFrame, clauses: int
    ) -> tuple[list[dict[str, Any]], list[RowIndexes | None]]:
        """Per file holding a modified or matched target row (of `per_row`: one per target row,
        with its matches, whether modified and its clause): its counts, and with deletion
        vectors the indexes of its modified rows (else None)."""
        several = F.col("matches") > 1
        modified = F.col("modified") > 0
        counts = [
            F.count(F.when(modified, 1)).alias("modified"),
            F.count(F.when(F.col("matches") > 0, 1)).alias("matched"),
            F.count(F.when(several & modified, 1)).alias("conflicts"),
            F.count(F.when(several & ~modified, 1)).alias("copies"),
            *(F.count(F.when(F.col(ACTION) == i, 1)).alias(f"c{i}") for i in range(clauses)),
        ]
        if self._dvs:
            counts.append(changed_row_indexes(modified, ROW).alias("indexes"))
        found = per_row.groupBy(FILE).agg(*counts).toArrow()
        if not self._dvs:
            return found.to_pylist(), [None] * found.num_rows
        indexes = index_lists(found.column("indexes"))
        return found.drop_columns(["indexes"]).to_pylist(), indexes


# -- helpers -----------------------------------------------------------------------------------


def first_clause(
    clauses: list[MergeClause], matched: Column, in_target: Column | None = None
) -> Column:
    """The index of the first clause that applies to a joined row (NULL when none does).

    `matched`: the row has a source side; `in_target` (full outer joins only): it has a target
    side. Without `in_target`, a row without a source side is a target row and vice versa.
    """
    first: Column | None = None
    for i, clause in enumerate(clauses):
        if in_target is None:
            applies = matched if clause.kind == MATCHED else ~matched
        elif clause.kind == MATCHED:
            applies = matched & in_target
        elif clause.kind == NOT_MATCHED:
            applies = matched & ~in_target
        else:
            applies = ~matched & in_target
        if clause.condition is not None:
            applies = applies & F.expr(clause.condition)
        first = F.when(applies, F.lit(i)) if first is None else first.when(applies, F.lit(i))
    assert first is not None, "a MERGE has at least one clause"
    return first.alias(ACTION)


def _file_uri(uri: str) -> str:
    """`uri` with a `file:` URI's empty authority dropped (`file:///x` and `file:/x` alike)."""
    if uri.startswith("file://"):
        rest = uri[len("file:") :].lstrip("/")
        return f"file:/{rest}"
    return uri
