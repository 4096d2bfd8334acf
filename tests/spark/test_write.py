"""Spark writes: `write_delta` in every mode and `write_files`, on the shared local session.

Every table is read back three ways and compared: the rows the test expects; this engine's
snapshot (each AddFile read with pyarrow, partition values parsed from the log); and deltalake
(delta-rs): its add actions (paths and typed partition values, which it parses itself) with the
files it lists read by pyarrow. Never `to_pyarrow_table()`/`to_pandas()`: they abort the process.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from airflow_delta.engine import CommitProperties, DeltaLog, Operation, SetTransaction
from airflow_delta.engine.errors import (
    ConstraintViolationError,
    InvalidArgumentError,
    InvalidCommitError,
    SchemaMismatchError,
    TableAlreadyExistsError,
)
from airflow_delta.engine.log.log_store import get_log_store
from airflow_delta.engine.protocol.schema import (
    DELTA_METADATA_KEY,
    HIVE_DEFAULT_PARTITION,
    parse_partition_value,
)
from airflow_delta.spark.write import OPTIMIZE_WRITE_CONF, write_delta, write_files

# -- readers -------------------------------------------------------------------------------


def canon(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as sorted JSON texts, so that lists of rows compare regardless of order."""
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def engine_rows(path: str) -> list[dict[str, Any]]:
    """The table's rows through this engine's snapshot: AddFiles read with plain pyarrow."""
    snapshot = DeltaLog.for_table(path).update()
    types = {f["name"]: f["type"] for f in json.loads(snapshot.metadata.schema_string)["fields"]}
    rows = []
    for add in snapshot.all_files():
        data = pq.ParquetFile(os.path.join(path, unquote(add.path))).read()
        assert not set(data.column_names) & set(add.partition_values), "partition column in file"
        assert data.num_rows == add.num_records
        for row in data.to_pylist():
            for column, value in add.partition_values.items():
                row[column] = parse_partition_value(value, types[column])
            rows.append({name: row.get(name) for name in types})  # a file may lack new columns
    return rows


def deltalake_adds(path: str) -> list[dict[str, Any]]:
    return pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()


def deltalake_rows(path: str) -> list[dict[str, Any]]:
    """The table's rows as deltalake sees them: its files, with its partition values."""
    table = DeltaTable(path)
    names = [f.name for f in table.schema().fields]
    uris = {os.path.basename(u): u for u in table.file_uris()}
    rows = []
    for add in deltalake_adds(path):
        data = pq.ParquetFile(uris[os.path.basename(add["path"])]).read()
        values = {k[len("partition.") :]: v for k, v in add.items() if k.startswith("partition.")}
        for row in data.to_pylist():
            row.update(values)
            rows.append({name: row.get(name) for name in names})
    return rows


def assert_rows(path: str, expected: list[dict[str, Any]]) -> None:
    """The table holds `expected`, through this engine and through deltalake."""
    assert canon(engine_rows(path)) == canon(expected)
    assert canon(deltalake_rows(path)) == canon(expected)


