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
