"""Data file paths other engines write, read alike by every reader of this project.

A path in the log is a URI reference resolved against the table root (`paths.resolve_path`):
relative and URL-encoded, an absolute-path reference (`/abs/...`, as DuckDB's writer puts it),
or a `file:` URI. `read_delta`, `scan_files` (its per-file join on Spark's file URI), the Spark
MERGE (which maps `input_file_name()` back to log paths) and the in-process MERGE all read the
file each one names; a file Spark cannot reach is refused with UnsupportedStorageError naming
the table, the version and the path. The engine-only side is in tests/interop/test_mixed_engines.py.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from airflow_delta.engine import AddFile, DeltaLog, Operation
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import UnsupportedStorageError
from airflow_delta.engine.protocol.paths import resolve_path, table_root
from airflow_delta.spark.merge import merge_delta
from airflow_delta.spark.read import read_delta, scan_files

SCHEMA = pa.schema([("k", pa.string()), ("v", pa.int64())])
#: One name with what URIs, globs and Hadoop paths treat specially, and non-ASCII letters.
ODD = "part 0#%[1]*?{a}=ü中 .parquet"


def commit_adds(uri: str, paths: list[str], files: list[Path]) -> int:
    """Commit adds of `files` with the log paths `paths` (as given) through the engine."""
    now = int(time.time() * 1000)
    adds = [AddFile(p, {}, f.stat().st_size, now) for p, f in zip(paths, files, strict=True)]
    return DeltaLog.for_table(uri).start_transaction().commit(adds, Operation("WRITE"))


def rows(df) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


def mixed_table(tmp_path: Path) -> tuple[str, list[str]]:
    """A table of four one-row files: one inside the root (relative, encoded) and three in
    another folder (an absolute-path reference, a `file:` URI, a `file://localhost` URI)."""
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    elsewhere = tmp_path / "other place"
    elsewhere.mkdir()
    files = [Path(uri) / ODD, elsewhere / f"a{ODD}", elsewhere / f"u{ODD}", elsewhere / f"l{ODD}"]
    paths = [
        quote(ODD),
        quote(str(files[1])),
        files[2].as_uri(),
        "file://localhost" + quote(str(files[3])),
    ]
    for i, file in enumerate(files):
        pq.write_table(pa.table({"k": [f"k{i}"], "v": [i]}, SCHEMA), file)
    commit_adds(uri, paths, files)
    return uri, paths


def test_absolute_path_references_read_alike(spark: SparkSession, tmp_path: Path) -> None:
    uri, paths = mixed_table(tmp_path)
    expected = [(f"k{i}", i) for i in range(4)]
    assert rows(read_delta(spark, uri)) == expected
    snapshot = DeltaLog.for_table(uri).update()
    scanned = scan_files(spark, snapshot, snapshot.files(), file_column="f", row_index_column="r")
    assert rows(scanned) == sorted(
        [(f"k{i}", i, path, 0) for i, path in enumerate(paths)], key=repr
    )

    updates = pa.table({"k": ["k1", "k2", "new"], "v": [10, 20, 99]}, SCHEMA)
    results = {}
    for name in ("spark", "arrow"):
        copy = str(tmp_path / name)
        shutil.copytree(uri, copy)  # the files outside the root are shared: MERGE deletes none
        if name == "spark":
            builder = merge_delta(copy, spark.createDataFrame(updates), "t.k = s.k")
        else:
            builder = merge_arrow(copy, updates, "t.k = s.k")
        metrics = builder.when_matched_update_all().when_not_matched_insert_all().execute().metrics
        assert builder.executor == {"spark": "spark", "arrow": "in-process"}[name]
        results[name] = (
            rows(read_delta(spark, copy)),
            {k: metrics[k] for k in ("numTargetRowsUpdated", "numTargetRowsInserted")},
            sorted(f.path for f in DeltaLog.for_table(copy).update().all_files()),
        )
    assert results["spark"][:2] == results["arrow"][:2]
    assert results["spark"][0] == [("k0", 0), ("k1", 10), ("k2", 20), ("k3", 3), ("new", 99)]
    assert results["spark"][1] == {"numTargetRowsUpdated": 2, "numTargetRowsInserted": 1}
    for name in results:  # the untouched files keep their log paths
        assert {paths[0], paths[3]} <= set(results[name][2])
        assert not {paths[1], paths[2]} & set(results[name][2])


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("s3://bucket/t/part-0.parquet", "Spark has no filesystem for s3://"),
        ("file://elsewhere/t/part-0.parquet", "a file on host 'elsewhere'"),
    ],
)
def test_files_spark_cannot_reach(
    spark: SparkSession, tmp_path: Path, path: str, message: str
) -> None:
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, SCHEMA)
    data = Path(uri) / "part-0.parquet"
    pq.write_table(pa.table({"k": ["a"], "v": [1]}, SCHEMA), data)
    version = commit_adds(uri, [path], [data])
    pattern = f"{uri} version {version}: the data file {path} .*{message}"
    with pytest.raises(UnsupportedStorageError, match=pattern):
        read_delta(spark, uri)
    source = spark.createDataFrame(pa.table({"k": ["a"]}))
    with pytest.raises(UnsupportedStorageError, match=pattern):
        merge_delta(uri, source, "t.k = s.k").when_matched_delete().execute()


def encode(path: str, minimal: bool) -> str:
    """`path` URL-encoded, or (`minimal`) with only `%` escaped, as some writers leave it."""
    return path.replace("%", "%25") if minimal else quote(path)


NAMES = st.text(alphabet=" %#?[]*={}+&;,'!~@$üñ中xX1", min_size=1, max_size=8)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(NAMES, min_size=1, max_size=3, unique=True), minimal=st.booleans())
def test_odd_file_names_read_alike(spark: SparkSession, names: list[str], minimal: bool) -> None:
    """Odd names, relative-encoded in a folder of the table and absolute outside it: Spark
    reads from each file the rows written there, with the file's log path."""
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"{tmp}/t"
        DeltaLog.create_table(uri, SCHEMA)
        files, paths = [], []
        for name in names:
            relative = f"d{name}/p{name}.parquet"
            absolute = Path(tmp) / "out" / f"d{name}" / f"a{name}.parquet"
            for file, path in (
                (Path(uri) / relative, encode(relative, minimal)),
                (absolute, encode(str(absolute), minimal)),
            ):
                file.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.table({"k": [path], "v": [len(files)]}, SCHEMA), file)
                files.append(file)
                paths.append(path)
        root = table_root(uri, DeltaLog.for_table(uri).table_path)
        assert [resolve_path(root, p).fs_path for p in paths] == [str(f) for f in files]
        commit_adds(uri, paths, files)
        snapshot = DeltaLog.for_table(uri).update()
        df = scan_files(spark, snapshot, snapshot.files(), file_column="f")
        assert rows(df) == sorted(((p, i, p) for i, p in enumerate(paths)), key=repr)
