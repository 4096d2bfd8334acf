"""MERGE on Spark into tables with deletion vectors enabled: it writes a deletion vector over
the target rows it modifies (MATCHED and NOT MATCHED BY SOURCE clauses) and only the updated
and inserted rows, as the in-process MERGE does; a file with a DV already gets the union; the
results (rows as this engine and deltalake read them, metrics, DVs, change data) equal the
in-process MERGE's on copies of one table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from airflow_delta.engine import delete as engine_delete
from airflow_delta.engine import read_changes as engine_read_changes
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.spark import merge_delta
from tests.engine.commands.dml_tables import ROWS as TABLE_ROWS
from tests.engine.commands.dml_tables import SCHEMA, batch, batches, create
from tests.engine.commands.test_row_ids import TRACKED, tracked_rows
from tests.spark.test_dml_deletion_vectors import (
    CDF,
    DATA,
    commit,
    copies,
    deleted_ids,
    same_rows,
)

DDL = "id long, k int, s string, p string"
#: Clauses by name, each (kind, arguments) of the builder's `when_*` methods.
CLAUSES: dict[str, tuple[str, tuple[Any, ...]]] = {
    "update": ("when_matched_update", ({"s": "s.s", "k": "s.k"}, "t.k IS NULL OR t.k <> 1")),
    "delete": ("when_matched_delete", ("t.k = 1",)),
    "insert": ("when_not_matched_insert_all", ()),
    "by_source_update": ("when_not_matched_by_source_update", ({"s": "'gone'"}, "t.k = 2")),
    "by_source_delete": ("when_not_matched_by_source_delete", ("t.k = 3",)),
}
COMPARED = ("numTargetFilesRemoved", "numSourceRows")  # files added: as Spark's tasks write them


def merges(
    spark: SparkSession, ours: str, theirs: str, source: pa.Table, clauses: list[str]
) -> tuple[Any, Any]:
    """The same MERGE in process into `ours` and on Spark into `theirs`; both results."""
    df = spark.createDataFrame([tuple(r.values()) for r in source.to_pylist()], DDL)
    builders = [merge_arrow(ours, source, "t.id = s.id"), merge_delta(theirs, df, "t.id = s.id")]
    for name in clauses:
        method, arguments = CLAUSES[name]
        builders = [getattr(b, method)(*arguments) for b in builders]
    expected, result = (b.execute() for b in builders)
    assert builders[1].executor == "spark"
    assert result.version == expected.version
    for name, value in expected.metrics.items():
        if "Rows" in name or "DeletionVectors" in name or name in COMPARED:
            assert result.metrics[name] == value, name
    same_rows(ours, theirs)
    assert deleted_ids(theirs) == deleted_ids(ours)
    return expected, result


def test_a_merge_writes_deletion_vectors_over_the_rows_it_modifies(
    spark: SparkSession, tmp_path: Path
) -> None:
    ours, theirs = copies(tmp_path, *DATA, partitioned=False)
    for uri in (ours, theirs):
        engine_delete(uri, "id IN (2, 12)")  # both files have a DV
    source = batch([3, 12, 13, 25], k=[0, 0, 1, 0], s=["new"] * 4)  # 13: k 3, updated
    _, result = merges(spark, ours, theirs, source, ["update", "insert", "by_source_delete"])
    metrics = result.metrics
    assert metrics["numTargetRowsCopied"] == 0
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (2, 2)
    assert metrics["numTargetRowsNotMatchedBySourceDeleted"] == 2  # ids 8 and 18 (k 3)
    assert metrics["numTargetDeletionVectorsUpdated"] == 2
    assert metrics["numTargetFilesRemoved"] == 0
    adds = [a["add"] for a in commit(theirs, result.version) if "add" in a]
    new = [a for a in adds if a.get("deletionVector") is None]  # the written rows only
    assert sum(json.loads(a["stats"])["numRecords"] for a in new) == 4
    assert sorted(map(sorted, deleted_ids(theirs).values())) == [[2, 3, 8], [12, 13, 18]]


def test_change_data_with_deletion_vectors(spark: SparkSession, tmp_path: Path) -> None:
    ours, theirs = copies(tmp_path, *DATA, configuration=CDF)
    for uri in (ours, theirs):
        engine_delete(uri, "id = 1")
    source = batch([0, 1, 4, 11, 30], k=[0, 0, 1, 4, 0], s=["m"] * 5)
    clauses = ["delete", "update", "insert", "by_source_update"]
    _, result = merges(spark, ours, theirs, source, clauses)
    assert result.metrics["numTargetDeletionVectorsAdded"] > 0

    def changes(uri: str) -> list[tuple[Any, ...]]:
        key = ["_commit_version", "_change_type", *SCHEMA.names]
        table = pa.table(engine_read_changes(uri, result.version)).select(key)
        return sorted(zip(*(table.column(c).to_pylist() for c in key), strict=True), key=repr)

    found = changes(theirs)
    assert found == changes(ours)
    kinds = {c[1] for c in found}
    assert kinds == {"delete", "insert", "update_preimage", "update_postimage"}


@pytest.mark.parametrize("dv", [True, False], ids=["deletion_vectors", "rewrites"])
def test_row_tracking(spark: SparkSession, tmp_path: Path, dv: bool) -> None:
    """On a table with row tracking enabled the rows keep their ids, as in process: the rows
    left in place or copied keep id and commit version, updated rows keep their id and take
    the MERGE's version, inserted rows get fresh ids."""
    if dv:
        ours, theirs = copies(tmp_path, *DATA, partitioned=False, configuration=TRACKED)
    else:  # two tables without deletion vectors (their ids are the same: fresh, in order)
        ours, theirs = (
            create(tmp_path / name, *DATA, partitioned=False, configuration=TRACKED)
            for name in ("in_process", "spark")
        )
    before = tracked_rows(theirs)
    source = batch([3, 13, 25], k=[0, 0, 0], s=["new"] * 3)
    _, result = merges(spark, ours, theirs, source, ["update", "insert", "by_source_delete"])
    assert result.metrics["numTargetDeletionVectorsAdded"] == (2 if dv else 0)
    after = tracked_rows(theirs)
    assert set(after) == set(before) - {8, 18} | {25}  # 8, 18: k 3, deleted
    for key, (s, row_id, commit_version) in after.items():
        if key == 25:
            assert row_id not in {v[1] for v in before.values()}
            continue
        assert row_id == before[key][1], key
        if key in (3, 13):
            assert (s, commit_version) == ("new", result.version)
        else:
            assert (s, commit_version) == before[key][::2]
    assert {k: v[1] for k, v in tracked_rows(ours).items() if k != 25} == {
        k: v[1] for k, v in after.items() if k != 25
    }


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=TABLE_ROWS,
    commits=st.integers(1, 3),
    partitioned=st.booleans(),
    source_ids=st.sets(st.integers(0, 40), min_size=1, max_size=12),
    clauses=st.lists(st.sampled_from(sorted(CLAUSES)), min_size=1, max_size=4, unique=True),
    earlier=st.sampled_from([None, "id % 3 = 0"]),
    change_data=st.booleans(),
)
def test_as_in_process(
    spark: SparkSession,
    tmp_path_factory: Any,
    rows: list[tuple[Any, ...]],
    commits: int,
    partitioned: bool,
    source_ids: set[int],
    clauses: list[str],
    earlier: str | None,
    change_data: bool,
) -> None:
    """Random tables (some files with DVs already), sources and clauses: the Spark MERGE gives
    the rows, metrics and DVs of the in-process MERGE."""
    path = tmp_path_factory.mktemp("merge_dv")
    config = CDF if change_data else None
    data = batches(rows, commits)
    ours, theirs = copies(path, *data, partitioned=partitioned, configuration=config)
    if earlier is not None:
        for uri in (ours, theirs):
            engine_delete(uri, earlier)
    ids = sorted(source_ids)
    source = batch(ids, k=[i % 4 for i in ids], s=[f"n{i}" for i in ids], p=["a"] * len(ids))
    _, result = merges(spark, ours, theirs, source, clauses)  # same rows, metrics and DVs
    assert result.metrics["numSourceRows"] == len(ids)
