"""Clustered tables (the `clustering` writer feature): writable, with the row tracking and
deletion vectors the golden one carries; stats on the clustering columns are required, so a
table clustered by a column beyond `delta.dataSkippingNumIndexedCols` refuses adds with the fix.
Appends never cluster (PROTOCOL.md: a writer need not cluster a file at any moment)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import DeltaLog, Operation
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import InvalidCommitError, InvalidTablePropertyError
from airflow_delta.engine.protocol.config import MATERIALIZED_ROW_ID as ROW_ID
from airflow_delta.engine.protocol.config import TableConfig
from tests.engine.commands.dml_tables import append

GOLDEN = Path("/work/shared/golden/tables/delta-rs__table-with-domain-metadata")
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("department", pa.string())])


def clustered(tmp_path: Path) -> str:
    """A copy of the golden clustered table (by department; row tracking at mark 435; its log
    only: the golden copy keeps no data files)."""
    uri = str(tmp_path / "clustered")
    shutil.copytree(GOLDEN, uri)
    return uri


def rows(ids: list[int]) -> pa.Table:
    return pa.table(
        {"id": ids, "name": [f"n{i}" for i in ids], "department": ["Sales"] * len(ids)}, SCHEMA
    )


def test_a_clustered_table_is_appended_to_and_merged_into(tmp_path: Path) -> None:
    uri = clustered(tmp_path)
    before = DeltaLog.for_table(uri).update()
    assert "clustering" in (before.protocol.writer_features or [])
    version = append(uri, rows([1000, 1001]))
    # keys beyond every file's id range: stats prune every file, the rows are inserted
    merged = merge_arrow(uri, rows([2000]), "t.id = s.id").when_not_matched_insert_all().execute()
    assert merged.metrics["numTargetRowsInserted"] == 1 and merged.version == version + 1
    after = DeltaLog.for_table(uri).update()
    new = [f for f in after.all_files() if f.path not in {g.path for g in before.all_files()}]
    assert len(new) == 2 and all(f.clustering_provider is None for f in new)  # not clustered
    assert sorted(f.base_row_id for f in new) == [436, 438]  # after the golden mark, 435
    for f in new:
        stats = json.loads(f.stats or "{}")
        assert stats["minValues"]["department"] == "Sales"  # clustering column has stats
    assert after.domain_metadata["delta.clustering"] == before.domain_metadata["delta.clustering"]
    mark = json.loads(after.domain_metadata["delta.rowTracking"].configuration)
    assert mark["rowIdHighWaterMark"] == 438


def test_a_clustering_column_without_stats_refuses_adds(tmp_path: Path) -> None:
    uri = clustered(tmp_path)
    log = DeltaLog.for_table(uri)
    metadata = log.update().metadata
    narrow = {**metadata.configuration, "delta.dataSkippingNumIndexedCols": "2"}
    txn = log.start_transaction()
    txn.commit(
        [dataclasses.replace(metadata, configuration=narrow)], Operation("SET TBLPROPERTIES")
    )
    with pytest.raises(InvalidCommitError, match=r"clustered by department.*first 2 columns"):
        append(uri, rows([1000]))
    wide = {**narrow, "delta.dataSkippingNumIndexedCols": "-1"}
    txn = log.start_transaction()
    txn.commit([dataclasses.replace(metadata, configuration=wide)], Operation("SET TBLPROPERTIES"))
    append(uri, rows([1000]))


@pytest.mark.parametrize("value", ["x", "-2", "1.5"])
def test_num_indexed_cols_is_parsed_strictly(value: str) -> None:
    config = TableConfig({"delta.dataSkippingNumIndexedCols": value}, "/t")
    with pytest.raises(InvalidTablePropertyError, match="dataSkippingNumIndexedCols"):
        config.validate()


def test_optimize_compacts_only_unclustered_files_and_never_zorders(tmp_path: Path) -> None:
    from airflow_delta.engine import optimize
    from airflow_delta.engine.errors import UnsupportedCommandError

    uri = clustered(tmp_path)
    log = DeltaLog.for_table(uri)
    snapshot = log.update()
    golden = snapshot.all_files()  # clustered by another engine (and absent from the copy)
    clustered_files = [
        dataclasses.replace(f, clustering_provider="liquid", data_change=False) for f in golden
    ]
    log.start_transaction().commit(clustered_files, Operation("OPTIMIZE"))
    for i in range(3):
        append(uri, rows([1000 + i]))
    with pytest.raises(UnsupportedCommandError, match="clustered"):
        optimize(uri, zorder_by=["id"])
    result = optimize(uri, min_file_size=10**9)  # every file is small
    assert result.metrics["numFilesRemoved"] == 3 and result.metrics["numFilesAdded"] == 1
    after = {f.path: f for f in DeltaLog.for_table(uri).update().all_files()}
    assert all(after[f.path].clustering_provider == "liquid" for f in golden)  # left alone
    (compacted,) = [f for f in after.values() if f.path not in {g.path for g in golden}]
    stored = pq.read_table(Path(uri, compacted.path))  # the rows keep their row ids
    assert sorted(stored.column(snapshot.metadata.configuration[ROW_ID]).to_pylist()) == [
        436,
        437,
        438,
    ]
