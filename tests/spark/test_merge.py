"""MERGE (airflow_delta.spark.merge): Delta semantics, metrics, files rewritten, conflicts.

Rows are compared after every merge as this project reads them (read_delta) and as deltalake
reads them (through `to_pyarrow_dataset()`: never `to_pyarrow_table()`/`to_pandas()`, which
abort the process at exit here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from airflow_delta.engine import CommitResult, DeltaLog, Operation, OptimisticTransaction
from airflow_delta.engine.errors import ConcurrentAppendException, CorruptLogError
from airflow_delta.engine.protocol.actions import Action
from airflow_delta.spark.merge import (
    DeltaMergeBuilder,
    MultipleSourceRowMatchingTargetRowInMergeError,
    merge_delta,
)
from airflow_delta.spark.read import read_delta
from airflow_delta.spark.write import write_delta, write_files

DDL = "id long, value string, part string"
Row = tuple[int, str | None, str]
BASE: list[Row] = [(1, "a1", "a"), (2, "a2", "a"), (3, "b3", "b"), (4, "b4", "b"), (5, "c5", "c")]
ON = "t.id = s.id AND t.part = s.part"


def make_table(spark: SparkSession, path: Path, rows: list[Row], **configuration: str) -> str:
    """A table partitioned by `part` holding `rows`, one file per partition."""
    import pyarrow as pa

    uri = str(path / "table")
    schema = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])
    DeltaLog.create_table(uri, schema, ["part"], configuration or None)
    write_delta(spark.createDataFrame(rows, DDL).coalesce(1), uri)
    return uri


def source(spark: SparkSession, rows: list[Row]) -> DataFrame:
    return spark.createDataFrame(rows, DDL)


def source_of_kind(spark: SparkSession, rows: list[Row], kind: str) -> Any:
    """`rows` as a Spark DataFrame (kind "spark") or a pyarrow Table ("arrow": the engine's
    in-process MERGE runs it when it can)."""
    if kind == "spark":
        return source(spark, rows)
    import pyarrow as pa

    names = ("id", "value", "part")
    schema = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])
    return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows], schema)


def table_rows(spark: SparkSession, uri: str) -> list[Row]:
    """The rows as read_delta reads them, checked against deltalake's reading."""
    ours = sorted(tuple(r) for r in read_delta(spark, uri).select("id", "value", "part").collect())
    dataset = DeltaTable(uri).to_pyarrow_dataset().to_table(columns=["id", "value", "part"])
    theirs = sorted(tuple(r.values()) for r in dataset.to_pylist())
    assert ours == theirs
    return ours


def files_by_part(uri: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for add in DeltaLog.for_table(uri).update().all_files():
        out.setdefault(add.partition_values["part"], set()).add(add.path)
    return out


def commit_actions(uri: str, version: int) -> list[dict[str, Any]]:
    log = Path(uri, "_delta_log", f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line) for line in log]


def counts(metrics: dict[str, int]) -> dict[str, int]:
    """The row and file counts of the metrics (bytes left out)."""
    return {k: v for k, v in metrics.items() if "Bytes" not in k}


