"""deltalake (delta-rs) reads what this engine commits, and the two write the same tables.

1. Every version this engine commits (appends with real parquet files, overwrites by
   RemoveFile, txn actions, past an interval checkpoint) reads the same in
   `DeltaTable(path, version=v)`: version, file set, rows and app transaction versions.
2. deltalake appends to a table this engine created, and this engine appends to a table
   deltalake created; after every commit both see the same version and files.
3. Tables created here with `delta.enableInCommitTimestamps` or `delta.appendOnly` open in
   deltalake, and the commitInfo written here comes back through deltalake's `history()`.

Never call deltalake's ``to_pyarrow_table()``/``to_pandas()`` (they randomly abort the process
at exit here): rows are read with ``pyarrow.dataset`` over ``DeltaTable.file_uris()``.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta.engine import (
    AddFile,
    CommitProperties,
    DeltaLog,
    Operation,
    RemoveFile,
    SetTransaction,
    Snapshot,
)

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])
DATA_SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string())])  # part is in the path
APPEND = Operation("WRITE", {"mode": "Append"})


# -- helpers -----------------------------------------------------------------------------------


def write_file(root: str, part: str, ids: list[int]) -> AddFile:
    """A parquet data file of `ids` in partition `part`, and its AddFile (with stats)."""
    rel = f"part={part}/ours-{uuid.uuid4().hex}.parquet"
    full = Path(root, rel)
    full.parent.mkdir(parents=True, exist_ok=True)
    data = pa.table({"id": ids, "value": [f"v{i}" for i in ids]}, schema=DATA_SCHEMA)
    pq.write_table(data, full)
    stats = {
        "numRecords": len(ids),
        "minValues": {"id": min(ids), "value": f"v{min(ids)}"},
        "maxValues": {"id": max(ids), "value": f"v{max(ids)}"},
        "nullCount": {"id": 0, "value": 0},
    }
    return AddFile(
        path=rel,
        partition_values={"part": part},
        size=full.stat().st_size,
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=json.dumps(stats),
    )


def remove(add: dict[str, Any] | AddFile) -> RemoveFile:
    if isinstance(add, AddFile):
        path, pv, size = add.path, add.partition_values, add.size
    else:
        path, pv, size = add["path"], dict(add["partitionValues"] or []), add["size"]
    return RemoveFile(
        path=path,
        deletion_timestamp=int(time.time() * 1000),
        data_change=True,
        extended_file_metadata=True,
        partition_values=pv,
        size=size,
    )


def our_paths(snapshot: Snapshot) -> list[str]:
    return sorted(snapshot.files().field("path").to_pylist())


def dl_paths(dt: DeltaTable) -> list[str]:
    return sorted(pa.table(dt.get_add_actions(flatten=True)).column("path").to_pylist())


def dl_ids(dt: DeltaTable) -> list[int]:
    uris = dt.file_uris()
    if not uris:
        return []
    return sorted(pads.dataset(uris, format="parquet").to_table(columns=["id"])["id"].to_pylist())


def assert_same(uri: str, version: int | None = None) -> tuple[Snapshot, DeltaTable]:
    """Both engines see the same version and active files (latest, or at `version`)."""
    log = DeltaLog.for_table(uri)
    ours = log.update() if version is None else log.snapshot_at(version=version)
    theirs = DeltaTable(uri) if version is None else DeltaTable(uri, version=version)
    assert theirs.version() == ours.version
    assert dl_paths(theirs) == our_paths(ours), f"version {ours.version}"
    return ours, theirs


# -- 1. deltalake reads every version this engine writes ----------------------------------------


def test_deltalake_reads_every_version_this_engine_commits(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = DeltaLog.create_table(uri, SCHEMA, ["part"])
    expected_ids: dict[int, list[int]] = {0: []}  # version -> ids the table holds
    expected_txn: dict[int, int | None] = {0: None}
    rows: dict[str, list[int]] = {}  # path -> ids
    next_id = iter(range(10**6))

    def commit(actions: list, operation: Operation = APPEND) -> int:
        txn = log.start_transaction()
        if any(isinstance(a, RemoveFile) for a in actions):
            txn.read_whole_table()
        v = txn.commit(actions, operation)
        for a in actions:
            if isinstance(a, RemoveFile):
                rows.pop(a.path)
        expected_ids[v] = sorted(i for ids in rows.values() for i in ids)
        expected_txn[v] = txn_now[0]
        return v

    txn_now: list[int | None] = [None]

    def add(part: str, n: int = 2) -> AddFile:
        a = write_file(uri, part, [next(next_id) for _ in range(n)])
        rows[a.path] = sorted(pq.read_table(Path(uri, a.path))["id"].to_pylist())
        return a

    assert commit([add("a"), add("b")]) == 1
    txn_now[0] = 1
    assert commit([add("a"), SetTransaction("app", 1, int(time.time() * 1000))]) == 2
    # overwrite partition a: remove its files, add one
    in_a = [p for p in rows if p.startswith("part=a/")]
    a_files = {f.path: f for f in log.update().all_files()}
    overwrite_a = Operation("WRITE", {"mode": "Overwrite", "predicate": ["part = 'a'"]})
    assert commit([*(remove(a_files[p]) for p in in_a), add("a", 3)], overwrite_a) == 3
    # overwrite the whole table
    everything = [remove(f) for f in log.update().all_files()]
    assert commit([*everything, add("c", 4)], Operation("WRITE", {"mode": "Overwrite"})) == 4
    txn_now[0] = 2
    assert commit([add("b"), SetTransaction("app", 2, int(time.time() * 1000))]) == 5
    for _ in range(7):  # past the interval checkpoint at version 10
        commit([add("a", 1)])
    latest = log.update()
    assert latest.version == 12
    assert Path(uri, "_delta_log", f"{10:020d}.checkpoint.parquet").exists()

    for v in range(latest.version + 1):
        ours, theirs = assert_same(uri, v)
        assert dl_ids(theirs) == expected_ids[v], f"version {v}"
        assert theirs.transaction_version("app") == expected_txn[v], f"version {v}"
        assert ours.transactions.get("app") == expected_txn[v]
    theirs = DeltaTable(uri)
    assert theirs.version() == 12
    assert dl_ids(theirs) == expected_ids[12]
    assert theirs.metadata().partition_columns == ["part"]


# -- 2. the two engines writing one table --------------------------------------------------------


def dl_append(uri: str, ids: list[int], part: str) -> None:
    write_deltalake(
        uri,
        pa.table({"id": ids, "value": [f"v{i}" for i in ids], "part": [part] * len(ids)}),
        mode="append",
        partition_by=["part"],
    )


def our_append(uri: str, ids: list[int], part: str) -> int:
    log = DeltaLog.for_table(uri)
    return log.start_transaction().commit([write_file(uri, part, ids)], APPEND)


def test_deltalake_and_this_engine_alternate_on_a_table_created_here(tmp_path: Path) -> None:
    uri = str(tmp_path / "ours")
    DeltaLog.create_table(uri, SCHEMA, ["part"])
    want: list[int] = []
    for step in range(6):
        ids = [step * 10 + k for k in range(3)]
        if step % 2:
            dl_append(uri, ids, "ab"[step % 4 // 2])
        else:
            assert our_append(uri, ids, "ab"[step % 4 // 2]) == step + 1
        want += ids
        ours, theirs = assert_same(uri)
        assert ours.version == step + 1
        assert dl_ids(theirs) == sorted(want)
    history = DeltaLog.for_table(uri).history()
    engines = [h.get("engineInfo", "").split("/")[0].split(":")[0] for h in reversed(history)]
    assert engines == ["airflow-delta"] + ["airflow-delta", "delta-rs"] * 3


def test_this_engine_and_deltalake_alternate_on_a_table_deltalake_created(tmp_path: Path) -> None:
    uri = str(tmp_path / "theirs")
    dl_append(uri, [0, 1], "a")
    want = [0, 1]
    snapshot, _ = assert_same(uri)
    assert snapshot.version == 0 and snapshot.partition_columns == ["part"]
    for step in range(1, 7):
        ids = [step * 10 + k for k in range(3)]
        if step % 2:
            assert our_append(uri, ids, "b") == step
        else:
            dl_append(uri, ids, "c")
        want += ids
        ours, theirs = assert_same(uri)
        assert ours.version == step
        assert dl_ids(theirs) == sorted(want)
    # every version, both ways
    for v in range(7):
        assert_same(uri, v)


# -- 3. table features and commitInfo ----------------------------------------------------------


@pytest.mark.parametrize(
    "configuration",
    [{"delta.enableInCommitTimestamps": "true"}, {"delta.appendOnly": "true"}],
    ids=["inCommitTimestamps", "appendOnly"],
)
def test_tables_with_features_created_here_open_in_deltalake(
    tmp_path: Path, configuration: dict[str, str]
) -> None:
    uri = str(tmp_path / "t")
    log = DeltaLog.create_table(uri, SCHEMA, ["part"], configuration)
    our_append(uri, [1, 2], "a")
    our_append(uri, [3], "b")
    ours, theirs = assert_same(uri)
    assert ours.version == 2
    assert dl_ids(theirs) == [1, 2, 3]
    for key, value in configuration.items():
        assert theirs.metadata().configuration[key] == value
    protocol = theirs.protocol()
    assert (protocol.min_reader_version, protocol.min_writer_version) == (
        ours.protocol.min_reader_version,
        ours.protocol.min_writer_version,
    )
    assert sorted(protocol.writer_features or []) == sorted(ours.protocol.writer_features or [])
    if "delta.enableInCommitTimestamps" in configuration:
        assert "inCommitTimestamp" in (protocol.writer_features or [])
        stamps = [h["inCommitTimestamp"] for h in reversed(theirs.history())]
        assert stamps == sorted(stamps) and len(set(stamps)) == 3
        assert [h["inCommitTimestamp"] for h in log.history()] == stamps[::-1]
    for v in range(3):
        assert_same(uri, v)
    if "delta.appendOnly" in configuration:
        # deltalake honours the property set here: it appends, but refuses to delete
        dl_append(uri, [4], "a")
        ours, theirs = assert_same(uri)
        assert ours.version == 3 and dl_ids(theirs) == [1, 2, 3, 4]
        with pytest.raises(Exception, match="append-only"):
            theirs.delete("id = 1")
        assert assert_same(uri)[0].version == 3
    # (deltalake 1.6 cannot write to an inCommitTimestamp table: "Unsupported table features
    # required: [InCommitTimestamp]", so only reading is checked for it.)


def test_commit_info_comes_back_through_deltalake_history(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = DeltaLog.create_table(uri, SCHEMA, ["part"], {"delta.appendOnly": "false"})
    properties = CommitProperties(
        user_metadata="nightly load", custom_metadata={"airflow.dag_id": "etl", "attempt": 2}
    )
    txn = log.start_transaction(properties=properties)
    operation = Operation("WRITE", {"mode": "Append", "partitionBy": ["part"]}, {"numFiles": 1})
    assert txn.commit([write_file(uri, "a", [1])], operation) == 1
    ours = log.history()
    theirs = DeltaTable(uri).history()
    assert [h["version"] for h in theirs] == [h["version"] for h in ours] == [1, 0]
    for mine, dl in zip(ours, theirs, strict=True):
        for key, value in mine.items():
            assert dl.get(key) == value, f"version {mine['version']}: {key}"
    latest = theirs[0]
    assert latest["operation"] == "WRITE"
    assert latest["userMetadata"] == "nightly load"
    assert latest["airflow.dag_id"] == "etl" and latest["attempt"] == 2
    assert latest["operationParameters"] == {"mode": "Append", "partitionBy": '["part"]'}
    assert latest["operationMetrics"] == {"numFiles": "1"}
    assert latest["txnId"] == txn.txn_id
    assert latest["engineInfo"].startswith("airflow-delta/")
    assert latest["isBlindAppend"] is True and latest["readVersion"] == 0
    assert theirs[1]["operation"] == "CREATE TABLE"
