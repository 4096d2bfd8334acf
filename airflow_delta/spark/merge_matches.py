"""What the Spark MERGE's findTouchedFiles (`spark/merge.py`) learns from the matches of its
source with the candidate rows: per file, its modified and matched rows, the rows matched by
several source rows and the rows each clause modifies, in one Spark job (with deletion
vectors, also the modified rows' indexes in their files).

`merge.py` joins the source with the candidate rows, each carrying its file (`FILE`) and an id
unique in the query (`ROW`), and marks each joined row with whether it has a source side
(`SOURCE`) and the first modifying clause that applies to it (`CLAUSE`, NULL for none).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.spark.deletion_vectors import RowIndexes, changed_row_indexes, index_lists
from airflow_delta.spark.read import TableLayout, spark_uri

__all__ = [
    "CLAUSE",
    "FILE",
    "RESERVED",
    "ROW",
    "SOURCE",
    "Found",
    "check_reserved_names",
    "count_matches",
    "file_hashes",
]

#: Starts the name of every column the Spark MERGE adds to its rows.
RESERVED = "__delta_merge_"
FILE = f"{RESERVED}file"
ROW = f"{RESERVED}row_id"
SOURCE = f"{RESERVED}source_row"
CLAUSE = f"{RESERVED}clause"


def check_reserved_names(table: str, columns: list[str], side: str) -> None:
    """InvalidArgumentError for a column of the MERGE's `side` ("source", "table") whose name
    starts like the columns the Spark MERGE adds (Spark would find two of that name)."""
    clashing = [c for c in columns if c.lower().startswith(RESERVED)]
    if clashing:
        raise InvalidArgumentError(
            f"MERGE into {table}: the {side}'s columns {clashing} start with {RESERVED!r}, "
            "which the MERGE on Spark keeps for its own columns; rename them"
        )


@dataclass
class Found:
    """What findTouchedFiles found.

    - `paths`: the touched files (log paths); `per_clause`: the target rows each modifying
      clause changes; `modified`: per touched file, its modified rows' count and, with
      deletion vectors, their indexes;
    - `duplicates`: a touched file holds a row several source rows matched; `conflicts`: how
      many such rows a clause modifies;
    - `untouched_matches`: an untouched file holds a matched row;
    - `matches`: when the search kept them, its cached matches, with the values of the
      source's join columns `keys` (`release()` drops them); `pairs`: how many (target row,
      source row) matches the touched and matched files hold; `unmatched`: when the search
      knows them, a filter of the source rows (under its alias) that matched nothing.
    """

    paths: list[str] = field(default_factory=list)
    per_clause: list[int] = field(default_factory=list)
    duplicates: bool = False
    untouched_matches: bool = False
    modified: dict[str, tuple[int, RowIndexes | None]] = field(default_factory=dict)
    conflicts: int = 0
    matches: DataFrame | None = None
    keys: list[str] = field(default_factory=list)
    pairs: int = 0
    unmatched: Column | None = None

    def release(self) -> None:
        """Drop the cached matches (if any)."""
        if self.matches is not None:
            self.matches.unpersist()


def count_matches(
    rows: DataFrame,
    clauses: int,
    unmatched_rows: bool,
    indexes: bool,
    log_path: Callable[[Any], str],
    *,
    single: bool = False,
) -> Found:
    """What the joined `rows` show (one per match of a source and a target row, and with
    `unmatched_rows` one per target row no source row matched, which a NOT MATCHED BY SOURCE
    clause may modify), for `clauses` modifying clauses; `indexes`: with the modified rows'
    indexes (deletion vectors). `log_path` maps a FILE value to the file's log path. `single`:
    the caller knows no target row matches two source rows (the source's join keys are
    unique), so the matches need no grouping by target row (a shuffle of them all)."""
    matched = rows.where(F.col(SOURCE))
    if single:
        per_row = matched.select(
            FILE,
            ROW,
            F.lit(1).cast("long").alias("matches"),
            F.col(CLAUSE).isNotNull().cast("long").alias("modified"),
            CLAUSE,
        )
    else:  # only target rows that matched can match several times: group those alone
        per_row = matched.groupBy(FILE, ROW).agg(
            F.count(F.lit(1)).alias("matches"),
            F.count(CLAUSE).alias("modified"),
            F.max(CLAUSE).alias(CLAUSE),
        )
    if unmatched_rows:
        unmatched = rows.where(~F.col(SOURCE) & F.col(CLAUSE).isNotNull()).select(
            FILE,
            ROW,
            F.lit(0).cast("long").alias("matches"),
            F.lit(1).cast("long").alias("modified"),
            CLAUSE,
        )
        columns = [FILE, ROW, "matches", "modified", CLAUSE]
        per_row = per_row.select(*columns).unionByName(unmatched)
    per_file, row_indexes = _per_file(per_row, clauses, indexes)
    modified = [(r, i) for r, i in zip(per_file, row_indexes, strict=True) if r["modified"] > 0]
    conflicts = sum(r["conflicts"] for r, _ in modified)
    return Found(
        [log_path(r[FILE]) for r, _ in modified],
        [sum(r[f"c{i}"] for r, _ in modified) for i in range(clauses)],
        any(r["copies"] for r, _ in modified) or conflicts > 0,
        any(r["modified"] == 0 and r["matched"] > 0 for r in per_file),
        {log_path(r[FILE]): (int(r["modified"]), i) for r, i in modified},
        conflicts,
        pairs=sum(int(r["pairs"] or 0) for r in per_file),
    )


def _per_file(
    per_row: DataFrame, clauses: int, indexes: bool
) -> tuple[list[dict[str, Any]], list[RowIndexes | None]]:
    """Per file holding a modified or matched target row (of `per_row`: one per target row,
    with its matches, whether modified and its clause): its counts, and with `indexes` the
    indexes of its modified rows (else None)."""
    several = F.col("matches") > 1
    modified = F.col("modified") > 0
    counts = [
        F.count(F.when(modified, 1)).alias("modified"),
        F.count(F.when(F.col("matches") > 0, 1)).alias("matched"),
        F.count(F.when(several & modified, 1)).alias("conflicts"),
        F.count(F.when(several & ~modified, 1)).alias("copies"),
        F.sum("matches").alias("pairs"),
        *(F.count(F.when(F.col(CLAUSE) == i, 1)).alias(f"c{i}") for i in range(clauses)),
    ]
    if indexes:
        counts.append(changed_row_indexes(modified, ROW).alias("indexes"))
    found = per_row.groupBy(FILE).agg(*counts).toArrow()
    if not indexes:
        return found.to_pylist(), [None] * found.num_rows
    return found.drop_columns(["indexes"]).to_pylist(), index_lists(found.column("indexes"))


def file_hashes(spark: Any, snapshot: Any, paths: list[str]) -> dict[int, str] | None:
    """Spark's `xxhash64` of each name `input_file_name()` may give the files at `paths`
    (a local file shows as `file:///x` or `file:/x`) -> the log path; None when two files
    share a hash. Evaluated on the driver (a local relation's projection: no Spark job)."""
    layout = TableLayout.of(spark, snapshot)
    names, owners = [], []
    for path in paths:
        uri = _file_uri(spark_uri(layout.resolve(path)))
        forms = [uri, "file://" + uri[len("file:") :]] if uri.startswith("file:/") else [uri]
        names.extend(forms)
        owners.extend([path] * len(forms))
    hashed = spark.createDataFrame(pa.table({"name": names})).select(F.xxhash64("name"))
    by_hash: dict[int, str] = {}
    for (key,), path in zip(hashed.collect(), owners, strict=True):
        if by_hash.setdefault(key, path) != path:
            return None
    return by_hash


def _file_uri(uri: str) -> str:
    """`uri` with a `file:` URI's empty authority dropped (`file:///x` and `file:/x` alike)."""
    if uri.startswith("file://"):
        rest = uri[len("file:") :].lstrip("/")
        return f"file:/{rest}"
    return uri
