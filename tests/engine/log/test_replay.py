"""Log replay (seed InMemoryLogReplay): registries, keys, ordering, retention."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.log.replay import InMemoryLogReplay, LogBatch, canonicalize_paths
from tests.delta_log_builder import (
    add,
    commit_info,
    make_table,
    metadata,
    protocol,
    remove,
    write_commit,
)


def paths(snapshot) -> list[str]:
    return [f.path for f in snapshot.all_files()]


def test_versions_must_be_replayed_in_order() -> None:
    replay = InMemoryLogReplay(min_file_retention_timestamp=0)
    replay.append(3, LogBatch())
    replay.append(4, LogBatch())
    with pytest.raises(AssertionError, match=r"Attempted to replay version 6, but state is at 4"):
        replay.append(6, LogBatch())


def test_canonical_paths_ignore_file_scheme_and_escapes() -> None:
    raw = pa.array(["file:/t/a%20b", "file:///t/a%20b", "/t/a b", "d%3D1/x", "rel/y"])
    assert canonicalize_paths(raw).to_pylist() == ["/t/a b", "/t/a b", "/t/a b", "d=1/x", "rel/y"]


def test_file_uris_of_localhost_are_the_local_file() -> None:
    raw = pa.array(["file://localhost/t/a%20b", "/t/a b"])
    assert canonicalize_paths(raw).to_pylist() == ["/t/a b", "/t/a b"]


def test_remove_in_a_later_version_cancels_an_add_in_canonical_form(tmp_path) -> None:
    make_table(tmp_path, 2)
    write_commit(tmp_path, 2, [add("/abs/dir%20x/f.parquet")])
    write_commit(tmp_path, 3, [remove("file:///abs/dir x/f.parquet"), remove("f0")])
    snap = DeltaLog.for_table(str(tmp_path)).update()
    assert paths(snap) == ["f1"]


def test_re_add_after_remove_and_order_within_a_commit(tmp_path) -> None:
    make_table(tmp_path, 2)
    write_commit(tmp_path, 2, [remove("f0"), add("f0", records=5)])  # later line wins
    write_commit(tmp_path, 3, [add("f1", records=7), remove("f1")])
    snap = DeltaLog.for_table(str(tmp_path)).update()
    assert paths(snap) == ["f0"]
    assert snap.num_records == 5


def test_file_key_includes_the_deletion_vector(tmp_path) -> None:
    make_table(tmp_path, 1)
    dv = {
        "storageType": "u",
        "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^",
        "offset": 4,
        "sizeInBytes": 40,
        "cardinality": 1,
    }
    write_commit(tmp_path, 1, [remove("f0"), add("f0", deletionVector=dv)])
    snap = DeltaLog.for_table(str(tmp_path)).update()
    (only,) = snap.all_files()
    assert only.deletion_vector is not None and only.deletion_vector.offset == 4
    assert snap.num_records == 0  # 1 record, 1 deleted by the DV


def test_tombstones_kept_only_within_retention(tmp_path) -> None:
    now = int(time.time() * 1000)
    make_table(tmp_path, 3, {"delta.deletedFileRetentionDuration": "interval 1 hour"})
    write_commit(tmp_path, 3, [remove("f0", now - 10_000), remove("f1", now - 7_200_000)])
    tombstones = DeltaLog.for_table(str(tmp_path)).update().tombstones()
    assert tombstones.field("path").to_pylist() == ["f0"]


def test_latest_txn_protocol_metadata_and_domains_win(tmp_path) -> None:
    make_table(tmp_path, 1)
    write_commit(
        tmp_path,
        1,
        [
            {"txn": {"appId": "a", "version": 1}},
            {"txn": {"appId": "b", "version": 4}},
            {"domainMetadata": {"domain": "d1", "configuration": "{}", "removed": False}},
            {"domainMetadata": {"domain": "d2", "configuration": "{}", "removed": False}},
        ],
    )
    write_commit(
        tmp_path,
        2,
        [
            {"txn": {"appId": "a", "version": 2}},
            {"domainMetadata": {"domain": "d1", "configuration": "", "removed": True}},
            protocol(1, 3),
            metadata({"k": "v"}),
        ],
    )
    snap = DeltaLog.for_table(str(tmp_path)).update()
    assert snap.transactions == {"a": 2, "b": 4}
    assert set(snap.domain_metadata) == {"d2"}
    assert snap.protocol.min_writer_version == 3
    assert snap.metadata.configuration == {"k": "v"}


def test_unknown_actions_and_fields_are_tolerated(tmp_path) -> None:
    make_table(tmp_path, 1)
    write_commit(
        tmp_path,
        1,
        [
            {"someFutureAction": {"x": [1, 2]}},
            {"add": {**add("f1")["add"], "futureField": {"nested": True}}},
            {**commit_info(), "sideAction": 1},
        ],
    )
    assert paths(DeltaLog.for_table(str(tmp_path)).update()) == ["f0", "f1"]


def test_checkpoint_keeps_action_order_and_round_trips(tmp_path) -> None:
    now = int(time.time() * 1000)
    make_table(tmp_path, 1)
    names = ["zeta", "alpha", "mid"]
    write_commit(tmp_path, 1, [add(n) for n in names] + [remove("f0", now)])
    write_commit(tmp_path, 2, [{"txn": {"appId": "app", "version": 9, "lastUpdated": now}}])
    log = DeltaLog.for_table(str(tmp_path))
    before = log.update()
    result = log.checkpoint()
    assert (result.version, result.parts, result.num_of_add_files) == (2, 1, 3)
    write_commit(tmp_path, 3, [add("last")])
    after = log.update()
    assert after.log_segment.checkpoint_version == 2
    assert paths(after) == [*names, "last"]
    assert after.transactions == before.transactions == {"app": 9}
    assert after.tombstones().field("path").to_pylist() == ["f0"]
    assert after.metadata.schema_string == before.metadata.schema_string


def test_multi_part_checkpoint_and_incomplete_parts_ignored(tmp_path) -> None:
    make_table(tmp_path, 6)
    log = DeltaLog.for_table(str(tmp_path))
    result = log.checkpoint(part_size=2)
    assert result.parts == 4  # protocol + metadata + 6 adds = 8 actions
    assert paths(log.update()) == [f"f{i}" for i in range(6)]
    # a newer multi-part checkpoint with a missing part must be ignored
    write_commit(tmp_path, 6, [add("f6")])
    log_dir = tmp_path / "_delta_log"
    part = (log_dir / f"{5:020d}.checkpoint.0000000001.0000000004.parquet").read_bytes()
    (log_dir / f"{6:020d}.checkpoint.0000000001.0000000002.parquet").write_bytes(part)
    snap = log.update()
    assert snap.log_segment.checkpoint_version == 5
    assert paths(snap) == [f"f{i}" for i in range(7)]


def test_stale_last_checkpoint_uses_the_newer_checkpoint(tmp_path) -> None:
    make_table(tmp_path, 3)
    log = DeltaLog.for_table(str(tmp_path))
    log.checkpoint()
    hint = (tmp_path / "_delta_log" / "_last_checkpoint").read_bytes()
    for v in range(3, 6):
        write_commit(tmp_path, v, [add(f"f{v}")])
    log.checkpoint()
    (tmp_path / "_delta_log" / "_last_checkpoint").write_bytes(hint)  # points at version 2
    snap = log.update()
    assert (snap.version, snap.log_segment.checkpoint_version) == (5, 5)


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
