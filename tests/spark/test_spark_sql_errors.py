"""SQL a user hands a Spark command that Spark cannot parse or resolve (an unknown column, a
syntax error, a MERGE source lacking a column an update-all assigns) is a typed error naming
the table and the version, as the engine's in-process commands give, not Spark's bare
AnalysisException; nothing is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from airflow_delta.engine.errors import InvalidArgumentError, InvalidPredicateError
from airflow_delta.spark import delete, merge_delta, read_delta, update
from airflow_delta.spark.merge import IN_PROCESS_SOURCE_BYTES


def make_table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    return uri


def merge(spark: SparkSession, uri: str, condition: str, columns: str, clause: str) -> None:
    source = spark.createDataFrame([(2, "B", 1)], "id bigint, v string, x int")
    builder = merge_delta(uri, source.selectExpr(*columns.split(",")), condition)
    if clause == "update_all":
        builder = builder.when_matched_update_all()
    elif clause == "insert_all":
        builder = builder.when_not_matched_insert_all()
    else:
        builder = builder.when_matched_update({"v": clause})
    spark.conf.set(IN_PROCESS_SOURCE_BYTES, "0")
    try:
        builder.execute()
    finally:
        spark.conf.unset(IN_PROCESS_SOURCE_BYTES)


CASES: dict[str, tuple[Callable[[SparkSession, str], Any], type[Exception], str]] = {
    "MERGE condition with an unknown column": (
        lambda spark, uri: merge(spark, uri, "t.id = s.nope", "id,v", "s.v"),
        InvalidArgumentError,
        "`s`.`nope` cannot be resolved",
    ),
    "MERGE update-all from a source lacking a column": (
        lambda spark, uri: merge(spark, uri, "t.id = s.id", "id", "update_all"),
        InvalidArgumentError,
        "`s`.`v` cannot be resolved",
    ),
    "MERGE insert-all from a source lacking a column": (
        lambda spark, uri: merge(spark, uri, "t.id = s.id", "id", "insert_all"),
        InvalidArgumentError,
        "`s`.`v` cannot be resolved",
    ),
    "MERGE assignment that does not parse": (
        lambda spark, uri: merge(spark, uri, "t.id = s.id", "id,v", "s.v +"),
        InvalidArgumentError,
        "PARSE_SYNTAX_ERROR",
    ),
    "MERGE source with a column named like the MERGE's own": (
        lambda spark, uri: merge(
            spark, uri, "t.id = s.id", "id,v,x AS __delta_merge_row_id", "s.v"
        ),
        InvalidArgumentError,
        "start with '__delta_merge_'",
    ),
    "DELETE with an unknown column": (
        lambda spark, uri: delete(spark, uri, "nope = 1"),
        InvalidPredicateError,
        "`nope` cannot be resolved",
    ),
    "DELETE with a syntax error": (
        lambda spark, uri: delete(spark, uri, "id = = 1"),
        InvalidPredicateError,
        "PARSE_SYNTAX_ERROR",
    ),
    "UPDATE assignment with an unknown column": (
        lambda spark, uri: update(spark, uri, {"v": "upper(nope)"}, "id = 1"),
        InvalidArgumentError,
        "`nope` cannot be resolved",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_spark_sql_errors_are_typed(spark: SparkSession, tmp_path: Path, case: str) -> None:
    run, error, problem = CASES[case]
    uri = make_table(tmp_path)
    with pytest.raises(error) as caught:
        run(spark, uri)
    message = str(caught.value)
    assert uri in message and "version 0" in message and problem in message, message
    assert DeltaTable(uri).version() == 0
    assert sorted(r.id for r in read_delta(spark, uri).collect()) == [1, 2]
