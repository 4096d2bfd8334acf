"""The MERGE builder shared by both executors: what it commits in, and what it returns."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta.engine import DeltaLog, SetTransaction
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult


@pytest.fixture
def table(tmp_path: Path) -> str:
    uri = str(tmp_path / "t")
    write_deltalake(uri, pa.table({"id": [1, 2], "v": ["a", "b"]}))
    return uri


def upsert(target: object, source: pa.Table, **options: object) -> CommitResult:
    builder = merge_arrow(target, source, "t.id = s.id", **options)  # type: ignore[arg-type]
    return builder.when_matched_update_all().when_not_matched_insert_all().execute()


def test_the_result_is_the_commits_and_holds_only_metrics(table: str) -> None:
    result = upsert(table, pa.table({"id": [2, 3], "v": ["B", "c"]}))
    assert (result, result.version, result.operation, result.skipped) == (1, 1, "MERGE", False)
    assert "version" not in result.metrics
    assert result.metrics["numTargetRowsUpdated"] == 1
    assert result.metrics["numTargetRowsInserted"] == 1
    assert sorted(DeltaTable(table).to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "B"},
        {"id": 3, "v": "c"},
    ]


def test_a_given_transaction_is_read_and_committed_in(table: str) -> None:
    log = DeltaLog.for_table(table)
    once = CommitProperties(app_transactions=[SetTransaction("nightly", 7)])
    txn = log.start_transaction(properties=once)
    result = upsert(txn, pa.table({"id": [3], "v": ["c"]}))
    assert (result.version, result.read_version, txn.committed) == (1, 0, True)
    assert log.update().transactions == {"nightly": 7}
    again = upsert(log.start_transaction(properties=once), pa.table({"id": [4], "v": ["d"]}))
    assert (again.version, again.skipped, again.metrics) == (None, True, {})
    assert log.update().version == 1


def test_commit_properties_beside_a_transaction_are_refused(table: str) -> None:
    txn = DeltaLog.for_table(table).start_transaction()
    with pytest.raises(ValueError, match="pass commit_properties to the transaction"):
        upsert(txn, pa.table({"id": [3], "v": ["c"]}), commit_properties=CommitProperties())
    assert DeltaLog.for_table(table).update().version == 0
