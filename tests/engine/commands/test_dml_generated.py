"""The in-process UPDATE and MERGE of a table with generated columns: a generated column computed
from a column the UPDATE sets is recomputed on the updated rows, one it sets must equal its
expression (ConstraintViolationError, nothing written), and one whose expression the engine does
not evaluate leaves the command to Spark (UnsupportedCommandError, UnsupportedMergeError). The
MERGE computes the generated columns its clauses leave out, for updates and inserts."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_delta.engine import DeltaLog, update
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import (
    ConstraintViolationError,
    UnsupportedCommandError,
    UnsupportedMergeError,
)
from airflow_delta.engine.protocol.schema import DELTA_METADATA_KEY
from tests.engine.commands.dml_tables import append


def _generated(expression: str) -> dict[Any, bytes]:
    return {DELTA_METADATA_KEY: json.dumps({"delta.generationExpression": expression}).encode()}


def _table(path: Path, expressions: dict[str, str]) -> str:
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("ts", pa.timestamp("us", "UTC")),
            pa.field("y", pa.int32(), metadata=_generated(expressions["y"])),
            pa.field("twice", pa.int64(), metadata=_generated(expressions["twice"])),
        ]
    )
    uri = str(path)
    DeltaLog.create_table(uri, schema)
    ts = [dt.datetime(2020 + i, 6, 1, tzinfo=dt.UTC) for i in range(4)]
    data = pa.table(
        {
            "id": pa.array(range(4), pa.int64()),
            "ts": pa.array(ts, pa.timestamp("us", "UTC")),
            "y": pa.array([2020 + i for i in range(4)], pa.int32()),
            "twice": pa.array([2 * i for i in range(4)], pa.int64()),
        }
    )
    append(uri, data)  # the engine's writer: deltalake evaluates no `year(...)` expression
    return uri


def _rows(uri: str) -> list[tuple[int, int, int]]:
    table = DeltaTable(uri).to_pyarrow_table().sort_by("id")
    return list(zip(*(table.column(c).to_pylist() for c in ("id", "y", "twice")), strict=True))


def test_update_recomputes_and_checks_generated_columns(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t", {"y": "year(ts)", "twice": "id * 2"})
    update(uri, {"id": "id + 10", "ts": "CAST('1999-12-31 23:00:00' AS TIMESTAMP)"}, "id >= 2")
    assert _rows(uri) == [(0, 2020, 0), (1, 2021, 2), (12, 1999, 24), (13, 1999, 26)]
    update(uri, {"twice": "id * 2"}, "id = 0")  # the expression's own value is accepted
    version = DeltaLog.for_table(uri).update().version
    with pytest.raises(
        ConstraintViolationError, match=r"generated column twice \(twice = id \* 2\)"
    ):
        update(uri, {"twice": "5"}, "id = 1")
    assert DeltaLog.for_table(uri).update().version == version  # nothing written


def test_update_leaves_expressions_it_does_not_evaluate_to_spark(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t", {"y": "year(ts)", "twice": "hash(id)"})
    with pytest.raises(UnsupportedCommandError, match="Run it on Spark"):
        update(uri, {"id": "id + 1"}, "id = 1")
    update(uri, {"ts": "ts"}, "id = 1")  # twice is not computed from ts: no need to evaluate
    assert _rows(uri)[1] == (1, 2021, 2)


def _source(ids: list[int], years: list[int], **given: list[Any]) -> pa.Table:
    ts = [dt.datetime(y, 3, 1, tzinfo=dt.UTC) for y in years]
    columns = {"id": pa.array(ids, pa.int64()), "ts": pa.array(ts, pa.timestamp("us", "UTC"))}
    return pa.table(columns | {k: pa.array(v) for k, v in given.items()})


def test_merge_computes_the_generated_columns_it_leaves_out(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t", {"y": "year(ts)", "twice": "id * 2"})
    builder = (
        merge_arrow(uri, _source([1, 7], [1990, 1991]), "t.id = s.id")
        .when_matched_update({"ts": "s.ts"})
        .when_not_matched_insert_all()
    )
    builder.execute()
    assert builder.executor == "in-process"
    assert _rows(uri) == [(0, 2020, 0), (1, 1990, 2), (2, 2022, 4), (3, 2023, 6), (7, 1991, 14)]


def test_merge_checks_the_generated_columns_it_gives(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t", {"y": "year(ts)", "twice": "id * 2"})
    good = _source([2, 8], [2002, 2008], y=[2002, 2008], twice=[4, 16])
    merge_arrow(
        uri, good, "t.id = s.id"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    assert _rows(uri)[2:] == [(2, 2002, 4), (3, 2023, 6), (8, 2008, 16)]
    version = DeltaLog.for_table(uri).update().version
    bad = _source([9], [2009], y=[2009], twice=[5])
    with pytest.raises(ConstraintViolationError, match=r"generated column twice"):
        merge_arrow(uri, bad, "t.id = s.id").when_not_matched_insert_all().execute()
    assert DeltaLog.for_table(uri).update().version == version  # nothing written


def test_merge_leaves_expressions_it_does_not_evaluate_to_spark(tmp_path: Path) -> None:
    uri = _table(tmp_path / "t", {"y": "year(ts)", "twice": "hash(id)"})
    source = _source([1], [1990])
    with pytest.raises(UnsupportedMergeError, match="does not evaluate a generated column"):
        merge_arrow(uri, source, "t.id = s.id").when_matched_update({"ts": "s.ts"}).execute()
