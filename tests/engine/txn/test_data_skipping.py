"""filter_files with predicates over data columns: the files kept, and the conflicts a
concurrent add raises against such a read (it conflicts unless its stats prove no match)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from airflow_delta.engine import AddFile, DeltaLog, Operation
from airflow_delta.engine.errors import ConcurrentAppendException, InvalidPredicateError
from tests.txn_helpers import APPEND, new_table


def add(part: str, low: int | None, high: int | None) -> AddFile:
    """A file of partition `part` whose `id` ranges over [low, high] (no stats when None)."""
    stats = None
    if low is not None:
        stats = json.dumps(
            {
                "numRecords": 2,
                "minValues": {"id": low},
                "maxValues": {"id": high},
                "nullCount": {"id": 0},
            }
        )
    return AddFile(
        path=f"part={part}/{uuid.uuid4()}.parquet",
        partition_values={"part": part},
        size=100,
        modification_time=int(time.time() * 1000),
        stats=stats,
    )


@pytest.fixture
def log(tmp_path: Path) -> DeltaLog:
    log = new_table(tmp_path)
    files = [add("a", 0, 9), add("a", 10, 19), add("b", 0, 9), add("b", None, None)]
    log.start_transaction().commit(files, APPEND)
    return log


def test_filter_files_skips_by_stats_and_partition(log: DeltaLog) -> None:
    txn = log.start_transaction()
    assert len(txn.filter_files("id = 15")) == 2  # a/10-19 and the file without stats
    assert len(txn.filter_files("id = 15 AND part = 'a'")) == 1
    assert len(txn.filter_files("id > 100")) == 1
    assert len(txn.filter_files(["id < 5", "part = 'b'"])) == 2
    assert [p.text for p in txn.read_predicates][-1] == "(id < 5) AND (part = 'b')"


def test_unknown_columns_and_partition_only_reads_raise(log: DeltaLog) -> None:
    txn = log.start_transaction()
    with pytest.raises(InvalidPredicateError, match="not a column of this table"):
        txn.filter_files("nope = 1")
    with pytest.raises(InvalidPredicateError, match="not a partition column"):
        txn.filter_files("id = 1", data_skipping=False)
    assert txn.read_predicates == []


@pytest.mark.parametrize(
    ("winner_add", "conflicts"),
    [
        (("a", 0, 9), False),  # its stats prove no row has id > 100
        (("a", 50, 150), True),
        (("a", None, None), True),  # no stats: it may match
        (("b", 200, 300), False),  # another partition
    ],
)
def test_concurrent_adds_conflict_unless_their_stats_exclude_the_read(
    log: DeltaLog, winner_add: tuple[str, int | None, int | None], conflicts: bool
) -> None:
    loser = log.start_transaction()
    loser.filter_files("id > 100 AND part = 'a'")
    winner = log.start_transaction()
    winner.filter_files()  # a read: not a blind append
    winner.commit([add(*winner_add)], Operation("WRITE", {"mode": "Append"}))
    if conflicts:
        with pytest.raises(ConcurrentAppendException, match="id > 100"):
            loser.commit([add("a", 1, 1)], APPEND)
    else:
        assert loser.commit([add("a", 1, 1)], APPEND) == 3
