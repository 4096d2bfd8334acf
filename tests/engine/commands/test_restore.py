"""RESTORE (commands/restore.py): files re-added and removed to match a version, by version or
timestamp, missing files refused or left out, metadata restored, protocol never downgraded,
metrics; results read alike by the engine, deltalake and DuckDB, and equal to deltalake's own
restore of a copy."""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_delta.engine import (
    DeltaLog,
    Operation,
    Protocol,
    delete,
    optimize,
    restore,
    update,
    write_table,
)
from airflow_delta.engine.errors import (
    ConcurrentAppendException,
    InvalidArgumentError,
    RestoreMissingFilesError,
    TableNotFoundError,
)
from airflow_delta.engine.log.log_store import LocalLogStore
from tests.engine.commands.dml_tables import append, batch, create, deltalake_rows, rows


def _history_table(tmp_path: Path, dv: bool = False) -> tuple[str, dict[int, list]]:
    """Versions 1-2 appends, 3 a DELETE, 4 an UPDATE, 5 an OPTIMIZE; rows at each version."""
    uri = create(tmp_path / "t", batch(range(10)), batch(range(10, 20)), dv=dv)
    states = {2: rows(uri)}
    delete(uri, "id < 4")
    states[3] = rows(uri)
    update(uri, {"s": "'u'"}, "id >= 15")
    states[4] = rows(uri)
    optimize(uri)
    states[5] = rows(uri)
    return uri, states


@pytest.mark.parametrize("dv", [False, True], ids=["rewrites", "deletion-vectors"])
def test_restore_each_version_gives_its_rows(tmp_path: Path, dv: bool) -> None:
    uri, states = _history_table(tmp_path, dv)
    latest = 5
    for version in (4, 2, 3):
        result = restore(uri, version)
        latest += 1
        assert result.version == latest and result.operation == "RESTORE"
        assert rows(uri) == states[version], version
        snapshot = DeltaLog(uri).update()
        assert result.metrics["numOfFilesAfterRestore"] == snapshot.num_files
        assert result.metrics["tableSizeAfterRestore"] == snapshot.size_in_bytes
    info = DeltaLog(uri).history(limit=1)[0]
    assert info["operationParameters"] == {"version": "3"}
    assert info["isolationLevel"] == "Serializable"
    assert set(info["operationMetrics"]) >= {
        "tableSizeAfterRestore",
        "numOfFilesAfterRestore",
        "numRemovedFiles",
        "numRestoredFiles",
        "removedFilesSize",
        "restoredFilesSize",
    }


def test_metrics_count_the_files_moved(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(10)), batch(range(10, 20)))
    delete(uri, "p = 'a'")  # version 3: removes the two 'a' files whole
    append(uri, batch(range(100, 104)))  # version 4: two files
    files_v2 = {f.path: f.size for f in DeltaLog(uri).snapshot_at(2).all_files()}
    result = restore(uri, 2)
    m = result.metrics
    assert (m["numRestoredFiles"], m["numRemovedFiles"], m["numOfFilesAfterRestore"]) == (2, 2, 4)
    assert m["tableSizeAfterRestore"] == sum(files_v2.values())
    restored = [a for a in _actions(uri, result.version) if "add" in a]
    assert {a["add"]["path"] for a in restored} <= set(files_v2)
    assert all(a["add"]["dataChange"] for a in restored)
    assert all(a["remove"]["dataChange"] for a in _actions(uri, result.version) if "remove" in a)


