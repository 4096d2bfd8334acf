"""Spark's own parquet writer (`spark/native_write.py`) against the writer of Python tasks.

The differential test writes the same rows through both writers (the session conf
NATIVE_WRITE_CONF picks one) and compares, partition by partition, the rows and the Delta
stats of the files: numRecords, minValues, maxValues and nullCount, with nulls, NaN and
infinities, strings longer than Delta's 32-character prefix and than parquet's 4 KiB footer
statistics, timestamps with microseconds, decimals, dates, booleans and binaries.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_delta.engine import DeltaLog
from airflow_delta.spark import read_delta, write_delta
from airflow_delta.spark.native_write import NATIVE_WRITE_CONF

DDL = (
    "id long, i int, d double, f float, dec decimal(12,2), s string, ts timestamp, "
    "tsn timestamp_ntz, day date, b boolean, bin binary, p string"
)

_strings = st.one_of(
    st.text(max_size=40),
    st.text(min_size=1, max_size=3).map(lambda s: s * 40),  # past the 32-character prefix
    st.text(min_size=1, max_size=2).map(lambda s: s * 3000),  # past parquet's 4 KiB stats
    st.just("\U0010ffff" * 33),  # no upper bound above a prefix of the last code point
)
_times = st.datetimes(min_value=dt.datetime(1970, 1, 2), max_value=dt.datetime(2200, 1, 1))
_rows = st.lists(
    st.fixed_dictionaries(
        {
            "i": st.none() | st.integers(-(2**31), 2**31 - 1),
            "d": st.none() | st.floats(allow_nan=True, allow_infinity=True),
            "f": st.none() | st.floats(width=32, allow_nan=False, allow_infinity=True),
            "dec": st.none()
            | st.decimals(min_value=-(10**9), max_value=10**9, places=2, allow_nan=False),
            "s": st.none() | _strings,
            "ts": st.none() | _times,
            "tsn": st.none() | _times,
            "day": st.none() | st.dates(min_value=dt.date(1900, 1, 1)),
            "b": st.none() | st.booleans(),
            "bin": st.none() | st.binary(max_size=8),
            "p": st.sampled_from(["a", "b c", "x=y/z%", "", None]),
        }
    ),
    min_size=1,
    max_size=12,
)


@pytest.fixture
def native_conf(spark: SparkSession) -> Iterator[None]:
    """The session asks for Spark's parquet writer whenever it can write the rows during the
    test (the default, "auto", also does in the test's local session)."""
    spark.conf.set(NATIVE_WRITE_CONF, "true")
    yield
    spark.conf.unset(NATIVE_WRITE_CONF)


def _write(spark: SparkSession, rows: list[dict[str, Any]], path: str, native: bool) -> None:
    spark.conf.set(NATIVE_WRITE_CONF, str(native).lower())
    names = [column.split()[0] for column in DDL.split(", ")][1:]
    data = [(n, *(r[c] for c in names)) for n, r in enumerate(rows)]
    df = spark.createDataFrame(data, DDL).coalesce(1)  # one task: a file per partition
    write_delta(df, path, partition_by=["p"])


def _files(path: str) -> dict[str | None, tuple[list[Any], dict[str, Any]]]:
    """Partition value -> (the rows of its one file, sorted by id; the file's stats)."""
    found: dict[str | None, tuple[list[Any], dict[str, Any]]] = {}
    for add in DeltaLog.for_table(path).update().all_files():
        assert add.partition_values["p"] not in found, "one file per partition"
        data = pq.read_table(os.path.join(path, unquote(add.path))).to_pylist()
        found[add.partition_values["p"]] = (sorted(data, key=lambda r: r["id"]), add.stats)
    return found


def _canon(value: Any) -> Any:
    """Stats and rows made comparable: NaN equal to NaN."""
    if isinstance(value, dict):
        return {k: _canon(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canon(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=_rows)
def test_native_stats_equal_the_python_writers(
    spark: SparkSession, native_conf: None, rows: list[dict[str, Any]]
) -> None:
    root = tempfile.mkdtemp()
    try:
        native, python = f"{root}/native", f"{root}/python"
        _write(spark, rows, native, True)
        _write(spark, rows, python, False)
        ours, theirs = _files(native), _files(python)
        assert ours.keys() == theirs.keys()
        for key, (data, stats) in ours.items():
            their_data, their_stats = theirs[key]
            assert _canon(data) == _canon(their_data), key
            assert _canon(json.loads(stats, parse_float=decimal.Decimal)) == _canon(
                json.loads(their_stats, parse_float=decimal.Decimal)
            ), key
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _leftovers(path: Path) -> list[str]:
    """Everything under the table but the log and the data files it references."""
    referenced = {unquote(a.path) for a in DeltaLog.for_table(str(path)).update().all_files()}
    return sorted(
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file()
        and "_delta_log" not in p.parts
        and str(p.relative_to(path)) not in referenced
    )


def test_native_write_leaves_only_its_data_files(
    spark: SparkSession, native_conf: None, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    df = spark.range(0, 100, 1, 1).selectExpr(  # one task: a file per partition
        "id", "cast(id % 3 as string) as p", "current_timestamp() as t"
    )
    result = write_delta(df, str(table), partition_by=["p"])
    assert result.metrics["numFiles"] == 3 and result.metrics["numOutputRows"] == 100
    assert _leftovers(table) == []  # no _SUCCESS, _temporary, .crc or staging directory
    assert sorted(p.name for p in table.iterdir()) == ["_delta_log", "p=0", "p=1", "p=2"]


def test_a_failed_native_write_leaves_no_file(
    spark: SparkSession, native_conf: None, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    write_delta(spark.range(3), str(table))
    before = sorted(p.name for p in table.iterdir())
    boom = F.when(F.col("id") == 999, F.raise_error(F.lit("boom"))).otherwise(F.col("id"))
    failing = spark.range(0, 1000, 1, 2).withColumn("id", boom)  # the first task writes a file
    with pytest.raises(Exception, match="boom"):
        write_delta(failing, str(table))
    assert DeltaLog.for_table(str(table)).update().version == 0
    assert _leftovers(table) == []
    assert sorted(p.name for p in table.iterdir()) == before


def test_writes_it_does_not_cover_use_python_tasks(
    spark: SparkSession, native_conf: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: Any) -> None:
        raise AssertionError("written by Spark's parquet writer")

    monkeypatch.setattr("airflow_delta.spark.write.write_native", refused)
    table = str(tmp_path / "t")
    df = spark.range(0, 4, 1, 1).selectExpr("id", "array(id) as xs", "'a' as p")
    assert write_delta(df, table, partition_by=["p"]).metrics["numFiles"] == 1
    stats = json.loads(next(iter(DeltaLog.for_table(table).update().all_files())).stats)
    assert stats["nullCount"] == {"id": 0, "xs": 0}
    spark.conf.set(NATIVE_WRITE_CONF, "false")
    assert write_delta(spark.range(2), str(tmp_path / "u")).metrics["numOutputRows"] == 2


@pytest.fixture
def native_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per write that goes through Spark's parquet writer during the test."""
    import airflow_delta.spark.write as write_module

    used: list[int] = []
    native = write_module.write_native

    def counted(*args: Any) -> Any:
        used.append(1)
        return native(*args)

    monkeypatch.setattr(write_module, "write_native", counted)
    return used


def test_auto_chooses_it_in_a_local_session(
    spark: SparkSession, tmp_path: Path, native_writes: list[int]
) -> None:
    """By default ("auto") a local session writes partitioned and unpartitioned tables with
    Spark's parquet writer, "false" with the Python tasks; a value other than true, false or
    auto is an error naming the conf."""
    used = native_writes
    df = spark.range(0, 6, 1, 2).selectExpr("id", "cast(id % 2 as string) as p")
    for conf, native in ((None, [1, 1]), ("AUTO ", [1, 1]), ("false", [])):
        if conf is not None:
            spark.conf.set(NATIVE_WRITE_CONF, conf)
        try:
            flat, parts = str(tmp_path / f"flat-{conf}"), str(tmp_path / f"parts-{conf}")
            assert write_delta(df, flat).metrics["numOutputRows"] == 6
            assert write_delta(df, parts, partition_by=["p"]).metrics["numOutputRows"] == 6
            assert used == native
        finally:
            spark.conf.unset(NATIVE_WRITE_CONF)
        used.clear()
        got = DeltaTable(parts).to_pyarrow_table().to_pylist()
        assert sorted((r["id"], r["p"]) for r in got) == [(i, str(i % 2)) for i in range(6)]
    spark.conf.set(NATIVE_WRITE_CONF, "yes")
    try:
        with pytest.raises(ValueError, match=re.escape(f"{NATIVE_WRITE_CONF}='yes'")):
            write_delta(df, str(tmp_path / "bad"))
    finally:
        spark.conf.unset(NATIVE_WRITE_CONF)


def test_an_empty_frame_adds_no_file(
    spark: SparkSession, native_conf: None, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    result = write_delta(spark.range(0), str(table))
    assert (result.version, result.metrics["numFiles"]) == (0, 0)
    assert sorted(p.name for p in table.iterdir()) == ["_delta_log"]


def test_spark_rewrites_use_it_when_enabled(
    spark: SparkSession, tmp_path: Path, native_writes: list[int]
) -> None:
    """With the conf on, MERGE, UPDATE and DELETE on Spark write their plain rewrites with
    Spark's parquet writer too, and deltalake reads what the Python tasks would have written."""
    from airflow_delta.spark import delete, merge_delta, update
    from airflow_delta.spark.merge_source import IN_PROCESS_SOURCE_BYTES

    used = native_writes
    spark.conf.set(IN_PROCESS_SOURCE_BYTES, "0")  # the MERGE runs on Spark
    results = {}
    try:
        for kind in ("native", "python"):
            spark.conf.set(NATIVE_WRITE_CONF, str(kind == "native").lower())
            table = str(tmp_path / kind)
            write_delta(spark.range(0, 10, 1, 1).selectExpr("id", "id * 2 as v"), table)
            source = spark.range(5, 15, 1, 1).selectExpr("id", "id * 100 as v")
            builder = merge_delta(table, source, "t.id = s.id")
            builder.when_matched_update_all().when_not_matched_insert_all().execute()
            assert builder.executor == "spark"
            update(spark, table, {"v": "v + 1"}, "id < 3")
            delete(spark, table, "id = 14")
            results[kind] = sorted(
                DeltaTable(table).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]
            )
    finally:
        spark.conf.unset(NATIVE_WRITE_CONF)
        spark.conf.unset(IN_PROCESS_SOURCE_BYTES)
    assert len(used) == 4  # the write, MERGE, UPDATE and DELETE of the native table
    assert results["native"] == results["python"]
    expected = [{"id": i, "v": i * 2 + (i < 3)} for i in range(5)]
    assert results["native"] == expected + [{"id": i, "v": i * 100} for i in range(5, 14)]


def test_partition_values_spark_names_like_null_stay_apart(
    spark: SparkSession, native_conf: None, tmp_path: Path
) -> None:
    """The string `__HIVE_DEFAULT_PARTITION__` (Spark's directory name for NULL) stays that
    string, and values starting with `%` (the prefix that tells it apart) stay as written.
    Before, Spark's parquet writer put it in NULL's directory and the log held NULL."""
    table = str(tmp_path / "t")
    values = ["__HIVE_DEFAULT_PARTITION__", None, "%", "%__HIVE_DEFAULT_PARTITION__", "%%a", "a"]
    df = spark.createDataFrame(list(enumerate(values)), "id long, p string").coalesce(1)
    write_delta(df, table, partition_by=["p"])
    expected = sorted(enumerate(values), key=str)
    logged = {add.partition_values["p"] for add in DeltaLog.for_table(table).update().all_files()}
    assert logged == set(values)
    query = QueryBuilder().register("t", DeltaTable(table)).execute("SELECT id, p FROM t")
    assert sorted(((r["id"], r["p"]) for r in pa.table(query).to_pylist()), key=str) == expected
    assert sorted((tuple(r) for r in read_delta(spark, table).collect()), key=str) == expected
