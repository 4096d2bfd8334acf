"""The Spark-free reader (`engine.commands.table_reader`): `read_table`, `to_pandas` and
`to_pyarrow_dataset`, on tables with partitions, NULLs, column mapping, deletion vectors and
time travel, and against two independent readers: deltalake (delta-rs, its SQL `QueryBuilder`,
never `to_pyarrow_table()`) and DuckDB's delta extension (delta-kernel-rs)."""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

import airflow_delta.engine as engine
from airflow_delta.engine import AddFile, DeltaLog, Operation, delete
from airflow_delta.engine.commands.table_reader import (
    TableScan,
    read_table,
    to_pandas,
    to_pyarrow_dataset,
)
from airflow_delta.engine.errors import CorruptLogError, InvalidPredicateError
from airflow_delta.engine.protocol.schema import delta_field_metadata
from tests.engine.commands.dml_tables import ROWS, SCHEMA, batches, combined_predicates, create

GOLDEN = Path("/work/shared/golden/tables")


def _sorted(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


def deltalake_select(uri: str, where: str | None = None, version: int | None = None) -> pa.Table:
    table = DeltaTable(uri) if version is None else DeltaTable(uri, version=version)
    query = "SELECT * FROM t" + (f" WHERE {where}" if where else "")
    return pa.table(QueryBuilder().register("t", table).execute(query).read_all())


def duckdb_select(uri: str, where: str | None = None, version: int | None = None) -> pa.Table:
    import duckdb
    import duckdb_ext

    ext = next(Path(next(iter(duckdb_ext.__path__))).glob("extensions/v*/*/delta.duckdb_extension"))
    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions=false; SET autoload_known_extensions=false")
        con.execute(f"LOAD '{ext}'")
        source = f"delta_scan('{uri}')"
        if version is not None:
            con.execute(f"ATTACH '{uri}' AS t (TYPE delta, VERSION {version})")
            source = "t"
        query = f"SELECT * FROM {source}" + (f" WHERE {where}" if where else "")
        return con.execute(query).fetch_arrow_table()
    finally:
        con.close()


def same_rows(ours: pa.Table, theirs: pa.Table) -> bool:
    theirs = theirs.select(ours.column_names).cast(ours.schema)
    return _sorted(ours) == _sorted(theirs)


# -- a table with partitions and NULLs ----------------------------------------------------

ORDERS = pa.table(
    {
        "id": pa.array(range(12), pa.int64()),
        "status": ["new", None, "paid", "new", "paid", None, "new", "new", "paid", "x", "new", "y"],
        "amount": [1.0, None, 3.5, 4.0, None, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0],
        "region": ["eu", "us", None, "eu", "us", None, "eu", "eu", "us", "eu", None, "us"],
        "day": pa.array([dt.date(2024, 6, 1 + i % 3) for i in range(12)], pa.date32()),
    }
)


@pytest.fixture
def orders(tmp_path: Path) -> str:
    """ORDERS written by deltalake in two commits, partitioned by region and day."""
    uri = str(tmp_path / "orders")
    write_deltalake(uri, ORDERS.slice(0, 6), partition_by=["region", "day"])
    write_deltalake(uri, ORDERS.slice(6), mode="append")
    return uri


def test_reads_every_row_with_the_schema_types(orders: str) -> None:
    table = read_table(orders)

    assert table.schema == pa.schema(
        [
            ("id", pa.int64()),
            ("status", pa.string()),
            ("amount", pa.float64()),
            ("region", pa.string()),
            ("day", pa.date32()),
        ]
    )
    assert _sorted(table) == _sorted(ORDERS)


@pytest.mark.parametrize("where", [None, "amount > 5", "region = 'eu'"])
@pytest.mark.parametrize("columns", [[], ["region"], ["day", "region"]])
def test_reading_no_data_column_keeps_every_row(
    orders: str, columns: list[str], where: str | None
) -> None:
    """Partition columns alone, or no column at all, are read without any data column: the
    rows are still all there (a table of no column counts its rows too), as deltalake's
    dataset counts them."""
    table = read_table(orders, columns, where)
    dataset = DeltaTable(orders).to_pyarrow_dataset()
    theirs = dataset.to_table(columns=columns, filter=None if where is None else pc_filter(where))
    assert (table.num_rows, table.column_names) == (theirs.num_rows, columns)
    assert _sorted(table) == _sorted(theirs)


def pc_filter(where: str) -> ds.Expression:
    """The pyarrow expression of the few filters the test above uses."""
    column, op, value = where.split(" ", 2)
    literal = float(value) if op == ">" else value.strip("'")
    return ds.field(column) > literal if op == ">" else ds.field(column) == literal


def test_columns_are_read_in_the_order_asked_case_insensitively(orders: str) -> None:
    table = read_table(orders, ["DAY", "id"], "id < 2")

    assert table.column_names == ["day", "id"]
    assert table.sort_by("id").to_pylist() == [
        {"day": dt.date(2024, 6, 1), "id": 0},
        {"day": dt.date(2024, 6, 2), "id": 1},
    ]


def test_an_unknown_column_or_filter_column_is_refused(orders: str) -> None:
    with pytest.raises(ValueError, match=r"has no column 'nope' \(columns: id, status"):
        read_table(orders, ["id", "nope"])
    with pytest.raises(InvalidPredicateError, match="nope"):
        read_table(orders, filter="nope = 1")


@pytest.mark.parametrize(
    ("where", "ids"),
    [
        ("region = 'eu'", [0, 3, 6, 7, 9]),
        ("region IS NULL", [2, 5, 10]),
        ("region != 'eu'", [1, 4, 8, 11]),  # NULL does not match
        ("status != 'new'", [2, 4, 8, 9, 11]),
        ("NOT (status = 'new')", [2, 4, 8, 9, 11]),
        ("amount > 6 AND region = 'eu'", [6, 7, 9]),
        ("amount IS NULL OR day = DATE '2024-06-03'", [1, 2, 4, 5, 8, 11]),
        (["status IN ('paid', 'x')", "amount BETWEEN 3 AND 9"], [2, 8]),
    ],
)
def test_the_filter_keeps_exactly_the_matching_rows(
    orders: str, where: str | list[str], ids: list[int]
) -> None:
    table = read_table(orders, ["id"], where)

    assert sorted(table.column("id").to_pylist()) == ids
    text = where if isinstance(where, str) else " AND ".join(f"({w})" for w in where)
    assert same_rows(table, deltalake_select(orders, text).select(["id"]))


def test_files_are_skipped_by_partition_values_and_statistics(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    for first in range(0, 100, 10):  # ten files of ten ids each, two partitions
        batch = pa.table({"id": range(first, first + 10), "p": ["a" if first < 50 else "b"] * 10})
        write_deltalake(uri, batch, mode="append", partition_by=["p"])

    assert len(TableScan.of(DeltaLog.for_table(uri).update(), None, None).files) == 10
    scan = TableScan.of(DeltaLog.for_table(uri).update(), ["id"], "id >= 42 AND id < 48")
    assert len(scan.files) == 1
    assert scan.to_table().column("id").to_pylist() == list(range(42, 48))
    scan = TableScan.of(DeltaLog.for_table(uri).update(), ["id"], "p = 'b' AND id < 65")
    assert len(scan.files) == 2
    assert sorted(scan.to_table().column("id").to_pylist()) == list(range(50, 65))


def test_deletion_vectors_leave_the_deleted_rows_out(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", _rows(range(20)), dv=True)
    assert isinstance(to_pyarrow_dataset(uri), ds.FileSystemDataset)

    result = delete(uri, "k = 3")
    assert result.metrics["numDeletionVectorsAdded"] > 0
    table = read_table(uri, filter="id < 15")

    assert sorted(table.column("id").to_pylist()) == [i for i in range(15) if i % 5 != 3]
    assert same_rows(table, deltalake_select(uri, "id < 15"))
    assert same_rows(table, duckdb_select(uri, "id < 15"))
    dataset = to_pyarrow_dataset(uri)
    assert isinstance(dataset, ds.InMemoryDataset)
    assert _sorted(dataset.to_table()) == _sorted(read_table(uri))


def _rows(ids: range | list[int]) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": ids,
            "k": [i % 5 for i in ids],
            "s": [f"s{i % 3}" for i in ids],
            "p": ["a" if i % 2 else "b" for i in ids],
        },
        SCHEMA,
    )


def test_time_travel_by_version_timestamp_and_snapshot(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", _rows(range(5)), _rows(range(5, 8)))  # versions 1 and 2
    delete(uri, "id < 2")  # version 3
    log_dir = tmp_path / "t" / "_delta_log"
    base = 1_700_000_000
    for version in range(4):  # commit times an hour apart
        os.utime(log_dir / f"{version:020d}.json", (base + 3600 * version,) * 2)

    assert sorted(read_table(uri, ["id"], version=1).column("id").to_pylist()) == [0, 1, 2, 3, 4]
    at = dt.datetime.fromtimestamp(base + 3600 * 2 + 60, dt.UTC)
    assert read_table(uri, timestamp=at).num_rows == 8
    assert read_table(uri).num_rows == 6
    snapshot = DeltaLog.for_table(uri).update()
    assert read_table(snapshot, version=2).num_rows == 8
    assert read_table(snapshot).num_rows == 6
    assert to_pyarrow_dataset(uri, version=1).count_rows() == 5
    with pytest.raises(ValueError, match="either version or timestamp"):
        read_table(uri, version=1, timestamp=at)
    with pytest.raises(ValueError, match="storage_options"):
        read_table(snapshot, storage_options={})


def test_a_missing_data_file_is_the_snapshots_error(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", _rows(range(4)), partitioned=False)
    [path] = [f.path for f in DeltaLog.for_table(uri).update().all_files()]
    (tmp_path / "t" / path).unlink()

    with pytest.raises(CorruptLogError, match=f"version 1: the data file {path} is missing"):
        read_table(uri)


def test_other_writers_view_and_large_types_read_as_the_table_types(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    schema = pa.schema([("id", pa.int64()), ("s", pa.string()), ("l", pa.list_(pa.string()))])
    log = DeltaLog.create_table(uri, schema)
    data = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "s": pa.array(["x", None], pa.string_view()),
            "l": pa.array([["a"], None], pa.large_list(pa.large_string())),
        }
    )
    pq.write_table(data, tmp_path / "t" / "f.parquet")
    size = (tmp_path / "t" / "f.parquet").stat().st_size
    log.start_transaction().commit([AddFile("f.parquet", {}, size, 0)], Operation("WRITE"))

    table = read_table(uri)
    assert table.schema == schema
    assert table.to_pylist() == [{"id": 1, "s": "x", "l": ["a"]}, {"id": 2, "s": None, "l": None}]
    assert to_pyarrow_dataset(uri).to_table().to_pylist() == table.to_pylist()


# -- column mapping -----------------------------------------------------------------------

MAPPED = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("s", pa.struct([("a", pa.int32()), ("b", pa.string())])),
        ("p", pa.string()),
    ]
)


