"""Expired-log cleanup never makes a committed version invisible.

A writer that read an old snapshot may find the name of its next version free again once
cleanup removed the old commits; its commit must then fail with StaleCommitError (and leave no
file behind), never return a version no reader sees.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import CommitProperties, DeltaLog
from airflow_delta.engine.commands.maintenance import cleanup_expired_logs, truncate_day
from airflow_delta.engine.errors import StaleCommitError
from tests.txn_helpers import APPEND, add, new_table

DAY_MS = 86_400_000


def _age_log(log_dir: Path, days: float) -> None:
    """Back-date every file of `log_dir` by `days`."""
    stamp = time.time() - days * 86_400
    for path in log_dir.iterdir():
        if path.is_file():
            os.utime(path, (stamp, stamp))


def _stale_setup(table: Path):
    """Writer A reads version 1; writer B then commits up to a checkpoint at 12 and expired-log
    cleanup removes the commits below it."""
    log = new_table(table, **{"delta.checkpointInterval": "1000"})
    log.start_transaction().commit([add("a", "v1.parquet")], APPEND)
    stale = DeltaLog.for_table(str(table)).start_transaction()
    assert stale.read_version == 1
    for i in range(2, 13):
        log.start_transaction().commit([add("a", f"v{i}.parquet")], APPEND)
    log.checkpoint()
    _age_log(table / "_delta_log", 40)
    deleted = cleanup_expired_logs(log.location)
    assert "00000000000000000002.json" in deleted
    return log, stale


def test_a_stale_writer_commit_fails_instead_of_vanishing(tmp_path: Path) -> None:
    log, stale = _stale_setup(tmp_path / "t")

    with pytest.raises(StaleCommitError, match=r"read version 1.*checkpoint at version 12"):
        stale.commit([add("a", "lost.parquet")], APPEND)

    assert not (tmp_path / "t/_delta_log/00000000000000000002.json").exists()
    snapshot = DeltaLog.for_table(str(tmp_path / "t")).update()
    assert snapshot.version == 12
    assert "part=a/lost.parquet" not in {f.path for f in snapshot.all_files()}
    # a fresh transaction commits after the checkpoint
    retried = log.start_transaction().commit([add("a", "lost.parquet")], APPEND)
    assert retried == 13


def test_a_stale_writer_with_in_commit_timestamps_fails_too(tmp_path: Path) -> None:
    """With in-commit timestamps the commit reads its predecessor's first: it is gone."""
    log = new_table(tmp_path / "t", **{"delta.enableInCommitTimestamps": "true"})
    stale = DeltaLog.for_table(str(tmp_path / "t")).start_transaction()
    for _ in range(3):
        log.start_transaction().commit([add("a")], APPEND)
    log.checkpoint()
    _age_log(tmp_path / "t/_delta_log", 40)
    cleanup_expired_logs(log.location)

    with pytest.raises(StaleCommitError):
        stale.commit([add("a")], APPEND)
    assert log.update().version == 3


def test_winners_cleaned_up_during_the_conflict_check_fail_typed(tmp_path: Path) -> None:
    """The winners between the read version and the latest are gone: conflicts cannot be
    checked, so the commit stops with StaleCommitError."""
    log = new_table(tmp_path / "t", **{"delta.checkpointInterval": "1000"})
    stale = DeltaLog.for_table(str(tmp_path / "t")).start_transaction()
    for _ in range(4):
        log.start_transaction().commit([add("a")], APPEND)
    (tmp_path / "t/_delta_log/00000000000000000002.json").unlink()  # 1 stays: name taken

    with pytest.raises(StaleCommitError):
        stale.commit([add("a")], APPEND)


@pytest.mark.parametrize("hint", [True, False], ids=["with-last-checkpoint", "without"])
def test_a_stale_writer_after_another_stale_writer_fails_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hint: bool
) -> None:
    """Writers A (read version 1) and B (read version 2) both predate the cleanup. A writes
    its stale commit 2; before A withdraws it, B writes commit 3 on top of it. A's commit 2 is
    no sound predecessor (written after the checkpoint): B is withdrawn too, whether or not
    `_last_checkpoint` points past it, and the table keeps every commit it returned."""
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

    table = tmp_path / "t"
    log = new_table(table, **{"delta.checkpointInterval": "1000"})
    unlocked = CommitProperties(commit_lock=False)  # as two processes: no shared lock
    log.start_transaction().commit([add("a", "v1.parquet")], APPEND)
    a = DeltaLog.for_table(str(table)).start_transaction(properties=unlocked)
    log.start_transaction().commit([add("a", "v2.parquet")], APPEND)
    b = DeltaLog.for_table(str(table)).start_transaction(properties=unlocked)
    assert (a.read_version, b.read_version) == (1, 2)
    for i in range(3, 13):
        log.start_transaction().commit([add("a", f"v{i}.parquet")], APPEND)
    log.checkpoint()
    _age_log(table / "_delta_log", 40)
    cleanup_expired_logs(log.location)
    if not hint:
        (table / "_delta_log" / "_last_checkpoint").unlink()
    outcome: dict[str, object] = {}
    check = OptimisticTransaction._check_not_stale

    def b_in_between(self: OptimisticTransaction, version: int, path: str) -> None:
        if self is a:  # A's commit 2 is on storage: B (another process) commits now
            try:
                outcome["b"] = b.commit([add("a", "b.parquet")], APPEND)
            except StaleCommitError:
                outcome["b"] = "stale"
        check(self, version, path)

    monkeypatch.setattr(OptimisticTransaction, "_check_not_stale", b_in_between)
    with pytest.raises(StaleCommitError):
        a.commit([add("a", "a.parquet")], APPEND)
    assert outcome["b"] == "stale"
    assert sorted(p.name for p in (table / "_delta_log").glob("*.json")) == [f"{12:020d}.json"]
    assert log.update().version == 12


