"""CHECK constraints and invariants in the in-process UPDATE and MERGE, evaluated by the
engine's evaluator (`expressions/constraints.RowChecks`): a row that breaks one fails the
command with ConstraintViolationError naming the table, the constraint and the row (nothing
committed); rows that keep them are written; copied rows are not checked again (they were when
written). deltalake, which enforces CHECK constraints itself, accepts the tables afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta.engine import DeltaLog, update
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import ConstraintViolationError
from airflow_delta.engine.protocol.schema import DELTA_METADATA_KEY
from tests.engine.commands.dml_tables import SCHEMA, batch, create, rows

CHECKED = {"delta.constraints.small_k": "k < 10 AND s <> 'bad'"}


def _version(uri: str) -> int:
    return DeltaLog.for_table(uri).update().version


def test_update_checks_the_rows_it_writes(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(6)), configuration=CHECKED)
    version = _version(uri)
    with pytest.raises(ConstraintViolationError) as caught:
        update(uri, {"k": "k + 8"}, "id >= 3")  # k = id % 5: 3 + 8 = 11 breaks it
    message = str(caught.value)
    assert "CHECK constraint small_k (k < 10 AND s <> 'bad')" in message
    assert f"stays at version {version}" in message and " - k : 11" in message
    assert caught.value.constraint == "small_k"
    assert _version(uri) == version
    update(uri, {"k": "k + 1"}, "id >= 3")
    assert sorted(r[1] for r in rows(uri)) == [0, 1, 1, 2, 4, 5]


def test_merge_checks_updated_and_inserted_rows(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(4)), partitioned=False, configuration=CHECKED)
    version = _version(uri)
    bad_insert = batch([9], s=["bad"])
    with pytest.raises(ConstraintViolationError, match=r"small_k.*\n - k : 4\n - s : 'bad'"):
        merge_arrow(uri, bad_insert, "t.id = s.id").when_not_matched_insert_all().execute()
    with pytest.raises(ConstraintViolationError, match="small_k"):
        merge_arrow(uri, batch([1]), "t.id = s.id").when_matched_update({"k": "t.k + 20"}).execute()
    assert _version(uri) == version
    builder = (
        merge_arrow(uri, batch([1, 7]), "t.id = s.id")
        .when_matched_update({"k": "t.k + 5"})
        .when_not_matched_insert_all()
    )
    builder.execute()
    assert builder.executor == "in-process"
    assert [(r[0], r[1]) for r in rows(uri)] == [(0, 0), (1, 6), (2, 2), (3, 3), (7, 2)]
    with pytest.raises(Exception, match=r"(?i)check"):  # deltalake enforces the constraint too
        write_deltalake(uri, batch([8], k=[50]), mode="append")


def test_invariants_are_checked(tmp_path: Path) -> None:
    invariant = {"delta.invariants": json.dumps({"expression": {"expression": "k >= 0"}})}
    schema = pa.schema(
        [
            f.with_metadata({DELTA_METADATA_KEY: json.dumps(invariant).encode()})
            if f.name == "k"
            else f
            for f in SCHEMA
        ]
    )
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, schema, ["p"])
    merge_arrow(uri, batch([1, 2]), "t.id = s.id").when_not_matched_insert_all().execute()
    with pytest.raises(ConstraintViolationError, match=r"Invariant \(k >= 0\) on column k"):
        update(uri, {"k": "k - 5"}, "id = 1")
    assert sorted(r[1] for r in rows(uri)) == [1, 2]
    assert DeltaTable(uri).version() == 1
