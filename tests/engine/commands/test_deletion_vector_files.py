"""Deletion vectors in storage (engine/commands/deletion_vector_files.py), and DELETE/UPDATE on
tables whose deletion vectors delta-spark wrote (golden tables)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from airflow_delta.engine import DeltaLog, delete, update
from airflow_delta.engine.commands.data_reader import FileReader
from airflow_delta.engine.commands.deletion_vector_files import (
    DeletionVectorReader,
    DeletionVectorWriter,
)
from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.deletion_vectors import dv_file_name

GOLDEN = Path("/work/shared/golden/tables")


def test_writer_inlines_small_vectors_and_shares_one_file(tmp_path: Path) -> None:
    location = TableLocation.of(str(tmp_path))
    writer = DeletionVectorWriter(location)
    small = writer.add(np.array([5, 3, 3], dtype=np.uint64))
    large = writer.add(np.arange(0, 20000, 2, dtype=np.uint64))
    wide = writer.add(np.array([1, 2**40, 2**41 + 7], dtype=np.uint64))
    assert (small.storage_type, small.cardinality, small.offset) == ("i", 2, None)
    assert (large.storage_type, large.offset, large.cardinality) == ("u", 1, 10000)
    assert (wide.storage_type, wide.offset) == ("u", 1 + 4 + large.size_in_bytes + 4)  # 3 buckets
    assert list(tmp_path.iterdir()) == []  # nothing written before finish()
    writer.finish()
    assert [p.name for p in tmp_path.iterdir()] == [dv_file_name(writer.uuid)]
    reader = DeletionVectorReader(location, 0)
    assert reader.read(small).tolist() == [3, 5]
    assert reader.read(large).tolist() == list(range(0, 20000, 2))
    assert reader.read(wide.to_json_dict()).tolist() == [1, 2**40, 2**41 + 7]
    writer.abort()
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(CorruptLogError, match="is missing"):
        DeletionVectorReader(location, 3).read(large)
    wrong = {**small.to_json_dict(), "cardinality": 3}
    with pytest.raises(CorruptLogError, match="deletes 2 rows, the log says 3"):
        reader.read(wrong)


def _ids(uri: str) -> list[int]:
    txn = DeltaLog.for_table(uri).start_transaction()
    schema = pa.schema([("id", pa.int64())])
    ours = sorted(FileReader(txn, schema).read(txn.snapshot.files(), ["id"])["id"].to_pylist())
    query = QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT id FROM t")
    assert sorted(pa.table(query.read_all())["id"].to_pylist()) == ours
    return ours


def test_delta_sparks_deletion_vectors_are_respected_and_combined(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    shutil.copytree(GOLDEN / "delta__kernel-defaults__basic-dv-no-checkpoint", uri)
    before = _ids(uri)
    assert before == list(range(2, 10))  # delta-spark's DV deleted 0 and 1 (of file 0-4)
    result = delete(uri, "id = 1 OR id = 4 OR id = 8")  # 1 is deleted already
    m = result.metrics
    assert m["numDeletedRows"] == 2
    assert (m["numDeletionVectorsAdded"], m["numDeletionVectorsUpdated"]) == (2, 1)
    assert _ids(uri) == [2, 3, 5, 6, 7, 9]
    assert update(uri, {"id": "100"}, "id = 9").metrics["numUpdatedRows"] == 1
    assert _ids(uri) == [2, 3, 5, 6, 7, 100]
    assert [r[0] for r in _duckdb_ids(uri)] == [2, 3, 5, 6, 7, 100]


def _duckdb_ids(uri: str) -> list[tuple[int]]:
    import duckdb
    import duckdb_ext

    extensions = Path(next(iter(duckdb_ext.__path__)))
    ext = next(extensions.glob("extensions/v*/*/delta.duckdb_extension"))
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false; SET autoload_known_extensions=false")
    con.execute(f"LOAD '{ext}'")
    return sorted(con.execute(f"SELECT id FROM delta_scan('{uri}')").fetchall())
