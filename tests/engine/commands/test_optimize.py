"""OPTIMIZE (commands/optimize.py): bin-packing, deletion vectors purged, Z-order, metrics and
log entries, refusals; every result read alike by the engine, deltalake and DuckDB."""

from __future__ import annotations

import itertools
import json
from datetime import date, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog, IsolationLevel, delete, optimize
from airflow_delta.engine.commands.data_reader import FileReader
from airflow_delta.engine.commands.optimize import order_keys, z_values
from airflow_delta.engine.errors import ConcurrentDeleteReadException, TableNotFoundError
from tests.engine.commands.dml_tables import append, batch, create, engine_rows, rows


def _commit(uri: str, version: int) -> list[dict]:
    text = (Path(uri) / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _small_files(tmp_path: Path, commits: int = 6, **kw) -> str:
    return create(
        tmp_path / "t", *[batch(range(i * 10, i * 10 + 10)) for i in range(commits)], **kw
    )


def test_compaction_merges_each_partitions_small_files_into_one(tmp_path: Path) -> None:
    uri = _small_files(tmp_path)
    before = rows(uri)
    assert DeltaLog(uri).update().num_files == 12
    result = optimize(uri)
    assert result.version == 7 and result.operation == "OPTIMIZE"
    m = result.metrics
    assert (m["numFilesRemoved"], m["numFilesAdded"], m["partitionsOptimized"]) == (12, 2, 2)
    assert m["totalConsideredFiles"] == 12 and m["totalFilesSkipped"] == 0
    assert m["filesRemoved"]["totalFiles"] == 12 and m["filesAdded"]["totalFiles"] == 2
    assert m["numAddedBytes"] == m["filesAdded"]["totalSize"]
    assert m["numRemovedBytes"] == m["filesRemoved"]["totalSize"]
    assert "zOrderStats" not in m
    assert rows(uri) == before
    lines = _commit(uri, 7)
    info = lines[0]["commitInfo"]
    assert info["operation"] == "OPTIMIZE"
    assert info["operationParameters"]["predicate"] == "[]"
    assert info["operationParameters"]["zOrderBy"] == "[]"
    assert info["isolationLevel"] == IsolationLevel.SNAPSHOT_ISOLATION.value
    assert info["isBlindAppend"] is False
    assert info["operationMetrics"]["numRemovedFiles"] == "12"
    assert json.loads(info["operationMetrics"]["filesAdded"])["totalFiles"] == 2
    files = [line.get("add") or line.get("remove") for line in lines[1:]]
    assert len(files) == 14 and all(f["dataChange"] is False for f in files)
    assert optimize(uri).skipped  # nothing left to compact


def test_partition_filter_and_sizes_choose_the_files(tmp_path: Path) -> None:
    uri = _small_files(tmp_path)
    only_a = optimize(uri, "p = 'a'")
    assert only_a.metrics["numFilesRemoved"] == 6 and only_a.metrics["partitionsOptimized"] == 1
    assert only_a.metrics["totalConsideredFiles"] == 6
    assert json.loads(_commit(uri, 7)[0]["commitInfo"]["operationParameters"]["predicate"]) == [
        "p = 'a'"
    ]
    sizes = [f.size for f in DeltaLog(uri).update().all_files() if f.partition_values["p"] == "b"]
    # Files at or above min_file_size are left alone: nothing in 'b' is smaller than its min.
    assert optimize(uri, "p = 'b'", min_file_size=min(sizes)).skipped
    # A target of two files' size packs the six files of 'b' into three bins.
    packed = optimize(uri, "p = 'b'", target_size=2 * max(sizes))
    assert packed.metrics["numFilesRemoved"] == 6 and packed.metrics["numFilesAdded"] == 3
    assert len(engine_rows(uri)) == 60
    rows(uri)


def test_target_size_from_the_table_property(tmp_path: Path) -> None:
    uri = _small_files(tmp_path, configuration={"delta.targetFileSize": "1kb"})
    result = optimize(uri)  # bins of at most 1 KiB: files of ~900 bytes stay alone
    assert result.skipped and result.metrics["totalConsideredFiles"] == 12
    bad = _small_files(tmp_path / "bad", configuration={"delta.targetFileSize": "huge"})
    with pytest.raises(ValueError, match=r"delta.targetFileSize='huge'.*target_size"):
        optimize(bad)


def test_files_with_deletion_vectors_are_purged_even_alone(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(20)), dv=True, partitioned=False)
    delete(uri, "id IN (3, 7)")
    (file,) = DeltaLog(uri).update().all_files()
    assert file.deletion_vector is not None
    result = optimize(uri)
    m = result.metrics
    assert (m["numFilesRemoved"], m["numFilesAdded"], m["numDeletionVectorsRemoved"]) == (1, 1, 1)
    assert m["deletionVectorStats"]["numDeletionVectorRowsRemoved"] == 2
    (new,) = DeltaLog(uri).update().all_files()
    assert new.deletion_vector is None and new.num_records == 18
    assert [r[0] for r in rows(uri)] == sorted(set(range(20)) - {3, 7}, key=repr)


