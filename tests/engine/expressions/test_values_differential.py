"""Value expressions (arithmetic, CAST, CASE, functions) against Spark SQL with ANSI mode off.

Hypothesis draws small tables with NULLs, extreme and negative numbers, zero divisors, edge
dates and timestamps, unicode and number- or date-like strings; each expression of a group is
evaluated by the engine (`parse_value`) and by Spark on the same rows, and both the values and
the result type must be the same. A second test composes random arithmetic. Timestamps are
compared as microseconds since the epoch (`unix_micros`), in Spark's session time zone UTC.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.expressions.parser import parse_value

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

COLUMNS = {
    "i": "integer",
    "l": "long",
    "x": "double",
    "m": "decimal(5,2)",
    "s": "string",
    "d": "date",
    "ts": "timestamp",
    "b": "boolean",
}
ARROW = {
    "i": pa.int32(),
    "l": pa.int64(),
    "x": pa.float64(),
    "m": pa.decimal128(5, 2),
    "s": pa.string(),
    "d": pa.date32(),
    "ts": pa.timestamp("us", tz="UTC"),
    "b": pa.bool_(),
}
SPARK_TYPES = "i int, l bigint, x double, m decimal(5,2), s string, d date, ts timestamp, b boolean"
_UTC = dt.UTC
_STRINGS = [
    "", "ab", " ab ", "Ünï", "日本語", "😀x", "12", " 7 ", "-3.9", "+5", "1e3", "NaN", "inf",
    "2024-02-29", "2024-02-30", "2024-1-5 3:04:05.123", "2024", "2024-13-01", "true", "No",
    "9999999999", "0001-01-01 00:00:00",
]  # fmt: skip
_DATES = ["0001-01-01", "1969-12-31", "1970-01-01", "2024-02-29", "9999-12-31"]
_MICROS = [0, -1, 1_700_000_000_123_456, -62_135_596_800_000_000, 253_402_300_799_999_999]

values = {
    "i": st.sampled_from([-(2**31), 2**31 - 1, 0, -1, 1, 2, 7, -7]),
    "l": st.sampled_from([-(2**63), 2**63 - 1, 0, -5, 3, 10**12]),
    "x": st.sampled_from([0.0, -0.0, 1.005, -2.5, 2.5, 2.675, 1e20, -1e-7, math.nan, math.inf]),
    "m": st.sampled_from(["0.00", "-1.25", "1.25", "999.99", "-999.99", "2.50"]).map(
        decimal.Decimal
    ),
    "s": st.sampled_from(_STRINGS),
    "d": st.sampled_from(
        ["0001-01-01", "1969-12-31", "1970-01-01", "2024-02-29", "9999-12-31"]
    ).map(dt.date.fromisoformat),
    "ts": st.sampled_from(_MICROS).map(
        lambda us: dt.datetime(1970, 1, 1, tzinfo=_UTC) + dt.timedelta(microseconds=us)
    ),
    "b": st.booleans(),
}
ROWS = st.lists(
    st.fixed_dictionaries({k: st.none() | v for k, v in values.items()}), min_size=4, max_size=12
)

GROUPS = {
    "arithmetic": [
        "i + 1", "i - l", "i * i", "l * 3", "-i", "-l", "i / 0", "i / i", "l / 7", "x / 0",
        "x / x", "i % 3", "l % i", "x % 2", "x % 0", "i + x", "m + 1", "m * m", "m - i",
        "m + 1.25", "-m", "i * 2.5", "abs(i)", "abs(l)", "abs(x)", "abs(m)", "i + 2147483647",
        "l + 1", "l * l", "- -i", "i * 2 > 10", "(i + 1) % -2",
    ],
    "casts": [
        "CAST(s AS int)", "CAST(s AS bigint)", "CAST(s AS double)", "CAST(s AS date)",
        "CAST(s AS timestamp)", "CAST(s AS boolean)", "CAST(s AS tinyint)", "CAST(i AS string)",
        "CAST(l AS string)", "CAST(m AS string)", "CAST(d AS string)", "CAST(ts AS string)",
        "CAST(b AS string)", "CAST(x AS int)", "CAST(x AS bigint)", "CAST(x AS smallint)",
        "CAST(l AS int)", "CAST(i AS tinyint)", "CAST(ts AS date)", "CAST(d AS timestamp)",
        "CAST(i AS decimal(5,2))", "CAST(m AS decimal(3,1))", "CAST(m AS double)",
        "CAST(x AS boolean)", "CAST(i AS boolean)", "CAST(b AS int)", "CAST(x AS float)",
        "CAST(NULL AS int)", "CAST(l AS decimal(20,0))", "to_date(s)",
    ],
    "conditionals": [
        "CASE WHEN i > 0 THEN s WHEN i < 0 THEN 'neg' ELSE NULL END",
        "CASE i WHEN 1 THEN 'one' WHEN 2 THEN 'two' ELSE s END",
        "CASE WHEN b THEN m END", "CASE WHEN x > 1 THEN 1 ELSE 2.5 END",
        "coalesce(i, l)", "coalesce(s, 'none')", "coalesce(x, i)", "coalesce(d, ts)",
        "if(b, i, l)", "if(i > 0, s, CAST(d AS string))", "nvl(m, i)", "ifnull(s, i)",
        "if(NULL, 1, 2)", "coalesce(i, 'x')", "coalesce(NULL, NULL)", "-NULL", "NULL + NULL",
        "abs(NULL)", "floor(NULL)", "1.5 * NULL",
    ],
    "functions": [
        "year(ts)", "month(ts)", "day(ts)", "hour(ts)", "year(d)", "month(d)",
        "dayofmonth(d)", "hour(d)", "to_date(ts)", "year(s)", "upper(s)", "lower(s)",
        "trim(s)", "length(s)", "substring(s, 2)", "substring(s, 0, 2)", "substr(s, -2)",
        "substr(s, -5, 3)", "substring(s, 2, -1)", "substr(s, 1, 1)", "concat(s, '-', i)",
        "concat(s, s)", "concat_ws('/', s, i, d)", "concat_ws(s, 'a', 'b')", "round(x)",
        "round(x, 2)", "round(m, 1)", "round(i, 2)", "round(m)", "floor(x)", "ceil(x)",
        "floor(m)", "ceil(l)", "s || 'x'", "upper(s) = 'AB'", "year(ts) = 2024",
        "length(s) BETWEEN 1 AND 3", "i + 1 IN (0, 2)", "round(1.005, 2)",
        "floor(floor(m))", "ceil(round(m))", "floor(CAST(i AS decimal(10, 0)))", "round(round(m))",
        "m + -(0)", "m * -(12)", "m + CAST(5 AS int)", "m + -5", "m - 100",
    ],
}  # fmt: skip


@pytest.fixture
def sql(spark: Any) -> Iterator[Any]:
    """The Spark session with ANSI mode off (Spark 4 turns it on by default)."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    yield spark
    spark.conf.set("spark.sql.ansi.enabled", before)


