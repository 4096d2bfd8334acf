"""The DeltaLog facade (`engine.delta_log`): a table by its URI, `create_table`, snapshots and
history, and the maintenance it runs on demand (checkpoint, VACUUM, symlink manifests, expired
log cleanup). What each part does is tested with its module (tests/engine/log/, txn/,
commands/); here, that the facade reaches it."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaLog, Operation
from airflow_delta.engine.commands.maintenance import MANIFEST_LOCATION
from airflow_delta.engine.errors import (
    InvalidArgumentError,
    TableAlreadyExistsError,
    VersionNotFoundError,
)
from airflow_delta.engine.protocol.schema import DELTA_METADATA_KEY
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


def _column(name: str, annotation: dict[str, object]) -> pa.Field:
    return pa.field(name, pa.int64(), metadata={DELTA_METADATA_KEY: json.dumps(annotation)})


@pytest.mark.parametrize(
    ("annotation", "feature"),
    [
        ({"delta.generationExpression": "id + 1"}, "generatedColumns"),
        (
            {
                "delta.identity.start": 1,
                "delta.identity.step": 1,
                "delta.identity.allowExplicitInsert": False,
            },
            "identityColumns",
        ),
    ],
)
def test_create_table_binds_writers_to_generated_and_identity_columns(
    tmp_path, annotation: dict[str, object], feature: str
) -> None:
    """A new table whose schema has a generated or identity column gets the writer feature, so
    that other writers (deltalake) compute the column instead of ignoring it."""
    schema = pa.schema([("id", pa.int64()), _column("derived", annotation)])
    protocol = DeltaLog.create_table(str(tmp_path / "t"), schema).update().protocol
    assert protocol.min_writer_version == 7
    assert feature in (protocol.writer_features or [])
    assert protocol.min_reader_version == 1


def test_deltalake_computes_the_generated_column_of_a_table_we_created(tmp_path) -> None:
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "t")
    annotation = {"delta.generationExpression": "id + 1"}
    DeltaLog.create_table(uri, pa.schema([("id", pa.int64()), _column("derived", annotation)]))
    write_deltalake(uri, pa.table({"id": pa.array([1, 5], pa.int64())}), mode="append")
    rows = DeltaTable(uri).to_pyarrow_table().sort_by("id").to_pylist()
    assert rows == [{"id": 1, "derived": 2}, {"id": 5, "derived": 6}]


def test_an_old_table_with_generation_expressions_keeps_its_protocol(tmp_path) -> None:
    """DBR 8.0 wrote generation expressions under protocol (1, 2), where no writer is bound to
    them: a metadata change keeps them unenforced (no generatedColumns feature is added)."""
    golden = Path("/work/shared/golden/tables/delta__spark__dbr_8_0_non_generated_columns")
    shutil.copytree(golden, tmp_path / "t")
    log = DeltaLog.for_table(str(tmp_path / "t"))
    txn = log.start_transaction()
    txn.update_metadata(dataclasses.replace(txn.metadata, description="described"))
    txn.commit([], Operation("SET TBLPROPERTIES", {}))
    snapshot = log.update()
    assert (snapshot.protocol.min_reader_version, snapshot.protocol.min_writer_version) == (1, 2)
    assert snapshot.metadata.description == "described"


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
    with pytest.raises(VersionNotFoundError, match=r"has no commit 9: .* latest version is 2"):
        log.commit_info(9)


def test_snapshot_at_a_version_or_a_timestamp(tmp_path) -> None:
    log = new_table(tmp_path / "t")
    append(log)
    stamps = log.commit_timestamps()
    assert [v for v, _ in stamps] == [0, 1]
    assert stamps[0][1] < stamps[1][1]
    assert log.version_at_timestamp(stamps[1][1]) == 1
    assert log.snapshot_at(timestamp=stamps[0][1]).version == 0
    assert log.snapshot_at(version=0).num_files == 0
    with pytest.raises(InvalidArgumentError, match="either version or timestamp") as caught:
        log.snapshot_at(version=0, timestamp=stamps[0][1])
    assert log.table_uri in str(caught.value)
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
