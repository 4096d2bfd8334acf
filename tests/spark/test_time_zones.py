"""Predicates with timestamps in a Spark session whose time zone is not UTC.

Spark reads `ts = '2024-01-01 12:00:00'` in the session time zone; the engine, which prunes
the files a DELETE, UPDATE or MERGE reads and selects those a replaceWhere removes, reads it in
UTC. Every result here is read back by deltalake (delta-rs), an independent reader.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import DataFrame, SparkSession

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.spark import delete, merge_delta, read_delta, update, write_delta
from airflow_delta.spark.time_zones import is_utc, zone_dependent, zone_safe

ZONE = "America/Los_Angeles"  # UTC-8 in January
UTC_NOON = dt.datetime(2024, 1, 1, 12, 0, tzinfo=dt.UTC)  # 04:00 in Los Angeles
LA_NOON = dt.datetime(2024, 1, 1, 20, 0, tzinfo=dt.UTC)  # 12:00 in Los Angeles


@pytest.fixture
def los_angeles(spark: SparkSession) -> Iterator[SparkSession]:
    spark.conf.set("spark.sql.session.timeZone", ZONE)
    yield spark  # the conftest's autouse fixture restores the conf


def rows(uri: str) -> dict[int, tuple[dt.datetime, str]]:
    """id -> (ts as UTC, v), read by deltalake."""
    table = pa.table(QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT * FROM t"))
    return {r["id"]: (r["ts"].astimezone(dt.UTC), r["v"]) for r in table.to_pylist()}


def table(spark: SparkSession, uri: str, partition_by: list[str] | None) -> None:
    """Rows 1 and 2, one file each (so that the files' stats tell them apart)."""
    for row in [(1, UTC_NOON, "a"), (2, LA_NOON, "b")]:
        df = spark.createDataFrame([row], "id long, ts timestamp, v string")
        write_delta(df, uri, partition_by=partition_by)


@pytest.mark.parametrize("partition_by", [None, ["ts"]])
def test_delete_reads_timestamp_literal_in_session_zone(
    los_angeles: SparkSession, tmp_path: Path, partition_by: list[str] | None
) -> None:
    uri = str(tmp_path / "t")
    table(los_angeles, uri, partition_by)
    result = delete(los_angeles, uri, "ts = '2024-01-01 12:00:00'")
    # 12:00 in Los Angeles is row 2; before, the UTC pruning deleted row 1 (partitioned) or
    # nothing (by stats)
    assert result.metrics["numDeletedRows"] == 1
    assert rows(uri) == {1: (UTC_NOON, "a")}


@pytest.mark.parametrize("partition_by", [None, ["ts"]])
def test_update_reads_timestamp_literal_in_session_zone(
    los_angeles: SparkSession, tmp_path: Path, partition_by: list[str] | None
) -> None:
    uri = str(tmp_path / "t")
    table(los_angeles, uri, partition_by)
    update(los_angeles, uri, {"v": "'x'"}, "ts = timestamp'2024-01-01 12:00:00'")
    assert rows(uri) == {1: (UTC_NOON, "a"), 2: (LA_NOON, "x")}


@pytest.mark.parametrize("partition_by", [None, ["ts"]])
def test_merge_reads_timestamp_literal_in_session_zone(
    los_angeles: SparkSession, tmp_path: Path, partition_by: list[str] | None
) -> None:
    uri = str(tmp_path / "t")
    table(los_angeles, uri, partition_by)
    source = los_angeles.createDataFrame([(1, "y"), (2, "y")], "id long, v string")
    condition = "t.id = s.id AND t.ts = '2024-01-01 12:00:00'"
    merge_delta(uri, source, condition).when_matched_update({"v": "s.v"}).execute()
    assert rows(uri) == {1: (UTC_NOON, "a"), 2: (LA_NOON, "y")}


def test_replace_where_on_timestamp_in_other_zone_is_refused(
    los_angeles: SparkSession, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    table(los_angeles, uri, ["ts"])
    new: DataFrame = los_angeles.createDataFrame(
        [(3, LA_NOON, "c")], "id long, ts timestamp, v string"
    )
    # before: the engine removed the partition of 12:00 UTC (row 1, not named by the
    # predicate Spark checked row 3 against) and kept row 2 beside row 3
    with pytest.raises(InvalidArgumentError, match="session time zone 'America/Los_Angeles'"):
        write_delta(new, uri, mode="overwrite", replace_where="ts = '2024-01-01 12:00:00'")
    assert rows(uri) == {1: (UTC_NOON, "a"), 2: (LA_NOON, "b")}
    # with its zone written out, both read the same instant
    write_delta(new, uri, mode="overwrite", replace_where="ts = '2024-01-01 20:00:00Z'")
    assert rows(uri) == {1: (UTC_NOON, "a"), 3: (LA_NOON, "c")}


def test_zone_dependent_conjuncts(spark: SparkSession, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    df = spark.createDataFrame(
        [(1, UTC_NOON, dt.datetime(2024, 1, 1), dt.date(2024, 1, 1))],
        "id long, ts timestamp, ntz timestamp_ntz, d date",
    )
    write_delta(df, uri)
    txn = DeltaLog.for_table(uri).start_transaction()
    dependent = [
        "ts = '2024-01-01 12:00:00'",
        "ts < '2024-01-02'",
        "ts IN ('2024-01-01 12:00:00Z', '2024-01-01 13:00:00')",
        "ntz = '2024-01-01 12:00:00+02:00'",
    ]
    independent = [
        "ts = '2024-01-01 12:00:00Z'",
        "ts >= '2024-01-01T12:00:00.5+01:00'",
        "ntz = '2024-01-01 12:00:00'",
        "d = '2024-01-01'",
        "id = 1",
        "ts IS NULL",
    ]
    for conjunct in dependent:
        assert zone_dependent(txn, conjunct, ZONE), conjunct
        assert not zone_dependent(txn, conjunct, "UTC"), conjunct
    for conjunct in independent:
        assert not zone_dependent(txn, conjunct, ZONE), conjunct
    assert zone_safe(spark, txn, dependent + independent) == dependent + independent
    assert all(is_utc(z) for z in ("UTC", "Etc/UTC", "GMT", "Z", "+00:00"))
    assert not is_utc(ZONE)


@pytest.mark.parametrize("partition_by", [None, ["ts"]])
def test_read_filter_reads_timestamp_literal_in_session_zone(
    los_angeles: SparkSession, tmp_path: Path, partition_by: list[str] | None
) -> None:
    uri = str(tmp_path / "t")
    table(los_angeles, uri, partition_by)
    # before: the engine's data skipping dropped row 2's file (12:00 read as UTC)
    found = read_delta(los_angeles, uri, filter="ts = '2024-01-01 12:00:00'").collect()
    assert [r["id"] for r in found] == [2]
