"""MERGE of Arrow data, run in process by the engine: the same rows and metrics as Spark's MERGE.

Each case runs one MERGE three times on copies of a table: with a Spark DataFrame source (the
Spark executor), with the same rows as a pyarrow Table (the engine's in-process executor), and
with the DataFrame collected to run in process (what a local session does with a small source).
The tables must then hold the same rows, read by deltalake, and the commits the same metrics
(file counts and bytes aside: the executors cut files differently).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import ConstraintViolationError, UnsupportedMergeError
from airflow_delta.spark.merge import (
    IN_PROCESS_SOURCE_BYTES,
    DeltaMergeBuilder,
    MultipleSourceRowMatchingTargetRowInMergeError,
    collect_small_source,
    merge_delta,
)
from airflow_delta.spark.merge_source import broadcast_by_spark
from airflow_delta.spark.write import write_delta

DDL = "id long, value string, part string"
SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])
Row = tuple[int | None, str | None, str | None]
BASE: list[Row] = [(1, "a1", "a"), (2, "a2", "a"), (3, "b3", "b"), (4, "b4", "b"), (5, "c5", "c")]
SOURCE: list[Row] = [(2, "new2", "a"), (4, "new4", "b"), (9, "new9", "c"), (None, "nul", "c")]
#: Metrics that depend on how an executor cuts its output into files.
FILE_LAYOUT = {"numTargetFilesAdded", "numTargetBytesAdded"}

Clauses = Callable[[DeltaMergeBuilder], DeltaMergeBuilder]


def rows_of(uri: str) -> list[tuple]:
    table = DeltaTable(uri).to_pyarrow_dataset().to_table(columns=["id", "value", "part"])
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def last_metrics(uri: str) -> dict[str, int]:
    history = DeltaLog.for_table(uri).history(limit=1)[0]
    return {k: int(v) for k, v in history["operationMetrics"].items()}


@pytest.fixture(scope="module")
def base_table(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table partitioned by `part`, one file per partition (copied for every MERGE)."""
    path = tmp_path_factory.mktemp("merge-arrow") / "base"
    DeltaLog.create_table(str(path), SCHEMA, ["part"])
    write_delta(spark.createDataFrame(BASE, DDL).repartition("part"), str(path))
    return path


@contextlib.contextmanager
def in_process_sources(spark: SparkSession, limit: int) -> Iterator[None]:
    """DataFrame sources up to `limit` estimated bytes merged in process (0: none), for now."""
    spark.conf.set(IN_PROCESS_SOURCE_BYTES, str(limit))
    try:
        yield
    finally:
        spark.conf.set(IN_PROCESS_SOURCE_BYTES, "0")  # the session fixture's setting


def both(
    spark: SparkSession,
    base: Path,
    tmp_path: Path,
    condition: str,
    clauses: Clauses,
    source: list[Row] = SOURCE,
) -> tuple[list[tuple], dict[str, int]]:
    """Run the MERGE with a Spark source on Spark, with an Arrow source, and with a Spark source
    collected to run in process; the (equal) rows and metrics."""
    results = []
    for kind in ("spark", "arrow", "collected"):
        uri = str(tmp_path / kind)
        shutil.copytree(base, uri)
        data: Any = pa.Table.from_pylist(
            [dict(zip(SCHEMA.names, r, strict=True)) for r in source], SCHEMA
        )
        if kind == "spark":
            data = spark.createDataFrame(source, DDL)
        elif kind == "collected":  # a DataFrame of Arrow data: Spark knows its size
            data = spark.createDataFrame(data)
        builder = clauses(merge_delta(uri, data, condition))
        if kind != "spark":  # the engine runs it: Spark's MERGE must not
            builder._write_spark = None  # type: ignore[method-assign]
        with in_process_sources(spark, 0 if kind == "spark" else 1 << 20):
            result = builder.execute()
        assert builder.executor == ("spark" if kind == "spark" else "in-process")
        metrics = {k: v for k, v in last_metrics(uri).items() if k not in FILE_LAYOUT}
        layout_free = {k: v for k, v in result.metrics.items() if k not in FILE_LAYOUT}
        assert (result.version, layout_free) == (2, metrics)
        results.append((rows_of(uri), metrics))
    assert results[0] == results[1]
    return results[1]