def test_files_restored_from_a_checkpoint_keep_their_stats(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", *(batch([n]) for n in range(10)))  # checkpoint at 10
    assert (tmp_path / "t" / "_delta_log" / f"{10:020d}.checkpoint.parquet").exists()
    wanted = {f.path: f.stats for f in DeltaLog(uri).snapshot_at(10).all_files()}
    delete(uri, "id < 4")
    result = restore(uri, 10)
    restored = [a["add"] for a in _actions(uri, result.version) if "add" in a]
    assert len(restored) == result.metrics["numRestoredFiles"] > 0
    assert all(a["stats"] and a["stats"] == wanted[a["path"]] for a in restored)


def _actions(uri: str, version: int) -> list[dict]:
    text = (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_restore_by_timestamp(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(4)))
    # version 1's commit timestamp as time travel reads it (the commit file's mtime)
    moment = DeltaLog(uri).commit_timestamps()[-1][1]
    while time.time() * 1000 <= moment + 1:  # the next commit must be strictly later
        time.sleep(0.001)
    append(uri, batch(range(4, 8)))
    when = datetime.fromtimestamp(moment / 1000, UTC)
    result = restore(uri, timestamp=when.isoformat())
    assert sorted(r[0] for r in rows(uri)) == [0, 1, 2, 3]
    info = DeltaLog(uri).history(limit=1)[0]
    assert info["operationParameters"]["version"] == "1"
    assert info["operationParameters"]["timestamp"] == when.isoformat()
    assert result.metrics["numRemovedFiles"] == 2


def test_missing_files_are_refused_unless_ignored(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(10)))
    gone = DeltaLog(uri).update().all_files()[0]
    delete(uri, "id >= 0")
    (Path(uri) / gone.path).unlink()
    with pytest.raises(RestoreMissingFilesError, match=r"to version 1: 1 data .*ignore_missing"):
        restore(uri, 1)
    assert DeltaLog(uri).update().version == 2
    result = restore(uri, 1, ignore_missing_files=True)
    assert result.metrics["numMissingFilesSkipped"] == 1
    assert result.metrics["numRestoredFiles"] == 1
    assert gone.path not in {f.path for f in DeltaLog(uri).update().all_files()}
    rows(uri)  # readable by all three readers


def test_a_file_whose_deletion_vector_is_gone_is_left_out(tmp_path: Path) -> None:
    """ignore_missing_files with a vacuumed deletion vector file: the data file is left out,
    never re-added with the missing vector (an unreadable table) nor without it (deleted rows
    back)."""
    uri = create(tmp_path / "t", batch(range(3000)), dv=True, partitioned=False)
    delete(uri, "id % 2 = 0")  # version 2: a deletion vector too large to be inline
    [file] = DeltaLog(uri).update().all_files()
    assert file.deletion_vector is not None and file.deletion_vector.storage_type == "u"
    delete(uri, "id >= 0")
    [dv_file] = Path(uri).glob("deletion_vector_*.bin")
    dv_file.unlink()
    with pytest.raises(RestoreMissingFilesError, match=r"version 2: 1 data .*deletion_vector_"):
        restore(uri, 2)
    result = restore(uri, 2, ignore_missing_files=True)
    assert result.metrics["numMissingFilesSkipped"] == 1
    assert result.metrics["numRestoredFiles"] == 0
    assert DeltaLog(uri).update().num_files == 0
    assert rows(uri) == []  # readable by all three readers


def test_metadata_is_restored_and_the_protocol_kept(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(4)))
    log = DeltaLog(uri)
    before = log.update()
    txn = log.start_transaction()
    config = {**before.metadata.configuration, "delta.enableDeletionVectors": "true"}
    txn.update_metadata(dataclasses.replace(before.metadata, configuration=config))
    txn.commit([], Operation("SET TBLPROPERTIES"))  # version 2, protocol upgraded
    upgraded = log.update().protocol
    assert upgraded != before.protocol
    restore(uri, 1)
    after = log.update()
    assert after.metadata.configuration == before.metadata.configuration
    assert after.protocol == upgraded  # never downgraded
    assert isinstance(upgraded, Protocol)


