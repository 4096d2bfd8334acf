"""The engine's in-process MERGE (`merge_arrow`) on tables deltalake wrote, without Spark.

Rows are read back by deltalake (`to_pyarrow_dataset()`, never `to_pyarrow_table()`). The
same MERGEs compared row for row with the Spark MERGE are in tests/spark/test_merge_arrow.py.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_delta.engine import DeltaLog, SetTransaction
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import CorruptLogError, UnsupportedMergeError
from airflow_delta.engine.txn.commit_types import CommitProperties

DAY1, DAY2 = dt.date(2026, 1, 1), dt.date(2026, 1, 2)
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("region", pa.string())])


def rows_of(uri: str) -> list[tuple]:
    table = DeltaTable(uri).to_pyarrow_dataset().to_table(columns=SCHEMA.names)
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


@pytest.fixture
def table(tmp_path: Path) -> str:
    """Partitioned by day; written by deltalake in two commits."""
    uri = str(tmp_path / "events")
    data = {"id": [1, 2, 3], "day": [DAY1, DAY1, DAY2], "region": ["eu", "us", ""]}
    write_deltalake(uri, pa.table(data, SCHEMA), partition_by=["day"])
    more = {"id": [4], "day": [DAY2], "region": [None]}
    write_deltalake(uri, pa.table(more, SCHEMA), partition_by=["day"], mode="append")
    return uri


def test_upsert_prunes_partitions(table: str) -> None:
    updates = pa.table({"id": [2, 5], "day": [DAY1, DAY1], "region": ["asia", "eu"]}, SCHEMA)
    builder = merge_arrow(table, updates, "t.id = s.id AND t.day = s.day")
    result = builder.when_matched_update_all().when_not_matched_insert_all().execute()
    metrics = result.metrics
    assert result.version == 2 and "version" not in metrics
    assert rows_of(table) == sorted(
        [(1, DAY1, "eu"), (2, DAY1, "asia"), (3, DAY2, ""), (4, DAY2, None), (5, DAY1, "eu")],
        key=repr,
    )
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (1, 1)
    assert (metrics["numTargetRowsCopied"], metrics["numTargetFilesRemoved"]) == (1, 1)
    txn = builder.transaction
    assert txn is not None
    assert [p.text for p in txn.read_predicates] == [
        "(`day` IN (DATE '2026-01-01')) AND (`id` IN (2, 5))"
    ]
    history = DeltaLog.for_table(table).history(limit=1)[0]
    assert history["operation"] == "MERGE"
    assert history["operationParameters"]["predicate"] == "t.id = s.id AND t.day = s.day"


def test_record_batch_reader_source(table: str) -> None:
    updates = pa.table({"id": [1, 9], "day": [DAY1, DAY2], "region": ["x", "y"]}, SCHEMA)
    reader = pa.RecordBatchReader.from_batches(SCHEMA, updates.to_batches())
    metrics = (
        merge_arrow(table, reader, "t.id = s.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
        .metrics
    )
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == (1, 1)
    assert (1, DAY1, "x") in rows_of(table) and (9, DAY2, "y") in rows_of(table)


def test_delete_and_idempotent_retry(table: str) -> None:
    gone = pa.table({"id": [1, 3]})
    marker = CommitProperties(app_transactions=[SetTransaction("nightly", 7)])
    first = merge_arrow(table, gone, "t.id = s.id", commit_properties=marker)
    assert first.when_matched_delete().execute().metrics["numTargetRowsDeleted"] == 2
    retry = merge_arrow(table, gone, "t.id = s.id", commit_properties=marker)
    skipped = retry.when_matched_delete().execute()
    assert (skipped.version, skipped.skipped, skipped.metrics) == (None, True, {})
    assert (skipped.operation, skipped.table) == ("MERGE", table)
    assert [r[0] for r in rows_of(table)] == [2, 4]


def test_refusals_write_nothing(table: str, tmp_path: Path) -> None:
    keys = pa.table({"id": [1.0]})
    with pytest.raises(UnsupportedMergeError, match="does not join int64 with double"):
        merge_arrow(table, keys, "t.id = s.id").when_matched_delete().execute()
    with pytest.raises(ValueError, match=r"s\.nope is not a column of the source"):
        merge_arrow(table, keys, "t.id = s.nope").when_matched_delete().execute()
    with pytest.raises(TypeError, match="not Arrow data"):
        merge_arrow(table, [{"id": 1}], "t.id = s.id")
    checked = str(tmp_path / "checked")
    configuration = {"delta.constraints.hashed": "sha2(cast(id AS STRING), 256) > ''"}
    DeltaLog.create_table(checked, SCHEMA, configuration=configuration)
    with pytest.raises(UnsupportedMergeError, match="CHECK constraint or invariant"):
        merge_arrow(checked, pa.table({"id": [1]}), "t.id = s.id").when_matched_delete().execute()
    assert DeltaLog.for_table(table).update().version == 1
    assert DeltaLog.for_table(checked).update().version == 0


def test_missing_data_file_is_a_typed_error(table: str) -> None:
    files = DeltaLog.for_table(table).update().all_files()
    bounds = [json.loads(f.stats or "{}") for f in files]
    victim = next(  # the file that holds id 1 (the others are pruned by their stats)
        f.path for f, b in zip(files, bounds, strict=True) if b["minValues"]["id"] <= 1
    )
    (Path(table) / victim).unlink()
    with pytest.raises(CorruptLogError, match=r"version 1: the data file .* is missing"):
        merge_arrow(table, pa.table({"id": [1]}), "t.id = s.id").when_matched_delete().execute()
    assert DeltaLog.for_table(table).update().version == 1


def test_engine_merge_does_not_import_spark() -> None:
    code = (
        "import sys, airflow_delta.engine.commands.merge_in_process; "
        "sys.exit('pyspark' in sys.modules or 'airflow' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_star_clauses_warn_about_source_columns_the_table_lacks(
    table: str, caplog: pytest.LogCaptureFixture
) -> None:
    updates = pa.table({"id": [2, 7], "day": [DAY1, DAY2], "region": ["x", "y"], "extra": [1, 2]})
    with caplog.at_level("WARNING", logger="airflow_delta.engine.commands.merge"):
        merge = merge_arrow(table, updates, "t.id = s.id")
        merge.when_matched_update_all().when_not_matched_insert_all().execute()
    assert f"MERGE into {table}: the insert-all and update-all clause ignores" in caplog.text
    assert "the table does not have: extra." in caplog.text
    assert (7, DAY2, "y") in rows_of(table)


def test_assignment_keys_name_target_columns(table: str) -> None:
    """A key names a column without regard to case, with or without backquotes or the target's
    alias; an unknown or twice-named column is a ValueError naming the clause and the table's
    columns, and nothing is committed."""
    version = DeltaLog.for_table(table).update().version
    updates = pa.table({"id": [1], "day": [DAY2], "region": ["north"]}, schema=SCHEMA)
    for key in ("nope", "s.region"):
        with pytest.raises(ValueError, match=rf"'{key}' is not a column of the update clause"):
            merge_arrow(table, updates, "t.id = s.id").when_matched_update(
                {key: "s.region"}
            ).execute()
    bad = merge_arrow(table, updates, "t.id = s.id").when_matched_update(
        {"T.Region": "s.region", "`region`": "'x'"}
    )
    with pytest.raises(ValueError, match=r"'`region`' is assigned twice in the update clause"):
        bad.execute()
    assert DeltaLog.for_table(table).update().version == version
    merge_arrow(table, updates, "t.id = s.id").when_matched_update(
        {"t.`REGION`": "upper(s.region)"}
    ).execute()
    assert [r[2] for r in rows_of(table) if r[0] == 1] == ["NORTH"]


@pytest.mark.parametrize(
    "keys",
    [
        pa.array(["a", "b", "b", None], pa.string()),
        pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 2), None]),
        pa.array([1, 2, 2, None], pa.int32()),
    ],
    ids=["string", "date", "int"],
)
@pytest.mark.parametrize("clauses", ["update, insert", "delete", "insert"])
def test_a_condition_on_partition_columns_alone(tmp_path: Path, keys: pa.Array, clauses: str):
    """The search then reads no data column of the target (only its partition values): every
    row still counts, and the MERGE does what deltalake's does."""
    target = pa.table({"k": keys, "v": pa.array([1, 2, 3, 4], pa.int64())})
    source = pa.table({"k": pa.array([keys[1].as_py(), keys[0].as_py()], keys.type)})
    source = source.append_column("v", pa.array([20, 10], pa.int64()))
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for uri in (ours, theirs):
        write_deltalake(uri, target, partition_by=["k"])
    builder = merge_arrow(ours, source, "t.k = s.k")
    merger = DeltaTable(theirs).merge(source, "t.k = s.k", source_alias="s", target_alias="t")
    if "update" in clauses:
        builder, merger = builder.when_matched_update_all(), merger.when_matched_update_all()
    if "delete" in clauses:
        builder, merger = builder.when_matched_delete(), merger.when_matched_delete()
    if "insert" in clauses:
        builder = builder.when_not_matched_insert_all()
        merger = merger.when_not_matched_insert_all()
    metrics = builder.execute().metrics
    merger.execute()

    def rows(uri: str) -> list[tuple]:
        table = DeltaTable(uri).to_pyarrow_dataset().to_table(columns=["k", "v"])
        return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)

    assert rows(ours) == rows(theirs)
    touched = {"update, insert": 3, "delete": 3, "insert": 0}[clauses]
    changed = metrics["numTargetRowsUpdated"] + metrics["numTargetRowsDeleted"]
    assert changed == touched