CASES: dict[str, tuple[str, Clauses]] = {
    "upsert": (
        "t.id = s.id AND t.part = s.part",
        lambda m: m.when_matched_update_all().when_not_matched_insert_all(),
    ),
    "delete on match": ("t.id = s.id", lambda m: m.when_matched_delete()),
    "insert only": ("s.id = t.id", lambda m: m.when_not_matched_insert_all()),
    "by source delete": (
        "t.id = s.id",
        lambda m: m.when_matched_update({"value": "s.value"}).when_not_matched_by_source_delete(),
    ),
    "by source update": (
        "t.id = s.id",
        lambda m: m.when_not_matched_by_source_update({"value": "'stale'", "t.part": "t.part"}),
    ),
    "literal partition conjunct": (
        "t.id = s.id AND t.part = 'a'",
        lambda m: m.when_matched_update({"value": "NULL"}).when_not_matched_insert(
            {"id": "s.id", "part": "'z'"}
        ),
    ),
    "clause conditions": (
        "t.id = s.id",
        lambda m: (
            m.when_matched_delete("s.value = 'new4'")
            .when_matched_update({"value": "s.value"}, "t.part <> s.value AND s.id IS NOT NULL")
            .when_not_matched_insert_all("s.id > 5")
            .when_not_matched_insert({"id": "-1", "value": "s.value", "part": "'z'"})
            .when_not_matched_by_source_update({"value": "'old'"}, "t.id IN (1, 3)")
            .when_not_matched_by_source_delete("t.part = 'c'")
        ),
    ),
    "conditions on nulls and mixed types": (
        "t.id = s.id",
        lambda m: m.when_matched_update_all(
            "t.value < s.value OR t.value IS NULL"
        ).when_not_matched_insert_all("s.id BETWEEN 1 AND 8.5"),
    ),
    "partition value changes": (
        "t.id = s.id",
        lambda m: m.when_matched_update({"part": "s.value", "`value`": "t.part"}),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_arrow_merge_matches_spark(
    spark: SparkSession, base_table: Path, tmp_path: Path, case: str
) -> None:
    condition, clauses = CASES[case]
    rows, metrics = both(spark, base_table, tmp_path, condition, clauses)
    assert metrics["numSourceRows"] == len(SOURCE)
    if case == "upsert":
        assert rows == sorted(
            [
                (1, "a1", "a"),
                (2, "new2", "a"),
                (3, "b3", "b"),
                (4, "new4", "b"),
                (5, "c5", "c"),
                (9, "new9", "c"),
                (None, "nul", "c"),
            ],
            key=repr,
        )
        assert metrics["numTargetRowsUpdated"] == 2
        assert metrics["numTargetRowsInserted"] == 2  # the NULL id matches nothing
        assert metrics["numTargetFilesRemoved"] == 2  # partition c untouched
    if case == "literal partition conjunct":
        assert (4, "b4", "b") in rows and (2, None, "a") in rows and (4, None, "z") in rows


def test_multiple_matches(spark: SparkSession, base_table: Path, tmp_path: Path) -> None:
    """Two source rows on one target row: an update is refused, a delete is not."""
    twice = [*SOURCE, (2, "again", "a")]
    uri = str(tmp_path / "t")
    shutil.copytree(base_table, uri)
    source = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in twice], SCHEMA)
    with pytest.raises(MultipleSourceRowMatchingTargetRowInMergeError, match="1 target row"):
        merge_arrow(uri, source, "t.id = s.id").when_matched_update_all().execute()
    assert DeltaLog.for_table(uri).update().version == 1
    rows, metrics = both(
        spark, base_table, tmp_path, "t.id = s.id", lambda m: m.when_matched_delete(), twice
    )
    assert metrics["numTargetRowsDeleted"] == 2
    assert [r[0] for r in rows] == [1, 3, 5]


