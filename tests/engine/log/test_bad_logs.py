"""Malformed logs: every bad input gets a typed error or the spec's fallback, never a wrong
snapshot or a hang."""

from __future__ import annotations

import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import (
    CorruptLogError,
    DeltaProtocolError,
    TableNotFoundError,
)
from tests.delta_log_builder import add, make_table, metadata, protocol, write_commit

LOG = "_delta_log"


def load(path) -> object:
    return DeltaLog.for_table(str(path)).update()


def commit_path(table, version: int):
    return table / LOG / f"{version:020d}.json"


def test_truncated_json_line(tmp_path) -> None:
    make_table(tmp_path, 3)
    data = commit_path(tmp_path, 2).read_bytes()
    commit_path(tmp_path, 2).write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptLogError, match=r"00000000000000000002\.json: line \d+ is not valid"):
        load(tmp_path)


def test_commit_that_is_not_json(tmp_path) -> None:
    make_table(tmp_path, 2)
    commit_path(tmp_path, 1).write_bytes(b"PAR1\x00\x01 binary garbage\n")
    with pytest.raises(CorruptLogError, match="not valid JSON"):
        load(tmp_path)


def test_commit_line_that_is_not_an_object(tmp_path) -> None:
    make_table(tmp_path, 2)
    commit_path(tmp_path, 1).write_text('["add", 1]\n')
    with pytest.raises(CorruptLogError, match="not a JSON object"):
        load(tmp_path)


def test_add_with_wrong_field_types(tmp_path) -> None:
    make_table(tmp_path, 1)
    write_commit(tmp_path, 1, [{"add": {"path": "x", "size": "big", "partitionValues": {}}}])
    snapshot = load(tmp_path)  # file actions are converted when first needed
    with pytest.raises(CorruptLogError, match=r"00000000000000000001\.json: malformed 'add'"):
        snapshot.files()


def test_empty_commit_file(tmp_path) -> None:
    make_table(tmp_path, 2)
    commit_path(tmp_path, 1).write_bytes(b"")
    with pytest.raises(CorruptLogError, match="holds no action"):
        load(tmp_path)


def test_version_gap(tmp_path) -> None:
    make_table(tmp_path, 5)
    commit_path(tmp_path, 2).unlink()
    with pytest.raises(CorruptLogError, match=r"versions are not contiguous: missing 2"):
        load(tmp_path)


def test_no_delta_log(tmp_path) -> None:
    (tmp_path / "data.parquet").write_bytes(b"PAR1")
    with pytest.raises(TableNotFoundError, match="is not a Delta table"):
        load(tmp_path)


def test_empty_delta_log(tmp_path) -> None:
    (tmp_path / LOG).mkdir()
    with pytest.raises(TableNotFoundError, match="is empty"):
        load(tmp_path)


def test_path_that_does_not_exist(tmp_path) -> None:
    with pytest.raises(TableNotFoundError):
        load(tmp_path / "nowhere")


def test_path_that_is_a_file(tmp_path) -> None:
    f = tmp_path / "file.txt"
    f.write_text("hello")
    with pytest.raises(TableNotFoundError):
        load(f)


def test_unknown_reader_feature_is_named(tmp_path) -> None:
    write_commit(
        tmp_path,
        0,
        [
            protocol(3, 7, readerFeatures=["deletionVectors", "fancyFeature"], writerFeatures=[]),
            metadata(),
        ],
    )
    with pytest.raises(DeltaProtocolError, match=r"reader features .*: fancyFeature\."):
        load(tmp_path)


def test_missing_protocol_and_missing_metadata(tmp_path) -> None:
    write_commit(tmp_path / "a", 0, [metadata(), add("f")])
    with pytest.raises(CorruptLogError, match="no protocol"):
        load(tmp_path / "a")
    write_commit(tmp_path / "b", 0, [protocol(), add("f")])
    with pytest.raises(CorruptLogError, match="No metadata found"):
        load(tmp_path / "b")


def test_history_cleaned_without_checkpoint(tmp_path) -> None:
    make_table(tmp_path, 3)
    commit_path(tmp_path, 0).unlink()
    with pytest.raises(CorruptLogError, match="commits before version 1 are missing"):
        load(tmp_path)


# -- hostile contents: deep nesting, special files, stats ------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def test_deeply_nested_json_in_a_commit_is_a_corrupt_log(tmp_path) -> None:
    make_table(tmp_path, 2)
    with commit_path(tmp_path, 1).open("a") as f:
        f.write('{"add": ' + DEEP + "}\n")
    with pytest.raises(CorruptLogError, match="nested too deeply"):
        load(tmp_path)


def test_deeply_nested_json_in_history_is_a_corrupt_log(tmp_path) -> None:
    make_table(tmp_path, 2)
    commit_path(tmp_path, 1).write_text('{"commitInfo": ' + DEEP + "}\n")
    with pytest.raises(CorruptLogError, match="nested too deeply"):
        DeltaLog.for_table(str(tmp_path)).history()


def test_deeply_nested_schema_string_is_a_corrupt_log(tmp_path) -> None:
    meta = metadata()
    meta["metaData"]["schemaString"] = DEEP
    write_commit(tmp_path, 0, [protocol(), meta])
    with pytest.raises(CorruptLogError, match="nested too deeply"):
        load(tmp_path).schema  # noqa: B018


