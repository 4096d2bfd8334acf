"""Checkpoints (`log.checkpoints`, `Snapshot.write_checkpoint`) on local tables: classic and
multi-part checkpoints written and read back, the `_last_checkpoint` hint and what happens when
it is wrong or unreadable, and the fallback to an older checkpoint (or to the commits) when a
checkpoint cannot be read.

V2 checkpoints with sidecars, checkpoints other engines wrote and read, and streamed checkpoints
are tested against deltalake and the golden tables in tests/interop/ (test_golden_tables.py,
test_streamed_checkpoints.py, test_deltalake_interop.py); the `_last_checkpoint` hint of the log
probes in test_log_segment.py; hostile `_last_checkpoint` files (deep nesting, a FIFO, a device)
in test_bad_logs.py.
"""

from __future__ import annotations

import time

import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import CorruptLogError
from tests.delta_log_builder import add, make_table, remove, write_commit
from tests.txn_helpers import append, new_table

LOG = "_delta_log"


def paths(snapshot) -> list[str]:
    return [f.path for f in snapshot.all_files()]


def load(path) -> object:
    return DeltaLog.for_table(str(path)).update()


def commit_path(table, version: int):
    return table / LOG / f"{version:020d}.json"


# -- writing and reading ------------------------------------------------------------------------


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


def test_checkpoint_every_interval(tmp_path) -> None:
    log = new_table(tmp_path, **{"delta.checkpointInterval": "3"})
    for _ in range(7):
        append(log)
    names = sorted(p.name for p in (tmp_path / "_delta_log").glob("*.checkpoint.parquet"))
    assert names == [f"{3:020d}.checkpoint.parquet", f"{6:020d}.checkpoint.parquet"]
    assert log.update().num_files == 7


# -- the _last_checkpoint hint ------------------------------------------------------------------


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


@pytest.mark.parametrize("garbage", [b"", b"{not json", b'{"version": "three"}', b"[1, 2]"])
def test_garbage_last_checkpoint_falls_back_to_listing(tmp_path, garbage: bytes) -> None:
    make_table(tmp_path, 4)
    log = DeltaLog.for_table(str(tmp_path))
    log.checkpoint()
    (tmp_path / LOG / "_last_checkpoint").write_bytes(garbage)
    snap = log.update()
    assert (snap.version, snap.num_files, snap.log_segment.checkpoint_version) == (3, 4, 3)


def test_last_checkpoint_pointing_at_missing_checkpoint(tmp_path) -> None:
    make_table(tmp_path, 4)
    (tmp_path / LOG / "_last_checkpoint").write_text('{"version": 2, "size": 4}')
    snap = load(tmp_path)
    assert (snap.version, snap.num_files, snap.log_segment.checkpoint_version) == (3, 4, None)


def test_an_oversized_last_checkpoint_is_ignored(tmp_path, monkeypatch) -> None:
    from airflow_delta.engine.log import checkpoints

    make_table(tmp_path, 3)
    (tmp_path / LOG / "_last_checkpoint").write_text('{"version": 1, "size": 3}' + " " * 200)
    monkeypatch.setattr(checkpoints, "LAST_CHECKPOINT_MAX_BYTES", 100)
    assert load(tmp_path).version == 2


# -- unreadable checkpoints ---------------------------------------------------------------------


def test_truncated_checkpoint_falls_back_to_commits(tmp_path) -> None:
    make_table(tmp_path, 4)
    log = DeltaLog.for_table(str(tmp_path))
    log.checkpoint()
    cp = tmp_path / LOG / f"{3:020d}.checkpoint.parquet"
    cp.write_bytes(cp.read_bytes()[:100])
    snap = log.update()
    assert (snap.version, snap.num_files, snap.log_segment.checkpoint_version) == (3, 4, None)


def test_truncated_checkpoint_without_commits_to_fall_back_on(tmp_path) -> None:
    make_table(tmp_path, 4)
    log = DeltaLog.for_table(str(tmp_path))
    log.checkpoint()
    for v in range(3):
        commit_path(tmp_path, v).unlink()
    cp = tmp_path / LOG / f"{3:020d}.checkpoint.parquet"
    cp.write_bytes(cp.read_bytes()[:100])
    with pytest.raises(CorruptLogError):
        log.update()


def test_gap_covered_by_a_checkpoint_is_fine(tmp_path) -> None:
    make_table(tmp_path, 5)
    log = DeltaLog.for_table(str(tmp_path))
    log.checkpoint(log.snapshot_at(version=3))
    commit_path(tmp_path, 2).unlink()
    assert log.update().num_files == 5
