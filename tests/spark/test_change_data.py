"""Change data feed on Spark: write_delta appends and overwrites on a CDF table (no cdc files:
readers take the adds and removes), MERGE with an Arrow source (in process, cdc files), the
Spark MERGE executor's refusal, and `airflow_delta.spark.read_changes` against deltalake's
`load_cdf`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import ChangeDataFeedError, DeltaProtocolError
from airflow_delta.spark import merge_delta, read_changes, write_delta

CDF = {"delta.enableChangeDataFeed": "true"}
KEY = ["_commit_version", "_change_type", "id", "v", "p"]


def rows(table: Any) -> list[tuple[Any, ...]]:
    table = pa.table(table)
    return sorted(zip(*(table.column(c).to_pylist() for c in KEY), strict=True), key=repr)


def spark_rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r[c] for c in KEY) for r in df.collect()), key=repr)


def theirs(uri: str) -> list[tuple[Any, ...]]:
    return rows(DeltaTable(uri).load_cdf(starting_version=0).read_all())


def data(ids: list[int], v: str = "x") -> pa.Table:
    return pa.table(
        {"id": ids, "v": [f"{v}{i}" for i in ids], "p": ["a" if i % 2 else "b" for i in ids]},
        pa.schema([("id", pa.int64()), ("v", pa.string()), ("p", pa.string())]),
    )


def test_write_merge_and_read_changes(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, data([]).schema, ["p"], CDF)
    write_delta(spark.createDataFrame(data(list(range(6)))), uri)  # 1: append
    write_delta(spark.createDataFrame(data([1, 3], "o")), uri, mode="overwrite",
                replace_where="p = 'a'")  # fmt: skip
    result = (  # 3: in process (an Arrow source), with cdc files
        merge_delta(uri, data([0, 1, 9], "m"), "t.id = s.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert result.metrics["numTargetChangeFilesAdded"] > 0
    changes = read_changes(spark, uri, 0)
    assert spark_rows(changes) == theirs(uri)
    assert [r[1:3] for r in spark_rows(changes) if r[0] == 2] == [
        ("delete", 1), ("delete", 3), ("delete", 5), ("insert", 1), ("insert", 3),
    ]  # fmt: skip
    assert spark_rows(read_changes(spark, uri, 3, 3)) == [r for r in theirs(uri) if r[0] == 3]
    assert changes.columns[-3:] == ["_change_type", "_commit_version", "_commit_timestamp"]


def test_spark_merge_executor_refuses_cdf_rewrites(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, data([]).schema, ["p"], CDF)
    write_delta(spark.createDataFrame(data([1, 2])), uri)
    source = spark.createDataFrame(data([2], "m"))  # a DataFrame: the Spark executor here
    merge = merge_delta(uri, source, "t.id = s.id").when_matched_update_all()
    with pytest.raises(DeltaProtocolError, match=r"change data feed.*Arrow source"):
        merge.execute()
    assert DeltaLog.for_table(uri).update().version == 1
    inserts = merge_delta(uri, spark.createDataFrame(data([7])), "t.id = s.id")
    assert inserts.when_not_matched_insert_all().execute().version == 2  # inserts only: fine


def test_read_changes_refuses_tables_without_cdf(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_delta(spark.createDataFrame(data([1])), uri)
    with pytest.raises(ChangeDataFeedError, match=r"delta\.enableChangeDataFeed"):
        read_changes(spark, uri, 0)
