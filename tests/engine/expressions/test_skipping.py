"""Data skipping: the files kept for a predicate over data columns, from their statistics.

The rules are tested on hand-written stats; a differential test then writes small tables with
deltalake (several files, nulls, NaN, long strings whose stats deltalake truncates, timestamps
with microseconds, some files stripped of their stats) and checks, for random predicates, that
no file holding a matching row is ever skipped.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.expressions.predicates import PartitionPredicate
from airflow_delta.engine.expressions.skipping import FilePredicate, parse_file_predicates
from airflow_delta.engine.protocol.action_types import ADD_TYPE
from airflow_delta.engine.protocol.columnar import array_from_pylist

COLUMNS = {
    "i": "long",
    "f": "double",
    "s": "string",
    "ts": "timestamp",
    "ntz": "timestamp_ntz",
    "d": "date",
    "dec": "decimal(10,2)",
    "b": "boolean",
}


def files(*stats: Any) -> pa.StructArray:
    """ADD_TYPE rows with these stats (a dict is dumped to JSON, a string kept as is)."""
    rows = [
        {
            "path": f"f{n}.parquet",
            "partitionValues": {"p": "x"},
            "size": 1,
            "modificationTime": 0,
            "dataChange": True,
            "stats": json.dumps(s) if isinstance(s, dict) else s,
        }
        for n, s in enumerate(stats)
    ]
    return array_from_pylist(rows, ADD_TYPE)


def kept(predicate: str, adds: pa.StructArray) -> list[int]:
    parsed = parse_file_predicates(predicate, {"p": "string"}, COLUMNS)
    mask = parsed.evaluate(adds).to_pylist()
    return [n for n, keep in enumerate(mask) if keep]


def stats(column: str, low: Any, high: Any, nulls: int = 0, rows: int = 10) -> dict[str, Any]:
    return {
        "numRecords": rows,
        "minValues": {column: low},
        "maxValues": {column: high},
        "nullCount": {column: nulls},
    }


def test_partition_only_predicates_stay_partition_predicates() -> None:
    parsed = parse_file_predicates("p = 'x'", {"p": "string"}, COLUMNS)
    assert type(parsed) is PartitionPredicate
    assert isinstance(parse_file_predicates("i > 1", {"p": "string"}, COLUMNS), FilePredicate)


def test_unknown_columns_are_typed_errors() -> None:
    with pytest.raises(InvalidPredicateError, match="'zz', which is not a column of this table"):
        parse_file_predicates("zz = 1", {"p": "string"}, COLUMNS)


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("i = 5", [0]),
        ("i = 15", [1]),
        ("i < 10", [0]),
        ("i <= 10", [0, 1]),
        ("i > 10", [1]),
        ("i >= 10", [0, 1]),
        ("i != 10", [0, 1]),
        ("i BETWEEN 11 AND 12", [1]),
        ("i IN (1, 30)", [0]),
        ("i NOT IN (1, 30)", [0, 1]),
        ("i IN (NULL)", []),
        ("i = NULL", []),
        ("NOT (i < 10)", [0, 1]),
        ("NOT (i <= 10)", [1]),
        ("NOT (i >= 10 AND i <= 20)", [0]),
        ("i < 0 OR i > 19", [1]),
        ("i < 0 OR p = 'x'", [0, 1]),
        ("i < 0 AND p = 'x'", []),
        ("NOT (i < 0 AND p = 'y')", [0, 1]),
    ],
)
def test_comparisons_use_min_and_max(predicate: str, expected: list[int]) -> None:
    assert kept(predicate, files(stats("i", 0, 10), stats("i", 10, 20))) == expected


def test_long_in_lists_test_each_value_against_the_bounds() -> None:
    adds = files(stats("i", 0, 10), stats("i", 100, 200), stats("f", 0.0, 1.0))
    listed = ", ".join(str(n) for n in range(50, 150))
    assert kept(f"i IN ({listed})", adds) == [1, 2]
    assert kept(f"i NOT IN ({listed})", adds) == [0, 1, 2]
    floats = ", ".join(f"{n}.5" for n in range(50, 150))
    assert kept(f"f IN ({floats})", adds) == [0, 1]  # NaN (outside stats) equals no value
    assert kept(f"f IN ({listed})", files(stats("f", 160.0, 170.0))) == []
    assert kept(f"f IN ({floats}, 'NaN')", adds) == [0, 1, 2]


def test_column_mapping_reads_stats_by_physical_name() -> None:
    field = {
        "name": "i",
        "type": "long",
        "nullable": True,
        "metadata": {"delta.columnMapping.physicalName": "col-1"},
    }
    parsed = parse_file_predicates("I = 5", {"p": "string"}, {"i": field})
    adds = files(stats("col-1", 0, 9), stats("col-1", 10, 19), stats("i", 10, 19))
    assert parsed.evaluate(adds).to_pylist() == [True, False, True]


def test_not_equal_skips_only_constant_files() -> None:
    assert kept("i != 3", files(stats("i", 3, 3), stats("i", 3, 4))) == [1]
    assert kept("NOT (i = 3)", files(stats("i", 3, 3), stats("i", 3, 4))) == [1]


def test_missing_or_unreadable_stats_keep_the_file() -> None:
    adds = files(
        None,
        "",
        {"numRecords": 3},
        stats("s", "a", "b"),  # stats of another column
        stats("i", 100, 200),
    )
    assert kept("i = 1", adds) == [0, 1, 2, 3]
    # stats of `i` that do not parse: that file has no stats for `i`, the others still do
    bad = '{"numRecords": 3, "minValues": {"i": "x", "s": "a"}, "maxValues": {"i": 1, "s": "b"}}'
    adds = files(bad, stats("i", 100, 200), stats("s", "c", "d"), "{not json", stats("i", 7, 8))
    assert kept("i = 1", adds) == [0, 2, 3]
    assert kept("i = 1 AND s = 'a'", adds) == [0, 3]
    many = files(*[bad if n % 3 == 0 else stats("i", 100, 200) for n in range(3000)])
    assert sum(parse_file_predicates("i = 1", {}, COLUMNS).evaluate(many).to_pylist()) >= 1000
    assert kept("i = 1", files()) == []


def test_null_counts() -> None:
    adds = files(stats("i", 0, 10, nulls=0), stats("i", 0, 10, nulls=4), stats("i", None, None, 10))
    assert kept("i IS NULL", adds) == [1, 2]
    assert kept("i IS NOT NULL", adds) == [0, 1]
    assert kept("NOT (i IS NULL)", adds) == [0, 1]
    assert kept("i < 100", adds) == [0, 1]  # an all-NULL column matches no comparison
    assert kept("i <=> NULL", adds) == [1, 2]
    assert kept("NOT (i <=> 5)", adds) == [0, 1, 2]


def test_truncated_string_max_never_excludes() -> None:
    prefix = "a" * 32
    delta_spark = stats("s", prefix, prefix + "\U0010ffff")  # tie-breaker appended
    plain = stats("s", prefix, prefix)  # truncated to a prefix
    deltalake = stats("s", prefix, "a" * 31 + "b")  # last character incremented
    adds = files(delta_spark, plain, deltalake, stats("s", "ba", "bc"))
    assert kept(f"s = '{prefix}zzz'", adds) == [0, 1, 2]
    assert kept(f"s > '{prefix}zzz'", adds) == [0, 1, 2, 3]
    assert kept("s < 'a'", adds) == []
    assert kept("s = 'bb'", adds) == [3]
    assert kept("s = 'ca'", adds) == []  # "bc" may be "b" + more, never "c..."
    assert kept("s = 'bd'", files(stats("s", "ba", "bc"))) == [0]


def test_nan_keeps_the_file_when_nan_could_match() -> None:
    nan_max = '{"numRecords":2,"minValues":{"f":0.0},"maxValues":{"f":NaN},"nullCount":{"f":0}}'
    adds = files(stats("f", 0.0, 1.0), nan_max, '{"minValues":{"f":NaN}}')
    assert kept("f = 5", adds) == [1, 2]
    assert kept("f < -1", adds) == [1, 2]
    assert kept("f > 5", adds) == [0, 1, 2]  # a writer may leave NaN out of max
    assert kept("f = 'NaN'", adds) == [0, 1, 2]


def test_timestamps_are_widened_by_a_millisecond() -> None:
    adds = files(stats("ts", "2024-01-01T00:00:00.000Z", "2024-01-01T00:00:00.123Z"))
    assert kept("ts > TIMESTAMP '2024-01-01 00:00:00.123999'", adds) == [0]
    assert kept("ts > TIMESTAMP '2024-01-01 00:00:00.124001'", adds) == []
    assert kept("ts < TIMESTAMP '2023-12-31 23:59:59.999'", adds) == []
    ntz = files(stats("ntz", "2024-01-01 00:00:00", "2024-01-01 00:00:00.5"))
    assert kept("ntz >= '2024-01-01 00:00:00.5005'", ntz) == [0]
    assert kept("ntz >= '2024-01-01 00:00:00.502'", ntz) == []


def test_dates_booleans_and_decimals() -> None:
    adds = files(stats("d", "2024-01-01", "2024-01-31"), stats("d", "2024-02-01", "2024-02-02"))
    assert kept("d = '2024-02-01'", adds) == [1]
    assert kept("d < TIMESTAMP '2024-01-02 00:00:00'", adds) == [0]
    assert kept("b", files(stats("b", False, False), stats("b", False, True))) == [1]
    assert kept("NOT b", files(stats("b", True, True), stats("b", False, True))) == [1]
    assert kept("dec > 100", files(stats("dec", 1.0, 2.0))) == [0]  # no min/max for decimals


# --------------------------------------------------------------------------- differential

_BASE = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
_LONG = "a" * 70
_STRINGS = ["", "a", "ab", "b", "ba", _LONG, _LONG + "b", _LONG[:-1] + "b", "a" * 64]
_FLOATS = [-1.0, 0.0, 1.5, 2.0, math.nan]
_MICROS = [0, 1, 999, 1000, 1001, 1999, 2500, 123456]

values = {
    "i": st.one_of(st.none(), st.integers(-3, 3)),
    "f": st.one_of(st.none(), st.sampled_from(_FLOATS)),
    "s": st.one_of(st.none(), st.sampled_from(_STRINGS)),
    "ts": st.one_of(st.none(), st.sampled_from(_MICROS)),
}
literals = {
    "i": st.integers(-4, 4).map(str),
    "f": st.sampled_from([*_FLOATS[:-1], 1.0, 3.0]).map(repr) | st.just("'NaN'"),
    "s": st.sampled_from([*_STRINGS, _LONG + "a", "a" * 65, "c"]).map(lambda s: f"'{s}'"),
    "ts": st.sampled_from([*_MICROS, 998, 1002, 2000]).map(
        lambda us: f"TIMESTAMP '{(_BASE + dt.timedelta(microseconds=us)).isoformat()}'"
    ),
}


@st.composite
def atoms(draw: st.DrawFn) -> str:
    column = draw(st.sampled_from(sorted(values)))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "in", "in", "null", "between"]))
    literal = literals[column]
    if kind == "cmp":
        op = draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "<=>"]))
        return f"{column} {op} {draw(literal)}"
    if kind == "in":  # above 64 values, IN takes its vectorised path
        items = draw(st.lists(literal, min_size=1, max_size=3) | st.lists(literal, min_size=65))
        negated = draw(st.sampled_from(["", "NOT "]))
        return f"{column} {negated}IN ({', '.join(items)})"
    if kind == "null":
        return f"{column} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    low, high = draw(literal), draw(literal)
    return f"{column} BETWEEN {low} AND {high}"


predicates = st.recursive(
    atoms(),
    lambda inner: st.one_of(
        inner.map(lambda p: f"NOT ({p})"),
        st.tuples(inner, st.sampled_from(["AND", "OR"]), inner).map(
            lambda t: f"({t[0]}) {t[1]} ({t[2]})"
        ),
    ),
    max_leaves=3,
)

rows = st.fixed_dictionaries(values)
tables = st.lists(
    st.tuples(st.lists(rows, min_size=1, max_size=5), st.booleans()), min_size=2, max_size=4
)
SCHEMA = pa.schema(
    [("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("ts", pa.timestamp("us", "UTC"))]
)


def write(path: Path, table: list[tuple[list[dict[str, Any]], bool]]) -> None:
    """One deltalake append per file; a file whose flag is False loses its stats."""
    from deltalake import write_deltalake

    for version, (records, keep_stats) in enumerate(table):
        data = {name: [r[name] for r in records] for name in SCHEMA.names}
        data["ts"] = [
            None if us is None else _BASE + dt.timedelta(microseconds=us) for us in data["ts"]
        ]
        write_deltalake(str(path), pa.table(data, schema=SCHEMA), mode="append")
        if not keep_stats:
            commit = path / "_delta_log" / f"{version:020d}.json"
            actions = [json.loads(line) for line in commit.read_text().splitlines()]
            for action in actions:
                action.get("add", {}).pop("stats", None)
            commit.write_text("".join(json.dumps(a) + "\n" for a in actions))


def file_columns(path: Path) -> dict[str, tuple[dict[str, pa.Array], int]]:
    """The data of each active file: its columns and row count, by path."""
    found = {}
    for add in DeltaLog.for_table(str(path)).update().all_files():
        data = pq.read_table(path / add.path)
        columns = {name: data.column(name).combine_chunks() for name in data.column_names}
        columns["ts"] = columns["ts"].cast(pa.timestamp("us", "UTC"))
        found[add.path] = (columns, data.num_rows)
    return found


def matching_paths(data: dict[str, tuple[dict[str, pa.Array], int]], predicate: str) -> set[str]:
    """The files holding a row for which `predicate` is TRUE (Spark's semantics)."""
    parsed = PartitionPredicate.parse(predicate, {n: COLUMNS[n] for n in SCHEMA.names})
    return {p for p, (columns, n) in data.items() if parsed.evaluate_rows(columns, n).any()}


@settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(table=tables, checked=st.lists(predicates, min_size=10, max_size=10))
def test_skipping_never_drops_a_matching_file(
    tmp_path_factory: pytest.TempPathFactory, table: Any, checked: list[str]
) -> None:
    path = tmp_path_factory.mktemp("skip")
    write(path, table)
    data = file_columns(path)
    txn = DeltaLog.for_table(str(path)).start_transaction()
    for predicate in checked:
        kept_paths = set(pc.struct_field(txn.filter_files_arrow(predicate), "path").to_pylist())
        assert matching_paths(data, predicate) <= kept_paths, predicate


def test_deltalake_agrees_and_a_selective_predicate_prunes(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    write(
        tmp_path,
        [
            ([{"i": n * 10 + k, "f": 1.0, "s": "x", "ts": 0} for k in range(3)], True)
            for n in range(10)
        ],
    )
    txn = DeltaLog.for_table(str(tmp_path)).start_transaction()
    kept_files = txn.filter_files("i = 52")
    assert len(kept_files) == 1
    expected = DeltaTable(str(tmp_path)).to_pyarrow_table(filters=[("i", "=", 52)])
    data = pa.concat_tables(pq.read_table(tmp_path / f.path) for f in kept_files)
    assert data.filter(pc.equal(data["i"], 52)).num_rows == expected.num_rows == 1


def test_long_in_lists_prune_files_between_the_values() -> None:
    """More than 64 values: a file is kept only when one of them lies within its bounds, also
    when the values span every file (a range test would keep them all)."""
    adds = files(*(stats("i", 100 * n, 100 * n + 9) for n in range(10)))
    listed = ", ".join(str(100 * n + 50) for n in range(70))  # between every file's bounds
    assert kept(f"i IN ({listed}, 305)", adds) == [3]
    assert kept(f"i IN ({listed}, NULL)", adds) == []
    dates = files(stats("d", "2024-01-01", "2024-01-31"), stats("d", "2024-03-01", "2024-03-31"))
    days = ", ".join([f"DATE '2024-02-{d:02d}'" for d in range(1, 30)] * 3)
    assert kept(f"d IN ({days}, DATE '2024-03-15')", dates) == [1]
