"""Golden tables with variant columns (delta-spark's, `variantType` and its preview) written by
the Spark writer, the Spark MERGE and the in-process DELETE: variants round-trip through Spark,
null variants included; our data files hold them as delta-spark does (a struct of two required
binaries); their stats carry a nullCount and no min/max; deltalake reads the result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_delta.engine import DeltaLog, delete
from airflow_delta.spark.merge import merge_delta
from airflow_delta.spark.read import read_delta
from airflow_delta.spark.write import write_delta

GOLDEN = Path("/work/shared/golden/tables")
TABLES = ["delta__spark-variant-checkpoint", "delta-rs__spark-variant-checkpoint"]


def _json_of(spark_df, ids: list[int]) -> dict[int, str | None]:
    rows = spark_df.filter(F.col("id").isin(ids)).selectExpr("id", "to_json(v) AS j").collect()
    return {r["id"]: r["j"] for r in rows}


@pytest.mark.parametrize("name", TABLES)
def test_variant_columns_are_written(spark: SparkSession, tmp_path: Path, name: str) -> None:
    uri = str(tmp_path / name)
    shutil.copytree(GOLDEN / name, uri)
    before = read_delta(spark, uri)
    count = before.count()
    ids = sorted({r["id"] for r in before.select("id").collect()})

    new = before.filter(F.col("id").isin(ids[:2])).withColumn("id", F.col("id") + 1000)
    new = new.withColumn(
        "v", F.when(F.col("id") % 2 == 0, F.expr("""parse_json('{"n": [1, 2]}')"""))
    )  # one null variant, one new one
    appended = write_delta(new.coalesce(1), uri)
    commit = Path(uri, "_delta_log", f"{appended.version:020d}.json").read_text().splitlines()
    (add,) = [json.loads(line)["add"] for line in commit if '"add"' in line]
    stats = json.loads(add["stats"])
    assert "v" not in stats["minValues"] and "v" not in stats["maxValues"]
    assert stats["nullCount"]["v"] == new.filter("v IS NULL").count() > 0
    file = pq.ParquetFile(Path(uri, add["path"])).schema_arrow
    variant = file.field("v").type
    assert [(f.name, f.nullable) for f in variant] == [("value", False), ("metadata", False)]

    source = spark.sql(f"""SELECT {ids[2]} AS id, parse_json('{{"merged": true}}') AS v""")
    merge_delta(uri, source, "t.id = s.id").when_matched_update({"v": "s.v"}).execute()
    delete(uri, f"id = {ids[3]}")  # in process: rewrites a file of variants

    after = read_delta(spark, uri)
    assert after.count() == count + new.count() - before.filter(F.col("id") == ids[3]).count()
    got = _json_of(after, [ids[0] + 1000, ids[1] + 1000, ids[2]])
    for i in (ids[0] + 1000, ids[1] + 1000):
        assert got[i] == (None if i % 2 else '{"n":[1,2]}')
    assert got[ids[2]] == '{"merged":true}'
    assert after.filter(F.col("id") == ids[3]).count() == 0
    assert DeltaTable(uri).to_pyarrow_table().num_rows == after.count()
    assert DeltaLog.for_table(uri).update().version == appended.version + 2