def test_refusals(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(4)))
    with pytest.raises(ValueError, match="version 1 is not an earlier version"):
        restore(uri, 1)
    # a timestamp after the latest commit names the version it resolves to
    with pytest.raises(ValueError, match=r"version at 2999-01-01 \(1\) is not an earlier"):
        restore(uri, timestamp="2999-01-01")
    with pytest.raises(ValueError, match="either version or timestamp"):
        restore(uri)
    with pytest.raises(ValueError, match="either version or timestamp"):
        restore(uri, 0, "2024-01-01")
    with pytest.raises(TableNotFoundError):
        restore(str(tmp_path / "none"), 0)
    # a table with one version has nothing earlier: the message says so, not "0 to -1"
    single = str(tmp_path / "single")
    write_table(single, pa.table({"id": [1]}))
    with pytest.raises(InvalidArgumentError, match="only version 0, so there is nothing") as e:
        restore(single, 0)
    assert "-1" not in str(e.value).replace(single, "<table>")  # pytest-1xx paths hold a -1


def test_a_concurrent_blind_append_fails_a_restore(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(4)), batch(range(4, 8)))
    txn = DeltaLog(uri).start_transaction()
    append(uri, batch(range(8, 12)))
    with pytest.raises(ConcurrentAppendException):
        restore(txn, 1)


@pytest.mark.parametrize("dv", [False, True], ids=["rewrites", "deletion-vectors"])
def test_restore_matches_deltalakes_restore(tmp_path: Path, dv: bool) -> None:
    uri, _ = _history_table(tmp_path, dv)
    theirs = str(tmp_path / "theirs")
    shutil.copytree(uri, theirs)
    for version in (3, 1, 4):
        ours = restore(uri, version)
        metrics = DeltaTable(theirs).restore(version)
        assert rows(uri) == deltalake_rows(theirs), version
        assert ours.metrics["numRestoredFiles"] == metrics["numRestoredFile"]
        assert ours.metrics["numRemovedFiles"] == metrics["numRemovedFile"]


def test_a_retried_restore_with_an_app_transaction_commits_once(tmp_path: Path) -> None:
    from airflow_delta.engine import CommitProperties, SetTransaction

    uri = create(tmp_path / "t", batch(range(10)), batch(range(10, 20)))
    delete(uri, "id < 5")  # version 3
    once = CommitProperties(app_transactions=[SetTransaction("nightly-restore", 7)])
    first = restore(uri, 2, commit_properties=once)
    assert first.version == 4
    append(uri, batch(range(100, 102)))  # version 5: a retry must not undo it
    again = restore(uri, 2, commit_properties=once)
    assert again.skipped and DeltaLog.for_table(uri).update().version == 5
    assert len(rows(uri)) == 22


def test_restore_lists_the_log_from_checkpoints_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the target's log is listed from the checkpoint at or below it, not whole (B14)
    uri = create(tmp_path / "t", batch(range(3)))
    for n in range(1, 24):
        append(uri, batch([100 + n]))
    assert DeltaLog(uri).update().version == 24  # checkpoints at 10 and 20
    before = rows(uri)
    wanted = DeltaLog(uri).snapshot_at(12)
    listed: list[tuple[str, str | None]] = []
    list_range = LocalLogStore.list_range

    def spied(self: LocalLogStore, dir_path: str, start: str, end: str | None) -> Any:
        listed.append((start, end))
        return list_range(self, dir_path, start, end)

    monkeypatch.setattr(LocalLogStore, "list_range", spied)  # list_from lists through it
    result = restore(uri, 12)
    monkeypatch.undo()
    assert listed and all(start != "" for start, _ in listed)
    assert (f"{10:020d}", f"{13:020d}") in listed  # only the names the target needs
    assert result.metrics["numRemovedFiles"] == 12 and result.metrics["numRestoredFiles"] == 0
    assert sorted(f.path for f in DeltaLog(uri).update().all_files()) == sorted(
        f.path for f in wanted.all_files()
    )
    assert len(rows(uri)) == len(before) - 12
