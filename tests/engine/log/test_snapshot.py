"""Snapshots (`log.snapshot`): `load_snapshot` at the latest version or a given one, time travel
by version and by timestamp, and the properties of a Snapshot.

How a snapshot replays its actions is in test_replay.py, its checkpoints in test_checkpoints.py
and the malformed logs it refuses in test_bad_logs.py.
"""

from __future__ import annotations

import os
import time

import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import VersionNotFoundError
from airflow_delta.engine.log.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.log.table_location import TableLocation
from tests.delta_log_builder import add, make_table, metadata, protocol, write_commit
from tests.txn_helpers import SCHEMA, append, new_table

# -- load_snapshot ------------------------------------------------------------------------------


def test_load_snapshot_at_the_latest_version_or_a_given_one(tmp_path) -> None:
    location = TableLocation.of(str(make_table(tmp_path, 3)))
    latest = load_snapshot(location)
    assert (latest.version, latest.num_files) == (2, 3)
    assert load_snapshot(location, 0).num_files == 1
    assert repr(load_snapshot(location, 1)) == f"Snapshot(table={str(tmp_path)!r}, version=1)"


@pytest.mark.parametrize("version", [-1, 3])
def test_load_snapshot_refuses_a_version_the_log_does_not_hold(tmp_path, version: int) -> None:
    location = TableLocation.of(str(make_table(tmp_path, 3)))
    with pytest.raises(VersionNotFoundError, match=f"Cannot time travel table {tmp_path}"):
        load_snapshot(location, version)


def test_load_snapshot_falls_back_to_an_older_checkpoint(tmp_path) -> None:
    make_table(tmp_path, 6)
    log = DeltaLog.for_table(str(tmp_path))
    log.checkpoint(log.snapshot_at(version=2))
    log.checkpoint()
    newest = tmp_path / "_delta_log" / f"{5:020d}.checkpoint.parquet"
    newest.write_bytes(b"not parquet")
    snapshot = load_snapshot(log.location)
    assert (snapshot.version, snapshot.log_segment.checkpoint_version) == (5, 2)
    assert snapshot.num_files == 6


# -- time travel --------------------------------------------------------------------------------


def test_time_travel_by_version_and_timestamp(tmp_path) -> None:
    import os

    make_table(tmp_path, 4)
    for v in range(4):
        stamp = 1_700_000_000 + 100 * v
        os.utime(tmp_path / "_delta_log" / f"{v:020d}.json", (stamp, stamp))
    log = DeltaLog.for_table(str(tmp_path))
    assert [log.snapshot_at(version=v).num_files for v in range(4)] == [1, 2, 3, 4]
    assert log.snapshot_at(timestamp=1_700_000_150_000).version == 1
    assert log.snapshot_at(timestamp="2023-11-14T22:16:40Z").version == 2  # exactly v2
    assert log.snapshot_at(timestamp=1_800_000_000_000).version == 3


def test_in_commit_timestamps_drive_time_travel(tmp_path) -> None:
    conf = {"delta.enableInCommitTimestamps": "true"}
    write_commit(
        tmp_path,
        0,
        [
            {"commitInfo": {"inCommitTimestamp": 1000, "operation": "CREATE"}},
            protocol(1, 7, writerFeatures=["inCommitTimestamp"]),
            metadata(conf),
        ],
    )
    write_commit(tmp_path, 1, [{"commitInfo": {"inCommitTimestamp": 5000}}, add("a")])
    log = DeltaLog.for_table(str(tmp_path))
    assert log.snapshot_at(timestamp=4999).version == 0
    assert log.snapshot_at(timestamp=5000).version == 1
    assert log.update().timestamp == 5000


def test_snapshot_timestamp_at_a_checkpoint_version_is_the_in_commit_timestamp(tmp_path) -> None:
    log = new_table(tmp_path / "t", **{"delta.enableInCommitTimestamps": "true"})
    version = append(log)
    log.checkpoint()
    ict = log.commit_info(version).in_commit_timestamp
    commit = tmp_path / f"t/_delta_log/{version:020d}.json"
    old = time.time() - 86_400  # the files' mtimes say yesterday
    for path in (tmp_path / "t/_delta_log").iterdir():
        os.utime(path, (old, old))

    snapshot = DeltaLog.for_table(str(tmp_path / "t")).update()

    assert snapshot.log_segment.checkpoint_version == version
    assert not snapshot.log_segment.deltas
    assert snapshot.timestamp == ict
    assert commit.exists()


# -- properties ---------------------------------------------------------------------------------


def test_snapshot_properties(tmp_path) -> None:
    log = new_table(tmp_path / "t", **{"delta.checkpointInterval": "5"})
    append(log, "a", rows=3)
    append(log, "b", rows=4)
    snapshot = log.update()
    assert snapshot.table_uri == str(tmp_path / "t")
    assert snapshot.partition_columns == ["part"]
    assert snapshot.schema.names == SCHEMA.names
    assert snapshot.config.checkpoint_interval == 5
    assert (snapshot.num_files, snapshot.size_in_bytes, snapshot.num_records) == (2, 200, 7)
    assert sorted(f.partition_values["part"] for f in snapshot.all_files()) == ["a", "b"]


def test_the_empty_snapshot_is_version_minus_one(tmp_path) -> None:
    empty = Snapshot.empty(TableLocation.of(str(tmp_path / "t")))
    assert (empty.version, empty.num_files, empty.num_records) == (-1, 0, 0)
    assert empty.protocol is None and empty.metadata is None


def test_a_missing_data_file_names_the_table_the_version_and_the_fix(tmp_path) -> None:
    snapshot = load_snapshot(TableLocation.of(str(make_table(tmp_path, 2))))
    error = str(snapshot.missing_data_file("f1"))
    assert f"Table {tmp_path} version 1: the data file f1 is missing" in error
    assert "Restore the file from a backup" in error
    assert "starts with '/'" in str(snapshot.missing_data_file("/abs/f1"))
