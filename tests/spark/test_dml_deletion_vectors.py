"""DELETE and UPDATE on Spark on tables with deletion vectors enabled: they write deletion
vectors as the in-process commands do (DELETE no data file, UPDATE only the updated rows), the
row indexes they use are physical even in files that have a DV already (whose rows stay
deleted: the union), and the results (rows as this engine and deltalake read them, metrics,
change data) equal the in-process commands' on copies of one table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog
from airflow_delta.engine import delete as engine_delete
from airflow_delta.engine import read_changes as engine_read_changes
from airflow_delta.engine import update as engine_update
from airflow_delta.engine.commands.deletion_vector_files import DeletionVectorReader
from airflow_delta.spark import delete, update
from airflow_delta.spark.read import scan_files
from tests.engine.commands.dml_tables import ROWS as TABLE_ROWS
from tests.engine.commands.dml_tables import (
    batch,
    batches,
    combined_predicates,
    create,
    deltalake_rows,
    engine_rows,
)
from tests.engine.commands.test_row_ids import TRACKED, tracked_rows

DV_METRICS = ("numDeletionVectorsAdded", "numDeletionVectorsRemoved", "numDeletionVectorsUpdated")
METRICS = {
    "DELETE": ("numDeletedRows", "numCopiedRows", "numRemovedFiles", *DV_METRICS),
    "UPDATE": ("numUpdatedRows", "numCopiedRows", "numRemovedFiles", *DV_METRICS),
}
CDF = {"delta.enableChangeDataFeed": "true"}
#: Two appends to a flat table: one file each (ids 0-9, 10-19).
DATA = [batch(range(10)), batch(range(10, 20))]


def copies(path: Path, *data: pa.Table, **options: Any) -> tuple[str, str]:
    """Two copies of one table with deletion vectors enabled: for each executor."""
    first = create(path / "in_process", *data, dv=True, **options)
    second = str(path / "spark")
    shutil.copytree(first, second)
    return first, second


def same_rows(ours: str, theirs: str) -> list[tuple[Any, ...]]:
    found = engine_rows(theirs)
    assert found == engine_rows(ours)
    assert deltalake_rows(theirs) == found
    return found


def commit(uri: str, version: int) -> list[dict[str, Any]]:
    lines = Path(uri, "_delta_log", f"{version:020d}.json").read_text().splitlines()
    return [json.loads(line) for line in lines]


def deleted_ids(uri: str) -> dict[str, list[int]]:
    """Per active file holding a DV, the ids of the rows it deletes (read from the parquet
    file at the DV's row indexes)."""
    log = DeltaLog.for_table(uri)
    snapshot = log.update()
    reader = DeletionVectorReader(log.location, snapshot.version)
    out = {}
    for f in snapshot.files().to_pylist():
        if f["deletionVector"] is not None:
            ids = pq.read_table(Path(uri, f["path"]), columns=["id"]).column("id").to_pylist()
            out[f["path"]] = [ids[i] for i in reader.read(f["deletionVector"]).tolist()]
    return out


def test_the_row_index_is_the_parquet_position_in_a_file_with_a_deletion_vector(
    spark: SparkSession, tmp_path: Path
) -> None:
    uri = create(tmp_path / "t", *DATA, dv=True, partitioned=False)
    engine_delete(uri, "id IN (0, 3, 4, 15)")
    snapshot = DeltaLog.for_table(uri).update()
    rows = scan_files(
        spark, snapshot, snapshot.files(), file_column="file", row_index_column="row"
    ).collect()
    assert sorted(r["id"] for r in rows) == [i for i in range(20) if i not in (0, 3, 4, 15)]
    for r in rows:
        ids = pq.read_table(Path(uri, r["file"]), columns=["id"]).column("id").to_pylist()
        assert ids[r["row"]] == r["id"]  # the physical position, deleted rows counted


def test_delete_writes_deletion_vectors_and_no_data_file(
    spark: SparkSession, tmp_path: Path
) -> None:
    ours, theirs = copies(tmp_path, *DATA, partitioned=False)
    data_files = set(Path(theirs).rglob("*.parquet"))
    expected = engine_delete(ours, "id % 4 = 1 OR id >= 16")  # every row of none: 2 DVs
    result = delete(spark, theirs, "id % 4 = 1 OR id >= 16")
    for name in (*METRICS["DELETE"], "numAddedFiles"):
        assert result.metrics[name] == expected.metrics[name], name
    assert result.metrics["numDeletionVectorsAdded"] == 2
    assert result.metrics["numAddedFiles"] == result.metrics["numCopiedRows"] == 0
    actions = commit(theirs, result.version)
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    assert len(adds) == len(removes) == 2
    assert {a["path"] for a in adds} == {r["path"] for r in removes}  # the same files
    assert all(a.get("deletionVector") is not None for a in adds)
    assert all(json.loads(a["stats"])["tightBounds"] is False for a in adds)
    assert set(Path(theirs).rglob("*.parquet")) == data_files  # no data file written
    same_rows(ours, theirs)
    assert sorted(i for ids in deleted_ids(theirs).values() for i in ids) == [
        1, 5, 9, 13, 16, 17, 18, 19,
    ]  # fmt: skip


def test_an_existing_deletion_vector_is_unioned(spark: SparkSession, tmp_path: Path) -> None:
    ours, theirs = copies(tmp_path, *DATA, partitioned=False)
    for uri in (ours, theirs):
        engine_delete(uri, "id IN (2, 12)")
    expected = engine_update(ours, {"s": "upper(s)"}, "id IN (3, 4, 13)")
    result = update(spark, theirs, {"s": "upper(s)"}, "id IN (3, 4, 13)")
    for name in METRICS["UPDATE"]:  # files added: as many as Spark's tasks
        assert result.metrics[name] == expected.metrics[name], name
    assert result.metrics["numDeletionVectorsUpdated"] == 2
    assert sorted(map(sorted, deleted_ids(theirs).values())) == [[2, 3, 4], [12, 13]]
    adds = [a["add"] for a in commit(theirs, result.version) if "add" in a]
    new = [a for a in adds if a.get("deletionVector") is None]  # the updated rows only
    assert sum(json.loads(a["stats"])["numRecords"] for a in new) == 3
    rows = same_rows(ours, theirs)
    assert sorted(r[0] for r in rows if r[2] and r[2].isupper()) == [3, 4, 13]
    # a DELETE of every live row of a file with a DV removes it whole (not the updated rows:
    # the executors wrote them to files of their own)
    expected = engine_delete(ours, "id < 10 AND id NOT IN (3, 4)")
    result = delete(spark, theirs, "id < 10 AND id NOT IN (3, 4)")
    for name in METRICS["DELETE"]:
        assert result.metrics[name] == expected.metrics[name], name
    assert result.metrics["numRemovedFiles"] == 1
    same_rows(ours, theirs)


def test_change_data_with_deletion_vectors(spark: SparkSession, tmp_path: Path) -> None:
    ours, theirs = copies(tmp_path, *DATA, configuration=CDF)
    for uri in (ours, theirs):
        engine_delete(uri, "id = 1")  # a file with a DV before the Spark commands
    engine_delete(ours, "k = 0 OR id = 7")
    delete(spark, theirs, "k = 0 OR id = 7")
    expected = engine_update(ours, {"s": "'u'"}, "p = 'a' AND id > 3")
    result = update(spark, theirs, {"s": "'u'"}, "p = 'a' AND id > 3")
    assert result.metrics["numDeletionVectorsAdded"] == expected.metrics["numDeletionVectorsAdded"]
    assert result.metrics["numAddedChangeFiles"] > 0
    engine_delete(ours, "p = 'b'")  # whole files (one with a DV): cdc files, no data
    delete(spark, theirs, "p = 'b'")
    same_rows(ours, theirs)

    def changes(uri: str) -> list[tuple[Any, ...]]:
        key = ["_commit_version", "_change_type", "id", "k", "s", "p"]
        table = pa.table(engine_read_changes(uri, 3)).select(key)
        return sorted(zip(*(table.column(c).to_pylist() for c in key), strict=True), key=repr)

    found = changes(theirs)
    assert found == changes(ours)
    assert {c[1] for c in found} == {"delete", "update_preimage", "update_postimage"}
    assert not [c for c in found if c[1] == "update_postimage" and c[4] != "u"]  # no copies


@pytest.mark.parametrize("dv", [True, False], ids=["deletion_vectors", "rewrites"])
def test_row_tracking(spark: SparkSession, tmp_path: Path, dv: bool) -> None:
    """On a table with row tracking enabled the rows keep their ids, as in process: a DELETE
    with deletion vectors moves no row (the files keep their baseRowId), a rewrite copies the
    ids, and updated rows keep theirs and take the UPDATE's commit version."""
    uri = create(tmp_path / "t", *DATA, dv=dv, partitioned=False, configuration=TRACKED)
    before = tracked_rows(uri)
    result = delete(spark, uri, "id IN (1, 2, 15)")
    assert result.metrics["numDeletionVectorsAdded"] == (2 if dv else 0)
    assert tracked_rows(uri) == {k: v for k, v in before.items() if k not in (1, 2, 15)}
    version = update(spark, uri, {"s": "'u'"}, "id IN (3, 16)").version
    after = tracked_rows(uri)
    assert set(after) == set(before) - {1, 2, 15}
    for key, (s, row_id, commit_version) in after.items():
        assert row_id == before[key][1], key
        if key in (3, 16):
            assert (s, commit_version) == ("u", version)
        else:
            assert (s, commit_version) == before[key][::2]
    assert deltalake_rows(uri) == engine_rows(uri)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rows=TABLE_ROWS,
    commits=st.integers(1, 3),
    partitioned=st.booleans(),
    command=st.sampled_from(["DELETE", "UPDATE"]),
    predicate=combined_predicates(["k = 1", "k IS NULL", "s = 'x'", "p = 'a'", "k > 2", "id < 5"]),
    earlier=st.sampled_from([None, "id % 3 = 0", "k = 0"]),
)
def test_as_in_process(
    spark: SparkSession,
    tmp_path_factory: Any,
    rows: list[tuple[Any, ...]],
    commits: int,
    partitioned: bool,
    command: str,
    predicate: str,
    earlier: str | None,
) -> None:
    """Random tables (some files with DVs already) and predicates: DELETE or UPDATE on Spark
    gives the rows, metrics and DVs of the in-process command."""
    path = tmp_path_factory.mktemp("dv")
    ours, theirs = copies(path, *batches(rows, commits), partitioned=partitioned)
    if earlier is not None:
        for uri in (ours, theirs):
            engine_delete(uri, earlier)
    if command == "DELETE":
        expected, result = engine_delete(ours, predicate), delete(spark, theirs, predicate)
    else:
        assign = {"s": "'new'", "k": "7"}
        expected = engine_update(ours, assign, predicate)
        result = update(spark, theirs, assign, predicate)
    assert result.version == expected.version
    for name in METRICS[command]:
        assert result.metrics[name] == expected.metrics[name], name
    same_rows(ours, theirs)
    assert deleted_ids(theirs) == deleted_ids(ours)  # the same DVs, file by file
