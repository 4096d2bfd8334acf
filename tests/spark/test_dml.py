"""DELETE and UPDATE on Spark (`airflow_delta.spark.delete` / `update`) against the in-process
commands on copies of one table: the same rows (as this engine and deltalake read them), the
same row metrics, the same change data on CDF tables; assignments and predicates only Spark
evaluates (arithmetic, function calls); tables with deletion vectors, CHECK constraints and
generated columns; conflicts by the read predicate."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import SparkSession

from airflow_delta.engine import CommitProperties, DeltaLog, IsolationLevel
from airflow_delta.engine import delete as engine_delete
from airflow_delta.engine import read_changes as engine_read_changes
from airflow_delta.engine import update as engine_update
from airflow_delta.engine.errors import (
    ConcurrentAppendException,
    ConstraintViolationError,
)
from airflow_delta.spark import delete, update
from airflow_delta.spark.dml import pruning_predicates
from tests.engine.commands.dml_tables import (
    append,
    batch,
    create,
    deltalake_rows,
    engine_rows,
    expected,
)

#: Two appends (two files per partition), with NULLs in k and s.
DATA = [
    batch(range(0, 6), k=[0, None, 2, 3, None, 0], s=["s0", "s1", None, "s0", "s1", None]),
    batch(range(6, 12)),
]
ROW_METRICS = {
    "DELETE": ("numDeletedRows", "numCopiedRows", "numRemovedFiles", "numAddedChangeFiles"),
    "UPDATE": ("numUpdatedRows", "numCopiedRows", "numRemovedFiles"),
}
CDF = {"delta.enableChangeDataFeed": "true"}
DV_METRICS = ("numDeletionVectorsAdded", "numDeletionVectorsRemoved", "numDeletionVectorsUpdated")


def copies(tmp_path: Path, **options: Any) -> tuple[str, str]:
    """Two copies of one table of DATA: one for each executor."""
    first = create(tmp_path / "in_process", *DATA, **options)
    second = str(tmp_path / "spark")
    shutil.copytree(first, second)
    return first, second


def same_table(ours: str, theirs: str) -> list[tuple[Any, ...]]:
    found = engine_rows(theirs)
    assert found == engine_rows(ours)
    assert deltalake_rows(theirs) == found
    return found


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "flat"])
@pytest.mark.parametrize(
    "predicate",
    ["id < 3", "k IS NULL", "p = 'a'", "s = 's1' OR k > 2", "NOT (k = 0)", None, "id > 1000"],
)
def test_delete_as_in_process(
    spark: SparkSession, tmp_path: Path, predicate: str | None, partitioned: bool
) -> None:
    ours, theirs = copies(tmp_path, partitioned=partitioned)
    expected_result = engine_delete(ours, predicate)
    result = delete(spark, theirs, predicate)
    assert result.version == expected_result.version  # None both when nothing matched
    for name in ROW_METRICS["DELETE"]:
        assert result.metrics[name] == expected_result.metrics[name], name
    same_table(ours, theirs)
    if result.version is not None:
        assert DeltaLog.for_table(theirs).history(1)[0]["operationParameters"] == {
            "predicate": f'["{predicate}"]' if predicate else "[]"
        }


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitioned", "flat"])
@pytest.mark.parametrize(
    ("assignments", "predicate"),
    [
        ({"s": "'z'"}, "id >= 4 AND p = 'b'"),
        ({"k": "NULL", "s": "s"}, "k IS NULL OR s IS NULL"),
        ({"`S`": "'all'"}, None),
    ],
)
def test_update_as_in_process(
    spark: SparkSession,
    tmp_path: Path,
    assignments: dict[str, str],
    predicate: str | None,
    partitioned: bool,
) -> None:
    ours, theirs = copies(tmp_path, partitioned=partitioned)
    expected_result = engine_update(ours, assignments, predicate)
    result = update(spark, theirs, assignments, predicate)
    for name in ROW_METRICS["UPDATE"]:
        assert result.metrics[name] == expected_result.metrics[name], name
    same_table(ours, theirs)


def test_arithmetic_and_functions_only_spark_evaluates(spark: SparkSession, tmp_path: Path) -> None:
    uri = create(tmp_path / "t", *DATA)
    result = update(
        spark, uri, {"k": "coalesce(k, -1) * 10 + 1", "s": "upper(s)"}, "id % 3 = 0 OR k IS NULL"
    )

    def updated(row: tuple[Any, ...]) -> tuple[Any, ...]:
        id_, k, s, p = row
        if id_ % 3 == 0 or k is None:
            return (id_, (-1 if k is None else k) * 10 + 1, s.upper() if s else None, p)
        return row

    rows = sorted((updated(r) for r in expected(DATA, lambda r: True)), key=repr)
    assert engine_rows(uri) == deltalake_rows(uri) == rows
    assert result.metrics["numUpdatedRows"] == 6  # ids 0, 3, 6, 9 and the NULL k of 1, 4
    deleted = delete(spark, uri, "length(s) * 2 = 4 AND k > 10")  # 'S0'/'S1'/'S2' updated
    assert deleted.metrics["numDeletedRows"] == sum(
        1 for r in rows if r[2] is not None and len(r[2]) == 2 and r[1] is not None and r[1] > 10
    )
    left = [r for r in rows if not (r[2] is not None and len(r[2]) * 2 == 4 and (r[1] or 0) > 10)]
    assert engine_rows(uri) == deltalake_rows(uri) == left
    assert DeltaTable(uri).version() == 4


def test_deletion_vectors_of_the_table_are_applied(spark: SparkSession, tmp_path: Path) -> None:
    """Files holding deletion vectors (written in process) are read without their deleted rows
    and, on a table with deletion vectors, get new ones as in process (tests/spark/
    test_dml_deletion_vectors.py has the details)."""
    ours, theirs = copies(tmp_path, dv=True)
    for uri in (ours, theirs):
        assert engine_delete(uri, "id IN (1, 6)").metrics["numDeletionVectorsAdded"] == 2
    expected_result = engine_update(ours, {"s": "'u'"}, "k = 0")
    result = update(spark, theirs, {"s": "'u'"}, "k = 0")
    for name in ("numUpdatedRows", "numCopiedRows", "numRemovedFiles", *DV_METRICS):
        assert result.metrics[name] == expected_result.metrics[name], name
    assert result.metrics["numDeletionVectorsUpdated"] > 0
    same_table(ours, theirs)
    engine_delete(ours, "id >= 7")
    delete(spark, theirs, "id >= 7")
    same_table(ours, theirs)


def changes(rows: pa.Table) -> list[tuple[Any, ...]]:
    key = ["_commit_version", "_change_type", "id", "k", "s", "p"]
    table = rows.select(key)
    return sorted(zip(*(table.column(c).to_pylist() for c in key), strict=True), key=repr)


def test_change_data_as_in_process(spark: SparkSession, tmp_path: Path) -> None:
    ours, theirs = copies(tmp_path, configuration=CDF)
    engine_delete(ours, "k = 0 OR id = 7")
    delete(spark, theirs, "k = 0 OR id = 7")
    engine_update(ours, {"s": "'u'"}, "p = 'a' AND id > 3")
    update(spark, theirs, {"s": "'u'"}, "p = 'a' AND id > 3")
    engine_delete(ours, "p = 'b'")  # whole files: no cdc files, the removes are the changes
    delete(spark, theirs, "p = 'b'")
    same_table(ours, theirs)
    found = changes(pa.table(engine_read_changes(theirs, 3)))
    assert found == changes(pa.table(engine_read_changes(ours, 3)))
    assert changes(DeltaTable(theirs).load_cdf(starting_version=3).read_all()) == found
    kinds = {c[1] for c in found}
    assert kinds == {"delete", "update_preimage", "update_postimage"}


def test_change_data_of_an_update_only_spark_evaluates(spark: SparkSession, tmp_path: Path) -> None:
    uri = create(tmp_path / "t", *DATA, configuration=CDF)
    result = update(spark, uri, {"id": "id + 100"}, "id BETWEEN 2 AND 3")
    assert result.metrics["numAddedChangeFiles"] > 0
    found = changes(pa.table(engine_read_changes(uri, 3)))
    assert [(c[1], c[2]) for c in found] == [
        ("update_postimage", 102),
        ("update_postimage", 103),
        ("update_preimage", 2),
        ("update_preimage", 3),
    ]
    assert changes(DeltaTable(uri).load_cdf(starting_version=3).read_all()) == found


def test_check_constraints(spark: SparkSession, tmp_path: Path) -> None:
    """The Spark UPDATE on a table with CHECK constraints checks every row written; an
    unknown column is refused."""
    uri = create(tmp_path / "t", *DATA, configuration={"delta.constraints.pos": "id >= 0"})
    with pytest.raises(ConstraintViolationError, match="nothing written"):
        update(spark, uri, {"id": "id - 5"}, "p = 'a'")
    assert DeltaLog.for_table(uri).update().version == 2
    assert update(spark, uri, {"id": "id * 2"}, "p = 'a'").metrics["numUpdatedRows"] == 6
    with pytest.raises(ValueError, match="'nope' is not a column of"):
        update(spark, uri, {"nope": "1"}, None)


@pytest.mark.parametrize(
    ("level", "partition", "outcome"),
    [
        (IsolationLevel.SERIALIZABLE, "a", ConcurrentAppendException),
        (IsolationLevel.SERIALIZABLE, "b", None),  # the DELETE read partition a only
    ],
)
def test_delete_racing_an_append(
    spark: SparkSession,
    tmp_path: Path,
    level: IsolationLevel,
    partition: str,
    outcome: type | None,
) -> None:
    uri = create(tmp_path / "t", *DATA)
    props = CommitProperties(isolation_level=level)
    txn = DeltaLog.for_table(uri).start_transaction(properties=props)  # reads version 2
    append(uri, batch([101, 103], p=[partition, partition], s=["s1", "s1"]))  # version 3 wins
    predicate = "p = 'a' AND initcap(s) = 'S1'"  # only `p = 'a'` prunes (and is the read)
    assert pruning_predicates(txn, predicate) == ["p = 'a'"]
    if outcome is not None:
        with pytest.raises(outcome, match="concurrent"):
            delete(spark, txn, predicate)
        assert DeltaLog.for_table(uri).update().version == 3
        return
    result = delete(spark, txn, predicate)
    assert result.version == 4 and result.conflicts_resolved == (3,)
    assert 101 in [r[0] for r in engine_rows(uri)]


def test_column_mapped_table(spark: SparkSession, tmp_path: Path) -> None:
    """A column-mapped table (the in-process commands refuse it): read and written by its
    physical names, deltalake reads the result."""
    from airflow_delta.spark import write_delta

    uri = str(tmp_path / "t")
    data = spark.sql("SELECT id, CAST(id % 3 AS INT) AS `the k`, IF(id % 2 = 0, 'a', 'b') AS p "
                     "FROM range(0, 10)")  # fmt: skip
    write_delta(data, uri, partition_by=["p"], configuration={"delta.columnMapping.mode": "name"})
    assert update(spark, uri, {"`the k`": "`the k` + 100"}, "id > 6").metrics["numUpdatedRows"] == 3
    assert delete(spark, uri, "`the k` = 0 AND p = 'a'").metrics["numDeletedRows"] == 2  # 0, 6
    query = 'SELECT id, "the k", p FROM t ORDER BY id'
    table = pa.table(QueryBuilder().register("t", DeltaTable(uri)).execute(query).read_all())
    want = [
        (i, i % 3 + (100 if i > 6 else 0), "a" if i % 2 == 0 else "b")
        for i in range(10)
        if i not in (0, 6)
    ]
    assert (
        list(zip(*(table.column(c).to_pylist() for c in ("id", "the k", "p")), strict=True)) == want
    )


def test_generated_columns_of_updated_rows_are_recomputed(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An UPDATE of the column a generated column is computed from (the in-process UPDATE
    refuses it) recomputes it on the updated rows; setting it to another value fails."""
    import json

    from airflow_delta.engine.protocol.schema import DELTA_METADATA_KEY

    generated = {DELTA_METADATA_KEY: json.dumps({"delta.generationExpression": "id * 2"}).encode()}
    schema = pa.schema([("id", pa.int64()), pa.field("twice", pa.int64(), metadata=generated)])
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, schema)
    from airflow_delta.spark import write_delta

    write_delta(spark.createDataFrame([(i,) for i in range(4)], "id long"), uri)
    assert update(spark, uri, {"id": "id + 10"}, "id >= 2").metrics["numUpdatedRows"] == 2
    found = DeltaTable(uri).to_pyarrow_table().sort_by("id").to_pylist()
    assert [(r["id"], r["twice"]) for r in found] == [(0, 0), (1, 2), (12, 24), (13, 26)]
    with pytest.raises(ConstraintViolationError, match="twice"):
        update(spark, uri, {"twice": "0"}, "id = 1")


