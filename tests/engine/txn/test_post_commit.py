"""Post-commit hooks (`txn.post_commit`): when the transaction registers them, that a hook's
failure leaves the commit committed, and the log cleanup hook. What the hooks do is tested with
the maintenance commands (tests/engine/commands/test_maintenance_*.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_delta.engine import CommitProperties, DeltaLog
from airflow_delta.engine.commands.maintenance import MANIFEST_LOCATION
from airflow_delta.engine.log.snapshot import Snapshot
from airflow_delta.engine.txn.post_commit import GenerateSymlinkManifest, LogCleanupHook
from tests.engine.commands.maintenance_tables import (
    SCHEMA,
    SYMLINK,
    WRITE,
    age,
    appended_table,
    assert_versions,
    commit,
    log_dir,
    new_file,
)


@pytest.fixture
def table(tmp_path: Path) -> tuple[Path, DeltaLog]:
    root = tmp_path / "events table"
    delta_log = DeltaLog.create_table(str(root), SCHEMA, ["a", "b"], SYMLINK)
    return root, delta_log


def test_no_manifests_without_the_property(tmp_path: Path) -> None:
    root = tmp_path / "t"
    delta_log = DeltaLog.create_table(str(root), SCHEMA, ["a", "b"])
    _, results = commit(delta_log, [new_file(root, {"a": "1", "b": "x"}, "f.parquet")])
    assert results == {}
    assert not (root / MANIFEST_LOCATION).exists()


def test_hook_is_idempotent_per_transaction(table) -> None:
    _, delta_log = table
    txn = delta_log.start_transaction()
    txn.register_post_commit_hook(GenerateSymlinkManifest())
    txn.register_post_commit_hook(GenerateSymlinkManifest())
    assert len(txn.post_commit_hooks) == 1


def test_deletion_vectors_are_refused_after_the_commit_succeeds(tmp_path: Path) -> None:
    root = tmp_path / "dv"
    configuration = {**SYMLINK, "delta.enableDeletionVectors": "true"}
    delta_log = DeltaLog.create_table(str(root), SCHEMA, ["a", "b"], configuration)
    version, results = commit(delta_log, [new_file(root, {"a": "1", "b": "x"}, "f.parquet")])

    assert version == 1 and delta_log.update().version == 1
    assert results["symlink_manifest"].startswith("failed: ")
    assert "deletion vectors" in results["symlink_manifest"]
    assert "delta.enableDeletionVectors=true" in results["symlink_manifest"]
    assert not (root / MANIFEST_LOCATION).exists()


def test_log_cleanup_hook(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 10)  # checkpoint at 10
    age(log_dir(delta_log).iterdir(), days=31)
    txn = delta_log.start_transaction()
    txn.register_post_commit_hook(LogCleanupHook())
    version = txn.commit([new_file(tmp_path / "t", {}, "g.parquet", columns=())], WRITE)

    assert txn.hook_results == {"log_cleanup": "ok"}
    assert not (log_dir(delta_log) / f"{9:020d}.json").exists()
    assert_versions(delta_log, {**counts, version: counts[10] + 1}, first_readable=10)


def test_log_cleanup_hook_honours_enable_expired_log_cleanup(tmp_path: Path) -> None:
    configuration = {"delta.enableExpiredLogCleanup": "false"}
    delta_log, counts = appended_table(tmp_path / "t", 10, configuration)
    age(log_dir(delta_log).iterdir(), days=31)
    txn = delta_log.start_transaction()
    txn.register_post_commit_hook(LogCleanupHook())
    txn.commit([new_file(tmp_path / "t", {}, "g.parquet", columns=())], WRITE)

    assert txn.hook_results == {"log_cleanup": "ok"}
    assert_versions(delta_log, counts, first_readable=0)


def test_the_committed_table_is_loaded_once_for_every_hook(table, monkeypatch) -> None:
    """The interval checkpoint, a checkpoint hook and the manifest hook all need the table
    as committed: it is loaded once for them, and the checkpoint is written once."""
    import airflow_delta.engine.txn.post_commit as post_commit
    import airflow_delta.engine.txn.transaction as transaction

    root, delta_log = table
    loads: list[int | None] = []
    original = transaction.load_snapshot

    def counted(location, version=None):
        loads.append(version)
        return original(location, version)

    monkeypatch.setattr(transaction, "load_snapshot", counted)
    monkeypatch.setattr(post_commit, "load_snapshot", counted, raising=False)
    checkpoints: list[int] = []
    write_checkpoint = Snapshot.write_checkpoint

    def counted_checkpoint(snapshot, *args, **kwargs):
        checkpoints.append(snapshot.version)
        return write_checkpoint(snapshot, *args, **kwargs)

    monkeypatch.setattr(Snapshot, "write_checkpoint", counted_checkpoint)
    for i in range(9):  # versions 1-9; version 10 is the interval checkpoint's
        commit(delta_log, [new_file(root, {"a": str(i), "b": "x"}, f"f{i}.parquet")])
    loads.clear()
    properties = CommitProperties(post_commit_hooks=["checkpoint"])
    txn = delta_log.start_transaction(properties=properties)
    loads.clear()  # the read snapshot's
    version = txn.commit([new_file(root, {"a": "9", "b": "x"}, "f9.parquet")], WRITE)
    assert version == 10 and loads == [10] and checkpoints == [10]
    assert txn.hook_results == {
        "interval_checkpoint": "ok",
        "checkpoint": "ok",
        "symlink_manifest": "ok",
        "log_cleanup": "ok",
    }
    assert (log_dir(delta_log) / f"{version:020d}.checkpoint.parquet").exists()
