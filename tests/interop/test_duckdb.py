"""DuckDB's delta extension (built on delta-kernel-rs, a third Delta implementation) as an
independent reader and writer.

Its writer records a file it puts at the table root as `/duckdb-<uuid>.parquet`: an
absolute-path URI reference, which by the protocol names a file at the root of the filesystem,
while delta-rs and DuckDB itself read it under the table root. This engine reads the path the
protocol's way and says so when the file is missing; vacuum keeps both readings.

As a reader, DuckDB is the third of three independent implementations: golden tables written
by Spark and delta-rs read alike by this engine's Spark-free `read_table`, deltalake and DuckDB.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import AddFile, DeltaLog, Operation
from airflow_delta.engine.commands.maintenance import vacuum
from airflow_delta.engine.errors import CorruptLogError

duckdb = pytest.importorskip("duckdb")
DAY_MS = 86_400_000
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def _connect():
    import duckdb_ext

    ext = next(Path(next(iter(duckdb_ext.__path__))).glob("extensions/v*/*/delta.duckdb_extension"))
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false; SET autoload_known_extensions=false")
    con.execute(f"LOAD '{ext}'")
    return con


def _duckdb_insert(table: Path, rows: int) -> None:
    con = _connect()
    con.execute(f"ATTACH '{table}' AS t (TYPE delta)")
    con.execute(f"INSERT INTO t SELECT range AS id, 'v' || range AS v FROM range({rows})")
    con.close()


def _duckdb_count(table: Path) -> int:
    return _connect().execute(f"SELECT count(*) FROM delta_scan('{table}')").fetchone()[0]


def test_vacuum_keeps_the_files_duckdb_wrote(tmp_path: Path) -> None:
    table = tmp_path / "t"
    log = DeltaLog.create_table(str(table), SCHEMA)
    _duckdb_insert(table, 5)
    [written] = [f.path for f in log.update().all_files()]
    assert written.startswith("/duckdb-")  # the writer's habit this test is about
    (table / "orphan.parquet").write_bytes(b"PAR1")

    result = vacuum(log.location, now_ms=int(time.time() * 1000) + 30 * DAY_MS)

    assert result.files_deleted == ["orphan.parquet"]
    assert (table / written.lstrip("/")).exists()
    assert _duckdb_count(table) == 5


def test_a_root_path_of_duckdb_is_read_the_protocol_way_with_a_clear_error(tmp_path) -> None:
    from airflow_delta.engine.commands.merge_in_process import merge_arrow

    table = tmp_path / "t"
    DeltaLog.create_table(str(table), SCHEMA)
    _duckdb_insert(table, 3)
    source = pa.table({"id": pa.array([1], pa.int64()), "v": ["new"]})

    with pytest.raises(
        CorruptLogError, match=r"version 1: the data file /duckdb-.*starts with '/'"
    ):
        merge_arrow(str(table), source, "t.id = s.id").when_matched_update_all().execute()


def test_duckdb_reads_and_appends_to_a_table_this_engine_wrote(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = tmp_path / "t"
    log = DeltaLog.create_table(str(table), SCHEMA)
    pq.write_table(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA), table / "p0.parquet")
    size = (table / "p0.parquet").stat().st_size
    stats = '{"numRecords": 2}'
    log.start_transaction().commit(
        [AddFile("p0.parquet", {}, size, 0, stats=stats)], Operation("WRITE")
    )
    log.checkpoint()

    assert _duckdb_count(table) == 2
    _duckdb_insert(table, 4)
    assert _duckdb_count(table) == 6
    assert log.update().num_records == 6


# -- three independent readers of the golden tables ----------------------------------------

GOLDEN = Path("/work/shared/golden/tables")
#: Golden tables the three readers must read alike: partition values of every type, nested
#: and complex types, timestamps, checkpoints (classic, multi-part, v2), deletion vectors,
#: column mapping; name -> columns DuckDB does not read right (left out of its comparison).
THREE_READERS: dict[str, tuple[str, ...]] = {
    "delta__data-reader-partition-values": (),
    "delta__data-reader-primitives": (),
    "delta__data-reader-nested-struct": (),
    "delta__data-reader-array-complex-objects": (),
    "delta__data-reader-escaped-chars": (),
    "delta__hive__deltatbl-special-chars-in-partition-column": (),
    "delta__kernel-timestamp-PST": (),
    "delta__decimal-various-scale-precision": (),
    "delta__basic-with-inserts-overwrite-restore": (),
    "delta__kernel-defaults__kernel-pagination-multi-part-checkpoints": (),
    "delta__kernel-defaults__kernel-pagination-v2-checkpoint-parquet": (),
    "delta__kernel-defaults__basic-dv-no-checkpoint": (),
    "delta-rs__table-with-dv-small": (),
    "delta__dv-with-columnmapping": (),
    "delta__kernel-defaults__data-reader-partition-values-column-mapping-name": (),
    # DuckDB reads a column-mapped partition column that is not the first field as NULL
    "delta__data-reader-timestamp_ntz-id-mode": ("tsNtzPartition",),
}


def _rows(table: pa.Table, columns: list[str], schema: pa.Schema) -> list[str]:
    return sorted(map(repr, table.select(columns).cast(schema).to_pylist()))


@pytest.mark.parametrize("name", sorted(THREE_READERS))
def test_the_engine_deltalake_and_duckdb_read_the_same_golden_rows(name: str) -> None:
    from deltalake import DeltaTable, QueryBuilder

    from airflow_delta.engine import read_table

    table = GOLDEN / name
    if not table.is_dir():
        pytest.skip(f"golden table {name} not here")
    ours = read_table(str(table))
    query = QueryBuilder().register("t", DeltaTable(str(table))).execute("SELECT * FROM t")
    theirs = pa.table(query.read_all())
    con = _connect()
    try:
        duck = con.execute(f"SELECT * FROM delta_scan('{table}')").fetch_arrow_table()
    finally:
        con.close()

    names = ours.column_names
    assert _rows(theirs, names, ours.schema) == _rows(ours, names, ours.schema)
    kept = [n for n in names if n not in THREE_READERS[name]]
    schema = pa.schema([ours.schema.field(n) for n in kept])
    assert _rows(duck, kept, schema) == _rows(ours, kept, schema)


def test_stats_converted_from_stats_parsed_are_delta_json(tmp_path: Path) -> None:
    """A checkpoint written with `delta.checkpoint.writeStatsAsJson=false` carries its files'
    stats in `stats_parsed` only; this engine turns them into the stats JSON its next
    checkpoint writes. That JSON must be Delta's (ISO timestamps in UTC with `Z`, decimals as
    numbers, no NaN token, unknown values left out), or DuckDB can no longer filter the table.
    A NaN bound (as Spark records one) is left out, which skips nothing."""
    import datetime as dt
    import decimal
    import json
    import re

    import pyarrow.parquet as pq
    from deltalake import DeltaTable, write_deltalake

    from airflow_delta.engine import read_table, write_table

    uri = str(tmp_path / "t")
    utc = dt.UTC

    def rows(ids: list[int], f: list[float]) -> pa.Table:
        return pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "f": pa.array(f, pa.float64()),
                "ts": pa.array([dt.datetime(2024, 1, i, 12, 0, 0, 1500, tzinfo=utc) for i in ids]),
                "ntz": pa.array([dt.datetime(2024, 1, i, 8) for i in ids], pa.timestamp("us")),
                "d": pa.array([decimal.Decimal(f"{i}.25") for i in ids], pa.decimal128(9, 2)),
                "s": pa.array([{"x": f"n{i}"} for i in ids]),
            }
        )

    config = {
        "delta.checkpoint.writeStatsAsStruct": "true",
        "delta.checkpoint.writeStatsAsJson": "false",
    }
    write_deltalake(uri, rows([1, 2], [float("nan"), 1.0]), configuration=config)
    write_deltalake(uri, rows([3], [5.0]), mode="append")
    DeltaTable(uri).create_checkpoint()
    [checkpoint] = (tmp_path / "t" / "_delta_log").glob("*.checkpoint.parquet")
    table = pq.read_table(checkpoint)
    actions = table.to_pylist()
    for action in actions:  # as Spark records it: the max of [NaN, 1.0] is NaN
        if action["add"] and action["add"]["stats_parsed"]["numRecords"] == 2:
            action["add"]["stats_parsed"]["maxValues"]["f"] = float("nan")
    pq.write_table(pa.Table.from_pylist(actions, schema=table.schema), checkpoint)

    write_table(uri, rows([4], [2.0]))
    DeltaLog.for_table(uri).checkpoint()  # its stats: converted from stats_parsed, and ours
    strict = {"parse_constant": lambda token: pytest.fail(f"{token} in the stats JSON")}
    for stats in DeltaLog.for_table(uri).update().files().field("stats").to_pylist():
        parsed = json.loads(stats, **strict)
        low, high = parsed["minValues"], parsed["maxValues"]
        assert re.fullmatch(r"2024-01-0\dT12:00:00\.00[12]Z", high["ts"]), high  # max rounds up
        assert re.fullmatch(r"2024-01-0\dT08:00:00\.000", low["ntz"]), low
        assert isinstance(low["d"], float) and low["s"] == {"x": f"n{low['id']}"}
        assert "f" not in high or high["f"] == high["f"]  # NaN left out
    expected = [1, 2, 3, 4]  # NaN > 0.5 in Spark's order
    con = _connect()
    query = f"SELECT id FROM delta_scan('{uri}') WHERE f > 0.5 OR ts < TIMESTAMPTZ '2000-01-01'"
    assert sorted(r[0] for r in con.execute(query).fetchall()) == expected
    assert sorted(read_table(uri, ["id"], "f > 0.5").column("id").to_pylist()) == expected


NAN_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("x", pa.float64()),
        ("y", pa.float32()),
        ("s", pa.struct([("f", pa.float64()), ("g", pa.int32())])),
        ("l", pa.list_(pa.float64())),
    ]
)


def _nan_rows(ids: list[int], nan: bool) -> pa.Table:
    x = [float("nan") if nan and i % 2 else 0.5 for i in ids]
    return pa.table(
        {
            "id": ids,
            "x": x,
            "y": [0.5] * len(ids),
            "s": [{"f": v, "g": 1} for v in x],
            "l": [[v] for v in x],
        },
        NAN_SCHEMA,
    )


def _footer_bounds(path: Path) -> set[str]:
    """The leaf columns with min/max in some row group of the parquet file at `path`."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    return {
        meta.row_group(g).column(c).path_in_schema
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
        if (stats := meta.row_group(g).column(c).statistics) is not None and stats.has_min_max
    }