def test_a_partition_delete_runs_no_spark_job(spark: SparkSession, tmp_path: Path) -> None:
    """A predicate over partition columns only selects whole files: removed by their stats'
    counts, with no Spark job (as delta-spark's metadata-only delete)."""
    uri = create(tmp_path / "t", *DATA)
    context = spark.sparkContext
    context.setJobGroup("partition-delete", "DELETE by partition")
    try:
        result = delete(spark, uri, "p = 'a'")
        assert context.statusTracker().getJobIdsForGroup("partition-delete") == []
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert (result.metrics["numDeletedRows"], result.metrics["numRemovedFiles"]) == (6, 2)
    assert result.metrics["numAddedFiles"] == result.metrics["numCopiedRows"] == 0
    assert engine_rows(uri) == deltalake_rows(uri) == expected(DATA, lambda r: r["p"] == "b")


def test_string_literals_are_read_as_spark_reads_them(spark: SparkSession) -> None:
    """The engine's predicates and Spark's read a string literal alike (backslash escapes,
    doubled quotes): the DML operators send the same predicate to either executor."""
    from airflow_delta.engine.expressions.tokens import tokenize
    from tests.engine.expressions.test_tokens import SPARK_STRINGS

    row = spark.sql("SELECT " + ", ".join(literal for literal, _ in SPARK_STRINGS)).first()
    assert row is not None
    assert list(row) == [tokenize(literal)[0].value for literal, _ in SPARK_STRINGS]


