"""What the Spark MERGE learns of its source (`spark/merge_source.py`): the facts of a source
Spark broadcasts come from its join columns collected to the driver, and must equal those of
the aggregate job a larger source gets; whether its join keys are unique decides whether
findTouchedFiles groups its matches by target row."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

from airflow_delta.engine.commands.merge import MAX_PRUNING_VALUES
from airflow_delta.spark.merge_source import SourceFacts

BROADCASTS = "spark.sql.autoBroadcastJoinThreshold"
SCHEMA = pa.schema(
    [
        ("i", pa.int32()),
        ("s", pa.string()),
        ("d", pa.decimal128(10, 2)),
        ("day", pa.date32()),
        ("b", pa.bool_()),
        ("x", pa.binary()),
    ]
)
#: (column, Delta type) of each column the facts are asked about.
COLUMNS = [
    ("i", "integer"),
    ("s", "string"),
    ("d", "decimal(10,2)"),
    ("day", "date"),
    ("b", "boolean"),
    ("x", "binary"),
]

ROWS = st.lists(
    st.tuples(
        st.none() | st.integers(-3, 3),
        st.none() | st.sampled_from(["", "a", "b", "é", "z"]),
        st.none() | st.decimals(-5, 5, places=2, allow_nan=False),
        st.none() | st.dates(dt.date(1999, 12, 30), dt.date(2000, 1, 3)),
        st.none() | st.booleans(),
        st.none() | st.sampled_from([b"", b"\x00", b"\xff", b"a"]),
    ),
    max_size=30,
)


@contextmanager
def broadcasts(spark: SparkSession, on: bool) -> Iterator[None]:
    previous = spark.conf.get(BROADCASTS)
    spark.conf.set(BROADCASTS, "10485760" if on else "-1")
    try:
        yield
    finally:
        spark.conf.set(BROADCASTS, previous)


def frame(spark: SparkSession, rows: list[tuple], schema: pa.Schema) -> DataFrame:
    """A source of Arrow data: Spark knows its size, so it broadcasts it when allowed (rows
    given as Python objects have no size estimate: Spark never broadcasts them)."""
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return spark.createDataFrame(pa.table(columns, schema=schema))


def facts(df: DataFrame, broadcast: bool) -> dict[str, Any]:
    """Every answer SourceFacts gives about `df`'s columns, with or without Spark's
    broadcasts (the collected or the aggregate way)."""
    spark = df.sparkSession
    with broadcasts(spark, broadcast):
        found = SourceFacts(df, {key: key[0] in ("b", "day") for key in COLUMNS})
        answers: dict[str, Any] = {}
        for name, kind in COLUMNS:
            values = normalized(found.values(name, kind))
            answers[name] = (
                normalized(found.bounds(name, kind)),
                found.many(name, kind),
                None if values is None else sorted((v for v in values if v is not None), key=repr),
            )
        answers["rows"] = found.rows()
        answers["unique"] = found.unique(["i", "s"])
    return answers


def normalized(value: Any) -> Any:
    """Binary values as bytes (Spark's rows hold bytearray, Arrow's bytes)."""
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, tuple):
        return tuple(normalized(v) for v in value)
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=ROWS)
def test_collected_facts_equal_the_aggregate(spark: SparkSession, rows: list[tuple]) -> None:
    """Bounds, counts and distinct values agree both ways, NULLs, the empty string, bytes
    above 0x7f and a non-ASCII string included."""
    df = frame(spark, rows, SCHEMA)
    collected, aggregated = facts(df, True), facts(df, False)
    for name, _ in COLUMNS:
        assert collected[name] == aggregated[name], name
    assert collected["rows"] == aggregated["rows"] == len(rows)
    keys = [(i, s) for i, s, *_ in rows if i is not None and s is not None]
    assert collected["unique"] == (len(set(keys)) == len(keys))
    assert aggregated["unique"] is False  # not known without the collected keys


def test_binary_values_are_the_same_bytes(spark: SparkSession) -> None:
    data = [(b"\xff",), (b"",), (None,), (b"\xff",)]
    df = frame(spark, data, pa.schema([("x", pa.binary())]))
    answers = []
    for broadcast in (True, False):
        with broadcasts(spark, broadcast):
            found = SourceFacts(df, {("x", "binary"): False})
            values = found.values("x", "binary") or []
            listed = sorted(bytes(v) for v in values if v is not None)
            answers.append((normalized(found.bounds("x", "binary")), listed))
    assert answers[0] == answers[1] == ((b"", b"\xff"), [b"", b"\xff"])


@pytest.mark.parametrize(
    ("rows", "keys", "unique"),
    [
        ([(1, "a"), (2, "a"), (None, "a"), (None, "a")], ["i"], True),  # NULLs never match
        ([(1, "a"), (1, "b")], ["i"], False),
        ([(1, "a"), (1, "b")], ["i", "s"], True),
        ([(1, "a"), (1, "a"), (1, None)], ["I", "S"], False),  # names as the condition has them
    ],
)
def test_unique_keys(spark: SparkSession, rows: list[tuple], keys: list[str], unique: bool):
    """Whether no target row can match two source rows on equalities of `keys`."""
    df = frame(spark, rows, pa.schema([("i", pa.int32()), ("s", pa.string())]))
    columns = {("i", "integer"): False, ("s", "string"): False}
    with broadcasts(spark, True):
        found = SourceFacts(df, columns)
        assert found.rows() == len(rows)
        assert found.unique(keys) is unique


def test_a_double_key_is_not_collected(spark: SparkSession) -> None:
    """NaN and signed zeros compare otherwise in Arrow than in Spark: a source with a double
    join column gets the aggregate (its bounds as Spark orders them, NaN greatest), and its
    keys are not known to be unique."""
    rows = [(1, float("nan")), (2, -0.0), (3, 0.0)]
    df = frame(spark, rows, pa.schema([("i", pa.int32()), ("f", pa.float64())]))
    with broadcasts(spark, True):
        found = SourceFacts(df, {("i", "integer"): False, ("f", "double"): False})
        bounds = found.bounds("f", "double")
        assert bounds is not None and bounds[0] == 0.0 and bounds[1] != bounds[1]  # NaN
        assert found.bounds("i", "integer") == (1, 3)
        assert found.unique(["i", "f"]) is False


def test_a_key_of_another_type_than_its_target_column_is_not_known_unique(
    spark: SparkSession,
) -> None:
    """`t.id = s.id` with a string source and a long target casts: '1' and '01' match the same
    target row, so distinct strings prove nothing; such a column is not collected."""
    df = frame(spark, [("1",), ("01",)], pa.schema([("id", pa.string())]))
    with broadcasts(spark, True):
        found = SourceFacts(df, {("id", "long"): False})
        assert found.bounds("id", "long") is None
        assert found.unique(["id"]) is False


def test_many_distinct_values_are_counted_exactly(spark: SparkSession) -> None:
    """Collected, a column with one value more than MAX_PRUNING_VALUES is `many` (listing only
    MAX_PRUNING_VALUES + 1 of them); one with MAX_PRUNING_VALUES lists them all."""
    for count, many in ((MAX_PRUNING_VALUES + 1, True), (MAX_PRUNING_VALUES, False)):
        df = spark.range(count).union(spark.range(0, 1))
        with broadcasts(spark, True):
            found = SourceFacts(df, {("id", "long"): False})
            assert found.many("id", "long") is many
            values = found.values("id", "long") or []
            assert len(values) == min(count, MAX_PRUNING_VALUES + 1)
            assert found.bounds("id", "long") == (0, count - 1)
            assert found.rows() == count + 1
            assert found.unique(["id"]) is False  # 0 twice


def test_the_keys_of_a_source_that_changes_at_each_read_are_not_known_unique(
    spark: SparkSession,
) -> None:
    """A source of `rand()` gives other rows at each evaluation: keys unique when collected may
    repeat in the search's join, so uniqueness is never taken from one read of it (the MERGE
    then still checks for target rows matched twice)."""
    source = frame(spark, [(i,) for i in range(20)], pa.schema([("i", pa.int32())]))
    changing = source.selectExpr("CAST(i + floor(rand() * 2) AS INT) AS i")
    with broadcasts(spark, True):
        assert SourceFacts(source, {("i", "integer"): False}).unique(["i"]) is True
        found = SourceFacts(changing, {("i", "integer"): False})
        assert found.unique(["i"]) is False
        assert found.rows() == 20
