"""Row tracking: baseRowId / defaultRowCommitVersion on every committed AddFile, the row-id
high-water mark domain, its re-derivation on a conflict retry, and the refusals."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_delta.engine import DeltaLog, Operation, Protocol
from airflow_delta.engine.errors import DeltaProtocolError
from airflow_delta.engine.protocol.actions import AddFile
from airflow_delta.engine.txn.row_tracking import (
    MATERIALIZED_ROW_COMMIT_VERSION,
    MATERIALIZED_ROW_ID,
    ROW_TRACKING_DOMAIN,
    RowIdAssigner,
    high_water_mark,
)
from tests.txn_helpers import APPEND, add, new_table

TRACKED = {"delta.enableRowTracking": "true"}


def commit_actions(table, version: int) -> list[dict]:
    text = (table / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def adds_of(table, version: int) -> list[dict]:
    return [a["add"] for a in commit_actions(table, version) if "add" in a]


def mark_of(table, version: int) -> int | None:
    for a in commit_actions(table, version):
        if a.get("domainMetadata", {}).get("domain") == ROW_TRACKING_DOMAIN:
            return json.loads(a["domainMetadata"]["configuration"])["rowIdHighWaterMark"]
    return None


def test_new_table_gets_the_features_and_materialized_column_names(tmp_path) -> None:
    snap = new_table(tmp_path, **TRACKED).update()
    assert {"rowTracking", "domainMetadata"} <= set(snap.protocol.writer_features or [])
    conf = snap.metadata.configuration
    assert conf[MATERIALIZED_ROW_ID].startswith("_row-id-col-")
    assert conf[MATERIALIZED_ROW_COMMIT_VERSION].startswith("_row-commit-version-col-")


def test_appends_get_consecutive_row_ids_and_their_commit_version(tmp_path) -> None:
    log = new_table(tmp_path, **TRACKED)
    log.start_transaction().commit([add("a", rows=3), add("b", rows=2)], APPEND)
    log.start_transaction().commit([add("a", rows=4)], APPEND)
    first, second = adds_of(tmp_path, 1), adds_of(tmp_path, 2)
    assert [(a["baseRowId"], a["defaultRowCommitVersion"]) for a in first] == [(0, 1), (3, 1)]
    assert [(a["baseRowId"], a["defaultRowCommitVersion"]) for a in second] == [(5, 2)]
    assert (mark_of(tmp_path, 1), mark_of(tmp_path, 2)) == (4, 8)
    snap = log.update()
    assert high_water_mark(snap.domain_metadata) == 8
    assert sorted(f.base_row_id for f in snap.all_files()) == [0, 3, 5]


def test_a_concurrent_commit_moves_the_mark_and_the_loser_reassigns(tmp_path) -> None:
    log = new_table(tmp_path, **TRACKED)
    loser = log.start_transaction()
    winner = log.start_transaction()
    assert winner.commit([add("a", rows=10)], APPEND) == 1
    result = loser.commit([add("b", rows=5)], APPEND)
    assert result == 2 and result.attempts == 2
    (won,), (lost,) = adds_of(tmp_path, 1), adds_of(tmp_path, 2)
    assert (won["baseRowId"], won["defaultRowCommitVersion"]) == (0, 1)
    assert (lost["baseRowId"], lost["defaultRowCommitVersion"]) == (10, 2)  # re-derived
    assert mark_of(tmp_path, 2) == 14


def test_files_without_num_records_are_refused(tmp_path) -> None:
    log = new_table(tmp_path, **TRACKED)
    bare = dataclasses.replace(add("a"), stats=None)
    with pytest.raises(DeltaProtocolError, match=r"rowTracking.*no numRecords"):
        log.start_transaction().commit([bare], APPEND)


def test_recommitted_files_keep_their_row_ids(tmp_path) -> None:
    log = new_table(tmp_path, **TRACKED)
    log.start_transaction().commit([add("a", rows=3)], APPEND)
    (old,) = log.update().all_files()
    again = dataclasses.replace(old, tags={"x": "y"})  # same path: e.g. a new deletion vector
    log.start_transaction().commit([old.remove(1), again], Operation("DELETE"))
    (kept,) = adds_of(tmp_path, 2)
    assert (kept["baseRowId"], kept["defaultRowCommitVersion"]) == (0, 1)
    assert mark_of(tmp_path, 2) is None  # no new row id: the mark stays


def test_rewrites_that_do_not_preserve_row_ids_are_refused(tmp_path) -> None:
    log = new_table(tmp_path, **TRACKED)
    log.start_transaction().commit([add("a", rows=3)], APPEND)
    (old,) = log.update().all_files()
    txn = log.start_transaction()
    with pytest.raises(DeltaProtocolError, match=r"delta.enableRowTracking.*preserving"):
        txn.commit([old.remove(1), add("a", rows=2)], Operation("DELETE"))
    txn = log.start_transaction()
    txn.row_ids_preserved = True  # the writer wrote the materialized row-id columns
    assert txn.commit([old.remove(1), add("a", rows=2)], Operation("DELETE")) == 2
    txn = log.start_transaction()
    txn.changes_from_files = True  # a whole-file replacement (overwrite): no row copied
    (old,) = log.update().all_files()
    assert txn.commit([old.remove(1), add("a", rows=2)], Operation("WRITE")) == 3
    assert adds_of(tmp_path, 3)[0]["baseRowId"] == 5


def test_row_ids_without_the_property_need_no_preservation(tmp_path) -> None:
    """The feature alone (supported, delta.enableRowTracking unset): fresh ids only."""
    log = new_table(tmp_path)
    txn = log.start_transaction()
    protocol = Protocol(1, 7, None, ["appendOnly", "invariants", "domainMetadata", "rowTracking"])
    txn.commit([protocol], Operation("UPGRADE PROTOCOL"))
    log.start_transaction().commit([add("a", rows=3)], APPEND)
    (old,) = log.update().all_files()
    log.start_transaction().commit([old.remove(1), add("a", rows=2)], Operation("DELETE"))
    assert adds_of(tmp_path, 3)[0]["baseRowId"] == 3


def test_enabling_row_tracking_on_a_table_with_files_needs_a_backfill(tmp_path) -> None:
    log = new_table(tmp_path)
    log.start_transaction().commit([add("a")], APPEND)
    txn = log.start_transaction()
    metadata = log.update().metadata
    txn.update_metadata(
        dataclasses.replace(metadata, configuration={**metadata.configuration, **TRACKED})
    )
    with pytest.raises(DeltaProtocolError, match="backfill"):
        txn.commit([], Operation("SET TBLPROPERTIES"))


def test_assigner_ignores_a_given_mark_domain_and_observes_winners() -> None:
    assigner = RowIdAssigner("/t", 4)
    assigner.observe([])
    assert assigner.high_water_mark == 4
    from airflow_delta.engine.protocol.actions import DomainMetadata

    assigner.observe([DomainMetadata(ROW_TRACKING_DOMAIN, '{"rowIdHighWaterMark":9}')])
    out = assigner.assign(
        [AddFile("f", stats='{"numRecords":2}'), DomainMetadata(ROW_TRACKING_DOMAIN, "{}")], 7
    )
    assert out[0].base_row_id == 10 and out[0].default_row_commit_version == 7
    assert [a.configuration for a in out[1:]] == ['{"rowIdHighWaterMark":11}']


def test_golden_row_tracking_table_replays_its_mark(tmp_path) -> None:
    log = DeltaLog.for_table("/work/shared/golden/tables/delta-rs__table_with_liquid_clustering")
    snap = log.update()
    assert sorted(f.base_row_id for f in snap.all_files()) == list(range(10))
    assert high_water_mark(snap.domain_metadata) == 9


def test_a_blind_append_without_row_tracking_never_lists_the_files(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a commit that turns row tracking on counts the table's files: a blind append to a
    100k-file table stays a 2 ms commit (B2), not a read of the checkpoint's file actions."""
    from airflow_delta.engine.log.snapshot import Snapshot

    log = new_table(tmp_path / "t", partitioned=False)
    log.start_transaction().commit([add(None)], APPEND)
    log.checkpoint()

    def listed(*args, **kwargs):
        raise AssertionError("the commit listed the table's files")

    monkeypatch.setattr(Snapshot, "files", listed)
    assert (
        DeltaLog.for_table(str(tmp_path / "t")).start_transaction().commit([add(None)], APPEND) == 2
    )