LIKE_ROWS = ["abc", "ABD", "a%c", "a_c", "a\\c", "", "ab", "xabc"]
LIKE_FILTERS = [
    "s LIKE 'ab%'",
    "s NOT LIKE 'ab%'",
    "s ILIKE 'ab%'",
    "s LIKE '_b_'",
    "s LIKE 'a\\\\%c'",
    "s LIKE 'a\\\\_c'",
    "s LIKE 'a\\\\\\\\c'",
    "s LIKE '%'",
    "s LIKE ''",
    "s LIKE NULL",
    "s LIKE '%c' OR s IS NULL",
    "upper(s) LIKE 'A%D'",
]


def test_like_selects_the_rows_spark_selects(spark: SparkSession, tmp_path: Path) -> None:
    """LIKE and ILIKE (with `%`, `_`, escapes and NULLs) select what Spark SQL selects."""
    from airflow_delta.engine import read_table, write_table

    uri = str(tmp_path / "t")
    rows = pa.table({"id": list(range(len(LIKE_ROWS) + 1)), "s": [*LIKE_ROWS, None]})
    write_table(uri, rows)
    frame = spark.createDataFrame(rows.to_pylist(), "id long, s string")
    for where in LIKE_FILTERS:
        ours = sorted(read_table(uri, ["id"], where).column("id").to_pylist())
        theirs = sorted(r.id for r in frame.where(where).collect())
        assert ours == theirs, where
