"""`write_table`: Arrow data written to a Delta table in process, with no Spark. Differential
against deltalake's `write_deltalake` (hypothesis over rows, partitions and modes: the two
tables read the same rows by both engines and DuckDB), plus the modes, schema checks, exactly-
once app transactions, identity and generated columns, constraints and a change-data-feed
overwrite."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import CommitProperties, DeltaLog, SetTransaction, read_table, write_table
from airflow_delta.engine.errors import (
    ConstraintViolationError,
    IdentityColumnError,
    InvalidArgumentError,
    InvalidCommitError,
    SchemaMismatchError,
    TableAlreadyExistsError,
)
from airflow_delta.engine.protocol.schema import DELTA_METADATA_KEY
from tests.engine.commands.dml_tables import (
    SCHEMA,
    batch,
    deltalake_rows,
    duckdb_rows,
    engine_rows,
)

ROWS = st.lists(
    st.tuples(
        st.integers(-5, 50),
        st.one_of(st.none(), st.integers(0, 9)),
        st.one_of(st.none(), st.sampled_from(["", "x", "é/ü", "a b"])),
        st.sampled_from(["a", "b", "c"]),
    ),
    max_size=12,
)


def _table(rows: list[tuple[Any, ...]]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    return pa.table(dict(zip(SCHEMA.names, columns, strict=True)), SCHEMA)


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    writes=st.lists(
        st.tuples(ROWS, st.sampled_from(["append", "overwrite"])), min_size=1, max_size=3
    ),
    partitioned=st.booleans(),
)
def test_writes_match_deltalake(
    tmp_path_factory: Any, writes: list[tuple[list[Any], str]], partitioned: bool
) -> None:
    root = tmp_path_factory.mktemp("write")
    ours, theirs = str(root / "ours"), str(root / "theirs")
    partition_by = ["p"] if partitioned else None
    for rows, mode in writes:
        write_table(ours, _table(rows), mode=mode, partition_by=partition_by)
        write_deltalake(theirs, _table(rows), mode=mode, partition_by=partition_by)
    expected = deltalake_rows(theirs)
    assert engine_rows(ours) == expected
    assert deltalake_rows(ours) == expected
    assert duckdb_rows(ours) == expected
    assert DeltaLog.for_table(ours).update().version == len(writes) - 1
    shutil.rmtree(root)


def test_modes_metrics_and_history(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    created = write_table(uri, batch(range(4)), partition_by=["p"])
    assert created.version == 0 and created.metrics["numOutputRows"] == 4
    assert created.metrics["numFiles"] == 2  # one per partition value
    with pytest.raises(TableAlreadyExistsError, match="mode is 'error'"):
        write_table(uri, batch([9]), mode="error")
    assert write_table(uri, batch([9]), mode="ignore").version is None
    replaced = write_table(uri, batch([7, 8]), mode="overwrite")
    assert replaced.metrics["numRemovedFiles"] == 2
    assert sorted(r[0] for r in engine_rows(uri)) == [7, 8]
    (last, *_) = DeltaLog.for_table(uri).history()
    assert last["operation"] == "WRITE"
    assert last["operationParameters"]["mode"] == "Overwrite"
    assert json.loads(last["operationParameters"]["partitionBy"]) == ["p"]


def test_schema_is_matched_by_name_and_widened(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, batch(range(2)))
    narrow = pa.table(
        {
            "P": ["a"],
            "id": pa.array([5], pa.int32()),
            "s": pa.array(["x"], pa.large_string()),
        }
    )  # k missing (nullable), id narrower, s another layout, names in another case and order
    write_table(uri, narrow)
    assert (5, None, "x", "a") in engine_rows(uri)
    with pytest.raises(SchemaMismatchError) as caught:
        write_table(uri, pa.table({"id": [1.5], "extra": [1]}))
    message = str(caught.value)
    assert "column extra is not in the table" in message
    assert "column id: double does not widen to int64" in message
    with pytest.raises(SchemaMismatchError, match="partitioned by"):
        write_table(uri, batch([1]), partition_by=["s"])


def test_an_append_only_table_refuses_an_overwrite_before_writing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, batch([1]), configuration={"delta.appendOnly": "true"})
    files = sorted(p.name for p in Path(uri).rglob("*.parquet"))
    with pytest.raises(InvalidCommitError, match="append-only"):
        write_table(uri, batch([2]), mode="overwrite")
    assert sorted(p.name for p in Path(uri).rglob("*.parquet")) == files  # no orphan
    assert write_table(uri, batch([2])).version == 1


def test_app_transactions_make_a_retried_write_land_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    props = CommitProperties(app_transactions=[SetTransaction("dag.task", 1)])
    assert write_table(uri, batch([1]), commit_properties=props).version == 0
    again = write_table(uri, batch([1]), commit_properties=props)
    assert again.version is None
    assert [r[0] for r in engine_rows(uri)] == [1]


def test_identity_generated_columns_and_constraints(tmp_path: Path) -> None:
    def annotated(name: str, type_: pa.DataType, **meta: Any) -> pa.Field:
        return pa.field(name, type_, metadata={DELTA_METADATA_KEY: json.dumps(meta)})

    uri = str(tmp_path / "t")
    schema = pa.schema(
        [
            annotated(
                "id",
                pa.int64(),
                **{
                    "delta.identity.start": 10,
                    "delta.identity.step": 5,
                    "delta.identity.allowExplicitInsert": False,
                },
            ),
            ("ts", pa.timestamp("us", "UTC")),
            annotated("year", pa.int32(), **{"delta.generationExpression": "year(ts)"}),
        ]
    )
    DeltaLog.create_table(uri, schema, configuration={"delta.constraints.recent": "year > 2000"})
    ts = [dt.datetime(2020 + i, 1, 1, tzinfo=dt.UTC) for i in range(3)]
    write_table(uri, pa.table({"ts": pa.array(ts, pa.timestamp("us", "UTC"))}))
    got = DeltaTable(uri).to_pyarrow_table().sort_by("id").to_pylist()
    assert [(r["id"], r["year"]) for r in got] == [(10, 2020), (15, 2021), (20, 2022)]
    field = json.loads(DeltaLog.for_table(uri).update().metadata.schema_string)["fields"][0]
    assert field["metadata"]["delta.identity.highWaterMark"] == 20
    with pytest.raises(IdentityColumnError, match="GENERATED ALWAYS"):
        write_table(uri, pa.table({"id": [1], "ts": pa.array(ts[:1], pa.timestamp("us", "UTC"))}))
    old = [dt.datetime(1999, 1, 1, tzinfo=dt.UTC)]
    with pytest.raises(ConstraintViolationError, match=r"recent.*\n - year : 1999"):
        write_table(uri, pa.table({"ts": pa.array(old, pa.timestamp("us", "UTC"))}))
    assert DeltaLog.for_table(uri).update().version == 1


def test_overwrite_of_a_change_data_feed_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, batch(range(3)), configuration={"delta.enableChangeDataFeed": "true"})
    write_table(uri, batch([7]), mode="overwrite")
    changes = DeltaTable(uri).load_cdf(starting_version=1).read_all()
    kinds = sorted(
        zip(
            changes.column("id").to_pylist(),
            changes.column("_change_type").to_pylist(),
            strict=True,
        )
    )
    assert kinds == [(0, "delete"), (1, "delete"), (2, "delete"), (7, "insert")]


def test_replace_where_replaces_the_partitions_it_selects(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    first = batch(range(6))  # p = 'b' for even ids, 'a' for odd
    write_table(ours, first, partition_by=["p"])
    write_deltalake(theirs, first, partition_by=["p"])
    new = batch([10, 12], p=["b", "b"])
    result = write_table(ours, new, mode="overwrite", replace_where="p = 'b'")
    write_deltalake(theirs, new, mode="overwrite", predicate="p = 'b'")
    assert engine_rows(ours) == deltalake_rows(theirs)
    assert sorted(r[0] for r in engine_rows(ours)) == [1, 3, 5, 10, 12]
    assert result.metrics["numRemovedFiles"] == 1
    (last, *_) = DeltaLog.for_table(ours).history()
    assert last["operationParameters"]["predicate"] == "p = 'b'"
    version = DeltaLog.for_table(ours).update().version
    outside = batch([20, 21])  # 21 lands in partition a
    with pytest.raises(ConstraintViolationError, match="does not conform to partial table"):
        write_table(ours, outside, mode="overwrite", replace_where="p = 'b'")
    assert DeltaLog.for_table(ours).update().version == version
    with pytest.raises(ValueError, match="need mode='overwrite'"):
        write_table(ours, outside, replace_where="p = 'b'")


def test_dynamic_partition_overwrite(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, batch(range(6)), partition_by=["p"])
    write_table(
        uri, batch([7, 9], p=["a", "a"]), mode="overwrite", partition_overwrite_mode="dynamic"
    )
    assert sorted(r[0] for r in engine_rows(uri)) == [0, 2, 4, 7, 9]  # partition b untouched
    (last, *_) = DeltaLog.for_table(uri).history()
    assert last["operationParameters"]["partitionOverwriteMode"] == "dynamic"


def test_schema_merge_adds_columns_as_deltalake_does(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "p": ["a", "b"]})
    wider = pa.table(
        {"id": pa.array([3], pa.int64()), "score": pa.array([0.5]), "p": ["a"], "tag": ["t"]}
    )
    write_table(ours, first, partition_by=["p"])
    write_deltalake(theirs, first, partition_by=["p"])
    with pytest.raises(SchemaMismatchError, match="column score is not in the table"):
        write_table(ours, wider)
    write_table(ours, wider, schema_mode="merge")
    write_deltalake(theirs, wider, mode="append", schema_mode="merge")
    ours_rows = DeltaTable(ours).to_pyarrow_table().sort_by("id")
    assert ours_rows.column_names == ["id", "p", "score", "tag"]
    assert (
        ours_rows.to_pylist()
        == DeltaTable(theirs)
        .to_pyarrow_table()
        .select(ours_rows.column_names)
        .sort_by("id")
        .to_pylist()
    )


def test_schema_overwrite_replaces_schema_and_partitioning(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    write_table(uri, batch(range(4)), partition_by=["p"])
    new = pa.table({"key": ["x", "y"], "n": pa.array([1, 2], pa.int32())})
    with pytest.raises(ValueError, match="needs mode='overwrite'"):
        write_table(uri, new, schema_mode="overwrite")
    write_table(uri, new, mode="overwrite", schema_mode="overwrite", partition_by=["key"])
    snapshot = DeltaLog.for_table(uri).update()
    assert snapshot.partition_columns == ["key"] and snapshot.schema.names == ["key", "n"]
    assert DeltaTable(uri).to_pyarrow_table().sort_by("key").to_pylist() == [
        {"key": "x", "n": 1},
        {"key": "y", "n": 2},
    ]


UNHOLDABLE = {
    "no column": pa.table({}),
    "an all-None column": pa.Table.from_pylist([{"id": 1, "s": None}]),
    "a list of None": pa.table({"id": [1], "l": pa.array([[None]], pa.list_(pa.null()))}),
    "a struct with a None field": pa.table({"s": pa.array([{"x": None}])}),
    "uint64": pa.table({"n": pa.array([1], pa.uint64())}),
    "names equal but for case": pa.table({"a": [1], "A": [2]}),
    "time of day": pa.table({"t": pa.array([dt.time(1, 2)])}),
}


@pytest.mark.parametrize("data", UNHOLDABLE.values(), ids=UNHOLDABLE.keys())
def test_a_schema_delta_cannot_hold_is_refused_before_anything_is_written(
    tmp_path: Path, data: pa.Table
) -> None:
    """A new table (or one more column) of a schema other Delta readers could not read is a
    SchemaMismatchError naming the table, whether `write_table` or `create_table` makes it;
    nothing is written."""
    uri = str(tmp_path / "t")
    with pytest.raises(SchemaMismatchError, match=f"{uri}: .*"):
        write_table(uri, data)
    with pytest.raises(SchemaMismatchError, match=f"Cannot create table {uri}: "):
        DeltaLog.create_table(uri, data.schema)
    assert not (tmp_path / "t" / "_delta_log").exists() or not any(
        (tmp_path / "t" / "_delta_log").iterdir()
    )
    if data.num_columns and "id" in data.column_names:  # as a column added to a table
        write_table(uri, pa.table({"id": pa.array([0], pa.int64())}))
        with pytest.raises(SchemaMismatchError, match=f"WRITE to {uri}: "):
            write_table(uri, data, schema_mode="merge")
        assert DeltaLog.for_table(uri).update().version == 0


@pytest.mark.parametrize(
    ("unsigned", "signed"),
    [(pa.uint8(), pa.int16()), (pa.uint16(), pa.int32()), (pa.uint32(), pa.int64())],
)
def test_unsigned_integers_are_stored_in_the_next_wider_signed_type(
    tmp_path: Path, unsigned: pa.DataType, signed: pa.DataType
) -> None:
    """A new table types them one size up (their largest value fits), and later writes of the
    same data go in: as deltalake reads them back."""
    uri = str(tmp_path / "t")
    top = 2**unsigned.bit_width - 1
    write_table(uri, pa.table({"n": pa.array([0, top], unsigned)}))
    write_table(uri, pa.table({"n": pa.array([top], unsigned)}))
    table = DeltaTable(uri).to_pyarrow_dataset().to_table()
    assert table.schema.field("n").type == signed
    assert sorted(table.column("n").to_pylist()) == [0, top, top]


@pytest.mark.parametrize("value", ["a\\b", "it's", "x\\'y", "\\"])
def test_partition_values_with_quotes_and_backslashes_are_replaced_exactly(
    tmp_path: Path, value: str
) -> None:
    """A dynamic partition overwrite selects the partitions it writes by a predicate built
    from their values: quoted for SQL, each value selects its own partition and no other."""
    uri = str(tmp_path / "t")
    data = pa.table({"id": [1, 2], "p": [value, value + "x"]})
    write_table(uri, data, partition_by=["p"])
    write_table(
        uri,
        pa.table({"id": [9], "p": [value]}),
        mode="overwrite",
        partition_overwrite_mode="dynamic",
    )
    rows = DeltaTable(uri).to_pyarrow_dataset().to_table().to_pylist()
    assert sorted((r["id"], r["p"]) for r in rows) == [(2, value + "x"), (9, value)]


@pytest.mark.parametrize(
    ("partition_by", "problem"),
    [
        (["k", "k"], "name a column twice"),
        (["k", "K"], "name a column twice"),
        (["id", "k"], "cannot use all columns (id, k) for partition columns"),
    ],
)
def test_partition_columns_other_engines_refuse(
    tmp_path: Path, partition_by: list[str], problem: str
) -> None:
    """A repeated partition column (deltalake then fails with "Duplicate partition column")
    or every column a partition column (the file writer crashed: no data column) is refused
    before anything is written, for every writer (the metadata check of a new table)."""
    uri = tmp_path / "t"
    with pytest.raises(InvalidCommitError, match=re.escape(problem)) as caught:
        write_table(str(uri), pa.table({"id": [1], "k": ["a"]}), partition_by=partition_by)
    assert str(uri) in str(caught.value)
    assert not uri.exists() or not any(uri.rglob("*.*"))


@pytest.mark.parametrize("existing", [False, True])
def test_a_partition_value_delta_cannot_hold_is_refused_naming_the_column(
    tmp_path: Path, existing: bool
) -> None:
    """A binary partition value that is not UTF-8 (Delta's partition values are text): a typed
    error naming the table and the column, and no file left behind."""
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("b", pa.binary())])
    if existing:
        write_table(uri, pa.table({"id": [0], "b": [b"ok"]}, schema), partition_by=["b"])
    before = sorted(p.name for p in tmp_path.rglob("*.parquet"))
    rows = pa.table({"id": [1, 2, 3], "b": [b"a", b"\xff\xfe", b"z"]}, schema)
    with pytest.raises(InvalidArgumentError, match=f"table {uri}: partition column b: .*UTF-8"):
        write_table(uri, rows, mode="append", partition_by=["b"])
    assert sorted(p.name for p in tmp_path.rglob("*.parquet")) == before
    if existing:
        assert DeltaLog.for_table(uri).update().version == 0
    else:
        assert not (tmp_path / "t" / "_delta_log").exists()


# Partition column names pyarrow would read as a field path (a leading "." or "["), and other
# characters Delta allows in a column name.
_PARTITION_NAME = st.text(alphabet=st.sampled_from(list(".[]_%#é/ab0")), min_size=1, max_size=5)


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    names=st.lists(_PARTITION_NAME, min_size=2, max_size=2, unique=True).filter(
        lambda ns: "id" not in ns
    )
)
def test_partition_columns_named_like_field_paths_are_written(tmp_path: Path, names) -> None:
    """A partition column named `.x` (or `[0]`) crashed every partitioned write of more than one
    partition (ArrowInvalid: pyarrow's sort took the name for a field path); the rows written
    read back, by this engine and deltalake."""
    uri = str(tmp_path / f"t{abs(hash(tuple(names)))}")
    rows = pa.table({"id": [1, 2, 3, 4], names[0]: ["a", "b", "a", None], names[1]: [1, 1, 2, 2]})
    write_table(uri, rows, partition_by=names)
    expected = sorted(rows.to_pylist(), key=lambda r: r["id"])
    assert sorted(read_table(uri).to_pylist(), key=lambda r: r["id"]) == expected
    theirs = pa.table(
        QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT * FROM t").read_all()
    )
    assert sorted(theirs.to_pylist(), key=lambda r: r["id"]) == expected


@pytest.mark.parametrize("child", [".y", "[0]", ".s.y"])
def test_nested_fields_named_like_field_paths_get_their_own_stats(tmp_path: Path, child) -> None:
    """File statistics took a nested field named `.y` for the field path `y`: without a sibling
    `y` the write crashed (ArrowInvalid), with one the file got `y`'s min and max as `.y`'s
    (data skipping of other engines then dropped matching rows)."""
    structs = [{child: v, "y": 100, "s": {"y": 7}} for v in (1, 2, 3)]
    rows = pa.table({"id": [1, 2, 3], "st": structs, ".x": [10, 20, 30]})
    uri = str(tmp_path / "t")
    write_table(uri, rows)
    (added,) = DeltaLog.for_table(uri).update().all_files()
    stats = json.loads(added.stats or "{}")
    assert stats["minValues"]["st"] == {child: 1, "y": 100, "s": {"y": 7}}
    assert stats["maxValues"]["st"] == {child: 3, "y": 100, "s": {"y": 7}}
    assert (stats["minValues"][".x"], stats["maxValues"][".x"]) == (10, 30)
    assert sorted(read_table(uri).to_pylist(), key=lambda r: r["id"]) == rows.to_pylist()


def test_data_skipping_reads_the_stats_of_a_column_named_like_a_field_path(tmp_path: Path) -> None:
    """Data skipping read the statistics of `.x` from those of `x` (pyarrow's field path): a
    filter on `.x` skipped the very file holding the matching rows."""
    uri = str(tmp_path / "t")
    write_table(uri, pa.table({"id": [1], ".x": [50], "x": [0]}))
    write_table(uri, pa.table({"id": [2], ".x": [0], "x": [50]}))
    assert read_table(uri, filter="`.x` > 25").column("id").to_pylist() == [1]
    assert read_table(uri, filter="x > 25").column("id").to_pylist() == [2]