class InterleavedMerge(DeltaMergeBuilder):
    """A merge that runs `before_commit` after writing its files and before committing."""

    def __init__(self, *args: Any, before_commit: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.before_commit = before_commit
        self.txn: OptimisticTransaction | None = None

    def _commit(
        self, txn: OptimisticTransaction, actions: list[Action], metrics: dict[str, int]
    ) -> CommitResult:
        self.txn = txn
        self.before_commit()
        return super()._commit(txn, actions, metrics)


# -- semantics -----------------------------------------------------------------------------------


def test_upsert(spark: SparkSession, tmp_path: Path) -> None:
    uri = make_table(spark, tmp_path, BASE)
    updates = source(spark, [(2, "A2", "a"), (6, "a6", "a"), (7, "d7", "d")])
    result = (
        merge_delta(uri, updates, ON)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    metrics = result.metrics
    assert table_rows(spark, uri) == [
        (1, "a1", "a"),
        (2, "A2", "a"),
        (3, "b3", "b"),
        (4, "b4", "b"),
        (5, "c5", "c"),
        (6, "a6", "a"),
        (7, "d7", "d"),
    ]
    assert result.version == 2 and "version" not in metrics
    assert metrics["numTargetRowsUpdated"] == 1
    assert metrics["numTargetRowsInserted"] == 2
    assert metrics["numTargetRowsCopied"] == 1  # row 1, in the file of row 2
    assert metrics["numTargetFilesRemoved"] == 1


def test_matched_delete_with_condition(spark: SparkSession, tmp_path: Path) -> None:
    uri = make_table(spark, tmp_path, BASE)
    deletes = source(spark, [(1, "keep", "a"), (3, "drop", "b"), (4, "drop", "b")])
    metrics = (
        merge_delta(uri, deletes, ON).when_matched_delete("s.value = 'drop'").execute().metrics
    )
    assert table_rows(spark, uri) == [(1, "a1", "a"), (2, "a2", "a"), (5, "c5", "c")]
    assert metrics["numTargetRowsDeleted"] == 2
    assert metrics["numTargetRowsCopied"] == 0
    # Row 1 matched, but no clause modified it: its file is not rewritten.
    assert metrics["numTargetFilesRemoved"] == 1
    assert metrics["numTargetFilesAdded"] == 0


def test_insert_only_rewrites_no_file(spark: SparkSession, tmp_path: Path) -> None:
    uri = make_table(spark, tmp_path, BASE)
    before = files_by_part(uri)
    new = source(spark, [(1, "dup", "a"), (8, "a8", "a"), (9, "e9", "e")])
    result = merge_delta(uri, new, ON).when_not_matched_insert_all().execute()
    metrics = result.metrics
    assert table_rows(spark, uri) == sorted([*BASE, (8, "a8", "a"), (9, "e9", "e")])
    actions = commit_actions(uri, result.version)
    assert not [a for a in actions if "remove" in a]
    assert len([a for a in actions if "add" in a]) == metrics["numTargetFilesAdded"] == 2
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["isBlindAppend"] is False  # the merge read the target
    after = files_by_part(uri)
    assert all(before[p] <= after[p] for p in before)
    assert metrics["numTargetFilesRemoved"] == 0
    assert metrics["numTargetRowsInserted"] == 2
    assert metrics["numTargetRowsCopied"] == 0


def test_not_matched_by_source_update_and_delete(spark: SparkSession, tmp_path: Path) -> None:
    uri = make_table(spark, tmp_path, BASE)
    current = source(spark, [(1, "A1", "a"), (4, "B4", "b")])
    metrics = (
        merge_delta(uri, current, ON)
        .when_matched_update({"value": "s.value"})
        .when_not_matched_by_source_delete("t.part = 'c'")
        .when_not_matched_by_source_update({"t.value": "concat(t.value, '-stale')"})
        .execute()
        .metrics
    )
    assert table_rows(spark, uri) == [
        (1, "A1", "a"),
        (2, "a2-stale", "a"),
        (3, "b3-stale", "b"),
        (4, "B4", "b"),
    ]
    assert metrics["numTargetRowsMatchedUpdated"] == 2
    assert metrics["numTargetRowsNotMatchedBySourceUpdated"] == 2
    assert metrics["numTargetRowsNotMatchedBySourceDeleted"] == 1
    assert metrics["numTargetFilesRemoved"] == 3


def test_multiple_source_rows_matching_one_target_row(spark: SparkSession, tmp_path: Path) -> None:
    uri = make_table(spark, tmp_path, BASE)
    twice = source(spark, [(2, "x", "a"), (2, "y", "a"), (3, "z", "b")])
    with pytest.raises(MultipleSourceRowMatchingTargetRowInMergeError, match="multiple source"):
        merge_delta(uri, twice, ON).when_matched_update_all().execute()
    assert DeltaLog.for_table(uri).update().version == 1  # nothing committed
    assert table_rows(spark, uri) == BASE

    # No clause modifies row 2: it is copied once although its file is rewritten for row 1.
    one = source(spark, [(2, "x", "a"), (2, "y", "a"), (1, "A1", "a")])
    metrics = merge_delta(uri, one, ON).when_matched_update_all("s.id = 1").execute().metrics
    assert table_rows(spark, uri) == [(1, "A1", "a"), *BASE[1:]]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsCopied"]) == (1, 1)

    # As in Delta, a single unconditional DELETE may match a row several times.
    metrics = merge_delta(uri, twice, ON).when_matched_delete().execute().metrics
    assert table_rows(spark, uri) == [(1, "A1", "a"), (4, "b4", "b"), (5, "c5", "c")]
    assert metrics["numTargetRowsDeleted"] == 2


def test_clause_order_and_conditions(spark: SparkSession, tmp_path: Path) -> None:
    uri = make_table(spark, tmp_path, BASE)
    changes = source(
        spark,
        [
            (1, "del", "a"),
            (2, "skip", "a"),
            (3, "x", "b"),
            (4, "del", "b"),
            (101, "big", "a"),
            (102, "skip", "a"),
            (7, None, "a"),
        ],
    )
    (
        merge_delta(uri, changes, "tgt.id = src.id", source_alias="src", target_alias="tgt")
        .when_matched_delete("src.value = 'del' AND tgt.id = 1")
        .when_matched_update({"value": "concat(tgt.value, '+', src.value)"}, "src.value != 'skip'")
        .when_not_matched_insert({"id": "src.id", "part": "src.part"}, "src.value = 'skip'")
        .when_not_matched_insert(
            {"id": "src.id", "value": "'first'", "part": "src.part"}, "src.id > 100"
        )
        .when_not_matched_insert_all()
        .execute()
    )
    assert table_rows(spark, uri) == sorted(
        [
            (2, "a2", "a"),  # skip: no clause
            (3, "b3+x", "b"),
            (4, "b4+del", "b"),  # the delete's condition failed, the update applied
            (5, "c5", "c"),
            (7, None, "a"),  # insert *
            (101, "first", "a"),
            (102, None, "a"),  # the first insert clause wins; value unassigned
        ]
    )
    builder = merge_delta(uri, changes, ON).when_matched_update_all()
    with pytest.raises(ValueError, match="only the last MATCHED clause can omit"):
        builder.when_matched_delete()
    with pytest.raises(ValueError, match="'nope' is not a column"):
        merge_delta(uri, changes, ON).when_matched_update({"nope": "s.value"}).execute()


def test_metrics_and_commit_info(spark: SparkSession, tmp_path: Path) -> None:
    uri = make_table(spark, tmp_path, BASE)
    changes = source(spark, [(1, "A1", "a"), (3, "gone", "b"), (8, "a8", "a"), (9, "skip", "z")])
    result = (
        merge_delta(uri, changes, "t.id = s.id")
        .when_matched_delete("s.value = 'gone'")
        .when_matched_update_all()
        .when_not_matched_insert_all("s.value != 'skip'")
        .when_not_matched_by_source_update({"value": "upper(t.value)"}, "t.id = 5")
        .execute()
    )
    metrics = result.metrics
    assert counts(metrics) == {
        "numSourceRows": 4,
        "numTargetRowsInserted": 1,
        "numTargetRowsUpdated": 2,
        "numTargetRowsMatchedUpdated": 1,
        "numTargetRowsNotMatchedBySourceUpdated": 1,
        "numTargetRowsDeleted": 1,
        "numTargetRowsMatchedDeleted": 1,
        "numTargetRowsNotMatchedBySourceDeleted": 0,
        "numTargetRowsCopied": 2,  # rows 2 and 4, in the files of rows 1 and 3
        "numOutputRows": 5,
        "numTargetFilesAdded": metrics["numTargetFilesAdded"],
        "numTargetChangeFilesAdded": 0,  # not a change-data-feed table
        "numTargetFilesRemoved": 3,
        "numTargetDeletionVectorsAdded": 0,  # the Spark MERGE rewrites files
        "numTargetDeletionVectorsRemoved": 0,
        "numTargetDeletionVectorsUpdated": 0,
    }
    assert table_rows(spark, uri) == [
        (1, "A1", "a"),
        (2, "a2", "a"),
        (4, "b4", "b"),
        (5, "C5", "c"),
        (8, "a8", "a"),
    ]
    actions = commit_actions(uri, result.version)
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert metrics["numTargetFilesAdded"] == len(adds) >= 3  # partitions a, b and c
    assert metrics["numTargetBytesAdded"] == sum(a["size"] for a in adds)
    assert metrics["numTargetBytesRemoved"] == sum(r["size"] for r in removes)
    info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
    assert info["operation"] == "MERGE"
    assert info["operationMetrics"] == {k: str(v) for k, v in metrics.items()}
    parameters = info["operationParameters"]
    assert parameters["predicate"] == "t.id = s.id"
    assert json.loads(parameters["matchedPredicates"]) == [
        {"predicate": "s.value = 'gone'", "actionType": "delete"},
        {"actionType": "update"},
    ]
    assert json.loads(parameters["notMatchedPredicates"]) == [
        {"predicate": "s.value != 'skip'", "actionType": "insert"}
    ]
    assert json.loads(parameters["notMatchedBySourcePredicates"]) == [
        {"predicate": "t.id = 5", "actionType": "update"}
    ]


# -- files and pruning ---------------------------------------------------------------------------


def test_only_touched_files_are_rewritten(spark: SparkSession, tmp_path: Path) -> None:
    uri = make_table(spark, tmp_path, BASE)
    before = files_by_part(uri)
    result = (
        merge_delta(uri, source(spark, [(3, "B3", "b")]), "t.id = s.id")
        .when_matched_update_all()
        .execute()
    )
    after = files_by_part(uri)
    assert after["a"] == before["a"] and after["c"] == before["c"]
    assert not after["b"] & before["b"]
    removed = {a["remove"]["path"] for a in commit_actions(uri, result.version) if "remove" in a}
    assert removed == before["b"]
    names = {path.rsplit("/", 1)[-1] for path in set().union(*after.values())}
    assert {uri.rsplit("/", 1)[-1] for uri in DeltaTable(uri).file_uris()} == names
    assert table_rows(spark, uri) == sorted([(3, "B3", "b"), *(r for r in BASE if r[0] != 3)])


@pytest.mark.parametrize(
    ("condition", "clause", "changes", "predicates", "parts_read"),
    [
        (
            ON,
            "update",
            [(1, "A1", "a"), (3, "B3", "b")],
            ["(`part` IN ('a', 'b')) AND (`id` IN (1, 3))"],
            {"a", "b"},
        ),
        (ON, "update", [], ["(FALSE) AND (FALSE)"], set()),
        (
            "(t.id = s.id) AND (t.part = 'b')",
            "update",
            [(3, "B3", "b")],
            ["(`part` = 'b') AND (`id` IN (3))"],
            {"b"},
        ),
        (  # an empty source: no target row can match, so no file is read
            "t.part IN ('a', 'c') AND t.id = s.id",
            "insert",
            [],
            ["(`part` IN ('a', 'c')) AND (FALSE)"],
            set(),
        ),
        ("s.part = t.part AND t.id = s.id", "by_source", [(1, "A1", "a")], [], {"a", "b", "c"}),
    ],
)
@pytest.mark.parametrize("kind", ["spark", "arrow"])
def test_pruning_is_recorded(
    spark: SparkSession,
    tmp_path: Path,
    kind: str,
    condition: str,
    clause: str,
    changes: list[Row],
    predicates: list[str],
    parts_read: set[str],
) -> None:
    uri = make_table(spark, tmp_path, BASE)
    changes_source = source_of_kind(spark, changes, kind)
    merge = InterleavedMerge(uri, changes_source, condition, before_commit=lambda: None)
    if clause == "update":
        merge.when_matched_update_all()
    elif clause == "insert":
        merge.when_not_matched_insert_all()
    else:
        merge.when_not_matched_by_source_delete("t.id = 5")
    merge.execute()
    assert merge.txn is not None
    assert [p.text for p in merge.txn.read_predicates] == (predicates or ["true"])
    read_parts = {dict(r["partitionValues"])["part"] for r in merge.txn.read_files[0].to_pylist()}
    assert read_parts == parts_read


@pytest.mark.parametrize(
    ("keys", "broadcast", "listed"),
    [(25_000, False, False), (12_000, False, True), (12_000, True, False)],
)
def test_many_source_keys_prune_by_their_range(
    spark: SparkSession, tmp_path: Path, keys: int, broadcast: bool, listed: bool
) -> None:
    """More than MAX_PRUNING_VALUES distinct keys prune by their range. A source Spark does not
    broadcast gets one aggregate: the range, numSourceRows and an estimate of the distinct
    keys; far above the limit, the keys are never listed; near it, they are (and are too many).
    A source Spark broadcasts has its keys collected: their count is exact, never listed."""
    uri = make_table(spark, tmp_path, BASE)
    many = spark.range(3, 3 + keys).selectExpr("id", "'x' AS value", "'b' AS part")
    calls: list[str] = []

    class Counted(InterleavedMerge):
        def _source_values_of(self, name: str, delta_type: str) -> list[Any] | None:
            calls.append(name)
            return super()._source_values_of(name, delta_type)

    merge = Counted(uri, many, "t.id = s.id", before_commit=lambda: None)
    threshold = "spark.sql.autoBroadcastJoinThreshold"
    previous = spark.conf.get(threshold)
    spark.conf.set(threshold, previous if broadcast else "-1")
    try:
        metrics = merge.when_matched_update_all().when_not_matched_insert_all().execute().metrics
    finally:
        spark.conf.set(threshold, previous)
    assert merge.txn is not None
    assert [p.text for p in merge.txn.read_predicates] == [f"`id` BETWEEN 3 AND {keys + 2}"]
    assert calls == (["id"] if listed else [])
    assert metrics["numSourceRows"] == keys
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (3, keys - 3)


def test_one_aggregate_of_the_source_answers_every_pruning_question(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The source's row count, every join column's bounds and distinct-value estimate, and the
    distinct values of the column equated with the partition column come from one aggregate
    job: the source is read once before the search, however many columns prune."""
    uri = make_table(spark, tmp_path, BASE)
    keys = 25_000  # far above MAX_PRUNING_VALUES: pruned by their range, never listed
    parts = "IF(id = 3, 'b', 'd') AS part"
    many = spark.range(3, 3 + keys).selectExpr("id", "'x' AS value", parts)
    context = spark.sparkContext
    context.setJobGroup("merge-facts", "MERGE")
    try:
        on = "s.part = t.part AND t.id = s.id"
        merge = InterleavedMerge(uri, many, on, before_commit=lambda: None)
        metrics = merge.when_matched_update_all().when_not_matched_insert_all().execute().metrics
        tracker = context.statusTracker()
        jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup("merge-facts")]
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    stages = [tracker.getStageInfo(s) for job in jobs if job for s in job.stageIds]
    call_sites = {s.name for s in stages if s and "merge_source.py" in s.name}
    assert len(call_sites) == 1, call_sites
    assert merge.txn is not None
    expected = f"(`part` IN ('b', 'd')) AND (`id` BETWEEN 3 AND {keys + 2})"
    assert [p.text for p in merge.txn.read_predicates] == [expected]
    assert metrics["numSourceRows"] == keys
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (1, keys - 1)


@pytest.mark.parametrize("kind", ["spark", "arrow"])
def test_a_missing_data_file_is_a_corrupt_log(spark: SparkSession, tmp_path: Path, kind: str):
    """Both executors name the table, the version and the file; nothing is committed."""
    uri = make_table(spark, tmp_path, BASE)
    victim = sorted(files_by_part(uri)["b"])[0]
    (Path(uri) / victim).unlink()
    pattern = rf"Table {re.escape(uri)} version 1: the data file {re.escape(victim)} is missing"
    with pytest.raises(CorruptLogError, match=pattern):
        merge_delta(uri, source_of_kind(spark, [(3, "B3", "b")], kind), ON).when_matched_update(
            {"value": "s.value"}
        ).execute()
    with pytest.raises(CorruptLogError, match=pattern):
        read_delta(spark, uri)
    assert DeltaLog.for_table(uri).update().version == 1


# -- concurrency ---------------------------------------------------------------------------------


def blind_append(spark: SparkSession, uri: str, part: str, key: int) -> Callable[[], None]:
    def run() -> None:
        write_delta(source(spark, [(key, "concurrent", part)]), uri)

    return run


def read_then_append(spark: SparkSession, uri: str, part: str, key: int) -> Callable[[], None]:
    """An append whose transaction read the partition it appends to (not a blind append)."""

    def run() -> None:
        txn = DeltaLog.for_table(uri).start_transaction()
        txn.filter_files_arrow(f"part = '{part}'")
        adds = write_files(txn, source(spark, [(key, "concurrent", part)]))
        txn.commit(adds, Operation("WRITE", {"mode": "Append"}))

    return run


@pytest.mark.parametrize(
    ("isolation", "writer", "part", "key", "conflict"),
    [
        ("Serializable", blind_append, "a", 9, True),
        ("WriteSerializable", read_then_append, "a", 9, True),
        ("WriteSerializable", blind_append, "a", 9, False),  # blind appends may pass
        ("Serializable", read_then_append, "b", 9, False),  # disjoint partitions
        ("Serializable", blind_append, "a", 50, False),  # no source key: its stats exclude it
    ],
)
@pytest.mark.parametrize("kind", ["spark", "arrow"])
def test_concurrent_append(
    spark: SparkSession,
    tmp_path: Path,
    kind: str,
    isolation: str,
    writer: Callable[[SparkSession, str, str, int], Callable[[], None]],
    part: str,
    key: int,
    conflict: bool,
) -> None:
    """The MERGE read the files of partition `a` that may hold id 1 or 9: a concurrent file
    conflicts when it may hold one of them (its stats say) in a partition the MERGE read."""
    uri = make_table(spark, tmp_path, BASE, **{"delta.isolationLevel": isolation})
    changes = source_of_kind(spark, [(1, "A1", "a"), (9, "a9", "a")], kind)
    merge = InterleavedMerge(uri, changes, ON, before_commit=writer(spark, uri, part, key))
    merge.when_matched_update_all().when_not_matched_insert_all()
    if conflict:
        with pytest.raises(ConcurrentAppendException, match="partition \\[part=a\\]"):
            merge.execute()
        assert DeltaLog.for_table(uri).update().version == 2  # only the concurrent append
        assert table_rows(spark, uri) == sorted([*BASE, (key, "concurrent", part)])
        return
    assert merge.execute().version == 3
    expected = [(1, "A1", "a"), *BASE[1:], (9, "a9", "a"), (key, "concurrent", part)]
    assert table_rows(spark, uri) == sorted(expected)


@pytest.mark.parametrize("with_by_source", [False, True], ids=["upsert", "by-source"])
def test_unpartitioned_table(spark: SparkSession, tmp_path: Path, with_by_source: bool) -> None:
    """The plain-scan path (no partition columns): one outer join gives every clause's rows."""
    import pyarrow as pa

    uri = str(tmp_path / "flat")
    schema = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])
    DeltaLog.create_table(uri, schema)
    for chunk in (BASE[:2], BASE[2:4], BASE[4:]):  # three files
        write_delta(spark.createDataFrame(chunk, DDL).coalesce(1), uri)
    builder = (
        merge_delta(uri, source(spark, [(2, "A2", "a"), (9, "z9", "z")]), "t.id = s.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
    )
    if with_by_source:
        builder = builder.when_not_matched_by_source_delete("t.id = 5")
    metrics = builder.execute().metrics
    expected = [(1, "a1", "a"), (2, "A2", "a"), (3, "b3", "b"), (4, "b4", "b"), (9, "z9", "z")]
    if not with_by_source:
        expected.insert(4, (5, "c5", "c"))
    assert table_rows(spark, uri) == expected
    assert metrics["numTargetRowsUpdated"] == 1
    assert metrics["numTargetRowsInserted"] == 1
    assert metrics["numTargetRowsDeleted"] == (1 if with_by_source else 0)
    assert metrics["numTargetFilesRemoved"] == (2 if with_by_source else 1)


@pytest.mark.parametrize("hashed", [True, False], ids=["hashed-names", "shared-hash"])
def test_unpartitioned_search_keys_files_by_their_names_hash(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hashed: bool
) -> None:
    """On the plain-scan path the search on Spark keys a row's file by a hash of Spark's name
    for it (both names Spark gives a local file map to its log path); when two candidate files
    share a hash it keys them by their position instead, with the same result."""
    import pyarrow as pa

    import airflow_delta.spark.merge as merge_module
    from airflow_delta.spark.merge_driver import DRIVER_SEARCH_ROWS
    from airflow_delta.spark.merge_matches import file_hashes

    uri = str(tmp_path / "flat dir")  # a name Spark quotes in its URIs (%20)
    schema = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])
    DeltaLog.create_table(uri, schema)
    for chunk in (BASE[:2], BASE[2:4], BASE[4:]):  # three files
        write_delta(spark.createDataFrame(chunk, DDL).coalesce(1), uri)
    paths = DeltaLog.for_table(uri).update().files(stats=False).field("path").to_pylist()
    snapshot = DeltaLog.for_table(uri).update()
    by_hash = file_hashes(spark, snapshot, paths)
    assert by_hash is not None and sorted(by_hash.values()) == sorted(paths * 2)
    names = spark.read.format("parquet").load(f"{uri}/*.parquet")
    seen = {r[0] for r in names.selectExpr("xxhash64(input_file_name())").collect()}
    assert seen <= set(by_hash) and len(seen) == 3
    if not hashed:
        monkeypatch.setattr(merge_module, "file_hashes", lambda *args: None)
    spark.conf.set(DRIVER_SEARCH_ROWS, "0")  # the search runs on Spark
    try:
        result = (
            merge_delta(uri, source(spark, [(2, "A2", "a"), (5, "C5", "c"), (9, "z9", "z")]), ON)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
    finally:
        spark.conf.unset(DRIVER_SEARCH_ROWS)
    expected = [(1, "a1", "a"), (2, "A2", "a"), (3, "b3", "b"), (4, "b4", "b"), (5, "C5", "c")]
    assert table_rows(spark, uri) == [*expected, (9, "z9", "z")]
    assert result.metrics["numTargetFilesRemoved"] == 2  # the files of ids 2 and 5 only
    assert result.metrics["numTargetRowsCopied"] == 1
