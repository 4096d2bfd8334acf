"""The in-process MERGE into tables with identity columns (golden tables written by delta-spark
and delta-rs): inserted rows without a value get `start + k * step` beyond the high-water mark,
the mark is committed with the rows, GENERATED ALWAYS refuses explicit values, no clause may
update an identity column, and a concurrent insert that moved the mark makes the MERGE conflict
instead of handing out the same values twice."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from airflow_delta.engine import DeltaLog, OptimisticTransaction, read_table
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import DeltaConcurrentModificationException, IdentityColumnError
from airflow_delta.engine.protocol.identity import identity_marks

GOLDEN = Path("/work/shared/golden/tables")


def golden(name: str, tmp_path: Path) -> str:
    shutil.copytree(GOLDEN / name, tmp_path / name)
    return str(tmp_path / name)


def marks(uri: str) -> dict[str, int]:
    return identity_marks(DeltaLog.for_table(uri).update().metadata)


def deltalake_rows(uri: str, *columns: str) -> list[tuple[Any, ...]]:
    """The rows of the files deltalake lists (it refuses to scan v2Checkpoint tables itself;
    these tables have no deletion vectors), and the same rows as the engine reads them."""
    files = ds.dataset(DeltaTable(uri).file_uris()).to_table(columns=list(columns))
    ours = read_table(uri, list(columns))
    got = sorted(zip(*(files.column(c).to_pylist() for c in columns), strict=True))
    assert got == sorted(zip(*(ours.column(c).to_pylist() for c in columns), strict=True))
    return got


def test_generated_always_hands_out_values_and_refuses_explicit_ones(tmp_path: Path) -> None:
    uri = golden("delta-rs__checkpoint-v2-table", tmp_path)  # GENERATED ALWAYS, mark 44
    assert marks(uri) == {"id": 44}
    source = pa.table({"name": ["new-a", "new-b", "new-c"]})
    builder = merge_arrow(uri, source, "t.name = s.name").when_not_matched_insert(
        {"name": "s.name"}
    )
    builder.execute()
    assert builder.executor == "in-process"
    assert marks(uri) == {"id": 47}
    got = [r for r in deltalake_rows(uri, "id", "name") if r[1].startswith("new-")]
    assert sorted(r[0] for r in got) == [45, 46, 47]
    ids = [r[0] for r in deltalake_rows(uri, "id", "name")]
    assert len(ids) == len(set(ids)) == 47
    with pytest.raises(IdentityColumnError, match="GENERATED ALWAYS AS IDENTITY column id"):
        explicit = pa.table({"id": pa.array([1000], pa.int64()), "name": ["x"]})
        merge_arrow(uri, explicit, "t.name = s.name").when_not_matched_insert(
            {"id": "s.id", "name": "s.name"}
        ).execute()
    with pytest.raises(IdentityColumnError, match="cannot be updated"):
        merge_arrow(uri, source, "t.name = s.name").when_matched_update({"id": "1"}).execute()
    assert marks(uri) == {"id": 47}


def test_an_update_keeps_identity_values(tmp_path: Path) -> None:
    uri = golden("delta-rs__checkpoint-v2-table", tmp_path)
    before = dict((name, i) for i, name in deltalake_rows(uri, "id", "name"))
    name = next(iter(before))
    source = pa.table({"name": [name], "renamed": ["renamed"]})
    merge_arrow(uri, source, "t.name = s.name").when_matched_update(
        {"name": "s.renamed"}
    ).when_not_matched_insert({"name": "s.name"}).execute()
    after = dict((n, i) for i, n in deltalake_rows(uri, "id", "name"))
    assert after["renamed"] == before[name]
    assert marks(uri) == {"id": 44}  # nothing handed out


def test_by_default_keeps_explicit_values_and_fills_nulls(tmp_path: Path) -> None:
    uri = golden("delta__spark__identity_test_written_by_version_5", tmp_path)  # mark 4
    source = pa.table(
        {
            "id": pa.array([100, None, None], pa.int64()),
            "part": pa.array([7, 8, 9], pa.int32()),
            "value": ["explicit", "null-1", "null-2"],
        }
    )
    merge_arrow(uri, source, "t.value = s.value").when_not_matched_insert_all().execute()
    got = {v: i for i, v in deltalake_rows(uri, "id", "value")}
    assert got["explicit"] == 100
    assert sorted((got["null-1"], got["null-2"])) == [5, 6]
    assert marks(uri) == {"id": 100}  # an explicit value beyond the mark moves it


def test_a_concurrent_insert_makes_the_merge_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = golden("delta__spark__identity_test_written_by_version_5", tmp_path)
    original = OptimisticTransaction.commit
    raced: list[int] = []

    def commit(self: OptimisticTransaction, actions: Any, operation: Any) -> Any:
        if not raced:  # another writer's insert lands right before this MERGE commits
            raced.append(1)
            winner = pa.table({"part": pa.array([1], pa.int32()), "value": ["winner"]})
            merge_arrow(uri, winner, "t.value = s.value").when_not_matched_insert_all().execute()
        return original(self, actions, operation)

    monkeypatch.setattr(OptimisticTransaction, "commit", commit)
    loser = pa.table({"part": pa.array([2], pa.int32()), "value": ["loser"]})
    with pytest.raises(DeltaConcurrentModificationException):
        merge_arrow(uri, loser, "t.value = s.value").when_not_matched_insert_all().execute()
    merge_arrow(uri, loser, "t.value = s.value").when_not_matched_insert_all().execute()
    got = {v: i for i, v in deltalake_rows(uri, "id", "value")}
    assert (got["winner"], got["loser"]) == (5, 6)
    assert marks(uri) == {"id": 6}