def test_a_nan_is_not_hidden_by_the_footer_bounds(tmp_path: Path) -> None:
    """pyarrow leaves NaN out of a float column's footer min/max, so DuckDB's (and Spark's)
    row-group filter skipped the NaN rows `x > 1` must return: a file holding NaN in a float
    leaf writes no min/max for it (one whose first row group had none is rolled when a NaN
    comes); the leaves without NaN keep theirs."""
    from airflow_delta.engine import write_table
    from airflow_delta.engine.commands.data_files import DataFileWriter, WritePlan, add_files

    uri = str(tmp_path / "t")
    write_table(uri, _nan_rows([0, 1, 2, 3], nan=True))
    txn = DeltaLog.for_table(uri).start_transaction()
    writer = DataFileWriter(WritePlan.for_table(txn.location, txn.metadata))
    writer.row_group_bytes = 1  # a row group per add: the NaN comes in the second
    writer.add({}, _nan_rows([4, 6], nan=False))
    writer.add({}, _nan_rows([5, 7], nan=True))
    txn.commit(add_files(writer.finish()), Operation("WRITE"))

    footers = {p.name: _footer_bounds(p) for p in tmp_path.glob("t/*.parquet")}
    assert len(footers) == 3, footers
    with_nan = [bounds for bounds in footers.values() if "x" not in bounds]
    assert len(with_nan) == 2  # the first write's file and the rolled one
    assert all(b == {"id", "y", "s.g"} for b in with_nan), footers
    assert {"id", "x", "y", "s.f", "s.g"} in footers.values()  # no NaN: every bound but lists
    query = f"SELECT id FROM delta_scan('{uri}') WHERE {{}} ORDER BY id"
    con = _connect()
    for where in ("x > 1", "s.f > 1", "isnan(x)"):  # DuckDB orders NaN above every number
        assert [r[0] for r in con.execute(query.format(where)).fetchall()] == [1, 3, 5, 7]
    assert [r[0] for r in con.execute(query.format("x < 1")).fetchall()] == [0, 2, 4, 6]