_SPARK_NAMES = {"int32": "int", "int64": "bigint", "int8": "tinyint", "int16": "smallint"}


def spark_type_name(type_: pa.DataType) -> str:
    """The Spark type name of an Arrow type, as `DataType.simpleString` shows it."""
    if pa.types.is_decimal(type_):
        return f"decimal({type_.precision},{type_.scale})"
    if pa.types.is_timestamp(type_):
        return "timestamp" if type_.tz else "timestamp_ntz"
    names = {"double": "double", "float": "float", "string": "string", "date32[day]": "date"}
    names |= {"bool": "boolean", "null": "void", **_SPARK_NAMES}
    return names[str(type_)]


def engine(expression: str, rows: Sequence[dict[str, Any]]) -> tuple[pa.DataType, list[Any]]:
    expr, used = parse_value(expression, COLUMNS)
    arrays = {c: pa.array([r[c] for r in rows], ARROW[c]) for c in used}
    result = expr.evaluate(arrays)
    if isinstance(result, pa.Scalar):
        result = pa.array([result.as_py()] * len(rows), result.type)
    if pa.types.is_timestamp(result.type):
        result = result.cast(pa.int64())
    return expr.type, result.to_pylist()


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b) and type(a) is type(b)


def differences(
    sql: Any, expressions: Sequence[str], rows: list[dict[str, Any]]
) -> list[tuple[str, Any, Any]]:
    """The expressions whose type or values on `rows` differ between the engine and Spark:
    (expression, ours, Spark's)."""
    frame = sql.createDataFrame([tuple(r[c] for c in COLUMNS) for r in rows], SPARK_TYPES)
    wanted = {e: engine(e, rows) for e in expressions}
    spark_types = [f.dataType.simpleString() for f in frame.selectExpr(*expressions).schema]
    selected = [
        f"unix_micros({e})" if spark_type_name(wanted[e][0]).startswith("timestamp") else e
        for e in expressions
    ]
    got = frame.selectExpr(*selected).collect()
    found = []
    for index, expression in enumerate(expressions):
        type_, ours = wanted[expression]
        theirs = [row[index] for row in got]
        if spark_type_name(type_) != spark_types[index]:
            found.append((expression, spark_type_name(type_), spark_types[index]))
        elif not all(map(same, ours, theirs)):
            found.append((expression, ours, theirs))
    return found


@pytest.mark.parametrize("group", sorted(GROUPS))
@settings(
    max_examples=3,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=ROWS)
def test_expressions_evaluate_as_spark_does(
    sql: Any, group: str, rows: list[dict[str, Any]]
) -> None:
    assert differences(sql, GROUPS[group], rows) == [], rows


_LEAVES = ["i", "l", "x", "m", "0", "1", "-3", "2.5", "NULL", "1e2"]
arithmetic = st.recursive(
    st.sampled_from(_LEAVES),
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*", "/", "%"]), inner).map(
            lambda t: f"({t[0]} {t[1]} {t[2]})"
        ),
        inner.map(lambda e: f"-({e})"),
        st.tuples(st.sampled_from(["abs", "floor", "ceil", "round"]), inner).map(
            lambda t: f"{t[0]}({t[1]})"
        ),
        st.tuples(inner, inner).map(lambda t: f"coalesce({t[0]}, {t[1]})"),
    ),
    max_leaves=4,
)


@settings(
    max_examples=6,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(rows=ROWS, expressions=st.lists(arithmetic, min_size=4, max_size=8, unique=True))
def test_composed_arithmetic_evaluates_as_spark_does(
    sql: Any, rows: list[dict[str, Any]], expressions: list[str]
) -> None:
    """What the engine evaluates equals Spark's; what it refuses (decimal division, a decimal
    beyond 38 digits) is an InvalidPredicateError."""
    evaluated = []
    for expression in expressions:
        try:
            parse_value(expression, COLUMNS)
        except InvalidPredicateError as exc:
            assert "does not evaluate" in str(exc)
            continue
        evaluated.append(expression)
    if evaluated:
        assert differences(sql, evaluated, rows) == [], rows