def test_unsupported_merges_fall_back_to_spark(
    spark: SparkSession, base_table: Path, tmp_path: Path
) -> None:
    """A condition or an expression the engine does not evaluate: merge_arrow refuses before
    writing anything, and merge_delta runs the same MERGE on Spark."""
    source = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in SOURCE], SCHEMA)
    uri = str(tmp_path / "t")
    shutil.copytree(base_table, uri)
    unsupported = {
        "function in a condition": lambda m: m.when_matched_update_all("initcap(s.value) > 'A'"),
        "number into a string column": lambda m: m.when_matched_update({"value": "s.id"}),
        "function": lambda m: m.when_matched_update({"value": "initcap(s.value)"}),
        "non-equi condition": None,
    }
    for name, clauses in unsupported.items():
        condition = "t.id < s.id" if clauses is None else "t.id = s.id"
        builder = merge_arrow(uri, source, condition)
        builder = (clauses or (lambda m: m.when_matched_delete()))(builder)
        with pytest.raises(UnsupportedMergeError, match="in-process MERGE"):
            builder.execute()
        assert DeltaLog.for_table(uri).update().version == 1, name
    assert sorted(p.name for p in Path(uri).glob("part=*/*.parquet")) == sorted(
        p.name for p in base_table.glob("part=*/*.parquet")
    )
    result = (
        merge_delta(uri, source, "t.id = s.id")
        .when_matched_update({"value": "initcap(s.value)"})
        .execute()
    )
    assert result.metrics["numTargetRowsUpdated"] == 2
    assert (2, "New2", "a") in rows_of(uri)


