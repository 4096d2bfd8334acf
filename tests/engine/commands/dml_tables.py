"""Tables for the DELETE/UPDATE tests, and their rows as three readers see them: this engine
(`FileReader`, deletion vectors applied), deltalake (its SQL `QueryBuilder`, which applies
deletion vectors; never `to_pyarrow_table()`) and DuckDB's delta extension (delta-kernel-rs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog, Operation
from airflow_delta.engine.commands.data_files import write_tasks
from airflow_delta.engine.commands.data_reader import FileReader

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("s", pa.string()), ("p", pa.string())])
DV_ON = {"delta.enableDeletionVectors": "true"}


def batch(ids: range | list[int], **columns: list[Any]) -> pa.Table:
    """Rows with these ids; k = id % 5, s = 's<id % 3>', p = 'a'/'b' by parity, unless given."""
    ids = list(ids)
    data = {
        "id": ids,
        "k": columns.get("k", [i % 5 for i in ids]),
        "s": columns.get("s", [f"s{i % 3}" for i in ids]),
        "p": columns.get("p", ["a" if i % 2 else "b" for i in ids]),
    }
    return pa.table(data, SCHEMA)


def create(
    path: Path,
    *batches: pa.Table,
    dv: bool = False,
    partitioned: bool = True,
    configuration: dict[str, str] | None = None,
) -> str:
    """A table created by the engine, each of `batches` appended in its own commit."""
    uri = str(path)
    config = {**(DV_ON if dv else {}), **(configuration or {})}
    DeltaLog.create_table(uri, SCHEMA, ["p"] if partitioned else [], config or None)
    for data in batches:
        append(uri, data)
    return uri


def append(uri: str, data: pa.Table) -> int:
    """Append `data` through the engine's file writer (a blind append)."""
    txn = DeltaLog.for_table(uri).start_transaction()
    adds = write_tasks(txn, [lambda: data], [], "WRITE")
    return txn.commit(adds, Operation("WRITE", {"mode": "Append"}))


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)


def engine_rows(uri: str) -> list[tuple[Any, ...]]:
    txn = DeltaLog.for_table(uri).start_transaction()
    table = FileReader(txn, SCHEMA).read(txn.snapshot.files(), SCHEMA.names)
    return _sorted([tuple(r.values()) for r in table.to_pylist()])


def deltalake_rows(uri: str) -> list[tuple[Any, ...]]:
    query = f"SELECT {', '.join(SCHEMA.names)} FROM t"
    reader = QueryBuilder().register("t", DeltaTable(uri)).execute(query)
    table = pa.table(reader.read_all())
    return _sorted([tuple(r.values()) for r in table.to_pylist()])


def duckdb_rows(uri: str) -> list[tuple[Any, ...]]:
    import duckdb
    import duckdb_ext

    extensions = Path(next(iter(duckdb_ext.__path__)))
    ext = next(extensions.glob("extensions/v*/*/delta.duckdb_extension"))
    con = duckdb.connect()
    try:
        con.execute("SET autoinstall_known_extensions=false; SET autoload_known_extensions=false")
        con.execute(f"LOAD '{ext}'")
        query = f"SELECT {', '.join(SCHEMA.names)} FROM delta_scan('{uri}')"
        table = con.execute(query).fetch_arrow_table()
    finally:
        con.close()
    return _sorted([tuple(r.values()) for r in table.to_pylist()])


def rows(uri: str) -> list[tuple[Any, ...]]:
    """The table's rows (sorted), the same for this engine, deltalake and DuckDB."""
    ours = engine_rows(uri)
    assert deltalake_rows(uri) == ours, "deltalake reads other rows than the engine"
    assert duckdb_rows(uri) == ours, "DuckDB reads other rows than the engine"
    return ours


def expected(data: list[pa.Table], keep: Any) -> list[tuple[Any, ...]]:
    """The rows of `data` (tuples in SCHEMA order) for which `keep(row dict)` holds, sorted."""
    out = [tuple(r.values()) for t in data for r in t.to_pylist() if keep(r)]
    return _sorted(out)


# -- hypothesis strategies shared by the differential tests ----------------------------------


def combined_predicates(atoms: list[str]) -> st.SearchStrategy[str]:
    """SQL predicates built from `atoms` with AND, OR and NOT (up to 3 atoms)."""

    def combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        pairs = st.tuples(children, children)
        return st.one_of(
            pairs.map(lambda t: f"({t[0]}) AND ({t[1]})"),
            pairs.map(lambda t: f"({t[0]}) OR ({t[1]})"),
            children.map(lambda c: f"NOT ({c})"),
        )

    return st.recursive(st.sampled_from(atoms), combine, max_leaves=3)


#: Rows (k, s, p) of SCHEMA with NULLs and empty strings; `id` is the row's position.
ROWS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 4)),
        st.sampled_from([None, "x", "y", "", "z"]),
        st.sampled_from([None, "a", "b"]),
    ),
    min_size=1,
    max_size=30,
)


def batches(rows: list[tuple[Any, ...]], commits: int) -> list[pa.Table]:
    """`rows` (of ROWS) as SCHEMA tables, cut into `commits` appends."""
    data = [{"id": i, "k": k, "s": s, "p": p} for i, (k, s, p) in enumerate(rows)]
    size = -(-len(data) // commits)
    return [pa.Table.from_pylist(data[i : i + size], SCHEMA) for i in range(0, len(data), size)]
