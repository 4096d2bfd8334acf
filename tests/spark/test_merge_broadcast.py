"""The Spark MERGE's two plans for a MERGE that modifies and inserts, side by side.

With a source Spark broadcasts and a condition of equalities between target and source
columns, findTouchedFiles keeps its matches (cached, with the source's join columns) and the
inserts are the source rows whose keys matched nothing; otherwise one full outer join of the
source with the touched rows writes both. Turning Spark's broadcasts off
(`spark.sql.autoBroadcastJoinThreshold=-1`) selects the second plan, so the same MERGE runs
both ways on copies of one table: the tables, the metrics and the errors must agree, over keys
with NULLs and duplicates, one or two join columns, a source key of a wider type, clause
conditions that leave matched rows unmodified (those source rows are not inserted), and
tables with change data feed, deletion vectors or row tracking. The source is built from Arrow
data, whose size Spark knows (a DataFrame of Python rows has none: Spark never broadcasts it).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import DeltaError
from airflow_delta.spark.merge import DeltaMergeBuilder
from airflow_delta.spark.merge_matches import Found
from airflow_delta.spark.read import read_delta
from airflow_delta.spark.write import write_delta

TARGET_DDL = "k1 int, k2 string, v string"
SCHEMA = pa.schema([("k1", pa.int32()), ("k2", pa.string()), ("v", pa.string())])
BROADCASTS = "spark.sql.autoBroadcastJoinThreshold"
Row = tuple[int | None, str | None, str | None]

ROWS = st.tuples(
    st.none() | st.integers(0, 5),
    st.none() | st.sampled_from(["a", "b"]),
    st.none() | st.sampled_from(["c", "p", "x"]),
)
FEATURES = [
    {},
    {"delta.enableChangeDataFeed": "true"},
    {"delta.enableDeletionVectors": "true"},
    {"delta.enableRowTracking": "true"},
]
CONDITIONS = ["t.k1 = s.k1", "t.k1 = s.k1 AND t.k2 = s.k2", "s.k2 = t.k2 AND s.k1 = t.k1"]


class RecordedMerge(DeltaMergeBuilder):
    """A MERGE that records whether its inserts came from what the search kept of its matches
    (their keys for an anti join, or a filter of the unmatched keys' ranges)."""

    kept_matches: bool | None = None
    pairs: int | None = None

    def _unmatched(self, source: DataFrame, target: DataFrame, found: Found) -> DataFrame:
        self.kept_matches = found.matches is not None or found.unmatched is not None
        self.pairs = found.pairs
        return super()._unmatched(source, target, found)


def _persisted(spark: SparkSession) -> int:
    return int(spark.sparkContext._jsc.getPersistentRDDs().size())


def _run(
    spark: SparkSession, uri: str, source: DataFrame, condition: str, clauses: dict[str, Any]
) -> tuple[Any, RecordedMerge]:
    """The MERGE's outcome (sorted rows and row metrics, or the error's type) and the MERGE
    (whether the search kept its matches, and how many)."""
    builder = RecordedMerge(uri, source, condition)
    matched = clauses["matched"]
    builder.when_matched_update({"v": "s.v"}, None if matched == "update" else "s.v < 'p'")
    if matched == "update if, else delete":
        builder.when_matched_delete()
    builder.when_not_matched_insert({"k1": "s.k1", "k2": "s.k2", "v": "s.v"}, clauses["insert"])
    persisted = _persisted(spark)
    try:
        metrics = builder.execute().metrics
    except DeltaError as exc:
        outcome: Any = type(exc).__name__
    else:
        rows = sorted(
            (tuple(r) for r in read_delta(spark, uri).collect()),
            key=lambda r: tuple((v is None, v) for v in r),
        )
        outcome = (rows, {k: v for k, v in metrics.items() if k.startswith("numTargetRows")})
    assert _persisted(spark) == persisted  # the cached matches are dropped
    return outcome, builder


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    target=st.lists(ROWS, max_size=8),
    source=st.lists(ROWS, max_size=6),
    condition=st.sampled_from(CONDITIONS),
    wide_key=st.booleans(),
    matched=st.sampled_from(["update", "update if", "update if, else delete"]),
    insert=st.sampled_from([None, "s.v IS NOT NULL"]),
    features=st.sampled_from(FEATURES),
)
def test_both_plans_agree(
    spark: SparkSession,
    target: list[Row],
    source: list[Row],
    condition: str,
    wide_key: bool,
    matched: str,
    insert: str | None,
    features: dict[str, str],
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch, "base")
        DeltaLog.create_table(str(base), SCHEMA, configuration=features or None)
        write_delta(spark.createDataFrame(target, TARGET_DDL).repartition(3), str(base))
        key = pa.int64() if wide_key else pa.int32()
        columns = list(zip(*source, strict=True)) if source else [[], [], []]
        arrow = pa.table(
            [pa.array(c, t) for c, t in zip(columns, (key, pa.string(), pa.string()), strict=True)],
            names=SCHEMA.names,
        )
        frame = spark.createDataFrame(arrow)  # sized: Spark broadcasts it
        outcomes = {}
        for plan, threshold in (("broadcast", None), ("full outer join", "-1")):
            uri = str(Path(scratch, plan.replace(" ", "-")))
            shutil.copytree(base, uri)
            if threshold is not None:
                spark.conf.set(BROADCASTS, threshold)
            try:
                clauses = {"matched": matched, "insert": insert}
                outcomes[plan], builder = _run(spark, uri, frame, condition, clauses)
            finally:
                spark.conf.unset(BROADCASTS)
            if not isinstance(outcomes[plan], str):  # it ran to the write
                kept = builder.kept_matches
                assert (kept is True) == (plan == "broadcast"), (plan, kept)
    assert outcomes["broadcast"] == outcomes["full outer join"]


