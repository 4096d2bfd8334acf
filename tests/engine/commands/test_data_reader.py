"""FileReader.read (commands/data_reader.py): files read together, each run of files alike
(partition values, file schema) made the table's columns at once, give the rows and the
per-file lengths that reading them one by one gives; store_paths resolves paths as
LogStore.file_path does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import AddFile, DeltaLog, Operation, delete
from airflow_delta.engine.commands import data_reader
from airflow_delta.engine.commands.data_reader import FileReader, store_paths
from airflow_delta.engine.errors import UnsupportedStorageError
from airflow_delta.engine.log.log_store import get_log_store
from airflow_delta.engine.protocol import columnar
from airflow_delta.engine.protocol.paths import table_root
from tests.engine.commands.dml_tables import SCHEMA, batch, create


def _other_writers_file(uri: str, name: str, data: pa.Table, part: str) -> None:
    """A data file another writer wrote (its own column names and types), committed."""
    path = Path(uri) / f"p={part}" / name
    pq.write_table(data, path)
    add = AddFile(f"p={part}/{name}", {"p": part}, size=path.stat().st_size)
    DeltaLog(uri).start_transaction().commit([add], Operation("WRITE", {"mode": "Append"}))


@pytest.mark.parametrize("threaded", [False, True], ids=["one-thread", "threads"])
def test_read_equals_reading_file_by_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threaded: bool
) -> None:
    if threaded:
        monkeypatch.setattr(data_reader, "THREADED_FILE_SIZE", 0)
    uri = create(tmp_path / "t", *(batch(range(n, n + 10)) for n in range(0, 60, 10)), dv=True)
    delete(uri, "id IN (3, 12, 44)")  # deletion vectors on some files
    upper = pa.table({"ID": pa.array([100, 101], pa.int64()), "k": pa.array([1, 2], pa.int16())})
    _other_writers_file(uri, "upper.parquet", upper, "a")  # ID for id, k narrower, no s
    _other_writers_file(uri, "empty.parquet", upper.slice(0, 0), "a")
    txn = DeltaLog(uri).start_transaction()
    files = txn.snapshot.files()
    reader = FileReader(txn, SCHEMA)
    got = reader.read(files, SCHEMA.names)
    one_by_one, lengths = [], []
    for f in txn.snapshot.all_files():
        table = reader.read_file(f.path, list(f.partition_values.items()), SCHEMA.names)
        dv = f.deletion_vector.to_json_dict() if f.deletion_vector else None
        table = table.filter(columnar.bool_mask(reader.kept(dv, table.num_rows)))
        one_by_one.append(table)
        lengths.append(table.num_rows)
    assert got.equals(pa.concat_tables(one_by_one))
    assert reader.lengths.tolist() == lengths
    assert got.num_rows == 60 - 3 + 2 and np.array_equal(
        np.sort(got.column("id").to_numpy()), np.array(sorted({*range(60), 100, 101} - {3, 12, 44}))
    )
    assert reader.read(files.slice(0, 0), ["id"]).num_rows == 0


@pytest.mark.parametrize(
    "uri", ["local", "memory://tables/paths", "s3a://bucket/t", "/t/a/../t2"], ids=str
)
def test_store_paths_resolve_as_file_path_does(uri: str, tmp_path: Path) -> None:
    table = str(tmp_path / "t") if uri == "local" else uri
    if uri.startswith("/"):
        table = f"{tmp_path}{uri}"
    store, root_path = get_log_store(table, {"anon": "true"} if uri.startswith("s3") else None)
    root = table_root(table, root_path)
    paths = [
        "part-0.parquet", "a=1/b=x%20y/part-1.parquet", "./a/part.parquet", "a/../b.parquet",
        "a/./b.parquet", ".hidden/x.parquet", "a//b.parquet", "/abs/x.parquet",
        "a=1:2/x.parquet", "p=+ä/x.parquet", f"{root.uri}/q.parquet", "a/.. /x.parquet",
    ]  # fmt: skip
    expected = [store.file_path(root, p, table=table, version=3) for p in paths]
    assert store_paths(store, root, paths, table=table, version=3) == expected
    for foreign in ("gs://other/x.parquet", "x:y.parquet"):  # a scheme the store cannot open
        with pytest.raises(UnsupportedStorageError, match="cannot open"):
            store_paths(store, root, ["part-0.parquet", foreign], table=table, version=3)
