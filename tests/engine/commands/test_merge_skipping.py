"""MERGE prunes the target's files by the source's keys: `t.k = s.k` on a data column reads
only the files whose stats admit one of the source's keys, and records that predicate, so a
concurrent commit conflicts only when its files could hold one of the keys."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.commands.merge import MAX_PRUNING_VALUES
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import ConcurrentAppendException

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(ids: range | list[int], v: str = "old") -> pa.Table:
    return pa.table({"id": list(ids), "v": [v] * len(ids)}, SCHEMA)


@pytest.fixture
def table(tmp_path: Path) -> str:
    """Ten files by deltalake, file n holding ids 100n .. 100n + 99 (stats on id)."""
    uri = str(tmp_path / "t")
    for n in range(10):
        write_deltalake(
            uri,
            rows(range(100 * n, 100 * n + 100)),
            mode="append",
            configuration={"delta.isolationLevel": "Serializable"},
        )
    return uri


def ids_with(uri: str, v: str) -> list[int]:
    table = DeltaTable(uri).to_pyarrow_dataset().to_table()
    return sorted(row["id"] for row in table.to_pylist() if row["v"] == v)


def upsert(target, source: pa.Table):
    return merge_arrow(target, source, "t.id = s.id").when_matched_update_all()


def test_source_keys_choose_the_files(table: str) -> None:
    builder = upsert(table, rows([205, 701, 5000], "new"))
    metrics = builder.execute().metrics
    assert ids_with(table, "new") == [205, 701]
    assert metrics["numTargetFilesRemoved"] == 2 and metrics["numTargetRowsCopied"] == 198
    txn = builder.transaction
    assert txn is not None
    assert [p.text for p in txn.read_predicates] == ["`id` IN (205, 701, 5000)"]
    assert len(txn.read_files[0]) == 2


def test_many_keys_prune_by_their_range(table: str) -> None:
    keys = range(350, 350 + 2 * (MAX_PRUNING_VALUES + 1), 2)  # one key too many for IN
    builder = upsert(table, rows(keys, "new"))
    metrics = builder.execute().metrics
    assert ids_with(table, "new") == list(range(350, 1000, 2))
    assert metrics["numTargetFilesRemoved"] == 7  # files 3 .. 9
    txn = builder.transaction
    assert txn is not None
    assert [p.text for p in txn.read_predicates] == [f"`id` BETWEEN 350 AND {keys[-1]}"]


@pytest.mark.parametrize("head_keys", [3, MAX_PRUNING_VALUES + 1])
def test_the_key_list_counts_every_source_row(table: str, head_keys: int) -> None:
    """A long source: its distinct keys are counted over every row, not a prefix (the listing
    of the values stops early only once a prefix proves them too many for IN)."""
    head = [5000 + i % head_keys for i in range(4 * (MAX_PRUNING_VALUES + 1))]
    tail = [9000 + i for i in range(MAX_PRUNING_VALUES)] if head_keys == 3 else [205]
    source = pa.table({"id": head + tail, "v": ["x"] * (len(head) + len(tail))}, SCHEMA)
    builder = merge_arrow(table, source, "t.id = s.id").when_matched_delete()
    assert builder.execute().metrics["numTargetRowsDeleted"] == (0 if head_keys == 3 else 1)
    assert builder.transaction is not None
    (read,) = [p.text for p in builder.transaction.read_predicates]
    low, high = min(head + tail), max(head + tail)
    assert read == f"`id` BETWEEN {low} AND {high}"


def test_null_keys_match_nothing(table: str) -> None:
    source = pa.table({"id": pa.array([None, None], pa.int64()), "v": ["x", "y"]})
    builder = merge_arrow(table, source, "t.id = s.id").when_matched_delete()
    assert builder.execute().metrics["numTargetFilesRemoved"] == 0
    assert builder.transaction is not None
    assert [p.text for p in builder.transaction.read_predicates] == ["FALSE"]


@pytest.mark.parametrize(("concurrent_id", "conflicts"), [(9000, False), (205, True)])
def test_a_concurrent_append_conflicts_only_when_it_could_hold_a_key(
    table: str, concurrent_id: int, conflicts: bool
) -> None:
    """Serializable: an append after the MERGE read conflicts when its stats admit a key."""
    txn = DeltaLog.for_table(table).start_transaction()
    write_deltalake(table, rows([concurrent_id], "other"), mode="append")
    builder = upsert(txn, rows([205, 701], "new"))
    if conflicts:
        with pytest.raises(ConcurrentAppendException):
            builder.execute()
    else:
        assert builder.execute().version == 11
        assert ids_with(table, "new") == [205, 701]
