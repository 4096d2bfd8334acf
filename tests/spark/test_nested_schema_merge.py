"""write_delta(merge_schema=True) adds nested fields as delta-spark does (inside structs, array
elements and map values, nullable, after the existing ones), and a later write without them
(or with the fields in another order) stores NULL there: read back by Spark and the engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog, read_table
from airflow_delta.engine.errors import SchemaMismatchError
from airflow_delta.spark import read_delta, write_delta

#: (the table's column type, a later write's type with fields the table lacks, its value, the
#: value an old row reads back as after the merge)
CASES = {
    "struct": (
        "struct<a: bigint>",
        "struct<b: string, a: bigint>",
        {"b": "x", "a": 2},
        {"a": 1, "b": None},
    ),
    "deeper": (
        "struct<a: struct<x: bigint>>",
        "struct<a: struct<y: double, x: bigint>, c: int>",
        {"a": {"y": 0.5, "x": 2}, "c": 3},
        {"a": {"x": 1, "y": None}, "c": None},
    ),
    "array element": (
        "array<struct<a: bigint>>",
        "array<struct<a: bigint, b: string>>",
        [{"a": 2, "b": "x"}],
        [{"a": 1, "b": None}],
    ),
    "map value": (
        "map<string, struct<a: bigint>>",
        "map<string, struct<a: bigint, b: string>>",
        {"k": {"a": 2, "b": "x"}},
        {"k": {"a": 1, "b": None}},
    ),
}
OLD_VALUES = {
    "struct": {"a": 1},
    "deeper": {"a": {"x": 1}},
    "array element": [{"a": 1}],
    "map value": {"k": {"a": 1}},
}


def _plain(value: Any) -> Any:
    """A value as compared here: maps as dicts whatever reader gave them (Row, list of pairs)."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=False)
    pairs = isinstance(value, list) and value and isinstance(value[0], tuple)
    if pairs and not hasattr(value[0], "asDict"):  # a map as pyarrow gives it
        value = dict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("case", sorted(CASES))
def test_merge_schema_adds_nested_fields(spark: SparkSession, tmp_path: Path, case: str) -> None:
    old_type, new_type, new_value, old_after = CASES[case]
    table = str(tmp_path / "t")
    write_delta(spark.createDataFrame([(1, OLD_VALUES[case])], f"id long, c {old_type}"), table)
    evolved = spark.createDataFrame([(2, new_value)], f"id long, c {new_type}")
    with pytest.raises(SchemaMismatchError, match=r"column c: .*pass merge_schema=True"):
        write_delta(evolved, table)
    assert write_delta(evolved, table, merge_schema=True).version == 1
    # the old shape again, without merge_schema: the new fields are NULL
    write_delta(spark.createDataFrame([(3, OLD_VALUES[case])], f"id long, c {old_type}"), table)
    expected = {1: old_after, 2: new_value, 3: old_after}
    if case == "struct":  # the table's field order
        expected[2] = {"a": 2, "b": "x"}
    if case == "deeper":
        expected[2] = {"a": {"x": 2, "y": 0.5}, "c": 3}
    by_spark = {r["id"]: _plain(r["c"]) for r in read_delta(spark, table).collect()}
    by_engine = {r["id"]: _plain(r["c"]) for r in read_table(table).to_pylist()}
    assert by_spark == expected
    assert by_engine == expected
    assert json.dumps(by_spark[1]) == json.dumps(old_after)  # field order as in the table
    metadata = DeltaLog.for_table(table).update().metadata
    assert len(json.loads(metadata.schema_string or "{}")["fields"]) == 2
