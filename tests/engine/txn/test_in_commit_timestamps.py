"""In-commit timestamps turned on for a table with earlier commits (txn/in_commit_timestamps.py):
the enabling commit records its version and timestamp in the table properties, as the protocol
requires, so every reader takes the earlier commits' times from their files; and its timestamp
is later than the previous commit file's modification time."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaLog, Operation, write_table
from airflow_delta.engine.log.history import commit_timestamps, version_at_timestamp
from tests.txn_helpers import append, new_table

ICT = "delta.enableInCommitTimestamps"
ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"
SCHEMA = pa.schema([("id", pa.int64())])


def _commit_info(table: Path, version: int) -> dict:
    first = (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines()[0]
    return json.loads(first)["commitInfo"]


def _enable(log: DeltaLog) -> int:
    txn = log.start_transaction()
    metadata = txn.metadata
    configuration = {**metadata.configuration, ICT: "true"}
    txn.update_metadata(dataclasses.replace(metadata, configuration=configuration))
    return txn.commit([], Operation("SET TBLPROPERTIES", {"properties": json.dumps({ICT: "true"})}))


def test_enabling_on_a_table_with_commits_records_the_provenance(tmp_path: Path) -> None:
    table = tmp_path / "t"
    log = new_table(table)
    append(log)
    append(log)
    later = time.time() + 3600  # the previous commit's file looks an hour younger than now
    os.utime(table / "_delta_log" / f"{2:020d}.json", (later, later))

    assert _enable(log) == 3
    ict = _commit_info(table, 3)["inCommitTimestamp"]
    config = log.update().metadata.configuration
    assert config[ENABLEMENT_VERSION] == "3"
    assert config[ENABLEMENT_TIMESTAMP] == str(ict)
    assert ict > int(later * 1000)  # after the previous commit file's modification time

    append(log)
    assert log.update().metadata.configuration[ENABLEMENT_VERSION] == "3"  # recorded once
    stamps = commit_timestamps(log.location)
    assert [v for v, _ in stamps] == [0, 1, 2, 3, 4]
    assert stamps[3][1] == ict and stamps[4][1] == _commit_info(table, 4)["inCommitTimestamp"]
    for version, stamp in stamps:
        assert version_at_timestamp(log.location, stamp) == version


def test_a_table_created_with_them_records_no_provenance(tmp_path: Path) -> None:
    log = new_table(tmp_path / "t", **{ICT: "true"})
    append(log)
    config = log.update().metadata.configuration
    assert ENABLEMENT_VERSION not in config and ENABLEMENT_TIMESTAMP not in config


def test_other_readers_read_the_table_that_enabled_them(tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    from deltalake import DeltaTable

    from tests.interop.test_duckdb import _connect

    table = tmp_path / "t"
    log = DeltaLog.create_table(str(table), SCHEMA)
    write_table(str(table), pa.table({"id": [1, 2]}, SCHEMA))
    _enable(log)
    write_table(str(table), pa.table({"id": [3]}, SCHEMA))
    assert DeltaTable(str(table)).version() == 3
    con = _connect()
    assert con.execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()[0] == 3
    con.execute(f"ATTACH '{table}' AS old (TYPE delta, VERSION 1)")
    assert con.execute("SELECT count(*) FROM old").fetchone()[0] == 2
