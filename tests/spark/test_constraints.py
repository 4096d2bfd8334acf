"""Identity and generated columns, and row tracking, on the Spark writers (write_delta and
MERGE): values handed out and computed on write, checks, refusals, the concurrent identity
insert that loses and writes again; golden tables appended to and merged into, read back by
deltalake and DuckDB's delta extension."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import (
    ConstraintViolationError,
    DeltaProtocolError,
    IdentityColumnError,
)
from airflow_delta.engine.protocol.identity import identity_columns
from airflow_delta.engine.protocol.schema import DELTA_METADATA_KEY
from airflow_delta.engine.txn.transaction import OptimisticTransaction
from airflow_delta.spark import constraints
from airflow_delta.spark.merge import merge_delta
from airflow_delta.spark.write import write_delta
from tests.interop.test_duckdb import _connect

GOLDEN = Path("/work/shared/golden/tables")


def golden(name: str, tmp_path: Path) -> str:
    target = tmp_path / name
    shutil.copytree(GOLDEN / name, target)
    return str(target)


def rows_of(uri: str, *columns: str) -> list[tuple[Any, ...]]:
    """The table's rows as DuckDB's delta extension reads them, sorted."""
    names = ", ".join(columns)
    got = _connect().execute(f"SELECT {names} FROM delta_scan('{uri}')").fetchall()
    return sorted(got)


def deltalake_rows(uri: str, *columns: str) -> list[tuple[Any, ...]]:
    import pyarrow.dataset as ds

    table = ds.dataset(DeltaTable(uri).file_uris()).to_table(columns=list(columns))
    return sorted(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def marks(uri: str) -> dict[str, int | None]:
    return {
        c.name: c.high_water_mark
        for c in identity_columns(DeltaLog.for_table(uri).update().metadata)
    }


# -- generated columns --------------------------------------------------------------------------


def test_generated_columns_are_computed_and_checked(spark: SparkSession, tmp_path) -> None:
    uri = golden("delta__spark__dbr_8_1_generated_columns", tmp_path)  # c2 = c1 + 1
    write_delta(spark.createDataFrame([(1,), (5,)], "c1 int"), uri)
    write_delta(spark.createDataFrame([(7, 8), (9, None)], "c1 int, c2 int"), uri)
    with pytest.raises(ConstraintViolationError, match=r"(?s)generated column c2.*c2 : 3") as err:
        write_delta(spark.createDataFrame([(1, 3)], "c1 int, c2 int"), uri)
    assert uri in str(err.value)
    expected = [(1, 2), (5, 6), (7, 8), (9, 10)]
    assert rows_of(uri, "c1", "c2") == expected
    assert deltalake_rows(uri, "c1", "c2") == expected
    assert DeltaLog.for_table(uri).update().version == 2  # the failed write committed nothing


def test_merge_recomputes_generated_columns(spark: SparkSession, tmp_path) -> None:
    uri = golden("delta__spark__dbr_8_1_generated_columns", tmp_path)
    write_delta(spark.createDataFrame([(1,), (2,)], "c1 int"), uri)
    source = spark.createDataFrame([(2, "x"), (3, "y")], "c1 int, tag string")
    (
        merge_delta(uri, source, "t.c1 = s.c1")
        .when_matched_update({"c1": "s.c1 * 10"})
        .when_not_matched_insert({"c1": "s.c1"})
        .execute()
    )
    assert rows_of(uri, "c1", "c2") == [(1, 2), (3, 4), (20, 21)]


def test_unparseable_generation_expressions_are_refused(spark: SparkSession, tmp_path) -> None:
    uri = golden("delta__spark__dbr_8_1_generated_columns", tmp_path)
    log_file = Path(uri) / "_delta_log" / "00000000000000000000.json"
    log_file.write_text(log_file.read_text().replace("c1 + 1", "no_such_fn(c1)"))
    with pytest.raises(DeltaProtocolError, match=r"generation expression of column c2"):
        write_delta(spark.createDataFrame([(1,)], "c1 int"), uri)


# -- identity columns --------------------------------------------------------------------------


def test_identity_by_default_fills_missing_and_null_values(spark: SparkSession, tmp_path) -> None:
    uri = golden("delta__spark__identity_test_written_by_version_5", tmp_path)  # hwm 4
    write_delta(spark.createDataFrame([(5, "five"), (6, "six")], "part int, value string"), uri)
    assert marks(uri) == {"id": 6}
    given = spark.createDataFrame(
        [(100, 7, "explicit"), (None, 8, "null")], "id long, part int, value string"
    )
    write_delta(given, uri)
    got = rows_of(uri, "id", "value")
    assert [r for r in got if r[1] in ("five", "six", "explicit", "null")] == [
        (5, "five"),
        (6, "six"),
        (7, "null"),
        (100, "explicit"),
    ]
    assert marks(uri) == {"id": 100}  # BY DEFAULT: an explicit value beyond the mark moves it
    ids = [r[0] for r in deltalake_rows(uri, "id")]
    assert len(ids) == len(set(ids)) == 7


def test_identity_generated_always_refuses_values_and_merges(spark: SparkSession, tmp_path) -> None:
    uri = golden("delta-rs__checkpoint-v2-table", tmp_path)  # GENERATED ALWAYS, hwm 44
    assert marks(uri) == {"id": 44}
    with pytest.raises(IdentityColumnError, match=r"GENERATED ALWAYS AS IDENTITY column id"):
        write_delta(spark.createDataFrame([(1, "x")], "id long, name string"), uri)
    write_delta(spark.createDataFrame([("a",), ("b",)], "name string"), uri)
    assert marks(uri) == {"id": 46}
    source = spark.createDataFrame([("a", "A"), ("zz", "Z")], "name string, up string")
    (
        merge_delta(uri, source, "t.name = s.name")
        .when_matched_update({"name": "s.up"})
        .when_not_matched_insert({"name": "s.name"})
        .execute()
    )
    assert marks(uri) == {"id": 47}
    got = deltalake_rows(uri, "id", "name")
    assert [r for r in got if r[1] in ("A", "b", "zz")] == [(45, "A"), (46, "b"), (47, "zz")]
    ids = [r[0] for r in got]
    assert len(ids) == len(set(ids)) == 47
    with pytest.raises(IdentityColumnError, match="cannot be updated"):
        merge_delta(uri, source, "t.name = s.name").when_matched_update({"id": "1"}).execute()


def _identity_table(
    uri: str, step: int, *more: tuple[str, pa.DataType], configuration: Any = None
) -> str:
    """A new table of `id` (identity BY DEFAULT, start 10, `step`), `v` and `more` columns."""
    meta = {"delta.identity.start": 10, "delta.identity.step": step}
    meta["delta.identity.allowExplicitInsert"] = True
    field = pa.field("id", pa.int64(), metadata={DELTA_METADATA_KEY: json.dumps(meta)})
    schema = pa.schema([field, ("v", pa.int64()), *more])
    DeltaLog.create_table(uri, schema, configuration=configuration)
    return uri


@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    writes=st.lists(st.lists(st.booleans(), min_size=1, max_size=12), min_size=1, max_size=2),
    partitions=st.integers(1, 5),
    step=st.sampled_from([1, 3, -2]),
)
def test_identity_values_are_dense_and_numbered_in_parallel(
    spark: SparkSession, tmp_path_factory, writes: list[list[bool]], partitions: int, step: int
) -> None:
    # each write: per row, whether it brings its own id (one the mark never reaches)
    uri = _identity_table(str(tmp_path_factory.mktemp("ident") / "t"), step)
    expected: dict[int, int] = {}  # v -> id
    mark = None
    for w, own in enumerate(writes):
        rows = [(-step * (10**6 + k) if o else None, 100 * w + k) for k, o in enumerate(own)]
        df = spark.createDataFrame(rows, "id long, v long").repartition(partitions, "v")
        handed = [v for (i, v) in rows if i is None]
        first = 10 + step * max(0, (mark - 10) // step + 1) if mark is not None else 10
        # NULLs take the next values in the order of their partitions, then of their rows
        order = [r["v"] for r in df.select("v").collect() if r["v"] in handed]
        expected |= {v: first + step * n for n, v in enumerate(order)}
        expected |= {v: i for (i, v) in rows if i is not None}
        result = write_delta(df, uri)
        written = [expected[v] for (_, v) in rows]  # the mark follows the extreme written
        extreme = (max if step > 0 else min)(written, default=None)
        if extreme is not None and (mark is None or (extreme - mark) * step > 0):
            mark = extreme
        assert marks(uri) == {"id": mark}
        busy = df.select(F.spark_partition_id()).distinct().count()
        assert result.metrics["numFiles"] == busy  # one file per partition: no single task
    assert dict((v, i) for i, v in deltalake_rows(uri, "id", "v")) == expected


def test_identity_values_of_a_merge_follow_the_mark(spark: SparkSession, tmp_path) -> None:
    uri = _identity_table(str(tmp_path / "t"), 1, ("s", pa.string()))
    rows = spark.range(2000).selectExpr(
        "CAST(NULL AS long) AS id", "id AS v", "repeat('t', 200) AS s"
    )
    write_delta(rows, uri)
    source = spark.range(1000, 5000).selectExpr("id AS v", "repeat('s', 200) AS s")
    # adaptive execution merges the join's small output partitions: the count must see the
    # partitions the write sees (its shuffle carrying every column, as the write's does)
    conf = {  # on Spark (the session fixture's inProcessSourceBytes=0), with:
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.autoBroadcastJoinThreshold": "-1",
        "spark.sql.adaptive.advisoryPartitionSizeInBytes": "50k",
        "spark.sql.adaptive.coalescePartitions.minPartitionSize": "1k",
    }
    for key, value in conf.items():  # restored after the test (tests/conftest.py)
        spark.conf.set(key, value)
    builder = (
        merge_delta(uri, source, "t.v = s.v")
        .when_matched_update({"s": "s.s"})
        .when_not_matched_insert({"v": "s.v", "s": "s.s"})
    )
    result = builder.execute()
    assert builder.executor == "spark"
    assert result.metrics["numTargetFilesAdded"] > 1  # several partitions numbered
    got = dict((v, i) for i, v in deltalake_rows(uri, "id", "v"))
    assert sorted(got) == list(range(5000))
    assert [got[v] for v in range(2000)] == list(range(10, 2010))  # kept by the update
    assert sorted(got[v] for v in range(2000, 5000)) == list(range(2010, 5010))
    assert marks(uri) == {"id": 5009}


def test_identity_values_in_a_merge_with_change_data(spark: SparkSession, tmp_path) -> None:
    uri = _identity_table(
        str(tmp_path / "t"), 2, configuration={"delta.enableChangeDataFeed": "true"}
    )
    write_delta(spark.range(6, numPartitions=3).selectExpr("id AS v"), uri)  # ids 10..20
    source = spark.range(3, 9, numPartitions=2).selectExpr("id AS v")
    builder = (
        merge_delta(uri, source, "t.v = s.v")
        .when_matched_update({"v": "s.v + 100"})
        .when_not_matched_insert({"v": "s.v"})
    )
    result = builder.execute()
    assert builder.executor == "spark"  # the session fixture's inProcessSourceBytes=0
    assert result.metrics["numTargetChangeFilesAdded"] > 0
    got = dict((v, i) for i, v in deltalake_rows(uri, "id", "v"))
    assert {v: got[v] for v in (0, 1, 2, 103, 104, 105)} == {
        0: 10, 1: 12, 2: 14, 103: 16, 104: 18, 105: 20
    }  # fmt: skip
    assert sorted(got[v] for v in (6, 7, 8)) == [22, 24, 26]
    feed = DeltaTable(uri).load_cdf(starting_version=result.version).read_all()
    changes = pa.table(feed).select(["_change_type", "id", "v"]).to_pylist()
    by_type: dict[str, list[tuple[int, int]]] = {}
    for c in changes:
        by_type.setdefault(c["_change_type"], []).append((c["id"], c["v"]))
    assert sorted(by_type["insert"]) == sorted((got[v], v) for v in (6, 7, 8))  # as written
    assert sorted(by_type["update_preimage"]) == [(16, 3), (18, 4), (20, 5)]
    assert sorted(by_type["update_postimage"]) == [(16, 103), (18, 104), (20, 105)]
    assert marks(uri) == {"id": 26}


def test_identity_values_refuse_a_source_that_changes(
    spark: SparkSession, tmp_path, monkeypatch
) -> None:
    uri = _identity_table(str(tmp_path / "t"), 1)
    flag = tmp_path / "all-rows"

    @F.udf("boolean")
    def keep(v: int) -> bool:  # half the rows until the flag exists
        return flag.exists() or v % 2 == 0

    counted = constraints._per_partition

    def per_partition(*args: Any) -> Any:  # after the count, before the write
        flag.touch()
        return counted(*args)

    monkeypatch.setattr(constraints, "_per_partition", per_partition)
    df = spark.range(40).selectExpr("CAST(NULL AS long) AS id", "id AS v").where(keep("v"))
    with pytest.raises(Exception, match="changed while identity column id handed out values"):
        write_delta(df, uri)
    assert DeltaLog.for_table(uri).update().version == 0
    assert rows_of(uri, "id") == []


def test_concurrent_identity_inserts_both_land_with_distinct_values(
    spark: SparkSession, tmp_path, monkeypatch
) -> None:
    uri = golden("delta__spark__identity_test_written_by_version_5", tmp_path)
    original = OptimisticTransaction.commit
    raced: list[int] = []

    def commit(self: OptimisticTransaction, actions: Any, operation: Any) -> Any:
        if not raced:  # the first writer is overtaken by a second right before it commits
            raced.append(1)
            write_delta(spark.createDataFrame([(2, "winner")], "part int, value string"), uri)
        return original(self, actions, operation)

    monkeypatch.setattr(OptimisticTransaction, "commit", commit)
    result = write_delta(spark.createDataFrame([(1, "loser")], "part int, value string"), uri)
    assert result.version == 2  # written again after the winner's version 1
    got = dict((v, i) for i, v in rows_of(uri, "id", "value"))
    assert (got["winner"], got["loser"]) == (5, 6)
    assert marks(uri) == {"id": 6}
    assert len(list((Path(uri) / "_delta_log").glob("*.json"))) == 3
    on_disk = {p.name for p in Path(uri).glob("*.parquet")}
    assert len(on_disk) == 4  # the golden two, the winner's, the loser's second: none orphaned


# -- row tracking ------------------------------------------------------------------------------


def test_row_tracking_on_spark_writes(spark: SparkSession, tmp_path) -> None:
    uri = str(tmp_path / "rt")
    conf = {"delta.enableRowTracking": "true"}
    write_delta(spark.range(3).selectExpr("id", "'a' AS v"), uri, configuration=conf)
    write_delta(spark.range(2).selectExpr("id + 10 AS id", "'b' AS v"), uri)
    files = DeltaLog.for_table(uri).update().all_files()
    ranges = sorted((f.base_row_id, f.num_records, f.default_row_commit_version) for f in files)
    starts = [r[0] for r in ranges]
    assert starts[0] == 0 and all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert {r[2] for r in ranges} == {0, 1}
    assert len(deltalake_rows(uri, "id")) == len(rows_of(uri, "id")) == 5
    source = spark.createDataFrame([(1, "x")], "id long, v string")
    # the MERGE keeps the rows' ids (tests/spark/test_merge_deletion_vectors.py checks them)
    merge_delta(uri, source, "t.id = s.id").when_matched_update_all().execute()
    assert sorted(deltalake_rows(uri, "id")) == sorted(rows_of(uri, "id"))
    assert len(rows_of(uri, "id")) == 5
