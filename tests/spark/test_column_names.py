"""Column names that PySpark resolves as paths: `p.c` (field `c` of `p`) and names with a
backquote, through the Python writing tasks (`write_files`), DELETE, UPDATE and MERGE. Read
back by deltalake (delta-rs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import SparkSession

from airflow_delta.spark import delete, merge_delta, update, write_delta
from airflow_delta.spark.native_write import NATIVE_WRITE_CONF

SCHEMA = "id long, `p.c` string, `v``w` string"


@pytest.fixture
def python_tasks(spark: SparkSession) -> Iterator[SparkSession]:
    spark.conf.set(NATIVE_WRITE_CONF, "false")
    yield spark  # the conftest's autouse fixture restores the conf


def rows(uri: str) -> list[dict[str, Any]]:
    query = QueryBuilder().register("t", DeltaTable(uri))
    return sorted(pa.table(query.execute("SELECT * FROM t")).to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("partition_by", [None, ["p.c"]])
def test_dotted_and_backquoted_names(
    python_tasks: SparkSession, tmp_path: Path, partition_by: list[str] | None
) -> None:
    uri = str(tmp_path / "t")
    df = python_tasks.createDataFrame([(1, "a", "x"), (2, "b", "y"), (3, "c", "z")], SCHEMA)
    # before: PySpark's mapInArrow raised AnalysisException UNRESOLVED_COLUMN for `p`.`c`
    write_delta(df, uri, partition_by=partition_by)
    assert rows(uri) == [
        {"id": 1, "p.c": "a", "v`w": "x"},
        {"id": 2, "p.c": "b", "v`w": "y"},
        {"id": 3, "p.c": "c", "v`w": "z"},
    ]
    delete(python_tasks, uri, "`p.c` = 'a' OR id = 0")
    update(python_tasks, uri, {"`v``w`": "upper(`v``w`)"}, "`p.c` = 'b' OR id = 0")
    source = python_tasks.createDataFrame([(3, "c", "new"), (4, "d", "ins")], SCHEMA)
    condition = "t.id = s.id AND t.`p.c` = s.`p.c`"
    merge_delta(
        uri, source, condition
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    assert rows(uri) == [
        {"id": 2, "p.c": "b", "v`w": "Y"},
        {"id": 3, "p.c": "c", "v`w": "new"},
        {"id": 4, "p.c": "d", "v`w": "ins"},
    ]
