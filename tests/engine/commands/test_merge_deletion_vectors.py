"""The in-process MERGE and deletion vectors: into files that carry DVs (written by this
engine's DELETE) the rows a DV deletes stay deleted; on a table with DVs enabled the MERGE
writes a DV over the rows it modifies (the others stay in place), else it rewrites the touched
file and removes it with its DV. The result is what deltalake's MERGE gives on a copy where
the same rows were deleted by rewrite; engine, deltalake and DuckDB agree on it."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog, Operation, delete
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from tests.engine.commands.dml_tables import ROWS as TABLE_ROWS
from tests.engine.commands.dml_tables import (
    SCHEMA,
    batch,
    batches,
    create,
    deltalake_rows,
    rows,
)

SET = Operation("SET TBLPROPERTIES")


def _merge(uri: str, source: pa.Table, clauses: str) -> Any:
    builder = merge_arrow(uri, source, "t.id = s.id")
    if "delete" in clauses:
        builder = builder.when_matched_delete("t.k = 1")
    if "update" in clauses:
        builder = builder.when_matched_update({"s": "s.s", "k": "s.k"})
    return builder.when_not_matched_insert_all().execute()


def _deltalake_merge(uri: str, source: pa.Table, clauses: str) -> None:
    merger = DeltaTable(uri).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    if "delete" in clauses:
        merger = merger.when_matched_delete("t.k = 1")
    if "update" in clauses:
        merger = merger.when_matched_update({"s": "s.s", "k": "s.k"})
    merger.when_not_matched_insert_all().execute()


def test_a_merge_writes_a_deletion_vector_over_the_rows_it_modifies(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(10)), dv=True, partitioned=False)
    assert delete(uri, "id IN (1, 2)").metrics["numDeletionVectorsAdded"] == 1
    source = batch([2, 3, 20], s=["new", "new", "new"])
    result = _merge(uri, source, "update")
    metrics = result.metrics
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (1, 2)
    assert metrics["numTargetRowsCopied"] == 0  # the 7 other rows stay in place
    assert (metrics["numTargetDeletionVectorsAdded"], metrics["numTargetFilesRemoved"]) == (1, 0)
    assert metrics["numTargetDeletionVectorsUpdated"] == 1  # its DV now holds 1, 2 and 3
    got = rows(uri)  # engine, deltalake and DuckDB agree
    assert sorted(r[0] for r in got if r[2] == "new") == [2, 3, 20]  # 2: deleted, so inserted
    assert sorted(r[0] for r in got) == [0, 2, 3, 4, 5, 6, 7, 8, 9, 20]  # 1 stays deleted
    commit = Path(uri, "_delta_log", f"{result.version:020d}.json").read_text().splitlines()
    removed = [json.loads(line)["remove"] for line in commit if '"remove"' in line]
    assert len(removed) == 1 and removed[0]["deletionVector"] is not None  # (path, old DV)
    files = DeltaLog.for_table(uri).update().files().to_pylist()
    (kept,) = [f for f in files if f["path"] == removed[0]["path"]]
    assert kept["deletionVector"]["cardinality"] == 3


def test_without_deletion_vectors_a_touched_dv_file_is_rewritten(tmp_path: Path) -> None:
    """DVs written earlier, then disabled: the MERGE rewrites the file without its deleted
    rows and removes it with its DV."""
    uri = create(tmp_path / "t", batch(range(10)), dv=True, partitioned=False)
    delete(uri, "id IN (1, 2)")
    log = DeltaLog.for_table(uri)
    metadata = log.update().metadata
    off = {**metadata.configuration, "delta.enableDeletionVectors": "false"}
    log.start_transaction().commit([dataclasses.replace(metadata, configuration=off)], SET)
    result = _merge(uri, batch([3], s=["new"]), "update")
    assert result.metrics["numTargetRowsCopied"] == 7  # 10 - 2 deleted by the DV - 1 updated
    assert sorted(r[0] for r in rows(uri)) == [0, 3, 4, 5, 6, 7, 8, 9]
    assert all(f["deletionVector"] is None for f in log.update().files().to_pylist())


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    table_rows=TABLE_ROWS,
    commits=st.integers(1, 3),
    deleted=st.sampled_from(["k = 0", "s = 'x'", "p = 'a' AND k > 2", "id % 2 = 0"]),
    source_ids=st.lists(st.integers(0, 35), min_size=1, max_size=8, unique=True),
    clauses=st.sampled_from(["update", "delete", "delete update"]),
)
def test_merge_into_dv_files_matches_deltalake(
    tmp_path_factory: Any,
    table_rows: list[Any],
    commits: int,
    deleted: str,
    source_ids: list[int],
    clauses: str,
) -> None:
    root = tmp_path_factory.mktemp("merge_dv")
    data = batches(table_rows, commits)
    ours = create(root / "ours", *data, dv=True)
    theirs = create(root / "theirs", *data)  # the same rows deleted by rewriting files
    if "%" in deleted:
        deleted = "id IN (" + ", ".join(str(i) for i in range(0, 40, 2)) + ")"
    delete(ours, deleted)
    delete(theirs, deleted)
    source = pa.table(
        {
            "id": source_ids,
            "k": [i % 3 for i in source_ids],
            "s": [f"m{i}" for i in source_ids],
            "p": ["a" if i % 2 else "b" for i in source_ids],
        },
        SCHEMA,
    )
    _merge(ours, source, clauses)
    _deltalake_merge(theirs, source, clauses)
    assert rows(ours) == deltalake_rows(theirs)
    shutil.rmtree(root)
