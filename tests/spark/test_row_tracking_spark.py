"""Row ids through the Spark data plane on a table with row tracking enabled: `scan_files`
gives each row's id and commit version (stored in the file's materialized columns, else from
the log's baseRowId + row index and defaultRowCommitVersion), and `write_files` stores them in
the new files' materialized columns, so a rewrite built from the two keeps every row's id and
is accepted by the commit's row-tracking check. The engine's own reader (`RowTracking`) is the
reference."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.compute as pc
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_delta.engine import DeltaLog, Operation
from airflow_delta.engine.commands.row_ids import RowTracking
from airflow_delta.engine.errors import DeltaProtocolError
from airflow_delta.spark.read import scan_files
from airflow_delta.spark.write import write_files
from tests.engine.commands.dml_tables import batch, create, rows
from tests.engine.commands.test_row_ids import TRACKED, tracked_rows


def _rewrite(spark: SparkSession, uri: str, keep_ids: bool, where: str = "id % 3 = 0") -> int:
    """Rewrite the files holding rows `where` on Spark: those rows get s = 'u' (and a new
    commit version), the others are copied; with `keep_ids` the rows carry their ids."""
    txn = DeltaLog.for_table(uri).start_transaction()
    tracking = RowTracking.of(txn.metadata)
    assert tracking is not None
    files = txn.filter_files_arrow()
    names = tracking.names if keep_ids else None
    data = scan_files(spark, txn.snapshot, files, row_tracking=names)
    hit = F.expr(where)
    data = data.withColumn("s", F.when(hit, F.lit("u")).otherwise(F.col("s")))
    if keep_ids:
        version = F.col(tracking.commit_version)
        data = data.withColumn(tracking.commit_version, F.when(hit, F.lit(None)).otherwise(version))
    adds = write_files(txn, data)
    now = int(time.time() * 1000)
    removes = [f.remove(now) for f in txn.snapshot.all_files()]
    return txn.commit([*removes, *adds], Operation("UPDATE", {"predicate": where}))


@pytest.mark.parametrize("dv", [False, True])
def test_a_spark_rewrite_keeps_every_row_id(spark: SparkSession, tmp_path: Path, dv: bool) -> None:
    uri = create(tmp_path / "t", batch(range(6)), batch(range(6, 10)), dv=dv, configuration=TRACKED)
    if dv:  # a deletion vector: the ids of the rows it keeps are base + their physical index
        from airflow_delta.engine import delete

        delete(uri, "id IN (1, 7)")
    before = tracked_rows(uri)
    version = _rewrite(spark, uri, keep_ids=True)
    after = tracked_rows(uri)
    assert set(after) == set(before)
    for key, (s, row_id, commit_version) in after.items():
        assert row_id == before[key][1], key  # every row keeps its id
        if key % 3 == 0:
            assert (s, commit_version) == ("u", version)
        else:
            assert (s, commit_version) == before[key][::2]
    assert len(rows(uri)) == len(before)  # deltalake and DuckDB read the rewritten table
    # a second rewrite reads the ids from the materialized columns written by the first
    _rewrite(spark, uri, keep_ids=True, where="id = 2")
    assert {k: v[1] for k, v in tracked_rows(uri).items()} == {k: v[1] for k, v in after.items()}


def test_a_spark_rewrite_without_row_ids_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(4)), configuration=TRACKED)
    version = DeltaLog.for_table(uri).update().version
    with pytest.raises(DeltaProtocolError, match="without preserving their row ids"):
        _rewrite(spark, uri, keep_ids=False)
    assert DeltaLog.for_table(uri).update().version == version


def test_scan_files_gives_fresh_ids_from_the_log(spark: SparkSession, tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(3)), configuration=TRACKED)
    snapshot = DeltaLog.for_table(uri).update()
    files = snapshot.files()
    assert pc.all(pc.is_valid(pc.struct_field(files, "baseRowId"))).as_py()
    tracking = RowTracking.of(snapshot.metadata)
    assert tracking is not None
    ids = scan_files(spark, snapshot, files, row_tracking=tracking.names)
    assert sorted(r[0] for r in ids.select(tracking.row_id).collect()) == [0, 1, 2]
