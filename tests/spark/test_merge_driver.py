"""findTouchedFiles on the driver (`spark/merge_driver.py`) against the search on Spark.

An upsert whose source Spark broadcasts (its join columns collected, keys unique) has its
touched files found by the driver, from the candidate files' key columns; with
`spark.airflow_delta.merge.driverSearchRows=0` the same MERGE searches with a Spark job. Both
run on copies of one table and must agree on the rows, the deletion vectors and the metrics,
over NULL and non-ASCII keys, one or two key columns, a partition column as a key, and tables
with deletion vectors (some files already holding one), change data feed or column mapping.
MERGEs the driver does not take (a source key matching twice, a conditional MATCHED clause,
more candidate rows than the limit) search on Spark as before.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog, Operation
from airflow_delta.engine import delete as engine_delete
from airflow_delta.engine.errors import MultipleSourceRowMatchingTargetRowInMergeError
from airflow_delta.engine.protocol.actions import Action
from airflow_delta.engine.txn.transaction import OptimisticTransaction
from airflow_delta.spark.merge import DeltaMergeBuilder, MergeClause
from airflow_delta.spark.merge_driver import (
    DRIVER_SEARCH_ROWS,
    MAX_INSERT_RANGES,
    unmatched_ranges,
)
from airflow_delta.spark.merge_matches import Found
from airflow_delta.spark.read import read_delta
from airflow_delta.spark.write import write_delta

KEYS = st.none() | st.sampled_from(["", "a", "é", "z", "ß", "ab"])
ROWS = st.tuples(st.none() | st.integers(0, 6), KEYS, st.sampled_from(["c", "p", "x"]))
FEATURES = [
    {},
    {"delta.enableDeletionVectors": "true"},
    {"delta.enableChangeDataFeed": "true"},
    {"delta.columnMapping.mode": "name"},
]
CONDITIONS = ["t.k1 = s.k1", "t.k1 = s.k1 AND t.k2 = s.k2", "s.k2 = t.k2"]
Row = tuple[int | None, str | None, str]


class RecordedMerge(DeltaMergeBuilder):
    """A MERGE that records whether the driver found its touched files."""

    on_driver: bool | None = None

    def _search_on_driver(
        self, txn: OptimisticTransaction, files: pa.StructArray, modifying: list[MergeClause]
    ) -> Found | None:
        found = super()._search_on_driver(txn, files, modifying)
        self.on_driver = found is not None
        return found


def _table(path: Path, partitioned: bool, features: dict[str, str]) -> str:
    schema = pa.schema([("k1", pa.int64()), ("k2", pa.string()), ("v", pa.string())])
    uri = str(path)
    DeltaLog.create_table(
        uri, schema, ["k2"] if partitioned else [], configuration=features or None
    )
    return uri


def _source(spark: SparkSession, rows: list[Row]) -> Any:
    columns = list(zip(*rows, strict=True)) if rows else [[], [], []]
    types = (pa.int64(), pa.string(), pa.string())
    arrow = pa.table(
        [pa.array(c, t) for c, t in zip(columns, types, strict=True)], names=["k1", "k2", "v"]
    )
    return spark.createDataFrame(arrow)  # sized: Spark broadcasts it, its keys are collected


def _merge(
    spark: SparkSession, uri: str, source: Any, condition: str, clauses: dict[str, Any]
) -> tuple[Any, RecordedMerge]:
    """The MERGE's outcome (rows, deleted rows' values, row and file metrics, or the error's
    type) and the builder."""
    builder = RecordedMerge(uri, source, condition)
    if clauses["matched"] == "delete":
        builder.when_matched_delete()
    else:
        builder.when_matched_update({"v": "s.v"})
    if clauses["insert"]:
        builder.when_not_matched_insert_all()
    try:
        metrics = builder.execute().metrics
    except MultipleSourceRowMatchingTargetRowInMergeError as exc:
        return type(exc).__name__, builder
    rows = sorted(
        (tuple(r) for r in read_delta(spark, uri).collect()),
        key=lambda r: tuple((v is None, v) for v in r),
    )
    compared = {
        k: v
        for k, v in metrics.items()
        if "Rows" in k or "DeletionVectors" in k or k == "numTargetFilesRemoved"
    }
    return (rows, len(_dv_files(uri)), compared), builder


def _dv_files(uri: str) -> list[str]:
    """The active files holding a deletion vector."""
    files = DeltaLog.for_table(uri).update().files().to_pylist()
    return [f["path"] for f in files if f["deletionVector"] is not None]


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    target=st.lists(ROWS, max_size=10),
    source=st.lists(ROWS, max_size=6, unique_by=lambda r: (r[0], r[1])),
    condition=st.sampled_from(CONDITIONS),
    partitioned=st.booleans(),
    features=st.sampled_from(FEATURES),
    deleted=st.booleans(),
    matched=st.sampled_from(["update", "delete"]),
    insert=st.booleans(),
)
def test_the_driver_and_spark_find_the_same_touched_files(
    spark: SparkSession,
    target: list[Row],
    source: list[Row],
    condition: str,
    partitioned: bool,
    features: dict[str, str],
    deleted: bool,
    matched: str,
    insert: bool,
) -> None:
    if condition == "s.k2 = t.k2":  # one key column: its values must be unique in the source
        source = list({r[1]: r for r in source}.values())
    elif condition == "t.k1 = s.k1":
        source = list({r[0]: r for r in source}.values())
    with tempfile.TemporaryDirectory() as scratch:
        base = _table(Path(scratch, "base"), partitioned, features)
        write_delta(spark.createDataFrame(target, "k1 long, k2 string, v string"), base)
        if deleted and features.get("delta.enableDeletionVectors"):
            engine_delete(base, "v = 'p'")  # files holding a 'p' row get a deletion vector
        frame = _source(spark, source)
        outcomes = {}
        for plan, limit in (("driver", None), ("spark", "0")):
            uri = str(Path(scratch, plan))
            shutil.copytree(base, uri)
            if limit is not None:
                spark.conf.set(DRIVER_SEARCH_ROWS, limit)
            try:
                clauses = {"matched": matched, "insert": insert}
                outcomes[plan], builder = _merge(spark, uri, frame, condition, clauses)
            finally:
                spark.conf.unset(DRIVER_SEARCH_ROWS)
            assert builder.on_driver is (plan == "driver"), plan
    assert outcomes["driver"] == outcomes["spark"]


def _three_files(spark: SparkSession, path: Path) -> str:
    uri = _table(path, False, {})
    for rows in ([(1, "a", "c"), (2, "b", "c")], [(3, "a", "c")], [(4, "b", "c")]):
        write_delta(spark.createDataFrame(rows, "k1 long, k2 string, v string").coalesce(1), uri)
    return uri


def test_the_driver_reads_key_columns_and_rewrites_only_touched_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = _three_files(spark, tmp_path / "t")
    source = _source(spark, [(2, "b", "x"), (9, "z", "x"), (None, "n", "x")])
    builder = RecordedMerge(uri, source, "t.k1 = s.k1")
    metrics = builder.when_matched_update_all().when_not_matched_insert_all().execute().metrics
    assert builder.on_driver is True
    assert metrics["numTargetFilesRemoved"] == 1  # the file of id 2 only
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsCopied"]) == (1, 1)
    assert metrics["numTargetRowsInserted"] == 2  # 9, and the NULL key that matches nothing
    rows = sorted(tuple(r) for r in read_delta(spark, uri).where("k1 IS NOT NULL").collect())
    assert rows == [(1, "a", "c"), (2, "b", "x"), (3, "a", "c"), (4, "b", "c"), (9, "z", "x")]


@pytest.mark.parametrize("case", ["repeated key", "conditional match", "over the limit"])
def test_merges_the_driver_does_not_take_search_on_spark(
    spark: SparkSession, tmp_path: Path, case: str
) -> None:
    uri = _three_files(spark, tmp_path / "t")
    rows: list[Row] = [(2, "b", "x"), (3, "a", "y")]
    if case == "repeated key":
        rows.append((2, "b", "w"))
    if case == "over the limit":
        spark.conf.set(DRIVER_SEARCH_ROWS, "2")  # the candidate files (ids 1-2, 3) hold 3 rows
    builder = RecordedMerge(uri, _source(spark, rows), "t.k1 = s.k1")
    builder.when_matched_update_all("s.v <> 'q'" if case == "conditional match" else None)
    if case == "repeated key":
        with pytest.raises(MultipleSourceRowMatchingTargetRowInMergeError):
            builder.execute()
        return
    metrics = builder.execute().metrics
    assert builder.on_driver is False
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetFilesRemoved"]) == (2, 2)


def test_files_without_row_counts_search_on_spark(spark: SparkSession, tmp_path: Path) -> None:
    """A candidate file whose stats lack numRecords: the driver cannot bound what it reads."""
    uri = _three_files(spark, tmp_path / "t")
    log = DeltaLog.for_table(uri)
    txn = log.start_transaction()
    files = txn.filter_files()
    actions: list[Action] = [files[0].remove(0, data_change=False)]
    actions.append(dataclasses.replace(files[0], stats=None, data_change=False))
    txn.commit(actions, Operation("OPTIMIZE", {}))
    builder = RecordedMerge(uri, _source(spark, [(1, "a", "x")]), "t.k1 = s.k1")
    metrics = builder.when_matched_update_all().execute().metrics
    assert builder.on_driver is False
    assert metrics["numTargetRowsUpdated"] == 1


@pytest.mark.parametrize("insert", [False, True])
def test_rows_of_a_file_with_a_deletion_vector_are_found_at_their_index(
    spark: SparkSession, tmp_path: Path, insert: bool
) -> None:
    """The driver reads a file's live rows (its DV's left out); the modified rows' indexes it
    hands to the new deletion vector are their positions in the whole file."""
    uri = _table(tmp_path / "t", False, {"delta.enableDeletionVectors": "true"})
    rows = [(i, "a", "c") for i in range(1, 7)]
    write_delta(spark.createDataFrame(rows, "k1 long, k2 string, v string").coalesce(1), uri)
    engine_delete(uri, "k1 = 2")
    builder = RecordedMerge(uri, _source(spark, [(4, "a", "x"), (5, "a", "y")]), "t.k1 = s.k1")
    builder.when_matched_update_all()
    if insert:
        builder.when_not_matched_insert_all()
    metrics = builder.execute().metrics
    assert builder.on_driver is True
    assert metrics["numTargetRowsUpdated"] == 2
    got = sorted(tuple(r) for r in read_delta(spark, uri).collect())
    assert got == [(1, "a", "c"), (3, "a", "c"), (4, "a", "x"), (5, "a", "y"), (6, "a", "c")]
    (path,) = _dv_files(uri)
    file = next(
        f for f in DeltaLog.for_table(uri).update().files().to_pylist() if f["path"] == path
    )
    assert file["deletionVector"]["cardinality"] == 3  # rows 2, 4 and 5


KEYED = st.tuples(st.integers(-(2**63), 2**63 - 1), st.booleans())  # (key, matched)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(KEYED, max_size=150, unique_by=lambda r: r[0]))
def test_unmatched_ranges_hold_exactly_the_unmatched_keys(rows: list[tuple[int, bool]]) -> None:
    values = np.array([v for v, _ in rows], dtype=np.int64)
    matched = np.array([m for _, m in rows], dtype=bool)
    ranges = unmatched_ranges(values, matched)
    ordered = [m for _, m in sorted(rows)]
    runs = sum(1 for i, m in enumerate(ordered) if not m and (i == 0 or ordered[i - 1]))
    if runs > MAX_INSERT_RANGES:
        assert ranges is None
        return
    assert ranges is not None and len(ranges) == runs
    for value, was_matched in rows:
        assert any(low <= value <= high for low, high in ranges) == (not was_matched)


@pytest.mark.parametrize("runs", [2, MAX_INSERT_RANGES + 1], ids=["ranges", "anti-join"])
def test_inserts_by_key_ranges_or_by_an_anti_join(
    spark: SparkSession, tmp_path: Path, runs: int
) -> None:
    """New keys interleaved with the matched ones: few runs of them are filtered by ranges,
    more by an anti join with the matched keys; the same inserts either way."""
    uri = _table(tmp_path / "t", False, {})
    existing = [(2 * i, "a", "c") for i in range(runs)]
    write_delta(spark.createDataFrame(existing, "k1 long, k2 string, v string"), uri)
    new = [(2 * i + 1, "n", "x") for i in range(runs)]
    source = _source(spark, [(k, "a", "x") for k, _, _ in existing] + new + [(None, "z", "x")])
    kept: list[Any] = []

    class Recorded(RecordedMerge):
        def _unmatched(self, source: Any, target: Any, found: Found) -> Any:
            kept.append((found.unmatched is not None, found.matches is not None))
            return super()._unmatched(source, target, found)

    builder = Recorded(uri, source, "t.k1 = s.k1")
    metrics = builder.when_matched_update_all().when_not_matched_insert_all().execute().metrics
    assert builder.on_driver is True
    assert kept == [(True, False) if runs <= MAX_INSERT_RANGES else (False, True)]
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (runs, runs + 1)
    got = sorted(tuple(r) for r in read_delta(spark, uri).where("k1 IS NOT NULL").collect())
    assert got == sorted([(k, "a", "x") for k, _, _ in existing] + new)
