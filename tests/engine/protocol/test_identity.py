"""Identity and generated columns read from the schema, values handed out beyond the
high-water mark in the step's direction, and the mark committed in the metadata."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from airflow_delta.engine import DeltaLog, Metadata, Operation
from airflow_delta.engine.commands.dml import delete, update
from airflow_delta.engine.commands.restore import restore
from airflow_delta.engine.errors import (
    DeltaProtocolError,
    IdentityColumnError,
)
from airflow_delta.engine.protocol.identity import (
    IdentityColumn,
    generated_columns,
    identity_columns,
    identity_marks,
    with_identity_high_water_marks,
)

GOLDEN = Path("/work/shared/golden/tables")


def metadata_with(fields: list[dict]) -> Metadata:
    schema = {"type": "struct", "fields": fields}
    return Metadata(id="t", schema_string=json.dumps(schema))


def field(name: str, **meta: object) -> dict:
    return {"name": name, "type": "long", "nullable": True, "metadata": meta}


def test_identity_and_generated_columns_from_the_schema() -> None:
    metadata = metadata_with(
        [
            field("id", **{"delta.identity.start": 10, "delta.identity.step": -2,
                           "delta.identity.allowExplicitInsert": False}),
            field("g", **{"delta.generationExpression": "id + 1"}),
        ]
    )  # fmt: skip
    (column,) = identity_columns(metadata)
    assert column == IdentityColumn("id", 10, -2, None, False) and column.generated_always
    assert generated_columns(metadata) == {"g": "id + 1"}
    assert column.first_value() == 10
    moved = with_identity_high_water_marks(metadata, {"id": 4})
    assert identity_marks(moved) == {"id": 4}
    assert identity_columns(moved)[0].first_value() == 2
    assert identity_marks(with_identity_high_water_marks(moved, {"id": 8})) == {"id": 4}  # back


@pytest.mark.parametrize(
    ("start", "step", "mark", "first"),
    [(1, 1, None, 1), (1, 1, 4, 5), (1, 3, 5, 7), (-1, -2, -5, -7), (5, 1, 2, 5), (0, 10, 10, 20)],
)
def test_first_value_is_start_plus_k_steps_beyond_the_mark(start, step, mark, first) -> None:
    assert IdentityColumn("id", start, step, mark, True).first_value() == first


def test_overflow_is_refused() -> None:
    column = IdentityColumn("id", 2**63 - 3, 1, None, False)
    assert column.last_value(3, "/t") == 2**63 - 1
    with pytest.raises(DeltaProtocolError, match="overflows"):
        column.last_value(4, "/t")


def test_commits_keep_identity_marks_and_in_process_updates_refuse(tmp_path) -> None:
    uri = str(tmp_path / "t")
    shutil.copytree(GOLDEN / "delta__spark__identity_test_written_by_version_5", uri)
    log = DeltaLog.for_table(uri)
    txn = log.start_transaction()
    txn.identity_high_water_marks["id"] = 9  # as a writer that handed out 5..9
    txn.commit([], Operation("WRITE"))
    assert identity_marks(log.update().metadata) == {"id": 9}
    restore(uri, version=0)  # the old metadata comes back, but not the old mark
    assert identity_marks(log.update().metadata) == {"id": 9}
    with pytest.raises(IdentityColumnError, match="identity column id cannot be updated"):
        update(uri, {"id": "1"})
    assert delete(uri, "value = 'one'").version == 3  # copies rows: nothing to compute


def test_in_process_update_evaluates_generated_columns(tmp_path) -> None:
    """c2 = c1 + 1 is evaluated in process (the rows: tests/engine/commands/
    test_dml_generated.py); the golden table has no rows, so nothing is committed."""
    uri = str(tmp_path / "g")
    shutil.copytree(GOLDEN / "delta__spark__dbr_8_1_generated_columns", uri)
    assert update(uri, {"c1": "5"}).version is None