def _physical(field: pa.Field) -> pa.Field:
    """`field` (of the table's schema) as the files hold it: physical names, field ids."""
    meta = delta_field_metadata(field)
    t = field.type
    if pa.types.is_struct(t):
        t = pa.struct([_physical(t.field(i)) for i in range(t.num_fields)])
    return pa.field(
        meta["delta.columnMapping.physicalName"],
        t,
        metadata={b"PARQUET:field_id": str(meta["delta.columnMapping.id"]).encode()},
    )


def mapped_table(path: Path, mode: str, batches: list[pa.Table]) -> str:
    """A column-mapped table (MAPPED, partitioned by p), each batch one file per commit in
    the files' physical names, with stats under the physical names."""
    uri = str(path)
    log = DeltaLog.create_table(uri, MAPPED, ["p"], {"delta.columnMapping.mode": mode})
    fields = {f.name: f for f in log.update().metadata.schema}
    data_fields = [_physical(fields[n]) for n in ("id", "name", "s")]
    key = data_fields[0].name
    p_key = _physical(fields["p"]).name
    for i, batch in enumerate(batches):
        [value] = set(batch.column("p").to_pylist())
        name = f"part-{i}.parquet"
        struct = batch.column("s").combine_chunks()
        physical_struct = pa.StructArray.from_arrays(
            [struct.field(0), struct.field(1)],
            fields=list(data_fields[2].type),
            mask=struct.is_null(),
        )
        columns = [batch.column("id"), batch.column("name"), physical_struct]
        pq.write_table(pa.Table.from_arrays(columns, schema=pa.schema(data_fields)), path / name)
        ids = batch.column("id").to_pylist()
        stats = {
            "numRecords": batch.num_rows,
            "minValues": {key: min(ids)},
            "maxValues": {key: max(ids)},
            "nullCount": {key: 0},
        }
        add = AddFile(
            name, {p_key: value}, (path / name).stat().st_size, 0, stats=json.dumps(stats)
        )
        log.start_transaction().commit([add], Operation("WRITE"))
    return uri


