"""The DeltaLog facade (`engine.delta_log`): a table by its URI, `create_table`, snapshots and
history, and the maintenance it runs on demand (checkpoint, VACUUM, symlink manifests, expired
log cleanup). What each part does is tested with its module (tests/engine/log/, txn/,
commands/); here, that the facade reaches it."""

from __future__ import annotations

import json
import time

import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.commands.maintenance import MANIFEST_LOCATION
from airflow_delta.engine.errors import TableAlreadyExistsError, VersionNotFoundError
from tests.engine.commands.test_maintenance_vacuum import OLD_UNREFERENCED, build_table
from tests.txn_helpers import SCHEMA, append, new_table

# -- a table by its URI ------------------------------------------------------------------------


def test_for_table_names_the_table_and_its_log(tmp_path) -> None:
    log = DeltaLog.for_table(str(tmp_path / "t"))
    assert log.table_uri == str(tmp_path / "t")
    assert log.log_path == f"{log.table_path}/_delta_log"
    assert log.storage_options == {}
    assert repr(log) == f"DeltaLog({str(tmp_path / 't')!r})"
    options = {"AWS_REGION": "us-east-1"}
    s3 = DeltaLog.for_table("s3://bucket/t", options)
    assert s3.storage_options == options and s3.storage_options is not options


# -- create_table ------------------------------------------------------------------------------


def test_create_table_commits_version_zero_with_default_protocol(tmp_path) -> None:
    log = new_table(tmp_path)
    snap = log.update()
    assert snap.version == 0
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (1, 2)
    assert snap.partition_columns == ["part"]
    assert snap.schema.names == SCHEMA.names
    with pytest.raises(TableAlreadyExistsError):
        new_table(tmp_path)


def test_create_table_refuses_a_bad_property(tmp_path) -> None:
    from airflow_delta.engine.errors import InvalidTablePropertyError

    with pytest.raises(InvalidTablePropertyError, match="checkpointInterval"):
        new_table(tmp_path / "t", **{"delta.checkpointInterval": "ten"})
    assert not list((tmp_path / "t").glob("_delta_log/*.json"))


def test_create_table_records_its_name_description_and_parameters(tmp_path) -> None:
    log = DeltaLog.create_table(
        str(tmp_path / "t"),
        SCHEMA,
        ["part"],
        {"delta.appendOnly": "true"},
        name="events",
        description="all events",
    )
    snapshot = log.update()
    assert (snapshot.metadata.name, snapshot.metadata.description) == ("events", "all events")
    (created,) = log.history()
    assert created["operation"] == "CREATE TABLE"
    assert json.loads(created["operationParameters"]["partitionBy"]) == ["part"]
    assert json.loads(created["operationParameters"]["properties"]) == {"delta.appendOnly": "true"}


# -- snapshots and history ---------------------------------------------------------------------


def test_history_latest_version_and_commit_info(tmp_path) -> None:
    log = new_table(tmp_path / "t")
    append(log)
    append(log)
    assert [(h["version"], h["operation"]) for h in log.history()] == [
        (2, "WRITE"),
        (1, "WRITE"),
        (0, "CREATE TABLE"),
    ]
    assert [h["version"] for h in log.history(limit=1)] == [2]
    assert log.latest_version() == 2 and log.latest_version(start=3) == 2
    info = log.commit_info(1)
    assert info is not None and info.operation == "WRITE"


def test_snapshot_at_a_version_or_a_timestamp(tmp_path) -> None:
    log = new_table(tmp_path / "t")
    append(log)
    stamps = log.commit_timestamps()
    assert [v for v, _ in stamps] == [0, 1]
    assert stamps[0][1] < stamps[1][1]
    assert log.version_at_timestamp(stamps[1][1]) == 1
    assert log.snapshot_at(timestamp=stamps[0][1]).version == 0
    assert log.snapshot_at(version=0).num_files == 0
    with pytest.raises(ValueError, match="either version or timestamp"):
        log.snapshot_at(version=0, timestamp=stamps[0][1])
    with pytest.raises(VersionNotFoundError, match="before the earliest available commit"):
        log.version_at_timestamp(stamps[0][1] - 1)


# -- maintenance ---------------------------------------------------------------------------------


def test_checkpoint_vacuum_manifests_and_log_cleanup_on_demand(tmp_path) -> None:
    root, log = build_table(tmp_path)
    assert log.vacuum(dry_run=True).files_deleted == OLD_UNREFERENCED
    assert all((root / f).exists() for f in OLD_UNREFERENCED)
    assert log.vacuum().files_deleted == OLD_UNREFERENCED
    assert not any((root / f).exists() for f in OLD_UNREFERENCED)

    update = log.generate_symlink_manifest()
    assert update.full and update.written == [str(root / MANIFEST_LOCATION / "_k=a" / "manifest")]

    assert log.checkpoint().version == 3
    assert log.cleanup_expired_logs() == []  # every commit is within the retention
    in_40_days = int(time.time() * 1000) + 40 * 86_400_000
    assert log.cleanup_expired_logs(now_ms=in_40_days) == [f"{v:020d}.json" for v in range(3)]
    assert log.update().version == 3
    with pytest.raises(VersionNotFoundError):
        log.snapshot_at(version=2)
