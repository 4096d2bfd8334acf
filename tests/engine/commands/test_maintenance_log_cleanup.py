"""Expired log cleanup (`maintenance.cleanup_expired_logs`): the log files older than
`delta.logRetentionDuration` that no version needs go, everything a readable version needs
stays. The hook that runs it after commits is tested in tests/engine/txn/test_post_commit.py."""

from __future__ import annotations

from pathlib import Path

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.commands.maintenance import cleanup_expired_logs
from tests.engine.commands.maintenance_tables import age, appended_table, assert_versions, log_dir


def log_files(delta_log: DeltaLog, *versions: int) -> list[Path]:
    """The log files of `versions` (commits, checkpoints, checksums)."""
    prefixes = {f"{v:020d}." for v in versions}
    return [p for p in log_dir(delta_log).iterdir() if p.name[:21] in prefixes]


def test_cleanup_deletes_below_the_newest_checkpoint(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 25)  # checkpoints at 10 and 20
    names = {p.name for p in log_dir(delta_log).iterdir()}
    assert {f"{v:020d}.checkpoint.parquet" for v in (10, 20)} <= names
    age(log_dir(delta_log).iterdir(), days=31)

    deleted = cleanup_expired_logs(delta_log.location)

    expected = {f"{v:020d}.json" for v in range(20)} | {f"{10:020d}.checkpoint.parquet"}
    assert set(deleted) == expected
    assert deleted == sorted(deleted), "oldest first"
    assert {p.name for p in log_dir(delta_log).iterdir()} == names - expected
    assert (log_dir(delta_log) / "_last_checkpoint").exists()
    assert_versions(delta_log, counts, first_readable=20)
    assert delta_log.update().version == 25


def test_cleanup_keeps_what_commits_within_retention_need(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 25)
    age(log_files(delta_log, *range(15)), days=31)  # 15..25 (and checkpoint 20) are recent

    deleted = cleanup_expired_logs(delta_log.location)

    # Commit 15 is within retention: it needs checkpoint 10 and commits 11-14, old or not.
    assert set(deleted) == {f"{v:020d}.json" for v in range(10)}
    assert_versions(delta_log, counts, first_readable=10)


def test_cleanup_respects_the_configured_retention(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 12)
    age(log_dir(delta_log).iterdir(), days=2)
    assert cleanup_expired_logs(delta_log.location) == []  # default: 30 days
    assert_versions(delta_log, counts, first_readable=0)

    short, short_counts = appended_table(
        tmp_path / "short", 12, {"delta.logRetentionDuration": "interval 1 day"}
    )
    age(log_dir(short).iterdir(), days=2)
    assert set(cleanup_expired_logs(short.location)) == {f"{v:020d}.json" for v in range(10)}
    assert_versions(short, short_counts, first_readable=10)


def test_cleanup_without_a_checkpoint_deletes_nothing(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 5)
    assert not any("checkpoint" in p.name for p in log_dir(delta_log).iterdir())
    age(log_dir(delta_log).iterdir(), days=365)
    assert cleanup_expired_logs(delta_log.location) == []
    assert_versions(delta_log, counts, first_readable=0)


def test_cleanup_of_multi_part_checkpoints_checksums_and_compactions(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 8, {"delta.checkpointInterval": "1000"})
    delta_log.checkpoint(delta_log.snapshot_at(version=3), part_size=2)
    delta_log.checkpoint(delta_log.snapshot_at(version=6))
    log = log_dir(delta_log)
    extra = [
        f"{1:020d}.crc",
        f"{2:020d}.crc",
        f"{7:020d}.crc",
        f"{1:020d}.{4:020d}.compacted.json",  # below the boundary: deleted
        f"{5:020d}.{7:020d}.compacted.json",  # spans the boundary: kept
    ]
    for name in extra:
        (log / name).write_text("{}\n")
    parts = sorted(p.name for p in log.iterdir() if ".checkpoint.0" in p.name)
    assert len(parts) == 3  # 4 files + protocol + metadata, 2 actions per part
    age(log.iterdir(), days=31)
    age([log / f"{1:020d}.crc"], days=29)  # below the boundary but within retention
    deleted = cleanup_expired_logs(delta_log.location)

    assert set(deleted) == {
        *(f"{v:020d}.json" for v in range(6)),
        *parts,
        f"{2:020d}.crc",
        f"{1:020d}.{4:020d}.compacted.json",
    }
    remaining = {p.name for p in log.iterdir()}
    assert {f"{1:020d}.crc", f"{7:020d}.crc", f"{5:020d}.{7:020d}.compacted.json"} <= remaining
    assert_versions(delta_log, counts, first_readable=6)


def test_cleanup_skips_an_incomplete_multi_part_checkpoint(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 6, {"delta.checkpointInterval": "1000"})
    delta_log.checkpoint(delta_log.snapshot_at(version=2))
    delta_log.checkpoint(delta_log.snapshot_at(version=4), part_size=2)
    log = log_dir(delta_log)
    next(p for p in log.iterdir() if ".checkpoint.0000000001." in p.name).unlink()
    age(log.iterdir(), days=31)

    deleted = cleanup_expired_logs(delta_log.location)

    assert f"{3:020d}.json" not in deleted  # checkpoint 4 is incomplete: 2 is the boundary
    assert set(deleted) == {f"{v:020d}.json" for v in range(2)}
    assert_versions(delta_log, counts, first_readable=2)


def test_cleanup_deletes_what_killed_writers_left_once_expired(tmp_path: Path) -> None:
    """A writer killed mid-write leaves its hidden temporary file in `_delta_log`
    (`.<name>.<hex>.tmp`); cleanup removes such files once they are as old as the commits it
    deletes, never a fresh one (it may be a live writer's), and no other hidden file."""
    from airflow_delta.engine.log.log_store import temporary_name

    delta_log, counts = appended_table(tmp_path / "t", 12)  # a checkpoint at 10
    old = [log_dir(delta_log) / temporary_name(n) for n in ("00000000000000000013.json", "x")]
    fresh = log_dir(delta_log) / temporary_name("00000000000000000014.json")
    other = log_dir(delta_log) / ".keep.tmp"
    for path in (*old, fresh, other):
        path.write_bytes(b"partial")
    age([p for p in log_dir(delta_log).iterdir() if p not in (fresh,)], days=31)

    deleted = cleanup_expired_logs(delta_log.location)

    assert {p.name for p in old} <= set(deleted)
    assert fresh.exists() and other.exists() and not any(p.exists() for p in old)
    assert_versions(delta_log, counts, first_readable=10)