def _mapped_batch(ids: range, p: str | None) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [None if i % 4 == 0 else f"n{i}" for i in ids],
            "s": [{"a": i, "b": f"b{i}"} if i % 3 else None for i in ids],
            "p": pa.array([p] * len(ids), pa.string()),
        },
        MAPPED,
    )


@pytest.mark.parametrize("mode", ["name", "id"])
def test_column_mapping_reads_physical_names_as_logical_ones(tmp_path: Path, mode: str) -> None:
    batches = [_mapped_batch(range(0, 6), "a"), _mapped_batch(range(6, 10), None)]
    uri = mapped_table(tmp_path / "t", mode, batches)

    table = read_table(uri)
    assert table.schema == MAPPED
    assert _sorted(table) == _sorted(pa.concat_tables(batches))
    assert same_rows(table, deltalake_select(uri))
    # DuckDB reads a mapped partition column that is not the first field as NULL (DESIGN.md)
    assert same_rows(
        table.select(["id", "name", "s"]), duckdb_select(uri).select(["id", "name", "s"])
    )
    scan = TableScan.of(DeltaLog.for_table(uri).update(), ["id", "s"], "id >= 6 AND name = 'n7'")
    assert len(scan.files) == 1  # skipped by the stats under the physical name
    assert scan.to_table().to_pylist() == [{"id": 7, "s": {"a": 7, "b": "b7"}}]
    assert read_table(uri, ["id"], "p IS NULL").num_rows == 4
    assert isinstance(to_pyarrow_dataset(uri), ds.InMemoryDataset)