def commit(path: str, version: int) -> list[dict[str, Any]]:
    text = Path(path, "_delta_log", f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def commit_info(path: str, version: int) -> dict[str, Any]:
    return next(a["commitInfo"] for a in commit(path, version) if "commitInfo" in a)


def parquet_files(path: str) -> set[str]:
    """Relative paths of every parquet file under the table root (referenced or not)."""
    root = Path(path)
    return {str(p.relative_to(root)) for p in root.rglob("*.parquet")}


def referenced(path: str) -> set[str]:
    return {unquote(a.path) for a in DeltaLog.for_table(path).update().all_files()}


@pytest.fixture
def table(tmp_path: Path) -> str:
    return str(tmp_path / "table")


@pytest.fixture
def small_batches(spark: SparkSession) -> Iterator[None]:
    """Arrow batches of two rows, so that one task writes several batches."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    spark.conf.set(key, "2")
    yield
    spark.conf.set(key, before)


ROWS = [
    {"id": 1, "p": "a", "v": 1.5},
    {"id": 2, "p": "a", "v": None},
    {"id": 3, "p": "b", "v": 3.0},
    {"id": 4, "p": "c", "v": -4.25},
]
DDL = "id long, p string, v double"


def frame(spark: SparkSession, rows: list[dict[str, Any]], ddl: str = DDL) -> DataFrame:
    return spark.createDataFrame([tuple(r.values()) for r in rows], ddl)


# -- modes ---------------------------------------------------------------------------------


def test_append_creates_the_table_then_appends(spark: SparkSession, table: str) -> None:
    first = write_delta(frame(spark, ROWS), table, partition_by=["p"])
    adds = [a["add"] for a in commit(table, 0) if "add" in a]
    assert (first.version, first.attempts, first.skipped, first.metrics) == (
        0,
        1,
        False,
        {"numFiles": 3, "numOutputRows": 4, "numOutputBytes": sum(a["size"] for a in adds)},
    )
    assert first == 0 and first.operation == "WRITE" and first.table == table
    kinds = [next(iter(a)) for a in commit(table, 0)]
    assert kinds == ["commitInfo", "protocol", "metaData", "add", "add", "add"]
    more = [{"id": 5, "p": "a", "v": 5.0}, {"id": 6, "p": "d", "v": None}]
    second = write_delta(frame(spark, more), table)
    assert (second.version, second.skipped, second.metrics["numFiles"]) == (1, False, 2)
    info = commit_info(table, 1)
    assert info["operation"] == "WRITE"
    assert info["operationParameters"] == {"mode": "Append", "partitionBy": '["p"]'}
    assert info["isBlindAppend"] is True
    assert info["operationMetrics"]["numOutputRows"] == "2"
    assert_rows(table, ROWS + more)
    snapshot = DeltaLog.for_table(table).update()
    assert snapshot.partition_columns == ["p"] and snapshot.num_records == 6
    assert DeltaTable(table).version() == 1


def test_overwrite_replaces_every_file(spark: SparkSession, table: str) -> None:
    write_delta(frame(spark, ROWS), table, partition_by=["p"])
    before = DeltaLog.for_table(table).update().all_files()
    new = [{"id": 10, "p": "z", "v": 0.5}]
    result = write_delta(frame(spark, new), table, mode="overwrite")
    assert result.version == 1
    assert result.metrics["numRemovedFiles"] == 3
    assert result.metrics["numRemovedBytes"] == sum(a.size for a in before)
    removed = {a["remove"]["path"] for a in commit(table, 1) if "remove" in a}
    assert removed == {a.path for a in before}
    assert commit_info(table, 1)["operationParameters"]["mode"] == "Overwrite"
    assert_rows(table, new)


def test_replace_where_replaces_matching_partitions(spark: SparkSession, table: str) -> None:
    write_delta(frame(spark, ROWS), table, partition_by=["p"])
    new = [{"id": 30, "p": "b", "v": 30.0}, {"id": 31, "p": "b", "v": None}]
    result = write_delta(frame(spark, new), table, mode="overwrite", replace_where="p = 'b'")
    assert result.metrics["numRemovedFiles"] == 1
    assert commit_info(table, 1)["operationParameters"]["predicate"] == "p = 'b'"
    assert_rows(table, [r for r in ROWS if r["p"] != "b"] + new)


def test_replace_where_rejects_rows_outside_the_predicate(spark: SparkSession, table: str) -> None:
    write_delta(frame(spark, ROWS), table, partition_by=["p"])
    files = referenced(table)
    new = [{"id": 30, "p": "b", "v": 30.0}, {"id": 31, "p": "c", "v": None}]
    with pytest.raises(ConstraintViolationError) as info:
        write_delta(frame(spark, new), table, mode="overwrite", replace_where="p = 'b'")
    message = str(info.value)
    assert "does not conform to partial table overwrite condition or constraint 'p = 'b''" in (
        message
    )
    assert "'c'" in message
    assert info.value.constraint == "replaceWhere"
    assert DeltaLog.for_table(table).update().version == 0
    assert referenced(table) == files
    assert_rows(table, ROWS)


def test_dynamic_partition_overwrite(spark: SparkSession, table: str) -> None:
    write_delta(frame(spark, ROWS), table, partition_by=["p"])
    new = [{"id": 40, "p": "a", "v": None}, {"id": 41, "p": "e", "v": 4.0}]
    result = write_delta(
        frame(spark, new), table, mode="overwrite", partition_overwrite_mode="dynamic"
    )
    assert result.metrics["numRemovedFiles"] == 1  # only partition a had files
    assert commit_info(table, 1)["operationParameters"]["partitionOverwriteMode"] == "dynamic"
    assert_rows(table, [r for r in ROWS if r["p"] != "a"] + new)


def test_dynamic_overwrite_replaces_nan_partitions(spark: SparkSession, table: str) -> None:
    """A NaN partition value is one partition (Spark: NaN = NaN): overwriting it dynamically
    removes its old files, like any other partition's."""
    rows = (
        "SELECT id, CASE WHEN id % 2 = 0 THEN CAST('NaN' AS DOUBLE) ELSE 1.5 END AS f FROM range(6)"
    )
    write_delta(spark.sql(rows), table, partition_by=["f"])
    files = DeltaLog.for_table(table).update().all_files()
    nan_files = [a for a in files if a.partition_values["f"] == "NaN"]
    new = spark.sql("SELECT 100L AS id, CAST('NaN' AS DOUBLE) AS f")
    result = write_delta(new, table, mode="overwrite", partition_overwrite_mode="dynamic")
    assert result.metrics["numRemovedFiles"] == len(nan_files) > 0
    found = sorted((r["id"], r["f"]) for r in deltalake_rows(table))
    assert [i for i, _ in found] == [1, 3, 5, 100]
    assert math.isnan(found[-1][1]) and found[0][1] == 1.5


def test_error_and_ignore_modes(spark: SparkSession, table: str) -> None:
    created = write_delta(frame(spark, ROWS), table, mode="errorifexists")
    assert created.version == 0
    assert commit_info(table, 0)["operationParameters"]["mode"] == "ErrorIfExists"
    with pytest.raises(TableAlreadyExistsError, match="already exists"):
        write_delta(frame(spark, ROWS[:1]), table, mode="error")
    ignored = write_delta(frame(spark, ROWS[:1]), table, mode="ignore")
    assert (ignored.version, ignored.skipped, ignored.attempts, ignored.metrics) == (
        None,
        True,
        0,
        {},
    )
    assert DeltaLog.for_table(table).update().version == 0
    other = table + "-ignore"
    assert write_delta(frame(spark, ROWS[:1]), other, mode="ignore").version == 0
    assert_rows(table, ROWS)
    assert_rows(other, ROWS[:1])


def etl(version: int) -> CommitProperties:
    """The commit properties of an idempotent write of app "etl" at `version`."""
    return CommitProperties(app_transactions=[SetTransaction("etl", version)])


def test_idempotent_writes_are_skipped(spark: SparkSession, table: str) -> None:
    first = write_delta(frame(spark, ROWS[:2]), table, commit_properties=etl(1))
    assert first.version == 0
    for version in (1, 0):
        again = write_delta(frame(spark, ROWS[:2]), table, commit_properties=etl(version))
        assert again.skipped and again.version is None
    later = write_delta(frame(spark, ROWS[2:]), table, commit_properties=etl(2))
    assert later.version == 1
    assert {"appId": "etl", "version": 2} in [
        {k: a["txn"][k] for k in ("appId", "version")} for a in commit(table, 1) if "txn" in a
    ]
    assert DeltaLog.for_table(table).update().transactions == {"etl": 2}
    assert DeltaTable(table).transaction_version("etl") == 2
    assert_rows(table, ROWS)


def test_the_table_can_be_a_delta_log_or_an_open_transaction(
    spark: SparkSession, table: str
) -> None:
    log = DeltaLog.for_table(table)
    assert write_delta(frame(spark, ROWS[:1]), log).version == 0
    txn = log.start_transaction(properties=CommitProperties(user_metadata="given"))
    result = write_delta(frame(spark, ROWS[1:]), txn)
    assert (result.version, result.read_version, txn.committed) == (1, 0, True)
    assert commit_info(table, 1)["userMetadata"] == "given"
    assert_rows(table, ROWS)


def test_user_metadata_and_argument_checks(spark: SparkSession, table: str) -> None:
    properties = CommitProperties(user_metadata="nightly load")
    write_delta(frame(spark, ROWS), table, commit_properties=properties)
    assert commit_info(table, 0)["userMetadata"] == "nightly load"
    df = frame(spark, ROWS)
    with pytest.raises(ValueError, match="need mode='overwrite'"):
        write_delta(df, table, replace_where="p = 'a'")
    with pytest.raises(TypeError):
        write_delta(df, table, "append")  # type: ignore[misc]  # keyword-only after the table
    txn = DeltaLog.for_table(table).start_transaction()
    with pytest.raises(ValueError, match="pass commit_properties to the transaction"):
        write_delta(df, txn, commit_properties=properties)
    with pytest.raises(ValueError, match="unknown mode"):
        write_delta(df, table, mode="upsert")
    with pytest.raises(SchemaMismatchError, match="partitioned by"):
        write_delta(df, table, partition_by=["p"])
    assert DeltaLog.for_table(table).update().version == 0


# -- stats and files ---------------------------------------------------------------------

LONG_A = "a" * 31 + "bcdefghij"  # 40 characters
LONG_Z = "z" * 31 + "\U0010ffff" + "tail"  # its 32nd character cannot be incremented

STATS_SQL = f"""
SELECT
  id,
  CAST(id % 2 AS STRING) AS p,
  CASE WHEN id % 4 = 0 THEN NULL ELSE CAST(id AS INT) * 3 END AS i,
  CASE WHEN id = 5 THEN CAST('NaN' AS DOUBLE) ELSE id / 4 END AS nan_d,
  CAST(id / 8 AS FLOAT) AS f,
  CASE WHEN id = 2 THEN '{LONG_A}' WHEN id = 7 THEN '{LONG_Z}'
       WHEN id % 3 = 0 THEN NULL ELSE concat('s', id) END AS s,
  CAST(id * 1.25 AS DECIMAL(12, 3)) AS dec,
  date_add(DATE'2024-02-27', CAST(id AS INT)) AS d,
  TIMESTAMP'2024-01-01 00:00:00.000250' + make_interval(0, 0, 0, 0, 0, 0, id * 1.001) AS ts,
  id % 2 = 0 AS b,
  CAST(CAST(id AS STRING) AS BINARY) AS bin,
  CASE WHEN id = 3 THEN NULL ELSE named_struct('x', id * 10, 'y', IF(id = 4, NULL, 'y'))
  END AS st,
  array(id, id + 1) AS arr,
  map('k', id) AS m
FROM range(12)
"""


def expected_stats(data: pa.Table) -> dict[str, Any]:
    """The stats a file with `data` must carry, from pyarrow.compute on the file's rows."""

    def bounds(column: Any) -> tuple[Any, Any]:
        mm = pc.min_max(column)
        return mm["min"].as_py(), mm["max"].as_py()

    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls = {name: data.column(name).null_count for name in data.column_names}
    for name in ("id", "i", "f", "dec"):
        low, high = bounds(data.column(name))
        if low is not None:
            mins[name], maxs[name] = low, high
    if not pc.any(pc.is_nan(data.column("nan_d"))).as_py():
        mins["nan_d"], maxs["nan_d"] = bounds(data.column("nan_d"))
    low, high = bounds(data.column("s"))
    if low is not None:
        mins["s"] = low[:32]
        if high == LONG_A:
            maxs["s"] = "a" * 31 + "c"  # cut to 32 characters, the last one incremented
        elif high == LONG_Z:
            maxs["s"] = "z" * 30 + "{"  # U+10FFFF cannot grow: the one before it does
        else:
            maxs["s"] = high
    low, high = bounds(data.column("d"))
    mins["d"], maxs["d"] = low.isoformat(), high.isoformat()
    low, high = bounds(data.column("ts"))
    ceiling = high + dt.timedelta(microseconds=-high.microsecond % 1000)
    mins["ts"] = low.strftime("%Y-%m-%dT%H:%M:%S.") + f"{low.microsecond // 1000:03d}Z"
    maxs["ts"] = ceiling.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ceiling.microsecond // 1000:03d}Z"
    x = pc.struct_field(data.column("st"), "x")
    y = pc.struct_field(data.column("st"), "y")
    low, high = bounds(x)
    if low is not None:
        mins["st"], maxs["st"] = {"x": low}, {"x": high}
    if pc.count(y).as_py():
        mins.setdefault("st", {})["y"], maxs.setdefault("st", {})["y"] = bounds(y)
    nulls["st"] = {"x": x.null_count, "y": y.null_count}
    return {"numRecords": data.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


@pytest.mark.usefixtures("small_batches")
def test_stats_match_the_data(spark: SparkSession, table: str) -> None:
    df = spark.sql(STATS_SQL).repartition(2)
    result = write_delta(df, table, partition_by=["p"], target_file_size=1)
    assert result.metrics["numOutputRows"] == 12
    adds = DeltaLog.for_table(table).update().all_files()
    assert len(adds) > 2, "a small target file size rolls files"
    assert any(a.path.endswith(".c001.snappy.parquet") for a in adds)
    dl_adds = {a["path"]: a for a in deltalake_adds(table)}
    for add in adds:
        assert add.path.split("/")[0] == f"p={add.partition_values['p']}"
        data = pq.ParquetFile(os.path.join(table, unquote(add.path))).read()
        stats = json.loads(add.stats, parse_float=decimal.Decimal)
        want = expected_stats(data)
        for side in ("minValues", "maxValues"):
            for name in ("f", "nan_d"):  # floats: compare as floats, not decimals
                if name in stats[side]:
                    stats[side][name] = float(stats[side][name])
        assert stats == want, add.path
        theirs = dl_adds[add.path]
        assert theirs["num_records"] == data.num_rows
        assert theirs["min.id"] == want["minValues"]["id"]
        assert theirs["null_count.s"] == want["nullCount"]["s"]
    dl_rows = deltalake_rows(table)
    assert canon(engine_rows(table)) == canon(dl_rows)
    assert sorted(r["id"] for r in dl_rows) == list(range(12))


def test_num_indexed_cols_limits_the_stats_columns(spark: SparkSession, table: str) -> None:
    df = spark.sql(
        "SELECT id, 'p' AS p, named_struct('a', 1, 'b', 2) AS st, 3 AS z FROM range(0, 3, 1, 1)"
    )
    write_delta(
        df,
        table,
        partition_by=["p"],
        configuration={"delta.dataSkippingNumIndexedCols": "2"},
    )
    [add] = DeltaLog.for_table(table).update().all_files()
    stats = json.loads(add.stats)
    assert stats["minValues"] == {"id": 0, "st": {"a": 1}}
    assert stats["nullCount"] == {"id": 0, "st": {"a": 0}}


def test_special_and_null_partition_values(spark: SparkSession, table: str) -> None:
    values = ["a b", "x=y/z%", "100%", None, "", "ü", "it's", "c:d"]
    rows = [{"id": i, "s": s, "n": None if i % 3 == 0 else i % 2} for i, s in enumerate(values * 2)]
    write_delta(frame(spark, rows, "id long, s string, n int"), table, partition_by=["s", "n"])
    expected = [{**r, "s": r["s"] or None} for r in rows]  # "" is null, as in Spark
    assert_rows(table, expected)
    dirs = {p.split("/")[0] for p in parquet_files(table)}
    assert f"s={HIVE_DEFAULT_PARTITION}" in dirs and "s=x%3Dy%2Fz%25" in dirs
    ours = [
        (a.partition_values["s"], a.partition_values["n"])
        for a in DeltaLog.for_table(table).update().all_files()
    ]
    theirs = [
        (a["partition.s"], None if a["partition.n"] is None else str(a["partition.n"]))
        for a in deltalake_adds(table)
    ]
    assert sorted(ours, key=str) == sorted(theirs, key=str)
    new = [{"id": 100, "s": "it's", "n": 0}, {"id": 101, "s": None, "n": None}]
    result = write_delta(
        frame(spark, new, "id long, s string, n int"),
        table,
        mode="overwrite",
        partition_overwrite_mode="dynamic",
    )
    replaced = [r for r in expected if (r["s"], r["n"]) in {("it's", 0), (None, None)}]
    removed = [v for v in ours if v in {("it's", "0"), (None, None)}]  # their files
    assert result.metrics["numRemovedFiles"] == len(removed) >= 2
    assert_rows(table, [r for r in expected if r not in replaced] + new)


def test_tasks_write_their_own_partitions_unless_optimize_write_asks(
    spark: SparkSession, table: str, tmp_path: Path
) -> None:
    """As Spark's and delta-spark's writers, each task writes the partitions its rows fall in
    (no shuffle); `delta.autoOptimize.optimizeWrite`, or the session conf that overrides it,
    first shuffles the rows by partition value: one file per partition value."""
    df = spark.range(0, 40, 1, 4).selectExpr("id", "cast(id % 2 as string) as p")
    assert write_delta(df, table, partition_by=["p"]).metrics["numFiles"] == 8  # 4 tasks x 2
    optimized = str(tmp_path / "optimized")
    conf = {"delta.autoOptimize.optimizeWrite": "true"}
    result = write_delta(df, optimized, partition_by=["p"], configuration=conf)
    assert result.metrics["numFiles"] == 2
    for value, target, files in (("false", optimized, 8), ("true", table, 2)):
        spark.conf.set(OPTIMIZE_WRITE_CONF, value)
        try:
            assert write_delta(df, target).metrics["numFiles"] == files
        finally:
            spark.conf.unset(OPTIMIZE_WRITE_CONF)
    for target in (table, optimized):
        found = sorted((r["id"], r["p"]) for r in deltalake_rows(target))
        assert found == sorted([(i, str(i % 2)) for i in range(40)] * 2)


def test_write_files_returns_uncommitted_add_files(spark: SparkSession, table: str) -> None:
    DeltaLog.create_table(table, pa.schema([("id", pa.int64()), ("p", pa.string())]), ["p"])
    txn = DeltaLog.for_table(table).start_transaction()
    adds = write_files(txn, frame(spark, ROWS[:3], "id long, P string, v double").drop("v"))
    assert txn.has_written
    assert sorted({a.partition_values["p"] for a in adds}) == ["a", "b"]
    assert referenced(table) == set()  # written, not committed
    assert parquet_files(table) == {unquote(a.path) for a in adds}
    assert txn.commit(adds, Operation("WRITE", {"mode": "Append"})) == 1
    assert_rows(table, [{"id": r["id"], "p": r["p"]} for r in ROWS[:3]])
    with pytest.raises(SchemaMismatchError, match="partitioned by"):
        write_files(DeltaLog.for_table(table).start_transaction(), frame(spark, ROWS), ["id"])


# -- constraints ---------------------------------------------------------------------------


def _invariant(expression: str) -> dict[bytes, bytes]:
    value = json.dumps({"expression": {"expression": expression}})
    return {DELTA_METADATA_KEY: json.dumps({"delta.invariants": value}).encode()}


CONSTRAINT_CASES = {
    "not-null": (
        pa.schema([pa.field("id", pa.int64(), nullable=False), ("x", pa.int64())]),
        {},
        (None, 7),
        ["NOT NULL constraint on column id", "id : null"],
    ),
    "invariant": (
        pa.schema([("id", pa.int64()), pa.field("x", pa.int64(), metadata=_invariant("x > 3"))]),
        {},
        (9, 2),
        ["Invariant (x > 3) on column x", "x : 2"],
    ),
    "check": (
        pa.schema([("id", pa.int64()), ("x", pa.int64())]),
        {"delta.constraints.positive": "x > 0"},
        (9, -1),
        ["CHECK constraint positive (x > 0)", "x : -1"],
    ),
    "check-null": (
        pa.schema([("id", pa.int64()), ("x", pa.int64())]),
        {"delta.constraints.positive": "x > 0"},
        (9, None),
        ["CHECK constraint positive (x > 0)", "x : null"],
    ),
}


@pytest.mark.usefixtures("small_batches")
@pytest.mark.parametrize("case", sorted(CONSTRAINT_CASES))
def test_constraint_violation_commits_nothing(spark: SparkSession, table: str, case: str) -> None:
    schema, configuration, bad, needles = CONSTRAINT_CASES[case]
    DeltaLog.create_table(table, schema, configuration=configuration)
    good = [(i, 10 + i) for i in range(5)]
    # one task, whose first batches are valid and written before the bad row shows up
    df = spark.createDataFrame([*good, bad], "id long, x long").coalesce(1)
    with pytest.raises(ConstraintViolationError) as info:
        write_delta(df, table, target_file_size=1)  # a file per batch
    for needle in needles:
        assert needle in str(info.value)
    assert DeltaLog.for_table(table).update().version == 0
    assert referenced(table) == set()
    assert parquet_files(table) == set(), "the failed task removes the files it wrote"
    assert write_delta(spark.createDataFrame(good, "id long, x long"), table).version == 1
    assert canon(engine_rows(table)) == canon([{"id": i, "x": x} for i, x in good])


def test_constraint_violation_is_one_clear_error(
    spark: SparkSession, table: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The error names the table and its version and shows the row's values as SQL does; no
    task fails (no Java stack trace in the output, nothing for Spark to retry), and the files
    of the tasks whose rows were fine are removed."""
    schema = pa.schema([("id", pa.int64()), ("x", pa.string()), ("d", pa.date32())])
    DeltaLog.create_table(table, schema, configuration={"delta.constraints.short": "len(x) < 4"})
    rows = [(i, "ok", dt.date(2024, 1, 1)) for i in range(20)] + [(99, "too long", None)]
    df = spark.createDataFrame(rows, "id long, x string, d date").repartition(4)
    capfd.readouterr()
    with pytest.raises(ConstraintViolationError) as info:
        write_delta(df, table)
    message = str(info.value)
    assert message.startswith(f"Table {table}: nothing written (it stays at version 0): ")
    assert "CHECK constraint short (len(x) < 4)" in message and "x : 'too long'" in message
    assert "Fix or filter the rows" in message and "<<" not in message
    output = capfd.readouterr()
    assert "Exception in task" not in output.err + output.out
    assert "at org.apache" not in output.err + output.out
    assert parquet_files(table) == set()
    assert DeltaLog.for_table(table).update().version == 0


# -- schemas -------------------------------------------------------------------------------


def test_columns_are_matched_cast_and_filled(spark: SparkSession, table: str) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("name", pa.string()),
            ("score", pa.float64()),
            ("note", pa.string()),
        ]
    )
    DeltaLog.create_table(table, schema)
    df = spark.createDataFrame([(1.5, "x", 1), (2.5, None, 2)], "SCORE float, Name string, ID int")
    write_delta(df, table)
    expected = [
        {"id": 1, "name": "x", "score": 1.5, "note": None},
        {"id": 2, "name": None, "score": 2.5, "note": None},
    ]
    assert_rows(table, expected)
    with pytest.raises(SchemaMismatchError, match="not in the table schema: extra"):
        write_delta(spark.createDataFrame([(3, 1)], "id long, extra int"), table)
    with pytest.raises(SchemaMismatchError, match="missing non-nullable column: id"):
        write_delta(spark.createDataFrame([("y",)], "name string"), table)
    with pytest.raises(SchemaMismatchError, match="column name: cannot safely cast int"):
        write_delta(spark.createDataFrame([(3, 4)], "id long, name int"), table)
    assert DeltaLog.for_table(table).update().version == 1


def test_merge_schema_adds_nullable_columns(spark: SparkSession, table: str) -> None:
    write_delta(frame(spark, ROWS), table, partition_by=["p"])
    wider = [{"id": 7, "p": "a", "v": 7.0, "tag": "new"}]
    df = frame(spark, wider, DDL + ", tag string")
    with pytest.raises(SchemaMismatchError, match="tag"):
        write_delta(df, table)
    result = write_delta(df, table, merge_schema=True)
    assert result.version == 1
    assert [a for a in commit(table, 1) if "metaData" in a]
    fields = DeltaLog.for_table(table).update().metadata.schema
    assert fields.names == ["id", "p", "v", "tag"] and fields.field("tag").nullable
    assert_rows(table, [{**r, "tag": None} for r in ROWS] + wider)


def test_overwrite_schema_replaces_schema_and_partitioning(spark: SparkSession, table: str) -> None:
    write_delta(frame(spark, ROWS), table, partition_by=["p"])
    new = [{"k": "x", "n": 1}, {"k": "y", "n": None}]
    df = frame(spark, new, "k string, n int")
    with pytest.raises(SchemaMismatchError):
        write_delta(df, table, mode="overwrite")
    with pytest.raises(ValueError, match="need mode='overwrite'"):
        write_delta(df, table, overwrite_schema=True)
    result = write_delta(df, table, mode="overwrite", overwrite_schema=True, partition_by=["K"])
    assert result.metrics["numRemovedFiles"] == 3
    metadata = DeltaLog.for_table(table).update().metadata
    assert metadata.partition_columns == ["k"]
    assert metadata.schema.names == ["k", "n"]
    assert_rows(table, new)


def test_legacy_writer_5_table_with_change_data_feed_is_appended_to(
    spark: SparkSession, table: str
) -> None:
    """Writer version 5 implies change data feed: an append to a table that turns it on needs
    no change data files (readers take its adds as inserts)."""
    field = {
        "name": "id",
        "type": "long",
        "nullable": True,
        "metadata": {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": "col-1"},
    }
    metadata = {
        "id": "t",
        "format": {"provider": "parquet", "options": {}},
        "schemaString": json.dumps({"type": "struct", "fields": [field]}),
        "partitionColumns": [],
        "configuration": {
            "delta.columnMapping.mode": "name",
            "delta.columnMapping.maxColumnId": "1",
            "delta.enableChangeDataFeed": "true",
        },
    }
    log = Path(table, "_delta_log")
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text(
        json.dumps({"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}})
        + "\n"
        + json.dumps({"metaData": metadata})
        + "\n"
    )
    assert write_delta(spark.createDataFrame([(1,)], "id long"), table).version == 1
    assert len(parquet_files(table)) == 1


@pytest.mark.s3
def test_executors_write_to_s3(spark: SparkSession, s3_bucket: tuple[str, dict[str, str]]) -> None:
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/table"
    write_delta(frame(spark, ROWS), uri, partition_by=["p"], storage_options=options)
    store, root = get_log_store(uri, options)
    rows = []
    for add in DeltaLog.for_table(uri, options).update().all_files():
        with store.fs.open(f"{root}/{unquote(add.path)}") as f:
            rows += [
                {**r, "p": add.partition_values["p"]} for r in pq.ParquetFile(f).read().to_pylist()
            ]
    assert canon(rows) == canon(ROWS)
    theirs = pa.table(DeltaTable(uri, storage_options=options).get_add_actions(flatten=True))
    assert sorted(theirs.column("partition.p").to_pylist()) == ["a", "b", "c"]
    assert pc.sum(theirs.column("num_records")).as_py() == len(ROWS)


def test_a_missing_nullable_column_is_written_as_null_with_a_warning(
    spark: SparkSession, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    generated = {DELTA_METADATA_KEY: json.dumps({"delta.generationExpression": "id * 2"}).encode()}
    twice = pa.field("twice", pa.int64(), metadata=generated)
    schema = pa.schema([("id", pa.int64()), ("note", pa.string()), twice])
    DeltaLog.create_table(table, schema)
    with caplog.at_level("WARNING", logger="airflow_delta.spark.write"):
        write_delta(spark.createDataFrame([(1,)], "id long"), table)
    # a generated (or identity) column is computed, not written as NULL: no warning for it
    assert f"Writing to table {table}: the DataFrame has no column note; written as NULL" in (
        caplog.text
    )
    assert engine_rows(table) == [{"id": 1, "note": None, "twice": 2}]


@pytest.mark.parametrize(
    ("columns", "partition_by", "error", "problem"),
    [
        (["id", "'a' AS k"], ["k", "K"], InvalidCommitError, "name a column twice"),
        (["id", "'a' AS k"], ["k", "k"], InvalidCommitError, "name a column twice"),
        (["id", "'a' AS k"], ["id", "k"], InvalidCommitError, "cannot use all columns"),
        (["id", "NULL AS n"], None, SchemaMismatchError, "column n has no type"),
        (
            ["id", "'a' AS k", "named_struct('x', NULL) AS s"],
            ["k"],
            SchemaMismatchError,
            "column s.x has no type",
        ),
    ],
)
def test_tables_other_engines_cannot_read_are_refused_before_the_job(
    spark: SparkSession,
    tmp_path: Path,
    columns: list[str],
    partition_by: list[str] | None,
    error: type[Exception],
    problem: str,
) -> None:
    """A repeated partition column committed `["k","k"]` (deltalake: "Duplicate partition
    column"); every column a partition column and a NullType column crashed the executors'
    file writer with a bare PythonException. Typed errors naming the table, nothing written."""
    uri = tmp_path / "t"
    df = spark.range(1).selectExpr(*columns)
    with pytest.raises(error, match=re.escape(problem)) as caught:
        write_delta(df, str(uri), partition_by=partition_by)
    assert str(uri) in str(caught.value)
    assert not uri.exists() or not any(uri.rglob("*.*"))


def test_a_partition_value_delta_cannot_hold_fails_on_the_driver(
    spark: SparkSession, table: str
) -> None:
    """A binary partition value that is not UTF-8, met by an executor: InvalidArgumentError on
    the driver naming the table, the column and the version; no file left behind."""
    first = spark.createDataFrame([(0, bytearray(b"ok"))], "id long, b binary")
    write_delta(first, table, partition_by=["b"])
    rows = [(1, bytearray(b"a")), (2, bytearray(b"\xff\xfe"))]
    df = spark.createDataFrame(rows, "id long, b binary")
    before = parquet_files(table)
    with pytest.raises(InvalidArgumentError, match=r"partition column b: .*stays at version 0"):
        write_delta(df, table)
    assert parquet_files(table) == before
    assert DeltaLog.for_table(table).update().version == 0
