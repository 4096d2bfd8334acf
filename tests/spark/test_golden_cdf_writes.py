"""Golden change-data-feed tables that delta-spark wrote (`../shared/golden/`), written to by
every path that records changes: a Spark append, a Spark replaceWhere overwrite, the
in-process MERGE, DELETE and UPDATE, and the Spark MERGE. After them, `read_changes` returns
what deltalake's `load_cdf` returns over the whole history (delta-spark's change files and
ours), and engine, deltalake and DuckDB read the same rows."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog, delete, read_changes, read_table, update
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.spark.merge import merge_delta
from airflow_delta.spark.write import write_delta
from tests.interop.test_duckdb import _connect

GOLDEN = Path("/work/shared/golden/tables")
#: Golden CDF tables, and a string column of each to change.
TABLES = {
    "delta-rs__cdf-table": "name",  # partitioned by birthday (a date)
    "delta-rs__cdf-table-non-partitioned": "name",
    "delta-rs__cdf-table-with-cdc-and-dvs": "comment",  # deletion vectors too
    "delta-rs__simple_table_with_cdc": "name",
}


def _changes(table: Any, names: list[str]) -> list[tuple[Any, ...]]:
    table = pa.table(table)
    key = ["_commit_version", "_change_type", *names]
    return sorted(zip(*(table.column(c).to_pylist() for c in key), strict=True), key=repr)


def _rows(table: Any, names: list[str]) -> list[tuple[Any, ...]]:
    table = pa.table(table)
    return sorted(zip(*(table.column(c).to_pylist() for c in names), strict=True), key=repr)


def _with(table: pa.Table, name: str, values: list[Any]) -> pa.Table:
    index = table.schema.get_field_index(name)
    return table.set_column(index, table.field(index), pa.array(values, table.field(index).type))


@pytest.mark.parametrize(("name", "text"), sorted(TABLES.items()))
def test_golden_cdf_table_records_every_write(
    spark: SparkSession, tmp_path: Path, name: str, text: str
) -> None:
    uri = str(tmp_path / name)
    shutil.copytree(GOLDEN / name, uri)
    start = DeltaLog.for_table(uri).latest_version()
    current = read_table(uri).sort_by("id")
    counts = pc.value_counts(current.column("id"))
    once = counts.field("values").filter(pc.equal(counts.field("counts"), 1))
    current = current.filter(pc.is_in(current.column("id"), once))  # rows a MERGE can name
    names = current.column_names
    first = current.slice(0, 1)

    appended = _with(_with(first, "id", [1000]), text, ["appended"])
    write_delta(spark.createDataFrame(appended.to_pandas()), uri)
    partitions = DeltaLog.for_table(uri).update().metadata.partition_columns
    if partitions:  # replaceWhere selects partitions (a data-column predicate is refused)
        replaced = _with(_with(first, "id", [1000]), text, ["replaced"])
        where = f"{partitions[0]} = '{first.column(partitions[0])[0].as_py()}'"
        write_delta(
            spark.createDataFrame(replaced.to_pandas()), uri, mode="overwrite",
            replace_where=where,
        )  # fmt: skip
    pair = current.slice(0, 2)  # some golden tables hold one row
    upserts = pa.concat_tables(
        [_with(pair, text, ["merged"] * pair.num_rows), _with(first, "id", [2000])]
    )
    merge_arrow(uri, upserts, "t.id = s.id").when_matched_update_all().when_not_matched_insert_all(
    ).execute()  # fmt: skip
    delete(uri, "id = 2000")
    update(uri, {text: "'updated'"}, f"id = {pair.column('id')[-1].as_py()}")
    on_spark = _with(current.slice(2, 1), text, ["spark"]) if current.num_rows > 2 else first
    source = spark.createDataFrame(on_spark.to_pandas())
    merge_delta(uri, source, "t.id = s.id").when_matched_update_all().execute()

    ours = read_changes(uri, 0)
    theirs = DeltaTable(uri).load_cdf(starting_version=0).read_all()
    assert _changes(ours, names) == _changes(theirs, names)
    later = ours.filter(pc.greater(ours.column("_commit_version"), start))
    kinds = set(later.column("_change_type").to_pylist())
    assert kinds == {"insert", "delete", "update_preimage", "update_postimage"}

    engine = _rows(read_table(uri), names)
    query = f"SELECT {', '.join(names)} FROM delta_scan('{uri}')"
    assert _rows(_connect().execute(query).fetch_arrow_table(), names) == engine
    from deltalake import QueryBuilder

    dl = QueryBuilder().register("t", DeltaTable(uri)).execute(f"SELECT {', '.join(names)} FROM t")
    assert _rows(dl.read_all(), names) == engine
    texts = [r[names.index(text)] for r in engine]
    assert ("replaced" in texts and "appended" not in texts) if partitions else "appended" in texts
