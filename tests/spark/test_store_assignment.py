"""Assigned values are stored as Delta stores them: cast to the column's type each on its own
(the other rows of a rewritten file keep their values exactly), and a value the type cannot
hold fails the command with InvalidArgumentError whatever `spark.sql.ansi.enabled` says (as
delta-spark's ANSI store assignment does), nothing written. Rows are checked as deltalake
reads them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.spark import merge_delta, update
from airflow_delta.spark.merge import IN_PROCESS_SOURCE_BYTES

BIG = Decimal("12345678901234567.123456789012345678")
EXACT = 2**53 + 1  # a long a double cannot hold


@contextmanager
def session_conf(spark: SparkSession, **conf: str) -> Iterator[None]:
    before = {k: spark.conf.get(k, None) for k in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def make_table(tmp_path: Path) -> str:
    """Two rows in one file: id 1 is never matched, id 2 is."""
    uri = str(tmp_path / "t")
    data = {
        "id": pa.array([1, 2], pa.int64()),
        "v": ["keep-me", "old"],
        "n": pa.array([EXACT, 7], pa.int64()),
        "d": pa.array([BIG, Decimal(1)], pa.decimal128(38, 18)),
        "i": pa.array([1, 2], pa.int32()),
    }
    write_deltalake(uri, pa.table(data))
    return uri


def rows(uri: str) -> dict[int, dict[str, Any]]:
    table = DeltaTable(uri).to_pyarrow_dataset().to_table()
    return {r["id"]: r for r in table.to_pylist()}


@contextmanager
def spark_conf(spark: SparkSession, ansi: bool) -> Iterator[None]:
    with session_conf(
        spark,
        **{IN_PROCESS_SOURCE_BYTES: "0", "spark.sql.ansi.enabled": str(ansi).lower()},
    ):
        yield


@pytest.mark.parametrize("ansi", [True, False], ids=["ansi", "legacy"])
@pytest.mark.parametrize(
    ("column", "assigned", "stored"),
    [
        ("v", "s.id", "2"),  # bigint into string: was a NumberFormatException on 'keep-me'
        ("d", "s.x", Decimal("0.5")),  # double into decimal(38,18): row 1 went through double
        ("n", "s.id * 10", 20),  # a long expression: row 1's 2**53+1 stays exact
        ("n", "s.x * 10", 5),  # a double into a long truncates, as Spark's cast does
    ],
)
def test_merge_casts_each_assignment_not_the_rows_it_does_not_match(
    spark: SparkSession, tmp_path: Path, ansi: bool, column: str, assigned: str, stored: Any
) -> None:
    uri = make_table(tmp_path)
    before = rows(uri)
    source = spark.createDataFrame([(2, 0.5)], "id bigint, x double")
    with spark_conf(spark, ansi):
        builder = merge_delta(uri, source, "t.id = s.id").when_matched_update({column: assigned})
        builder.execute()
    assert builder.executor == "spark"
    after = rows(uri)
    assert after[1] == before[1]
    assert after[2] == before[2] | {column: stored}


def run_update(spark: SparkSession, uri: str, assignments: dict[str, str]) -> None:
    update(spark, uri, assignments, "id = 2")


def run_merge(spark: SparkSession, uri: str, assignments: dict[str, str]) -> None:
    source = spark.createDataFrame([(2,)], "id bigint")
    merge_delta(uri, source, "t.id = s.id").when_matched_update(assignments).execute()


@pytest.mark.parametrize("ansi", [True, False], ids=["ansi", "legacy"])
@pytest.mark.parametrize("command", [run_update, run_merge], ids=["UPDATE", "MERGE"])
@pytest.mark.parametrize(
    ("assignments", "problem"),
    [
        ({"i": "3000000000"}, "column i (int) cannot hold the assigned value 3000000000"),
        ({"d": "CAST(1e21 AS DECIMAL(38, 0))"}, "column d (decimal(38,18)) cannot hold"),
        ({"i": "'x'"}, "column i (int) cannot hold the assigned value x"),
    ],
)
def test_a_value_the_column_cannot_hold_fails_the_command(
    spark: SparkSession,
    tmp_path: Path,
    ansi: bool,
    command: Any,
    assignments: dict[str, str],
    problem: str,
) -> None:
    """An int overflow wrapped and a decimal overflow became NULL with ANSI mode off; with it
    on, Spark's own CAST_OVERFLOW error came bare."""
    uri = make_table(tmp_path)
    before = rows(uri)
    with spark_conf(spark, ansi), pytest.raises(InvalidArgumentError) as caught:
        command(spark, uri, assignments)
    message = str(caught.value)
    assert uri in message and problem in message
    assert "the table stays at version 0" in message
    assert rows(uri) == before
    assert DeltaTable(uri).version() == 0


@pytest.mark.parametrize("native", ["false", "true"])
def test_a_nan_written_is_read_back_by_a_filter_above_it(
    spark: SparkSession, tmp_path: Path, native: str
) -> None:
    """Spark's parquet filter trusted the footer min/max pyarrow writes without NaN, so
    `x > 1` lost the NaN rows of files the Python tasks wrote (Spark orders NaN above every
    number); partitioned tables always go through them."""
    from airflow_delta.spark import read_delta, write_delta
    from airflow_delta.spark.native_write import NATIVE_WRITE_CONF

    uri = str(tmp_path / "t")
    df = spark.createDataFrame(
        [(0.5, 0.5, "a"), (float("nan"), float("nan"), "a")], "x double, y float, p string"
    )
    with session_conf(spark, **{NATIVE_WRITE_CONF: native}):
        write_delta(df.coalesce(1), uri)
        write_delta(df.coalesce(1), str(tmp_path / "parts"), partition_by=["p"])
    for table in (uri, str(tmp_path / "parts")):
        rows = read_delta(spark, table)
        assert rows.filter("x > 1").count() == rows.filter("y > 1").count() == 1
        assert rows.filter("x < 1").count() == 1
