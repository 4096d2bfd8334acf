"""Change data feed: what DELETE, UPDATE and the in-process MERGE write on a CDF table (cdc
actions, `_change_data/<partition>/cdc-*.parquet` files with `_change_type`), what
`read_changes` returns, and both against deltalake's `load_cdf` (on tables written here and
by deltalake) and DuckDB's delta extension."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog, Operation, delete, read_changes, update
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import (
    ChangeDataFeedError,
    CorruptLogError,
    DeltaProtocolError,
    VersionNotFoundError,
)
from airflow_delta.engine.log.history import commit_timestamps
from airflow_delta.engine.log.table_location import TableLocation
from tests.engine.commands.dml_tables import (
    SCHEMA,
    append,
    batch,
    create,
    deltalake_rows,
    duckdb_rows,
    engine_rows,
)

CDF = {"delta.enableChangeDataFeed": "true"}
KEY = ["_commit_version", "_change_type", "id", "k", "s", "p"]


def cdf_table(path: Path, rows: int = 10, dv: bool = False, partitioned: bool = True) -> str:
    return create(path, batch(range(rows)), dv=dv, partitioned=partitioned, configuration=CDF)


def changes(table: Any) -> list[tuple[Any, ...]]:
    """The changes as sorted tuples of KEY (any Arrow table, deltalake's arro3 too)."""
    table = pa.table(table)
    columns = [table.column(c).to_pylist() for c in KEY]
    return sorted(zip(*columns, strict=True), key=repr)


def theirs(uri: str, start: int = 0, end: int | None = None) -> list[tuple[Any, ...]]:
    cdf = DeltaTable(uri).load_cdf(starting_version=start, ending_version=end)
    return changes(cdf.read_all())


def commit_actions(uri: str, version: int) -> list[dict[str, Any]]:
    text = Path(uri, "_delta_log", f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def cdc_actions(uri: str, version: int) -> list[dict[str, Any]]:
    return [a["cdc"] for a in commit_actions(uri, version) if "cdc" in a]


def of_version(rows: list[tuple[Any, ...]], version: int) -> list[tuple[Any, ...]]:
    return [r[1:] for r in rows if r[0] == version]


# -- writing -------------------------------------------------------------------------------


def test_delete_writes_cdc_files_without_partition_columns(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path)
    result = delete(uri, "id = 3")
    assert result.metrics["numAddedChangeFiles"] == 1
    (cdc,) = cdc_actions(uri, result.version)
    assert cdc["path"].startswith("_change_data/p=a/cdc-") and cdc["dataChange"] is False
    assert cdc["partitionValues"] == {"p": "a"}
    stored = pq.read_table(Path(uri, cdc["path"]))
    assert stored.column_names == ["id", "k", "s", "_change_type"]  # no partition column
    assert stored.to_pylist() == [{"id": 3, "k": 3, "s": "s0", "_change_type": "delete"}]
    assert of_version(changes(read_changes(uri, 2)), 2) == [("delete", 3, 3, "s0", "a")]
    assert theirs(uri) == changes(read_changes(uri, 0))


def test_delete_of_whole_files_writes_no_cdc(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path)
    version = delete(uri, "p = 'a'").version
    assert cdc_actions(uri, version) == []  # readers take the removes as deletes
    deleted = of_version(changes(read_changes(uri, version)), version)
    assert [r[:2] for r in deleted] == [("delete", i) for i in (1, 3, 5, 7, 9)]
    assert theirs(uri) == changes(read_changes(uri, 0))


@pytest.mark.parametrize("dv", [False, True])
def test_update_writes_pre_and_post_images(tmp_path: Path, dv: bool) -> None:
    uri = cdf_table(tmp_path, dv=dv)
    version = update(uri, {"s": "'new'"}, "id IN (2, 5)").version
    assert of_version(changes(read_changes(uri, version)), version) == [
        ("update_postimage", 2, 2, "new", "b"),
        ("update_postimage", 5, 0, "new", "a"),
        ("update_preimage", 2, 2, "s2", "b"),
        ("update_preimage", 5, 0, "s2", "a"),
    ]
    assert theirs(uri) == changes(read_changes(uri, 0))


def test_deletion_vector_delete_and_removal_of_a_dv_file(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path, dv=True)
    first = delete(uri, "id = 3")
    assert first.metrics["numDeletionVectorsAdded"] == 1
    assert first.metrics["numAddedChangeFiles"] == 1
    second = delete(uri, "p = 'a'")  # removes a file with a DV whole: cdc of its live rows
    assert [r[:2] for r in of_version(changes(read_changes(uri, 3)), second.version)] == [
        ("delete", i) for i in (1, 5, 7, 9)
    ]
    assert theirs(uri) == changes(read_changes(uri, 0))


def test_merge_in_process_writes_every_change(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path)
    source = batch([2, 3, 4, 20], s=["u2", "u3", "u4", "n20"])
    result = (
        merge_arrow(uri, source, "t.id = s.id")
        .when_matched_update_all("s.id <> 3")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .when_not_matched_by_source_delete("t.id = 9")
        .execute()
    )
    assert result.metrics["numTargetChangeFilesAdded"] > 0
    assert of_version(changes(read_changes(uri, 2)), 2) == [
        ("delete", 3, 3, "s0", "a"),
        ("delete", 9, 4, "s0", "a"),
        ("insert", 20, 0, "n20", "b"),
        ("update_postimage", 2, 2, "u2", "b"),
        ("update_postimage", 4, 4, "u4", "b"),
        ("update_preimage", 2, 2, "s2", "b"),
        ("update_preimage", 4, 4, "s1", "b"),
    ]
    assert theirs(uri) == changes(read_changes(uri, 0))


def test_insert_only_merge_writes_no_cdc(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path)
    merge = merge_arrow(uri, batch([30]), "t.id = s.id").when_not_matched_insert_all()
    version = merge.execute().version
    assert cdc_actions(uri, version) == []
    assert of_version(changes(read_changes(uri, version)), version) == [
        ("insert", 30, 0, "s0", "b")
    ]


def test_rewrite_without_cdc_is_refused(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path)
    txn = DeltaLog.for_table(uri).start_transaction()
    (old, *_) = txn.snapshot.all_files()
    with pytest.raises(DeltaProtocolError, match=f"table {uri}.*delta.enableChangeDataFeed"):
        txn.commit([old.remove(1), old], Operation("WRITE"))


def test_others_read_our_tables(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path, dv=True)
    delete(uri, "id = 3")
    update(uri, {"k": "7"}, "id > 6")
    assert engine_rows(uri) == deltalake_rows(uri) == duckdb_rows(uri)


# -- reading -------------------------------------------------------------------------------


def test_read_changes_columns_and_types(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path)
    delete(uri, "id = 1")
    got = read_changes(uri, 1, 2, columns=["ID", "s"])
    assert got.column_names == ["id", "s", "_change_type", "_commit_version", "_commit_timestamp"]
    assert got.schema.field("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    assert sorted(set(got.column("_commit_version").to_pylist())) == [1, 2]
    with pytest.raises(ValueError, match="no column nope"):
        read_changes(uri, 0, columns=["nope"])


def test_read_changes_by_timestamp(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path)
    delete(uri, "id = 1")
    stamps = dict(commit_timestamps(TableLocation.of(uri)))
    at_2 = read_changes(uri, starting_timestamp=stamps[2])
    assert set(at_2.column("_commit_version").to_pylist()) == {2}
    assert set(at_2.column("_commit_timestamp").to_pylist()) == {
        dt.datetime.fromtimestamp(stamps[2] / 1000, dt.UTC)
    }
    only_1 = read_changes(uri, 1, ending_timestamp=stamps[1])
    assert set(only_1.column("_commit_version").to_pylist()) == {1}
    with pytest.raises(VersionNotFoundError, match="no commit at or after"):
        read_changes(uri, starting_timestamp=stamps[2] + 1)


def test_read_changes_refuses_versions_without_cdf(tmp_path: Path) -> None:
    uri = create(tmp_path, batch(range(4)))
    with pytest.raises(ChangeDataFeedError, match=r"version 0 .*delta.enableChangeDataFeed"):
        read_changes(uri, 0)
    with pytest.raises(VersionNotFoundError, match="after the latest version 1"):
        read_changes(cdf_table(tmp_path / "cdf"), 5)
    with pytest.raises(ValueError, match="before the starting"):
        read_changes(cdf_table(tmp_path / "cdf2"), 1, 0)


def test_read_changes_of_a_dv_delete_without_cdc(tmp_path: Path) -> None:
    """delta-spark's DELETE with deletion vectors writes no cdc files: the file is removed
    and added again with its new vector, and readers take the difference."""
    uri = cdf_table(tmp_path, dv=True)
    version = delete(uri, "id IN (3, 5)").version
    log = Path(uri, "_delta_log", f"{version:020d}.json")
    lines = [line for line in log.read_text().splitlines() if '"cdc"' not in line]
    log.write_text("\n".join(lines) + "\n")
    assert [r[:2] for r in of_version(changes(read_changes(uri, version)), version)] == [
        ("delete", 3),
        ("delete", 5),
    ]


def test_tables_written_by_deltalake(tmp_path: Path) -> None:
    uri = str(tmp_path)
    write_deltalake(uri, batch(range(10)), partition_by=["p"], configuration=CDF)
    table = DeltaTable(uri)
    table.delete("id = 3")
    table.update(updates={"s": "'zz'"}, predicate="id >= 7")
    (
        table.merge(batch([1, 40], s=["m1", "m40"]), "t.id = s.id", "s", "t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert theirs(uri) == changes(read_changes(uri, 0))
    delete(uri, "id = 2")  # and we write to it
    update(uri, {"s": "'w'"}, "id = 4")
    assert theirs(uri) == changes(read_changes(uri, 0))
    assert engine_rows(uri) == deltalake_rows(uri)


# -- differential --------------------------------------------------------------------------

_OPS = st.lists(
    st.tuples(st.sampled_from(["delete", "update", "merge", "append"]), st.integers(0, 14)),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=_OPS, dv=st.booleans(), partitioned=st.booleans())
def test_against_deltalake_load_cdf(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple[str, int]],
    dv: bool,
    partitioned: bool,
) -> None:
    uri = cdf_table(tmp_path_factory.mktemp("cdf"), 12, dv=dv, partitioned=partitioned)
    for name, n in ops:
        if name == "delete":
            delete(uri, f"k = {n % 5} AND id > {n}")
        elif name == "update":
            update(uri, {"s": f"'u{n}'", "k": "id"}, f"id >= {n}")
        elif name == "merge":
            source = batch([n, n + 7, n + 20], s=[f"m{n}"] * 3)
            merge = (
                merge_arrow(uri, source, "t.id = s.id")
                .when_matched_update_all(f"s.id <> {n}")
                .when_matched_delete()
                .when_not_matched_insert_all()
            )
            merge.execute()  # also into files with deletion vectors
        else:
            append(uri, batch([100 + n]))
    assert theirs(uri) == changes(read_changes(uri, 0))
    assert engine_rows(uri) == deltalake_rows(uri)


def test_schema_of_empty_range(tmp_path: Path) -> None:
    uri = cdf_table(tmp_path)
    got = read_changes(uri, 0, 0)  # version 0 only creates the table
    assert got.num_rows == 0
    assert got.column_names == [*SCHEMA.names, "_change_type", "_commit_version",
                                "_commit_timestamp"]  # fmt: skip


@pytest.mark.parametrize("metadata_then", [False, True], ids=["same-schema", "new-column"])
def test_changes_read_from_the_oldest_commit_kept_after_cleanup(
    tmp_path: Path, metadata_then: bool
) -> None:
    """After expired-log cleanup the oldest commit kept (the checkpoint's) is where the error
    for an earlier start says to begin: reading from it works, also when that commit changed
    the table's metadata (a column added)."""
    import time

    from airflow_delta.engine import write_table

    uri = str(tmp_path / "t")
    config = {"delta.enableChangeDataFeed": "true", "delta.checkpointInterval": "1000"}
    write_table(uri, pa.table({"id": [0]}), configuration=config)
    for i in range(1, 6):
        write_table(uri, pa.table({"id": [i]}))
    if metadata_then:
        write_table(uri, pa.table({"id": [6], "v": ["x"]}), schema_mode="merge")
    else:
        write_table(uri, pa.table({"id": [6]}))
    log = DeltaLog.for_table(uri)
    log.checkpoint()  # at 6
    write_table(uri, pa.table({"id": [7]}))
    log.cleanup_expired_logs(now_ms=int(time.time() * 1000) + 40 * 86_400_000)
    with pytest.raises(VersionNotFoundError, match="start at 6 or later"):
        read_changes(uri, 3)
    changes = read_changes(uri, 6).select(["id", "_commit_version"]).to_pylist()
    assert sorted((c["id"], c["_commit_version"]) for c in changes) == [(6, 6), (7, 7)]


def test_a_range_over_an_incompatible_schema_change_is_refused(tmp_path: Path) -> None:
    """A column retyped or dropped within the range would be read under the ending version's
    schema (its values cast or lost): refused as delta-spark does, naming where to split; each
    side of the split reads, and a column only added reads as NULL before it was added."""
    from airflow_delta.engine import write_table

    uri = str(tmp_path / "t")
    write_table(
        uri, pa.table({"id": [1, 2], "x": pa.array([10, 20], pa.int32())}), configuration=CDF
    )
    write_table(uri, pa.table({"id": [3], "x": pa.array([30], pa.int32()), "y": ["a"]}),
                schema_mode="merge")  # fmt: skip
    added = read_changes(uri, 0).sort_by("id").select(["id", "x", "y"]).to_pylist()
    assert added == [{"id": 1, "x": 10, "y": None}, {"id": 2, "x": 20, "y": None},
                     {"id": 3, "x": 30, "y": "a"}]  # fmt: skip
    write_table(uri, pa.table({"id": ["a"], "z": [1.5]}), mode="overwrite",
                schema_mode="overwrite")  # fmt: skip
    for start in (0, 1):
        with pytest.raises(ChangeDataFeedError, match=(
            rf"table {uri} from version {start} to 2 .*changed at version 2 .*column id has type "
            r"long, read as string.*up to version 1 and from version 2 on separately"
        )):  # fmt: skip
            read_changes(uri, start)
    assert read_changes(uri, 0, 1).num_rows == 3
    after = read_changes(uri, 2).select(["id", "z", "_change_type"]).to_pylist()
    assert {"id": "a", "z": 1.5, "_change_type": "insert"} in after


def test_a_deletion_vector_past_the_end_of_its_file_is_a_corrupt_log(tmp_path: Path) -> None:
    """A commit whose deletion vector deletes a row the file does not have: the feed fails with
    the typed error every other reader gives, never an IndexError."""
    import dataclasses

    from airflow_delta.engine.commands.deletion_vector_files import DeletionVectorWriter

    uri = create(tmp_path / "t", batch(range(10)), dv=True, partitioned=False, configuration=CDF)
    log = DeltaLog.for_table(uri)
    txn = log.start_transaction()
    [file] = txn.snapshot.all_files()
    bad = DeletionVectorWriter(log.location).add([100])
    txn.commit([dataclasses.replace(file, deletion_vector=bad)], Operation("WRITE", {}))
    with pytest.raises(CorruptLogError, match="deletes row 100 of a file of 10 rows"):
        read_changes(uri, 2)


def test_a_range_over_a_type_widening_reads_the_wider_type(tmp_path: Path) -> None:
    """Type widening (integer to long) changes no value: the range reads in one call."""
    import dataclasses

    from airflow_delta.engine import write_table

    uri = str(tmp_path / "t")
    config = {**CDF, "delta.enableTypeWidening": "true"}
    write_table(uri, pa.table({"id": pa.array([1], pa.int32())}), configuration=config)
    txn = DeltaLog.for_table(uri).start_transaction()
    schema = json.loads(txn.metadata.schema_string)
    schema["fields"][0]["type"] = "long"
    txn.update_metadata(dataclasses.replace(txn.metadata, schema_string=json.dumps(schema)))
    txn.commit([], Operation("CHANGE COLUMN", {}))
    write_table(uri, pa.table({"id": pa.array([2**40], pa.int64())}))
    changes = read_changes(uri, 0)
    assert changes.schema.field("id").type == pa.int64()
    assert sorted(changes.column("id").to_pylist()) == [1, 2**40]


def test_a_range_over_a_new_partitioning_is_refused(tmp_path: Path) -> None:
    """Files written while the table was partitioned by p hold no p values: read under an
    unpartitioned ending version they came back with p NULL. Refused; each side reads."""
    from airflow_delta.engine import write_table

    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1, 2], "p": ["a", "b"]}), partition_by=["p"],
                configuration=CDF)  # fmt: skip
    write_table(uri, pa.table({"id": [3], "p": ["c"]}), mode="overwrite", partition_by=[],
                schema_mode="overwrite")  # fmt: skip
    with pytest.raises(ChangeDataFeedError, match=r"partitioned by \['p'\], read as by \[\]"):
        read_changes(uri, 0)
    before = read_changes(uri, 0, 0).select(["id", "p"]).to_pylist()
    assert sorted(before, key=lambda r: r["id"]) == [{"id": 1, "p": "a"}, {"id": 2, "p": "b"}]


def test_an_ending_timestamp_before_every_commit_says_so(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(2)), configuration=CDF)
    with pytest.raises(VersionNotFoundError, match=r"no commit at or before 1000 .*version 0"):
        read_changes(uri, 0, ending_timestamp=1000)
