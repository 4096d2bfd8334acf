"""The in-process MERGE into tables with nested columns (struct, list, map, at any depth): rows
are copied, updated and inserted with their nested values as deltalake's MERGE gives them, also
under column mapping (nested physical names); a source whose nested type differs from the
table's (fields in another order, another field) is left to Spark, which resolves it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_delta.engine import DeltaLog, read_table
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import UnsupportedMergeError

INFO = pa.struct([("a", pa.int64()), ("b", pa.string())])
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("info", INFO),
        ("tags", pa.list_(pa.struct([("x", pa.int32())]))),
        ("m", pa.map_(pa.string(), pa.int64())),
    ]
)
TARGET = pa.table(
    {
        "id": [1, 2, 3],
        "info": [{"a": 1, "b": "x"}, None, {"a": 3, "b": None}],
        "tags": [[{"x": 1}], [], None],
        "m": [[("k", 1)], None, []],
    },
    SCHEMA,
)
SOURCE = pa.table(
    {
        "id": [2, 4],
        "info": [{"a": 20, "b": "y"}, {"a": 40, "b": "z"}],
        "tags": [[{"x": 5}, {"x": None}], None],
        "m": [[("q", 2)], None],
    },
    SCHEMA,
)


def _upsert(uri: str, source: pa.Table = SOURCE) -> str:
    builder = merge_arrow(uri, source, "t.id = s.id")
    builder.when_matched_update_all().when_not_matched_insert_all().execute()
    return builder.executor


def _sql_rows(uri: str) -> list[dict]:
    found = QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT * FROM t ORDER BY id")
    return pa.table(found.read_all()).to_pylist()


def test_nested_columns_merge_as_deltalake_merges_them(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    write_deltalake(ours, TARGET)
    write_deltalake(theirs, TARGET)
    assert _upsert(ours) == "in-process"
    DeltaTable(theirs).merge(
        SOURCE, "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    expected = _sql_rows(theirs)
    assert _sql_rows(ours) == expected
    assert read_table(ours).sort_by("id").to_pylist() == expected


def test_nested_columns_under_column_mapping(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA, configuration={"delta.columnMapping.mode": "name"})
    assert _upsert(uri, TARGET) == "in-process"
    assert _upsert(uri) == "in-process"
    got = read_table(uri).sort_by("id").to_pylist()
    assert _sql_rows(uri) == got  # deltalake resolves the nested physical names alike
    infos = [{"a": 1, "b": "x"}, {"a": 20, "b": "y"}, {"a": 3, "b": None}, {"a": 40, "b": "z"}]
    assert [r["info"] for r in got] == infos


def test_a_source_of_another_nested_type_goes_to_spark(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_deltalake(uri, TARGET)
    swapped = pa.struct([("b", pa.string()), ("a", pa.int64())])
    source = SOURCE.set_column(1, "info", SOURCE.column("info").cast(swapped))
    with pytest.raises(UnsupportedMergeError, match="does not store"):
        _upsert(uri, source)
    assert DeltaTable(uri).version() == 0