def test_a_stale_writer_fails_whatever_order_the_cleanup_deletes_land_in(tmp_path: Path) -> None:
    """An object store may apply a batch of deletes in any order: commit 2 gone while commit 1
    is still there. A stale writer that read version 1 then finds its predecessor in place, but
    the checkpoint at 12, older than its commit, shows version 2 existed before: withdrawn."""
    table = tmp_path / "t"
    log = new_table(table, **{"delta.checkpointInterval": "1000"})
    log.start_transaction().commit([add("a", "v1.parquet")], APPEND)
    stale = DeltaLog.for_table(str(table)).start_transaction()
    for i in range(2, 13):
        log.start_transaction().commit([add("a", f"v{i}.parquet")], APPEND)
    log.checkpoint()
    _age_log(table / "_delta_log", 40)
    for version in range(2, 12):  # the cleanup's deletes so far: not commit 1 yet
        (table / "_delta_log" / f"{version:020d}.json").unlink()

    with pytest.raises(StaleCommitError, match="checkpoint at version 12"):
        stale.commit([add("a", "lost.parquet")], APPEND)
    assert not (table / "_delta_log" / f"{2:020d}.json").exists()
    assert log.update().version == 12


def test_cleanup_cutoff_is_truncated_to_the_start_of_the_day(tmp_path: Path) -> None:
    """A commit that expired an hour ago, but on the cutoff's day, stays."""
    log = new_table(tmp_path / "t", **{"delta.logRetentionDuration": "interval 1 day"})
    for _ in range(3):
        log.start_transaction().commit([add("a")], APPEND)
    log.checkpoint()
    now = truncate_day(int(time.time() * 1000)) + 12 * 3_600_000  # noon today
    expired_at = (now - DAY_MS - 3_600_000) / 1000  # 25 hours ago: past the exact cutoff
    for path in (tmp_path / "t/_delta_log").glob("*.json"):
        os.utime(path, (expired_at, expired_at))

    assert cleanup_expired_logs(log.location, now_ms=now) == []
    assert len(cleanup_expired_logs(log.location, now_ms=now + DAY_MS)) == 3


# -- randomized interleavings ------------------------------------------------------------------

_STEP = st.tuples(
    st.sampled_from(["refresh", "commit", "commit", "commit", "checkpoint", "cleanup"]),
    st.integers(0, 2),
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_STEP, min_size=4, max_size=30))
def test_interleavings_of_writers_checkpoints_and_cleanup_lose_nothing(tmp_path_factory, steps):
    """Three writers holding snapshots of various ages, checkpoints and aggressive cleanup
    (every file expired) in any order: every commit that returned a version is in the final
    table, and every one that raised left nothing behind."""
    table = tmp_path_factory.mktemp("t")
    log = new_table(table, **{"delta.checkpointInterval": "3"})
    writers = [DeltaLog.for_table(str(table)).start_transaction() for _ in range(3)]
    committed: dict[str, int] = {}
    refused: set[str] = set()
    counter = 0
    for action, who in steps:
        if action == "refresh":
            writers[who] = DeltaLog.for_table(str(table)).start_transaction()
        elif action == "commit":
            counter += 1
            name = f"f{counter}.parquet"
            try:
                committed[name] = writers[who].commit([add("a", name)], APPEND)
            except StaleCommitError:
                refused.add(name)
            writers[who] = DeltaLog.for_table(str(table)).start_transaction(writers[who].snapshot)
        elif action == "checkpoint":
            log.checkpoint()
        else:
            cleanup_expired_logs(log.location, now_ms=int(time.time() * 1000) + 400 * DAY_MS)
    files = {
        f.path.removeprefix("part=a/") for f in DeltaLog.for_table(str(table)).update().all_files()
    }
    assert files == set(committed)
    assert not files & refused
    versions = sorted(committed.values())
    assert len(versions) == len(set(versions))
