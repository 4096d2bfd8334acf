"""Writes to column-mapped tables (`delta.columnMapping.mode` name and id): new tables, tables
delta-spark and delta-rs wrote (golden tables), appends, MERGE and schema evolution; checked
with this package's reader and with deltalake."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import InvalidCommitError
from airflow_delta.spark import merge_delta, read_delta, write_delta
from tests.spark.test_read import TABLES

ROWS = (
    "SELECT id, CAST(id % 2 AS STRING) AS `the part`, "
    "named_struct('a', id, 'b', CAST(id AS STRING)) AS s, array(named_struct('x', id)) AS arr "
    "FROM range({start}, {end})"
)


def deltalake_rows(path: str, columns: str) -> list[dict[str, Any]]:
    """The rows deltalake reads, sorted by id (its SQL engine applies column mapping)."""
    query = QueryBuilder().register("t", DeltaTable(path))
    table = pa.table(query.execute(f"SELECT {columns} FROM t ORDER BY id").read_all())
    return table.to_pylist()


def our_rows(spark: SparkSession, path: str) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in read_delta(spark, path).orderBy("id").collect()]


@pytest.mark.parametrize("mode", ["name", "id"])
def test_new_column_mapped_table(spark: SparkSession, tmp_path: Path, mode: str) -> None:
    path = str(tmp_path / "t")
    write_delta(
        spark.sql(ROWS.format(start=0, end=6)),
        path,
        partition_by=["the part"],
        configuration={"delta.columnMapping.mode": mode},
    )
    write_delta(spark.sql(ROWS.format(start=100, end=104)), path)

    snapshot = DeltaLog.for_table(path).update()
    assert "columnMapping" in (snapshot.protocol.writer_features or [])
    fields = json.loads(snapshot.metadata.schema_string)["fields"]
    physical = {f["name"]: f["metadata"]["delta.columnMapping.physicalName"] for f in fields}
    ids = {f["name"]: f["metadata"]["delta.columnMapping.id"] for f in fields}
    nested = fields[2]["type"]["fields"]
    assert all("delta.columnMapping.id" in f["metadata"] for f in nested)
    assert snapshot.metadata.configuration["delta.columnMapping.maxColumnId"] == "7"
    for add in snapshot.files().to_pylist():
        assert [k for k, _ in add["partitionValues"]] == [physical["the part"]]
        assert set(json.loads(add["stats"])["minValues"]) == {physical["id"], physical["s"]}
        file_schema = pq.read_schema(Path(path, add["path"]))
        assert file_schema.names == [physical["id"], physical["s"], physical["arr"]]
        assert (
            file_schema.field(physical["id"]).metadata[b"PARQUET:field_id"]
            == str(ids["id"]).encode()
        )

    expected = [
        {"id": i, "the part": str(i % 2), "s": {"a": i, "b": str(i)}, "arr": [{"x": i}]}
        for i in [*range(6), *range(100, 104)]
    ]
    assert our_rows(spark, path) == expected
    if mode == "name":  # deltalake reads name mode; id mode is read here only
        assert deltalake_rows(path, 'id, "the part", s, arr') == expected

    source = spark.sql(
        "SELECT * FROM VALUES (1L, '1', named_struct('a', 1000L, 'b', 'upd'), "
        "array(named_struct('x', 1L))), (7L, '1', named_struct('a', 7L, 'b', '7'), "
        "array(named_struct('x', 7L))) AS v(id, `the part`, s, arr)"
    )
    metrics = (
        merge_delta(path, source, "t.id = s.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
        .metrics
    )
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (1, 1)
    evolved = spark.sql("SELECT 8L AS id, '0' AS `the part`, 'e' AS extra")
    write_delta(evolved, path, merge_schema=True)
    metadata = DeltaLog.for_table(path).update().metadata
    added = json.loads(metadata.schema_string)["fields"][-1]
    assert added["name"] == "extra" and added["metadata"]["delta.columnMapping.id"] == 8
    assert metadata.configuration["delta.columnMapping.maxColumnId"] == "8"

    rows = {r["id"]: r for r in our_rows(spark, path)}
    assert rows[1]["s"] == {"a": 1000, "b": "upd"} and rows[7]["s"] == {"a": 7, "b": "7"}
    assert rows[8]["extra"] == "e" and rows[0]["extra"] is None and len(rows) == 12
    if mode == "name":
        assert [r["id"] for r in deltalake_rows(path, "id, extra")] == sorted(rows)


@pytest.mark.parametrize(
    "name",
    [
        "delta-rs__table_with_column_mapping",  # reader 2 / writer 5, partition column with spaces
        "delta__table-with-columnmapping-mode-name",
        "delta__dv-with-columnmapping",  # deletion vectors, partitions, a checkpoint
        "delta__data-reader-timestamp_ntz-id-mode",  # id mode, timestamp_ntz partitions
    ],
)
def test_append_and_merge_into_golden_column_mapped_tables(
    spark: SparkSession, tmp_path: Path, name: str
) -> None:
    path = str(tmp_path / name)
    shutil.copytree(TABLES / name, path)
    before = read_delta(spark, path)
    n = before.count()
    some = before.limit(3).cache()
    version = write_delta(some, path).version
    assert read_delta(spark, path).count() == n + 3
    key = before.columns[0]
    result = merge_delta(path, some, f"t.`{key}` <=> s.`{key}`").when_matched_delete().execute()
    metrics = result.metrics
    assert result.version == version + 1 and metrics["numTargetRowsDeleted"] >= 6
    after = read_delta(spark, path)
    assert after.count() == n + 3 - metrics["numTargetRowsDeleted"]
    if "id-mode" not in name:
        query = QueryBuilder().register("t", DeltaTable(path))
        counted = pa.table(query.execute("SELECT count(*) AS n FROM t").read_all())
        assert counted.to_pylist() == [{"n": after.count()}]


def test_engine_maps_new_tables_and_refuses_unmapped_fields(tmp_path: Path) -> None:
    log = DeltaLog.create_table(
        str(tmp_path / "t"),
        pa.schema([("id", pa.int64()), ("s", pa.struct([("a", pa.int32())]))]),
        configuration={"delta.columnMapping.mode": "name"},
    )
    metadata = log.update().metadata
    assert metadata.configuration["delta.columnMapping.maxColumnId"] == "3"
    assert metadata.physical_partition_columns == []
    schema = json.loads(metadata.schema_string)
    unmapped = {"name": "new", "type": "long", "nullable": True, "metadata": {}}
    txn = log.start_transaction()
    with pytest.raises(InvalidCommitError, match=r"'new' has no delta\.columnMapping\.id"):
        txn.update_metadata(
            dataclasses.replace(
                metadata,
                schema_string=json.dumps({**schema, "fields": [*schema["fields"], unmapped]}),
            )
        )
    widened = metadata.with_schema({**schema, "fields": [*schema["fields"], unmapped]})
    log.start_transaction().update_metadata(widened)  # mapped: accepted
    new_field = json.loads(widened.schema_string)["fields"][-1]
    assert new_field["metadata"]["delta.columnMapping.id"] == 4