def test_id_mode_finds_a_renamed_file_column_by_its_field_id(tmp_path: Path) -> None:
    uri = mapped_table(tmp_path / "t", "id", [_mapped_batch(range(3), "a")])
    [add] = DeltaLog.for_table(uri).update().all_files()
    file = pq.read_table(tmp_path / "t" / add.path)
    renamed = file.schema.field(0).with_name("some_other_name")
    file = file.rename_columns(["some_other_name", *file.column_names[1:]])
    pq.write_table(file.cast(file.schema.set(0, renamed)), tmp_path / "t" / add.path)

    assert read_table(uri, ["id"]).column("id").to_pylist() == [0, 1, 2]


@pytest.mark.parametrize(
    "name",
    [
        "delta__dv-with-columnmapping",
        "delta__kernel-defaults__data-reader-partition-values-column-mapping-name",
        "delta__table-with-columnmapping-mode-name",
        "delta-rs__table-with-dv-small",
        "delta__data-reader-partition-values",
        "delta__data-reader-nested-struct",
        "delta__data-reader-timestamp_ntz-id-mode",
    ],
)
def test_golden_tables_read_as_deltalake_reads_them(name: str) -> None:
    uri = str(GOLDEN / name)
    if not Path(uri).is_dir():
        pytest.skip(f"golden table {name} not here")
    assert same_rows(read_table(uri), deltalake_select(uri))


# -- the lazy dataset, pandas, the facade ---------------------------------------------------