def test_other_conditions_join_in_full(spark: SparkSession, tmp_path: Path) -> None:
    """A condition with more than column equalities keeps no matches: whether a source row
    matches is not a function of its join columns there."""
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    write_delta(spark.createDataFrame([(1, "a", "c"), (2, "b", "p")], TARGET_DDL), uri)
    source = spark.createDataFrame([(1, "a", "x"), (3, "b", "x")], TARGET_DDL)
    builder = RecordedMerge(uri, source, "t.k1 = s.k1 AND s.v > 'a'")
    builder.when_matched_update({"v": "s.v"}).when_not_matched_insert_all().execute()
    assert builder.kept_matches is None  # one full outer join: no anti join
    assert sorted(tuple(r) for r in read_delta(spark, uri).collect()) == [
        (1, "a", "x"),
        (2, "b", "p"),
        (3, "b", "x"),
    ]


@pytest.mark.parametrize("copies", [1, 4], ids=["fewer-matches", "more-matches-than-source-rows"])
def test_kept_matches_find_the_inserts_however_many(
    spark: SparkSession, tmp_path: Path, copies: int
) -> None:
    """The inserts are the source rows whose keys are not among the kept matches, whether the
    matches are no more than the source's rows (taken as they are) or outnumber them (one
    source key matching several target rows: made distinct first)."""
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    target = [(1, "a", f"c{i}") for i in range(copies)] + [(2, "b", "p")]
    write_delta(spark.createDataFrame(target, TARGET_DDL).repartition(2), uri)
    source = spark.createDataFrame(
        pa.table({"k1": pa.array([1, 3], pa.int32()), "k2": ["a", "b"], "v": ["x", "y"]})
    )
    clauses = {"matched": "update", "insert": None}
    outcome, builder = _run(spark, uri, source, "t.k1 = s.k1", clauses)
    assert builder.kept_matches is True and builder.pairs == copies
    rows, metrics = outcome
    assert rows == sorted([*[(1, "a", "x")] * copies, (2, "b", "p"), (3, "b", "y")])
    assert metrics["numTargetRowsUpdated"] == copies
    assert metrics["numTargetRowsInserted"] == 1
