"""What the Spark MERGE (`spark/merge.py`) learns from its source DataFrame, in as few Spark jobs
as it can, and when a small source is collected to run in process.

`SourceFacts` answers the engine's pruning questions (`MergeBuilder._source_values`) and the
numSourceRows metric with one Spark job over every source column the condition equates with a
target column. A deterministic source Spark broadcasts (small) whose such columns all compare
in Arrow as in Spark (`_EXACT_TYPES`) has those columns collected to the driver: the row count,
each column's bounds and distinct values, and whether the source's join keys are unique
(`unique`: then no target row matches two source rows, and findTouchedFiles need not group the
matches by target row) come from them, exactly. Otherwise the job is an aggregate: the row
count and, per column, its least and greatest values and an estimate of its distinct values;
for a column equated with a target partition column, also its distinct values (a partition per
value: few). A data column whose estimate is well above MAX_PRUNING_VALUES prunes by its bounds
with no other job; otherwise its distinct values are listed (a second job). The row count is
that job's, when one ran.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.types import StructField

from airflow_delta.engine.commands.merge import MAX_PRUNING_VALUES
from airflow_delta.engine.expressions.tokens import quote_identifier
from airflow_delta.spark.session import is_connect, runs_locally
from airflow_delta.spark.write import NUMERIC_ORDER

__all__ = [
    "DEFAULT_IN_PROCESS_SOURCE_BYTES",
    "IN_PROCESS_SOURCE_BYTES",
    "SourceFacts",
    "broadcast_by_spark",
    "collect_small_source",
    "spark_source",
]

#: Relative standard deviation of the distinct-value estimate (HyperLogLog++): coarse, since a
#: finer sketch costs more than the job (B6s: 0.02 doubles the job's time, 0.1 adds ~0.1 s).
_ESTIMATE_RSD = 0.1
#: An estimate above this is more than MAX_PRUNING_VALUES distinct values beyond doubt (ten
#: standard deviations at `_ESTIMATE_RSD`); at or below it the values are listed.
_MANY_ESTIMATE = MAX_PRUNING_VALUES * 2
#: Column types whose values Arrow orders, compares and tells apart as Spark does (no NaN or
#: signed zero, no time zone; strings of Spark's binary collation only, which `field` ensures).
_EXACT_TYPES = (
    T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.DecimalType, T.BooleanType,
    T.StringType, T.BinaryType, T.DateType,
)  # fmt: skip


@dataclass(frozen=True)
class _Summary:
    """One aggregate job's answer for a source column (`values`: its distinct non-NULL values,
    when listed in that job)."""

    rows: int
    least: Any
    greatest: Any
    estimated_distinct: int
    values: list[Any] | None = None


class SourceFacts:
    """The source DataFrame's row count and its join columns' values, each computed once.

    `columns` maps each (lower-case source column, Delta type of the target column it is equated
    with) the pruning may ask about to whether to list its distinct values in the same job (a
    partition column's). Example: `facts = SourceFacts(df, {("id", "long"): False})`;
    `facts.many("id", "long")`, `facts.bounds("id", "long")`, then `facts.rows()` (no further
    job: one aggregate answered them all).
    """

    def __init__(self, df: DataFrame, columns: dict[tuple[str, str], bool] | None = None) -> None:
        self.df = df
        self._columns = dict(columns or {})
        self._summaries: dict[tuple[str, str], _Summary | None] = {}
        #: The summarized columns' values, when collected (by lower-case name).
        self._collected: dict[str, pa.ChunkedArray] = {}

    def field(self, name: str, delta_type: str) -> StructField | None:
        """The source column `name` (lower case) when it is one column of exactly `delta_type`
        (else a cast would decide what matches: no pruning by it)."""
        found = [f for f in self.df.schema.fields if f.name.lower() == name]
        if len(found) != 1 or found[0].dataType.jsonValue() != delta_type:
            return None
        return found[0]

    def _summary(self, name: str, delta_type: str) -> _Summary | None:
        key = (name, delta_type)
        if key not in self._summaries:
            self._summarize({key: self._columns.get(key, False)} | self._columns)
        return self._summaries.get(key)

    def _summarize(self, columns: dict[tuple[str, str], bool]) -> None:
        """One job over the source for every column of `columns` not yet summarized (None for
        those not prunable): their values collected when the source is small and they are all
        of `_EXACT_TYPES`, else an aggregate."""
        fields: dict[tuple[str, str], StructField] = {}
        for key in columns:
            if key not in self._summaries:
                self._summaries[key] = None
                found = self.field(*key)
                if found is not None:
                    fields[key] = found
        if not fields:
            return
        exact = all(isinstance(f.dataType, _EXACT_TYPES) for f in fields.values())
        if exact and broadcast_by_spark(self.df) and _deterministic(self.df):
            self._collect(fields)
            return
        aggregates = [F.count(F.lit(1))]
        for key, found in fields.items():
            column = F.col(quote_identifier(found.name))
            aggregates += [F.min(column), F.max(column)]
            aggregates.append(F.approx_count_distinct(column, _ESTIMATE_RSD))
            aggregates.append(F.collect_set(column) if columns[key] else F.lit(None))
        row = self.df.agg(*aggregates).first()
        assert row is not None, "a global aggregate has one row"
        for i, key in enumerate(fields):
            least, greatest, estimate, values = row[1 + 4 * i : 5 + 4 * i]
            self._summaries[key] = _Summary(int(row[0]), least, greatest, int(estimate), values)

    def _collect(self, fields: dict[tuple[str, str], StructField]) -> None:
        """The summaries of `fields` (a small source's) from their values, collected in one
        job; the values are kept for `unique`."""
        names = list(dict.fromkeys(f.name for f in fields.values()))
        table = self.df.select(*(F.col(quote_identifier(n)) for n in names)).toArrow()
        for name, column in zip(names, table.columns, strict=True):
            self._collected[name.lower()] = column
        for key, found in fields.items():
            column = self._collected[found.name.lower()]
            bounds = pc.min_max(column)
            distinct = pc.unique(column).drop_null()
            self._summaries[key] = _Summary(
                table.num_rows,
                bounds["min"].as_py(),
                bounds["max"].as_py(),
                len(distinct),
                distinct[: MAX_PRUNING_VALUES + 1].to_pylist(),
            )

    def unique(self, names: Sequence[str]) -> bool:
        """Whether no two source rows hold equal, non-NULL values in the columns `names`
        (a MERGE condition's source sides of `t.<column> = s.<column>` equalities) that were
        collected: then no target row matches two source rows. False when it is not known (none
        of them collected: each collected column is of exactly its target column's type, so a
        match needs equal values)."""
        self._summarize(self._columns)
        columns = {n.lower(): self._collected.get(n.lower()) for n in names}
        known = {n: c for n, c in columns.items() if c is not None}
        if not known:
            return False
        keys = pa.table(known).drop_null()
        if keys.num_columns == 1:
            return bool(pc.count_distinct(keys.column(0)).as_py() == keys.num_rows)
        return keys.group_by(keys.column_names).aggregate([]).num_rows == keys.num_rows

    def collected(self, names: Sequence[str]) -> pa.Table | None:
        """The source's columns `names` (lower case), as collected for the summaries (None
        unless all were)."""
        self._summarize(self._columns)
        columns = {n: self._collected.get(n) for n in names}
        if any(c is None for c in columns.values()):
            return None
        return pa.table(columns)

    def many(self, name: str, delta_type: str) -> bool:
        """Whether the column surely has more than MAX_PRUNING_VALUES distinct values."""
        summary = self._summary(name, delta_type)
        if summary is not None and summary.values is not None:
            return len(summary.values) > MAX_PRUNING_VALUES
        return summary is not None and summary.estimated_distinct > _MANY_ESTIMATE

    def values(self, name: str, delta_type: str) -> list[Any] | None:
        """Up to MAX_PRUNING_VALUES + 1 distinct values of the column (None: not prunable):
        those summarized, else a job of their own."""
        summary = self._summaries.get((name, delta_type))
        if summary is not None and summary.values is not None:
            return summary.values[: MAX_PRUNING_VALUES + 1]
        found = self.field(name, delta_type)
        if found is None:
            return None
        rows = (
            self.df.select(F.col(quote_identifier(found.name)))
            .distinct()
            .limit(MAX_PRUNING_VALUES + 1)
            .collect()
        )
        return [r[0] for r in rows]

    def bounds(self, name: str, delta_type: str) -> tuple[Any, Any] | None:
        """The column's least and greatest non-NULL values (None: it has none)."""
        summary = self._summary(name, delta_type)
        if summary is None or summary.least is None:
            return None
        return summary.least, summary.greatest

    def rows(self) -> int:
        """The source's row count: a summary's, else a `count()` job."""
        self._summarize(self._columns)
        for summary in self._summaries.values():
            if summary is not None:
                return summary.rows
        return self.df.count()


# -- a small source, collected to run in process -------------------------------------------------

#: Source column types whose values `toArrow()` keeps as Spark compares and stores them
#: (timestamps are converted through the session time zone: they stay on Spark).
_COLLECTED_TYPES = (
    *NUMERIC_ORDER,
    *(T.DecimalType, T.BooleanType, T.StringType, T.BinaryType, T.DateType),
)

#: Spark conf: the largest DataFrame source, by Spark's estimate of its size in bytes, that a
#: MERGE on a local session collects to run in process; 0 keeps every DataFrame MERGE on Spark.
IN_PROCESS_SOURCE_BYTES = "spark.airflow_delta.merge.inProcessSourceBytes"
DEFAULT_IN_PROCESS_SOURCE_BYTES = 64 * 1024 * 1024
#: The JVM class of `SparkContext.parallelize`'s RDD, and how many parents to follow to it.
_PARALLELIZED = "ParallelCollectionRDD"
_MAX_LINEAGE = 32


def collect_small_source(df: DataFrame) -> pa.Table | None:
    """`df` as a pyarrow Table when the in-process MERGE should take it, else None.

    Only on a classic session with a `local[...]` master, where the driver is the machine the
    executors run on, and only when Spark's estimate of the source's size (its optimized plan's
    statistics) is at most `IN_PROCESS_SOURCE_BYTES`. Spark has no estimate for rows the driver
    handed it (`createDataFrame` of Python rows or of a `parallelize`d RDD): such a source is
    collected when it holds at most that many bytes, reading no more rows than would fit
    (`_collect_within`). Collecting evaluates the source once; a MERGE on Spark evaluates it
    several times. Column names equal but for case stay on Spark, which resolves them, and so
    do sources with columns of other types than `_COLLECTED_TYPES`.
    """
    if not runs_locally(df):
        return None
    default = str(DEFAULT_IN_PROCESS_SOURCE_BYTES)
    limit = int(df.sparkSession.conf.get(IN_PROCESS_SOURCE_BYTES, default) or default)
    if limit <= 0:
        return None
    names = {c.lower() for c in df.columns}
    if len(names) != len(df.columns):
        return None
    if not all(isinstance(f.dataType, _COLLECTED_TYPES) for f in df.schema.fields):
        return None
    if _estimated_bytes(df) <= limit:
        return df.toArrow()
    return _collect_within(df, limit) if _built_on_driver(df) else None


def spark_source(df: DataFrame, collected: pa.Table) -> DataFrame:
    """The DataFrame a Spark MERGE reads for the source `df`, collected as `collected` but
    refused by the in-process MERGE: `df` itself, or for rows built on the driver (evaluated
    again by Python workers at every read, with no size estimate) the collected rows as a
    local relation, which Spark can broadcast."""
    return df.sparkSession.createDataFrame(collected) if _built_on_driver(df) else df


def _built_on_driver(df: DataFrame) -> bool:
    """Whether every leaf of `df`'s plan holds rows the driver handed to Spark: a local relation,
    or an RDD of rows whose lineage (one parent per RDD) starts at a parallelized collection."""
    leaves = df._jdf.queryExecution().optimizedPlan().collectLeaves().iterator()
    rdds = 0
    while leaves.hasNext():
        leaf = leaves.next()
        if leaf.nodeName() == "LocalRelation":
            continue
        if leaf.nodeName() != "LogicalRDD" or not _parallelized(leaf.rdd()):
            return False
        rdds += 1
    return rdds > 0


def _parallelized(rdd: Any) -> bool:
    """Whether the JVM RDD `rdd` derives, one parent at a time, from `parallelize`."""
    for _ in range(_MAX_LINEAGE):
        parents = rdd.dependencies()
        if parents.size() != 1:
            return parents.size() == 0 and rdd.getClass().getSimpleName() == _PARALLELIZED
        rdd = parents.apply(0).rdd()
    return False


def _collect_within(df: DataFrame, limit: int) -> pa.Table | None:
    """`df` as a pyarrow Table if it holds at most `limit` bytes, else None. Reads at most as
    many rows as Spark's default row size (`StructType.defaultSize`) fits in `limit`, plus one:
    a source built on the driver may still expand (a `flatMap` of its RDD)."""
    row_bytes = max(1, int(df._jdf.schema().defaultSize()))
    most = max(1, limit // row_bytes)
    table = df.limit(most + 1).toArrow()
    return table if table.num_rows <= most and table.nbytes <= limit else None


def broadcast_by_spark(df: DataFrame) -> bool:
    """Whether Spark broadcasts `df` in a join on its own: its estimated size is at most the
    session's `spark.sql.autoBroadcastJoinThreshold` (False on Spark Connect, whose plans the
    client cannot inspect)."""
    if is_connect(df):
        return False
    threshold = int(
        df.sparkSession._jsparkSession.sessionState().conf().autoBroadcastJoinThreshold()
    )
    return threshold >= 0 and _estimated_bytes(df) <= threshold


def _deterministic(df: DataFrame) -> bool:
    """Whether a classic DataFrame's plan gives the same rows at each evaluation (no `rand()`,
    no `monotonically_increasing_id()`): only then do values collected once, such as the
    uniqueness of its keys, hold for the later joins."""
    return bool(df._jdf.queryExecution().analyzed().deterministic())


def _estimated_bytes(df: DataFrame) -> int:
    """Spark's estimate of a classic DataFrame's size in bytes (its optimized plan's stats)."""
    return int(str(df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()))