def test_which_dataframe_sources_run_in_process(
    spark: SparkSession,
    base_table: Path,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A local session collects a DataFrame source whose estimated size Spark knows and is within
    the limit (64 MiB unless set); otherwise, or when the engine refuses the MERGE, it runs on
    Spark with the DataFrame itself."""
    arrow = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in SOURCE], SCHEMA)
    known = spark.createDataFrame(arrow)  # a LocalRelation: Spark's estimate is its size
    parquet = str(tmp_path_factory.mktemp("source") / "source.parquet")
    known.write.parquet(parquet)
    unknown = spark.createDataFrame(SOURCE, DDL)  # an RDD of rows: collected (test below)
    mixed = unknown.join(spark.read.parquet(parquet).select("id"), "id")  # and a file: no estimate
    stamped = spark.createDataFrame(  # toArrow() shifts timestamps by the session time zone
        arrow.append_column("at", pa.array([None] * len(SOURCE), pa.timestamp("us")))
    )
    spark.conf.unset(IN_PROCESS_SOURCE_BYTES)
    try:
        assert collect_small_source(known) == arrow
        assert collect_small_source(mixed) is None
        assert collect_small_source(stamped) is None
    finally:
        spark.conf.set(IN_PROCESS_SOURCE_BYTES, "0")
    assert collect_small_source(known) is None  # 0: every DataFrame on Spark

    def run(source: Any, limit: int, clauses: Clauses) -> DeltaMergeBuilder:
        uri = str(tmp_path / f"t{len(list(tmp_path.iterdir()))}")
        shutil.copytree(base_table, uri)
        builder = clauses(merge_delta(uri, source, "t.id = s.id"))
        with in_process_sources(spark, limit):
            builder.execute()
        assert rows_of(uri) == rows_of(str(tmp_path / "t0")), "every run merges the same rows"
        return builder

    def initcap(m: DeltaMergeBuilder) -> DeltaMergeBuilder:  # a function the engine lacks
        return m.when_matched_update({"value": "initcap(s.value)"})

    assert run(unknown, 1 << 20, initcap).executor == "spark"
    assert run(known, 1, initcap).executor == "spark"  # above the limit
    fallback = run(known, 1 << 20, initcap)  # collected, refused by the engine, run on Spark
    assert fallback.executor == "spark" and fallback.source_df is known
    uri = str(tmp_path / "plain")
    shutil.copytree(base_table, uri)
    with in_process_sources(spark, 1 << 20):
        merged = merge_delta(uri, known, "t.id = s.id").when_matched_update({"value": "s.value"})
        merged.execute()
    assert merged.executor == "in-process"
    assert (2, "new2", "a") in rows_of(uri) and (2, "New2", "a") in rows_of(str(tmp_path / "t0"))


def test_sources_built_on_the_driver_run_in_process(
    spark: SparkSession, base_table: Path, tmp_path: Path
) -> None:
    """Spark has no size estimate for rows the driver built (`createDataFrame` of Python rows or
    of a parallelized RDD): such a source is collected when it holds at most the limit's bytes,
    reading at most the rows that fit, and merges in process with the rows of the Spark MERGE.
    Rows from storage (an RDD of a text file), or more than fit (a flatMap that expands), stay
    on Spark."""
    arrow = pa.Table.from_pylist([dict(zip(SCHEMA.names, r, strict=True)) for r in SOURCE], SCHEMA)
    rows = spark.createDataFrame(SOURCE, DDL)
    parallelized = spark.createDataFrame(spark.sparkContext.parallelize(SOURCE, 3), DDL)
    both_kinds = rows.unionByName(spark.createDataFrame(arrow)).dropDuplicates(["id"])
    text = tmp_path / "ids.txt"
    text.write_text("2\n4\n")
    from_file = spark.createDataFrame(
        spark.sparkContext.textFile(str(text)).map(lambda line: (int(line), "x", "a")), DDL
    )
    expanding = spark.createDataFrame(
        spark.sparkContext.parallelize([1]).flatMap(lambda _: [(i, "v", "a") for i in range(500)]),
        DDL,
    )
    with in_process_sources(spark, 1 << 20):
        assert collect_small_source(rows) == arrow
        assert collect_small_source(parallelized) == arrow
        got = collect_small_source(both_kinds)
        assert got is not None and sorted(got.column("id").to_pylist(), key=repr) == sorted(
            arrow.column("id").to_pylist(), key=repr
        )
        assert collect_small_source(from_file) is None
        assert collect_small_source(expanding) is not None  # 500 rows fit in 1 MiB
    with in_process_sources(spark, 4096):  # 4 KiB: 146 rows of Spark's default 28 bytes
        assert collect_small_source(rows) == arrow
        assert collect_small_source(expanding) is None
    with in_process_sources(spark, 1):
        assert collect_small_source(rows) is None
    results = {}
    for kind, limit in (("in-process", 1 << 20), ("spark", 0)):
        uri = str(tmp_path / kind)
        shutil.copytree(base_table, uri)
        builder = merge_delta(uri, spark.createDataFrame(SOURCE, DDL), "t.id = s.id")
        builder.when_matched_update_all().when_not_matched_insert_all()
        with in_process_sources(spark, limit):
            metrics = builder.execute().metrics
        assert builder.executor == kind
        results[kind] = (rows_of(uri), metrics["numTargetRowsUpdated"], metrics["numSourceRows"])
    assert results["in-process"] == results["spark"]
    assert results["spark"][1:] == (2, 4)

    # refused in process (a function the engine lacks): on Spark, from the collected rows as a
    # local relation (which Spark can broadcast), not from Python workers again
    refused = {}
    for limit in (1 << 20, 0):
        uri = str(tmp_path / f"initcap-{limit}")
        shutil.copytree(base_table, uri)
        source = spark.createDataFrame(SOURCE, DDL)
        builder = merge_delta(uri, source, "t.id = s.id")
        builder.when_matched_update({"value": "initcap(s.value)"})
        with in_process_sources(spark, limit):
            builder.execute()
        assert builder.executor == "spark"
        assert (builder.source_df is source) == (limit == 0)
        assert broadcast_by_spark(builder.source_df) == (limit > 0)
        refused[limit] = rows_of(uri)
    assert refused[1 << 20] == refused[0] and (2, "New2", "a") in refused[0]


def test_not_null_and_types(spark: SparkSession, tmp_path: Path) -> None:
    """NOT NULL holds (nothing committed); narrower integer keys and values are widened."""
    uri = str(tmp_path / "t")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("value", pa.string())])
    DeltaLog.create_table(uri, schema)
    write_delta(spark.createDataFrame([(1, "a")], "id long, value string"), uri)
    narrow = pa.table({"id": pa.array([1, 2], pa.int32()), "value": ["b", "c"]})
    merge_arrow(uri, narrow, "t.id = s.id").when_matched_update_all().when_not_matched_insert(
        {"id": "s.id", "value": "s.value"}
    ).execute()
    assert sorted(DeltaTable(uri).to_pyarrow_dataset().to_table().to_pylist(), key=repr) == [
        {"id": 1, "value": "b"},
        {"id": 2, "value": "c"},
    ]
    new = pa.table({"id": pa.array([3], pa.int32()), "value": ["d"]})
    with pytest.raises(ConstraintViolationError, match="NOT NULL constraint on column id"):
        merge_arrow(uri, new, "t.id = s.id").when_not_matched_insert({"value": "s.value"}).execute()
    assert DeltaLog.for_table(uri).update().version == 2
    stats = [json.loads(f.stats) for f in DeltaLog.for_table(uri).update().all_files()]
    assert sum(s["numRecords"] for s in stats) == 2
    assert sorted(s["minValues"]["id"] for s in stats) == [1, 2]
