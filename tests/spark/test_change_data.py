"""Change data feed on Spark: write_delta appends and overwrites on a CDF table (no cdc files:
readers take the adds and removes), MERGE with an Arrow source (in process, cdc files) and on
the Spark executor (the same changes as in process), and `airflow_delta.spark.read_changes`
against deltalake's `load_cdf`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog
from airflow_delta.engine import read_changes as engine_read_changes
from airflow_delta.engine.errors import ChangeDataFeedError
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


def merged_on_both(
    spark: SparkSession, tmp_path: Path, build: Any, source: pa.Table, partitioned: bool = True
) -> tuple[str, str, Any]:
    """A CDF table of ids 0..7 (version 1) and a copy of it, MERGEd from `source` by `build`
    (given the target and the source): on Spark (a DataFrame source) and in process (the
    Arrow source, on the copy). Both tables, and the Spark MERGE's result."""
    uri, copy = str(tmp_path / "spark"), str(tmp_path / "in_process")
    DeltaLog.create_table(uri, data([]).schema, ["p"] if partitioned else [], CDF)
    write_delta(spark.createDataFrame(data(list(range(8)))), uri)
    shutil.copytree(uri, copy)
    on_spark = build(uri, spark.createDataFrame(source))
    result = on_spark.execute()
    assert on_spark.executor == "spark"
    in_process = build(copy, source)
    expected = in_process.execute()
    assert in_process.executor == "in-process"
    assert expected.version == result.version == 2
    assert result.metrics["numTargetChangeFilesAdded"] > 0
    for name in ("Inserted", "Updated", "Deleted", "Copied"):
        metric = f"numTargetRows{name}"
        assert result.metrics[metric] == expected.metrics[metric], metric
    return uri, copy, result


def changes_of(uri: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Version 2's changes, by our reader and by deltalake's."""
    ours = rows(engine_read_changes(uri, 2, 2))
    assert ours == rows(DeltaTable(uri).load_cdf(starting_version=2, ending_version=2).read_all())
    return ours, [r for r in theirs(uri) if r[0] == 2]


def test_spark_merge_writes_change_data(spark: SparkSession, tmp_path: Path) -> None:
    def build(uri: str, source: Any) -> Any:
        return (
            merge_delta(uri, source, "t.id = s.id")
            .when_matched_delete("s.id = 2")
            .when_matched_update_all()
            .when_not_matched_insert_all()
        )

    uri, copy, result = merged_on_both(spark, tmp_path, build, data([1, 2, 3, 9, 10], "m"))
    ours, _ = changes_of(uri)
    assert ours == changes_of(copy)[0]
    assert [r[1:4] for r in ours] == sorted(
        [
            ("update_preimage", 1, "x1"), ("update_postimage", 1, "m1"),
            ("update_preimage", 3, "x3"), ("update_postimage", 3, "m3"),
            ("delete", 2, "x2"), ("insert", 9, "m9"), ("insert", 10, "m10"),
        ],
        key=lambda r: repr((2, *r)),
    )  # fmt: skip
    commit = (Path(uri) / "_delta_log" / f"{2:020d}.json").read_text().splitlines()
    cdc = [a for a in map(json.loads, commit) if "cdc" in a]
    assert len(cdc) == result.metrics["numTargetChangeFilesAdded"]
    assert all(a["cdc"]["path"].startswith("_change_data/p=") for a in cdc)
    table = DeltaTable(uri).to_pyarrow_table()
    assert sorted(table.column("id").to_pylist()) == [0, 1, 3, 4, 5, 6, 7, 9, 10]


def test_spark_merge_change_data_by_source_and_duplicates(
    spark: SparkSession, tmp_path: Path
) -> None:
    def by_source(uri: str, source: Any) -> Any:
        return (
            merge_delta(uri, source, "t.id = s.id")
            .when_matched_update({"v": "s.v"})
            .when_not_matched_by_source_update({"v": "'gone'"}, "t.id > 5")
            .when_not_matched_by_source_delete("t.id = 0")
        )

    uri, copy, _ = merged_on_both(spark, tmp_path / "a", by_source, data([2, 3], "m"), False)
    ours = changes_of(uri)[0]
    assert ours == changes_of(copy)[0]
    assert {r[1] for r in ours} == {"update_preimage", "update_postimage", "delete"}

    def delete_all(uri: str, source: Any) -> Any:  # several source rows match one target row
        return merge_delta(uri, source, "t.id = s.id").when_matched_delete()

    uri, copy, _ = merged_on_both(spark, tmp_path / "b", delete_all, data([4, 4, 5, 5, 5]))
    ours = changes_of(uri)[0]
    assert ours == changes_of(copy)[0]
    assert [r[1:3] for r in ours] == [("delete", 4), ("delete", 5)]


def test_spark_merge_inserting_only_writes_no_change_data(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, data([]).schema, ["p"], CDF)
    write_delta(spark.createDataFrame(data([1, 2])), uri)
    inserts = merge_delta(uri, spark.createDataFrame(data([2, 7])), "t.id = s.id")
    result = inserts.when_not_matched_insert_all().execute()
    assert result.version == 2
    assert result.metrics["numTargetChangeFilesAdded"] == 0
    assert [r[1:3] for r in theirs(uri) if r[0] == 2] == [("insert", 7)]


def test_read_changes_refuses_tables_without_cdf(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_delta(spark.createDataFrame(data([1])), uri)
    with pytest.raises(ChangeDataFeedError, match=r"delta\.enableChangeDataFeed"):
        read_changes(spark, uri, 0)