def test_the_dataset_is_lazy_with_partition_expressions(orders: str) -> None:
    dataset = to_pyarrow_dataset(orders)

    assert isinstance(dataset, ds.FileSystemDataset)
    assert dataset.schema == read_table(orders).schema
    assert _sorted(dataset.to_table()) == _sorted(read_table(orders))
    eu = ds.field("region") == "eu"
    assert len(list(dataset.get_fragments(filter=eu))) == 3
    assert _sorted(dataset.to_table(filter=eu)) == _sorted(
        read_table(orders, None, "region = 'eu'")
    )
    nulls = dataset.to_table(columns=["id"], filter=ds.field("region").is_null())
    assert sorted(nulls.column("id").to_pylist()) == [2, 5, 10]


def test_to_pandas_and_the_deltalog_facade(orders: str) -> None:
    frame = to_pandas(orders, ["id", "amount"], "amount > 10")
    assert sorted(frame["id"].tolist()) == [10, 11]

    log = DeltaLog.for_table(orders)
    assert log.read_table(["id"], "region = 'us'", version=0).column("id").to_pylist() == [1, 4]
    assert sorted(log.to_pandas(["id"], "id > 9")["id"]) == [10, 11]
    assert log.to_pyarrow_dataset(version=0).count_rows() == 6
    assert engine.read_table is read_table and engine.to_pyarrow_dataset is to_pyarrow_dataset


# -- differential: random tables and filters against deltalake and DuckDB ----------------------

ATOMS = [
    "k < 2",
    "k >= 3",
    "k = 1",
    "k != 2",
    "k IS NULL",
    "k IS NOT NULL",
    "k IN (0, 4)",
    "k BETWEEN 1 AND 3",
    "s = 'x'",
    "s != 'y'",
    "s IS NULL",
    "s = ''",
    "s IN ('x', '')",
    "s > 'x'",
    "p = 'a'",
    "p IS NULL",
    "p != 'b'",
    "p IN ('a', 'b')",
    "id < 8",
    "id >= 20",
]


FILTERS = combined_predicates(ATOMS)


@settings(max_examples=30, derandomize=True, deadline=None)
@given(
    data=ROWS,
    commits=st.integers(1, 3),
    dv=st.booleans(),
    partitioned=st.booleans(),
    deleted=st.one_of(st.none(), FILTERS),
    where=FILTERS,
    columns=st.sampled_from([None, ["id"], ["s", "p", "id"]]),
)
def test_read_table_returns_the_rows_deltalake_and_duckdb_return(
    data: list[tuple[Any, ...]],
    commits: int,
    dv: bool,
    partitioned: bool,
    deleted: str | None,
    where: str,
    columns: list[str] | None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        uri = create(Path(tmp) / "t", *batches(data, commits), dv=dv, partitioned=partitioned)
        if deleted is not None:
            delete(uri, deleted)  # deletion vectors when dv, else rewritten files
        ours = read_table(uri, columns, where)
        names = columns or SCHEMA.names
        assert ours.column_names == names
        assert same_rows(ours, deltalake_select(uri, where).select(names)), where
        assert same_rows(ours, duckdb_select(uri, where).select(names)), where
        if commits > 1:  # time travel to the first commit after the create
            first = read_table(uri, columns, where, version=1)
            assert same_rows(first, deltalake_select(uri, where, version=1).select(names))
            assert same_rows(first, duckdb_select(uri, where, version=1).select(names))
        dataset = to_pyarrow_dataset(uri).to_table()
        assert _sorted(dataset) == _sorted(read_table(uri))


@settings(max_examples=15, derandomize=True, deadline=None)
@given(
    ids=st.lists(st.integers(0, 40), min_size=1, max_size=12, unique=True),
    where=st.sampled_from(
        [
            "id < 5",
            "name IS NULL",
            "name != 'n3'",
            "p = 'a'",
            "p IS NULL OR id > 30",
            "name IS NOT NULL AND id > 2",
        ]
    ),
)
def test_column_mapped_tables_read_as_deltalake_reads_them(ids: list[int], where: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        half = len(ids) // 2
        batches = [_mapped_batch(ids[:half], "a"), _mapped_batch(ids[half:], None)]
        uri = mapped_table(Path(tmp) / "t", "name", [b for b in batches if b.num_rows])
        ours = read_table(uri, filter=where)
        assert same_rows(ours, deltalake_select(uri, where)), where