def test_deeply_nested_last_checkpoint_is_ignored(tmp_path) -> None:
    make_table(tmp_path, 3)
    (tmp_path / LOG / "_last_checkpoint").write_text(DEEP)
    assert load(tmp_path).version == 2


def _fifo_or_skip(path) -> None:
    import os

    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    os.mkfifo(path)


def _in_thread(fn, timeout: float = 60):
    """fn() run in a thread; fails the test instead of hanging it."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(fn).result(timeout=timeout)
    finally:
        pool.shutdown(wait=False)


def test_a_fifo_as_last_checkpoint_neither_hangs_nor_breaks_the_load(tmp_path) -> None:
    make_table(tmp_path, 3)
    _fifo_or_skip(tmp_path / LOG / "_last_checkpoint")
    assert _in_thread(lambda: load(tmp_path).version) == 2


def test_a_device_as_last_checkpoint_is_not_read(tmp_path) -> None:
    """A link to /dev/zero would be read forever (and fill the memory)."""
    make_table(tmp_path, 3)
    (tmp_path / LOG / "_last_checkpoint").symlink_to("/dev/zero")
    assert _in_thread(lambda: load(tmp_path).version) == 2


def test_a_fifo_where_a_winner_commit_is_read_is_a_corrupt_log(tmp_path) -> None:
    """The conflict check reads winners by name, not from a listing."""
    from airflow_delta.engine.log.log_store import LocalLogStore

    _fifo_or_skip(tmp_path / "fifo")
    with pytest.raises(CorruptLogError, match="not a regular file"):
        _in_thread(lambda: LocalLogStore().read(str(tmp_path / "fifo")))


@pytest.mark.parametrize(
    ("stats", "expected"),
    [
        ('{"minValues": {"numRecords": 9}, "numRecords": 2}', 2),
        ('{"minValues": {"numRecords": 9}}', None),  # no row count: unknown
        ('{"numRecords": "7"}', None),
        ('{\n  "numRecords":\n  4\n}', 4),
        ("not json", None),
        ('{"numRecords": 5, "maxValues": ' + DEEP + "}", 5),
    ],
)
def test_num_records_reads_the_stats_as_json(tmp_path, stats, expected) -> None:
    write_commit(
        tmp_path,
        0,
        [protocol(), metadata(), add("a"), {"add": {**add("b")["add"], "stats": stats}}],
    )
    snapshot = load(tmp_path)
    assert snapshot.num_records == (None if expected is None else 1 + expected)


MALFORMED_PARTITION_CALLS = {
    "read_table": lambda uri: __import__("airflow_delta.engine").engine.read_table(uri),
    "read_table with a filter": lambda uri: __import__("airflow_delta.engine").engine.read_table(
        uri, filter="day > DATE '2020-01-01'"
    ),
    "filter_files": lambda uri: (
        DeltaLog.for_table(uri).start_transaction().filter_files("day > DATE '2020-01-01'")
    ),
    "delete": lambda uri: __import__("airflow_delta.engine").engine.delete(
        uri, "day > DATE '2020-01-01'"
    ),
    "optimize": lambda uri: __import__("airflow_delta.engine").engine.optimize(
        uri, partition_filter="day > DATE '2020-01-01'"
    ),
}


@pytest.mark.parametrize("call", MALFORMED_PARTITION_CALLS.values(), ids=MALFORMED_PARTITION_CALLS)
def test_a_malformed_partition_value_names_the_table_and_version(tmp_path, call) -> None:
    """A partition value the column's type cannot hold is a corrupt log, reported with the
    table and the version read, whichever command meets it first."""
    import datetime as dt

    import pyarrow as pa

    from airflow_delta.engine import AddFile, Operation, write_table

    uri = str(tmp_path / "t")
    day = pa.array([dt.date(2024, 1, 1)])
    write_table(uri, pa.table({"id": [1], "day": day}), partition_by=["day"])
    [written] = (tmp_path / "t").glob("day=*/*.parquet")
    (tmp_path / "t" / "x.parquet").write_bytes(written.read_bytes())
    size = written.stat().st_size
    txn = DeltaLog.for_table(uri).start_transaction()  # a writer that got the value wrong
    txn.commit([AddFile("x.parquet", {"day": "yesterday"}, size, 0)], Operation("WRITE"))
    with pytest.raises(CorruptLogError, match=f"Table {uri} version 1: partition value 'yest"):
        call(uri)


def test_partition_columns_the_schema_lacks_are_a_corrupt_log(tmp_path) -> None:
    """Metadata partitioning by a column its schema does not have cannot be read rightly (the
    column's values would come from nowhere): the load refuses it, naming table and version."""
    import pyarrow as pa

    from airflow_delta.engine import read_table, write_table

    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1], "p": ["a"]}), partition_by=["p"])
    log = tmp_path / "t" / "_delta_log" / f"{0:020d}.json"
    log.write_text(log.read_text().replace('"partitionColumns":["p"]', '"partitionColumns":["zz"]'))
    with pytest.raises(
        CorruptLogError, match=rf"Table {uri} version 0: partition columns \['zz'\]"
    ):
        read_table(uri)