def test_a_file_with_a_deletion_vector_is_packed_with_the_small_files(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(8)), batch(range(8, 12)), dv=True, partitioned=False)
    delete(uri, "id < 3")
    result = optimize(uri)
    assert (result.metrics["numFilesRemoved"], result.metrics["numFilesAdded"]) == (2, 1)
    assert sorted(r[0] for r in rows(uri)) == list(range(3, 12))


def test_zorder_sorts_each_partition_by_the_interleaved_keys(tmp_path: Path) -> None:
    data = [
        batch(range(i, 200, 4), k=[(i * 7 + j) % 13 for j in range(i, 200, 4)]) for i in range(4)
    ]
    uri = create(tmp_path / "t", *data)
    before = rows(uri)
    result = optimize(uri, zorder_by=["k", "id"])
    m = result.metrics
    assert m["zOrderStats"]["strategyName"] == "all" and m["zOrderStats"]["numOutputCubes"] == 2
    assert m["partitionsOptimized"] == 2 and m["numFilesAdded"] == 2
    info = _commit(uri, result.version)[0]["commitInfo"]
    assert json.loads(info["operationParameters"]["zOrderBy"]) == ["k", "id"]
    assert rows(uri) == before
    txn = DeltaLog(uri).start_transaction()
    for f in txn.snapshot.all_files():
        table = FileReader(txn, pa.schema([("id", pa.int64()), ("k", pa.int32())])).read_file(
            f.path, f.partition_values, ["id", "k"]
        )
        z = z_values([table.column("k"), table.column("id")])
        assert np.all(z[:-1] <= z[1:]), f.path
    # Z-order rewrites a partition even when it is one file already.
    assert not optimize(uri, zorder_by=["k"]).skipped


@pytest.mark.parametrize(
    ("columns", "problem"),
    [(["p"], "partition column"), (["nope"], "not a column"), (["k", "k"], "repeats")],
)
def test_zorder_refuses_bad_columns(tmp_path: Path, columns: list[str], problem: str) -> None:
    uri = _small_files(tmp_path, commits=2)
    with pytest.raises(ValueError, match=problem):
        optimize(uri, zorder_by=columns)
    assert DeltaLog(uri).update().version == 2


def test_missing_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError):
        optimize(str(tmp_path / "none"))


def test_a_concurrent_append_does_not_fail_it_a_concurrent_delete_of_its_files_does(
    tmp_path: Path,
) -> None:
    uri = _small_files(tmp_path, commits=3)
    log = DeltaLog(uri)
    txn = log.start_transaction()
    append(uri, batch(range(100, 110)))  # blind append at version 4
    assert optimize(txn).version == 5
    assert len(engine_rows(uri)) == 40
    txn = log.start_transaction()
    delete(uri, "id = 0")  # removes (rewrites) a file the compaction reads
    with pytest.raises(ConcurrentDeleteReadException, match="version 6"):
        optimize(txn)
    assert log.update().version == 6


# -- order keys --------------------------------------------------------------------------------


@settings(max_examples=30, derandomize=True, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=30))
def test_integer_keys_keep_the_order(values: list[int]) -> None:
    keys = order_keys(pa.array(values, pa.int64()))
    pairs = sorted(zip(values, keys, strict=True))
    for (a, ka), (b, kb) in itertools.pairwise(pairs):
        assert ka <= kb, (a, b)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(st.lists(st.floats(allow_nan=False), min_size=2, max_size=30))
def test_float_keys_keep_the_order(values: list[float]) -> None:
    keys = order_keys(pa.array(values, pa.float64()))
    pairs = sorted(zip(values, keys, strict=True))
    for (a, ka), (b, kb) in itertools.pairwise(pairs):
        assert ka <= kb or a == b, (a, b)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=2, max_size=30))
def test_string_keys_keep_the_order_of_their_utf8_prefix(values: list[str]) -> None:
    keys = order_keys(pa.array(values, pa.string()))
    pairs = sorted(zip((v.encode() for v in values), keys, strict=True))
    for (a, ka), (b, kb) in itertools.pairwise(pairs):
        assert ka <= kb, (a, b)


def test_keys_of_dates_timestamps_and_nulls() -> None:
    days = [date(2024, 1, 2), None, date(1969, 12, 31), date(2024, 1, 1)]
    keys = order_keys(pa.array(days, pa.date32()))
    assert keys[1] == 0 and keys[2] < keys[3] < keys[0]
    moments = [datetime(2024, 1, 1, 0, 0, 1), datetime(2023, 12, 31)]
    keys = order_keys(pa.array(moments, pa.timestamp("us", tz="UTC")))
    assert keys[1] < keys[0]
    views = order_keys(pa.array(["b", "a", None], pa.string_view()))
    assert list(views) == list(order_keys(pa.array(["b", "a", None], pa.string())))
    assert views[2] < views[1] < views[0]


def test_z_values_interleave_the_scaled_bits() -> None:
    x = pa.array([0, 1, 0, 1], pa.int64())
    y = pa.array([0, 0, 1, 1], pa.int64())
    z = z_values([x, y])
    # With two columns of one significant bit each: x is the higher bit of each pair.
    assert list(np.argsort(z, kind="stable")) == [0, 2, 1, 3]
