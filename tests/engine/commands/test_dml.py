"""DELETE and UPDATE in process (engine/commands/dml.py): deletion vectors written and combined,
files removed whole or rewritten, the metrics, the log, refusals, and conflicts.

Every result is read by this engine, deltalake and DuckDB's delta extension, which must agree
(`dml_tables.rows`). The differential tests against deltalake's own DELETE and UPDATE are in
test_dml_differential.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import (
    CommitProperties,
    DeltaLog,
    IsolationLevel,
    SetTransaction,
    delete,
    update,
)
from airflow_delta.engine.errors import (
    ConcurrentAppendException,
    ConstraintViolationError,
    DeltaConcurrentModificationException,
    InvalidCommitError,
    InvalidPredicateError,
    TableNotFoundError,
    UnsupportedCommandError,
)
from tests.engine.commands.dml_tables import SCHEMA, append, batch, create, expected, rows
from tests.pandas_free import imports_pandas

FIRST = batch(range(0, 40))
SECOND = batch(range(40, 60))


def _log_actions(uri: str, version: int) -> list[dict]:
    path = Path(uri) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in path.read_text().splitlines()]


def _dvs(uri: str) -> dict[str, tuple[str, int]]:
    files = DeltaLog.for_table(uri).update().all_files()
    return {
        f.path: (f.deletion_vector.storage_type, f.deletion_vector.cardinality)
        for f in files
        if f.deletion_vector is not None
    }


# -- DELETE -----------------------------------------------------------------------------------


def test_delete_writes_deletion_vectors(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST, SECOND, dv=True)
    result = delete(uri, "id < 10 AND s = 's1'")
    m = result.metrics
    assert result.version == 3 and result.operation == "DELETE"
    assert m["numDeletedRows"] == 3  # ids 1, 4, 7
    assert (m["numRemovedFiles"], m["numAddedFiles"], m["numCopiedRows"]) == (0, 0, 0)
    assert (m["numDeletionVectorsAdded"], m["numDeletionVectorsRemoved"]) == (2, 0)
    assert m["numAddedChangeFiles"] == 0 and m["executionTimeMs"] >= 0
    assert rows(uri) == expected([FIRST, SECOND], lambda r: not (r["id"] < 10 and r["s"] == "s1"))
    actions = _log_actions(uri, 3)
    info = actions[0]["commitInfo"]
    assert info["operationParameters"] == {"predicate": "[\"id < 10 AND s = 's1'\"]"}
    assert info["isBlindAppend"] is False and info["operationMetrics"]["numDeletedRows"] == "3"
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert sorted(a["path"] for a in adds) == sorted(r["path"] for r in removes)
    assert all(a["deletionVector"]["storageType"] == "i" for a in adds)  # small: inline
    assert all(json.loads(a["stats"])["tightBounds"] is False for a in adds)
    assert all("deletionVector" not in r and r["dataChange"] for r in removes)


def test_deletion_vectors_combine_and_go_to_a_file_when_large(tmp_path: Path) -> None:
    big = batch(range(0, 30000), p=["a"] * 30000)
    uri = create(tmp_path / "t", big, dv=True)
    first = delete(uri, "id >= 100 AND id < 20000")  # a range of bitmap containers: a file
    assert first.metrics["numDeletionVectorsAdded"] == 1
    assert list(_dvs(uri).values()) == [("u", 19900)]
    assert len(list(Path(uri).glob("deletion_vector_*.bin"))) == 1
    second = delete(uri, "id < 10 OR id = 25000 OR id = 150")  # 150 is deleted already
    m = second.metrics
    assert m["numDeletedRows"] == 11
    assert (m["numDeletionVectorsAdded"], m["numDeletionVectorsRemoved"]) == (1, 1)
    assert m["numDeletionVectorsUpdated"] == 1
    assert list(_dvs(uri).values()) == [("u", 19911)]
    gone = {*range(100, 20000), *range(10), 25000}
    assert rows(uri) == expected([big], lambda r: r["id"] not in gone)
    last = delete(uri, "id >= 0")  # every live row: the file goes, with its DV
    assert (last.metrics["numRemovedFiles"], last.metrics["numDeletionVectorsRemoved"]) == (1, 1)
    assert last.metrics["numDeletedRows"] == 30000 - len(gone)
    assert rows(uri) == [] and _dvs(uri) == {}


def test_delete_rewrites_files_without_deletion_vectors(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST, SECOND)
    result = delete(uri, "k = 0 OR s IS NULL")
    m = result.metrics
    assert m["numDeletedRows"] == 12  # ids divisible by 5
    assert (m["numRemovedFiles"], m["numAddedFiles"]) == (4, 4)
    assert m["numCopiedRows"] == 48 and m["numDeletionVectorsAdded"] == 0
    assert m["numRemovedBytes"] > 0 and m["numAddedBytes"] > 0
    assert _dvs(uri) == {}
    assert rows(uri) == expected([FIRST, SECOND], lambda r: r["k"] != 0)


def test_delete_by_partition_removes_files_unread(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST, SECOND, dv=True)
    for f in DeltaLog.for_table(uri).update().all_files():
        if f.partition_values["p"] == "a":
            (Path(uri) / f.path).write_bytes(b"not parquet")  # reading it would fail
    result = delete(uri, "p = 'a'")
    m = result.metrics
    assert (m["numDeletedRows"], m["numRemovedFiles"], m["numDeletionVectorsAdded"]) == (30, 2, 0)
    assert rows(uri) == expected([FIRST, SECOND], lambda r: r["p"] != "a")


def test_delete_everything_and_the_read_it_records(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST, SECOND, partitioned=False)
    txn = DeltaLog.for_table(uri).start_transaction()
    result = delete(txn)
    assert result.metrics["numDeletedRows"] == 60 and result.metrics["numRemovedFiles"] == 2
    assert [p.matches_all() for p in txn.read_predicates] == [True]
    assert _log_actions(uri, 3)[0]["commitInfo"]["operationParameters"]["predicate"] == "[]"
    assert rows(uri) == []


def test_delete_parses_its_predicate_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # one parse serves the file pruning and the rows (a long IN list costs its parse once)
    from airflow_delta.engine.expressions import parser, skipping

    uri = create(tmp_path / "t", FIRST, SECOND, dv=True)
    texts: list[str] = []

    def counted(text: str, *args: object) -> object:
        texts.append(text)
        return parser.parse(text, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(skipping, "parse", counted)
    predicate = "id IN (" + ", ".join(str(i) for i in range(0, 60, 5)) + ") AND s = 's1'"
    txn = DeltaLog.for_table(uri).start_transaction()
    result = delete(txn, predicate)
    assert texts == [predicate]
    assert [p.text for p in txn.read_predicates] == [predicate]
    assert result.metrics["numDeletedRows"] == 4  # ids 10, 25, 40 and 55
    assert rows(uri) == expected(
        [FIRST, SECOND], lambda r: not (r["id"] % 5 == 0 and r["s"] == "s1")
    )


def test_delete_does_not_import_pandas(tmp_path: Path) -> None:
    # pyarrow imports pandas (0.3 s) to convert a Python value: the engine passes Arrow scalars
    uri = create(tmp_path / "t", FIRST, SECOND, dv=True)
    script = (
        "import sys\n"
        "from airflow_delta.engine import delete\n"
        f"m = delete({uri!r}, 'id IN (1, 2, 50) OR k IS NULL').metrics\n"
        "assert m['numDeletedRows'] == 3, m\n"
        "print('pandas' in sys.modules)\n"
    )
    assert not imports_pandas(script)


def test_nothing_matched_commits_nothing(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST)
    result = delete(uri, "id > 1000")
    assert result.skipped and result.metrics["numDeletedRows"] == 0
    assert DeltaLog.for_table(uri).update().version == 1
    # with an app transaction the marker lands, in an empty commit, and a rerun is skipped
    props = CommitProperties(app_transactions=[SetTransaction("gdpr", 7)])
    assert delete(uri, "id > 1000", commit_properties=props).version == 2
    again = delete(uri, "id < 5", commit_properties=props)
    assert again.skipped and again.metrics == {}
    assert len(rows(uri)) == 40


# -- UPDATE -----------------------------------------------------------------------------------


def test_update_with_deletion_vectors(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST, SECOND, dv=True)
    result = update(uri, {"s": "'new'", "k": "id"}, "id >= 35 AND id < 45")
    m = result.metrics
    assert result.operation == "UPDATE" and m["numUpdatedRows"] == 10
    assert (m["numRemovedFiles"], m["numCopiedRows"]) == (0, 0)
    assert m["numDeletionVectorsAdded"] == 4 and m["numAddedFiles"] == 2  # one per partition
    info = _log_actions(uri, 3)[0]["commitInfo"]
    assert info["operationParameters"] == {"predicate": "id >= 35 AND id < 45"}

    def changed(r: dict) -> dict:
        return {**r, "s": "new", "k": r["id"]} if 35 <= r["id"] < 45 else r

    data = [pa.Table.from_pylist([changed(r) for r in t.to_pylist()], SCHEMA) for t in (FIRST,)]
    data.append(pa.Table.from_pylist([changed(r) for r in SECOND.to_pylist()], SCHEMA))
    assert rows(uri) == expected(data, lambda r: True)


def test_update_rewrites_and_moves_partitions(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST)
    result = update(uri, {"p": "'c'", "s": "NULL"}, "id < 4")
    m = result.metrics
    assert (m["numUpdatedRows"], m["numRemovedFiles"], m["numCopiedRows"]) == (4, 2, 36)
    assert m["numAddedFiles"] == 4  # a and b rewritten, each with its rows now in c
    partitions = {f.partition_values["p"] for f in DeltaLog.for_table(uri).update().all_files()}
    assert partitions == {"a", "b", "c"}

    def changed(r: dict) -> dict:
        return {**r, "p": "c", "s": None} if r["id"] < 4 else r

    data = pa.Table.from_pylist([changed(r) for r in FIRST.to_pylist()], SCHEMA)
    assert rows(uri) == expected([data], lambda r: True)
    everything = update(uri, {"k": "k > 2"}, None)  # a condition stored as 1 / 0 / NULL
    assert everything.metrics["numUpdatedRows"] == 40
    assert {r[1] for r in rows(uri)} == {0, 1}


def test_update_values_typed_as_the_column(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST, dv=True)
    update(uri, {"`k`": "-7", "S": "'it''s'"}, "id = 3")
    assert [r for r in rows(uri) if r[0] == 3] == [(3, -7, "it's", "a")]
    before = sorted(p.name for p in Path(uri).rglob("*.parquet"))
    with pytest.raises(ValueError, match="cannot store string values in column k"):
        update(uri, {"k": "'x'"}, "id = 3")
    with pytest.raises(ValueError, match="cannot store"):
        update(uri, {"k": "3000000000"}, "id = 3")  # out of int32's range
    with pytest.raises(ValueError, match="'nope' is not a column"):
        update(uri, {"nope": "1"}, "id = 3")
    with pytest.raises(UnsupportedCommandError, match="run it on Spark"):
        update(uri, {"k": "nope(k)"}, "id = 3")  # a function the engine does not know
    with pytest.raises(ValueError, match="assignments"):
        update(uri, {}, "id = 3")
    assert sorted(p.name for p in Path(uri).rglob("*.parquet")) == before  # nothing written
    assert DeltaLog.for_table(uri).update().version == 2


def test_update_keeps_not_null_constraints(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.string())])
    DeltaLog.create_table(uri, schema)
    txn = DeltaLog.for_table(uri).start_transaction()
    from airflow_delta.engine import Operation
    from airflow_delta.engine.commands.data_files import write_tasks

    data = pa.table({"id": [1, 2], "s": ["a", "b"]}, schema)
    txn.commit(write_tasks(txn, [lambda: data], [], "WRITE"), Operation("WRITE"))
    with pytest.raises(ConstraintViolationError, match="UPDATE"):
        update(uri, {"id": "NULL"}, "s = 'a'")
    assert DeltaLog.for_table(uri).update().version == 1
    assert list(tmp_path.joinpath("t").glob("*.parquet")) != []


# -- refusals ---------------------------------------------------------------------------------


def test_refusals_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        delete(str(tmp_path / "none"), "id = 1")
    uri = create(tmp_path / "t", FIRST)
    with pytest.raises(InvalidPredicateError, match="not a column of this table"):
        delete(uri, "nope = 1")
    with pytest.raises(InvalidPredicateError):
        delete(uri, "id +")
    txn = DeltaLog.for_table(uri).start_transaction()
    with pytest.raises(ValueError, match="commit_properties"):
        delete(txn, "id = 1", commit_properties=CommitProperties())
    appends_only = create(tmp_path / "ao", FIRST, configuration={"delta.appendOnly": "true"})
    with pytest.raises(InvalidCommitError, match="append-only"):
        delete(appends_only, "id = 1")
    checked = create(
        tmp_path / "c", FIRST, configuration={"delta.constraints.h": "sha2(s, 256) > ''"}
    )
    with pytest.raises(UnsupportedCommandError, match="CHECK constraint or invariant"):
        update(checked, {"k": "1"}, "id = 1")  # a function the engine does not evaluate
    assert delete(checked, "id = 1").metrics["numDeletedRows"] == 1  # DELETE needs no check


# -- conflicts ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dv", [False, True])
@pytest.mark.parametrize(
    ("level", "partition", "outcome"),
    [
        (IsolationLevel.SERIALIZABLE, "a", ConcurrentAppendException),
        (IsolationLevel.SERIALIZABLE, "b", None),  # the DELETE read partition a only
        (IsolationLevel.WRITE_SERIALIZABLE, "a", None),  # a blind append goes by
    ],
)
def test_delete_racing_an_append(
    tmp_path: Path, dv: bool, level: IsolationLevel, partition: str, outcome: type | None
) -> None:
    uri = create(tmp_path / "t", FIRST, dv=dv)
    props = CommitProperties(isolation_level=level)
    txn = DeltaLog.for_table(uri).start_transaction(properties=props)  # reads version 1
    late = batch([101, 103], p=[partition, partition], s=["s1", "s1"])
    append(uri, late)  # version 2 wins
    if outcome is not None:
        with pytest.raises(outcome, match="concurrent"):
            delete(txn, "p = 'a' AND s = 's1'")
        assert DeltaLog.for_table(uri).update().version == 2
        return
    result = delete(txn, "p = 'a' AND s = 's1'")
    assert result.version == 3 and result.conflicts_resolved == (2,)
    gone = [r["id"] for r in FIRST.to_pylist() if r["p"] == "a" and r["s"] == "s1"]
    assert result.metrics["numDeletedRows"] == len(gone)
    assert rows(uri) == expected([FIRST, late], lambda r: r["id"] not in gone)  # 101, 103 stay


def test_two_deletes_of_one_file_conflict(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", FIRST, dv=True)
    loser = DeltaLog.for_table(uri).start_transaction()
    delete(uri, "id = 1")
    with pytest.raises(DeltaConcurrentModificationException):
        delete(loser, "id = 3")
    assert rows(uri) == expected([FIRST], lambda r: r["id"] != 1)


def test_vacuum_keeps_the_deletion_vectors_in_use(tmp_path: Path) -> None:
    from airflow_delta.engine.commands.maintenance import vacuum
    from airflow_delta.engine.log.table_location import TableLocation

    big = batch(range(0, 30000), p=["a"] * 30000)
    uri = create(tmp_path / "t", big, dv=True)
    delete(uri, "id < 20000")
    first = {p.name for p in Path(uri).glob("deletion_vector_*.bin")}
    delete(uri, "id >= 20000 AND id < 25000")  # replaces the file's DV: the old one is unused
    location = TableLocation.of(uri)
    later = int(time.time() * 1000) + 3_600_000
    vacuum(location, retention_hours=0, enforce_retention_duration=False, now_ms=later)
    left = {p.name for p in Path(uri).glob("deletion_vector_*.bin")}
    assert len(left) == 1 and not left & first
    assert rows(uri) == expected([big], lambda r: r["id"] >= 25000)


def test_nested_columns_of_a_table_deltalake_wrote(tmp_path: Path) -> None:
    from deltalake import DeltaTable, QueryBuilder, write_deltalake

    uri = str(tmp_path / "t")
    data = {
        "id": [1, 2, 3],
        "st": [{"a": 1, "b": "x"}, None, {"a": 3, "b": None}],
        "l": [[1, 2], [], None],
        "m": pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())),
    }
    write_deltalake(uri, pa.table(data))
    assert delete(uri, "id = 2").metrics["numCopiedRows"] == 2
    assert update(uri, {"id": "10"}, "id = 3").metrics["numUpdatedRows"] == 1
    query = QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT * FROM t ORDER BY id")
    assert pa.table(query.read_all()).to_pylist() == [
        {"id": 1, "st": {"a": 1, "b": "x"}, "l": [1, 2], "m": [("k", 1)]},
        {"id": 10, "st": {"a": 3, "b": None}, "l": None, "m": []},
    ]
