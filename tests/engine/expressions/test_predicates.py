"""Partition predicates: typing and vectorised three-valued evaluation on AddFiles."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import CorruptLogError, InvalidPredicateError
from airflow_delta.engine.expressions.predicates import TRUE, PartitionPredicate, parse_predicates
from airflow_delta.engine.protocol.action_types import ADD_TYPE
from airflow_delta.engine.protocol.columnar import array_from_pylist
from tests.engine.expressions.predicate_helpers import COLUMNS
from tests.pandas_free import imports_pandas

SPECIAL = "it's = 'x' AND é/%20"

PARTITIONS: dict[str, dict[str, str | None] | None] = {
    "f0": {
        "date": "2024-01-01",
        "region": "eu",
        "n": "3",
        "big": "3",
        "ts": "2024-01-01 00:00:00",
        "ntz": "2024-01-01 00:00:00",
        "d": "1.50",
        "f": "0.5",
        "b": "true",
    },
    "f1": {
        "date": "2024-01-02",
        "region": "us",
        "n": "5",
        "big": "6",
        "ts": "2024-01-02T10:00:00.000000Z",
        "ntz": "2024-01-02T10:00:00.000000",
        "d": "2.00",
        "f": "-1E3",
        "b": "false",
    },
    "f2": {column: None for column in COLUMNS},
    "f3": {},
    "f4": {
        "date": "2023-12-31",
        "region": SPECIAL,
        "n": "-7",
        "big": "-7",
        "ts": "2023-12-31 23:59:59.999999",
        "ntz": "2023-12-31 23:59:59.999999",
        "d": "-0.01",
        "f": "Infinity",
        "b": "TRUE",
        "other": "ignored",
    },
    "f5": None,
}
NULLS = ["f2", "f3", "f5"]
ALL = sorted(PARTITIONS)


def add_files(partitions: dict[str, Any]) -> pa.StructArray:
    rows = [
        {
            "path": path,
            "partitionValues": values,
            "size": 1,
            "modificationTime": 0,
            "dataChange": True,
        }
        for path, values in partitions.items()
    ]
    return array_from_pylist(rows, ADD_TYPE)


FILES = add_files(PARTITIONS)


def select(
    predicate: str | list[str] | None,
    files: pa.StructArray = FILES,
    columns: dict[str, Any] = COLUMNS,
) -> list[str]:
    mask = parse_predicates(predicate, columns).evaluate(files)
    assert isinstance(mask, pa.BooleanArray)
    assert len(mask) == len(files) and mask.null_count == 0
    return sorted(files.field("path").filter(mask).to_pylist())


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("n = 3", ["f0"]),
        ("n == 3", ["f0"]),
        ("n != 3", ["f1", "f4"]),
        ("n <> 3", ["f1", "f4"]),
        ("n < 3", ["f4"]),
        ("n <= 3", ["f0", "f4"]),
        ("n > 3", ["f1"]),
        ("n >= 3", ["f0", "f1"]),
        ("3 < n", ["f1"]),
        ("n = -7", ["f4"]),
        ("n > +4", ["f1"]),
        ("n <=> 3", ["f0"]),
        ("n <=> NULL", NULLS),
        ("NULL <=> n", NULLS),
        ("n = NULL", []),
        ("n != NULL", []),
        ("n BETWEEN -7 AND 3", ["f0", "f4"]),
        ("n NOT BETWEEN -7 AND 3", ["f1"]),
        ("region = 'eu'", ["f0"]),
        ("region > 'eu'", ["f1", "f4"]),
        ("region = 'it''s = ''x'' AND é/%20'", ["f4"]),
        ("region = ''", []),
    ],
)
def test_comparisons(predicate: str, expected: list[str]) -> None:
    assert select(predicate) == expected


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("n IN (3, 5)", ["f0", "f1"]),
        ("n IN (3, NULL)", ["f0"]),
        ("n NOT IN (3)", ["f1", "f4"]),
        ("n NOT IN (3, NULL)", []),
        ("NOT n IN (3, NULL)", []),
        ("n IN (NULL)", []),
        ("n NOT IN (NULL)", []),
        ("region IN ('eu', 'it''s = ''x'' AND é/%20')", ["f0", "f4"]),
        ("n IN ('5', 4.0, -7.00)", ["f1", "f4"]),
        ("n IN (big, 100)", ["f0", "f4"]),
        ("n NOT IN (big, 100)", ["f1"]),
        ("date IN (DATE '2024-01-02', '2023-12-31')", ["f1", "f4"]),
        ("NULL IN (1, 2)", []),
        ("3 IN (1, n)", ["f0"]),
    ],
)
def test_in_lists_follow_sql_null_semantics(predicate: str, expected: list[str]) -> None:
    assert select(predicate) == expected


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("region IS NULL", NULLS),
        ("region IS NOT NULL", ["f0", "f1", "f4"]),
        ("n IS NULL AND date IS NULL", NULLS),
        ("(n > 3) IS NULL", NULLS),
        ("NULL IS NULL", ALL),
        ("3 IS NULL", []),
    ],
)
def test_is_null_and_missing_keys(predicate: str, expected: list[str]) -> None:
    assert select(predicate) == sorted(expected)


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        # NULL partitions: unknown never selects, unless OR finds a true side or NOT of false.
        ("NOT (n = 3)", ["f1", "f4"]),
        ("n = 3 OR n IS NULL", ["f0", *NULLS]),
        ("n > 100 AND region IS NULL", []),
        ("n < 100 OR region IS NULL", ALL),
        ("NOT (n > 100 AND region = 'eu')", ["f0", "f1", "f4"]),
        ("NOT (n > 100 AND region IS NOT NULL)", ALL),
        ("NOT (n < 100 OR region IS NOT NULL)", []),
        ("NULL OR TRUE", ALL),
        ("NULL AND FALSE", []),
        ("NOT NULL", []),
        # AND binds tighter than OR, NOT tighter than AND, comparison tighter than NOT.
        ("region = 'eu' OR n = 5 AND region = 'xx'", ["f0"]),
        ("(region = 'eu' OR n = 5) AND region = 'xx'", []),
        ("NOT region = 'eu' AND n = 5", ["f1"]),
        ("NOT (region = 'eu' AND n = 5)", ["f0", "f1", "f4"]),
        ("NOT NOT n = 3", ["f0"]),
        ("((n = 3))", ["f0"]),
        ("(n = 3) = (region = 'eu')", ["f0", "f1", "f4"]),
        ("n in (3) and not b or REGION = 'us'", ["f1"]),
    ],
)
def test_three_valued_logic_and_precedence(predicate: str, expected: list[str]) -> None:
    assert select(predicate) == sorted(expected)


def test_column_names_are_case_insensitive_and_may_be_backquoted() -> None:
    assert select("REGION = 'eu'") == ["f0"]
    assert select("`Region` = 'eu'") == ["f0"]
    assert select("`date` = DATE '2024-01-01'") == ["f0"]
    assert select("date = date '2024-01-01'") == ["f0"]
    columns = {"Odd Name": "string", "with`tick": "integer", "and": "string"}
    files = add_files({"a": {"Odd Name": "x", "with`tick": "1", "and": "y"}, "b": {}})
    assert select("`odd name` = 'x' AND `WITH``TICK` = 1 AND `and` = 'y'", files, columns) == ["a"]
    predicate = PartitionPredicate.parse("`ODD NAME` IS NULL OR `with``tick` > 0", columns)
    assert predicate.columns == {"Odd Name", "with`tick"}


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("date = '2024-01-01'", ["f0"]),
        ("date >= DATE '2024-01-01'", ["f0", "f1"]),
        ("date < ' 2024-01-01 '", ["f4"]),
        ("date = TIMESTAMP '2024-01-02 00:00:00'", ["f1"]),
        ("date < TIMESTAMP '2024-01-01 12:00:00'", ["f0", "f4"]),
        ("ts = TIMESTAMP '2024-01-01 00:00:00'", ["f0"]),
        ("ts = TIMESTAMP '2024-01-02T10:00:00Z'", ["f1"]),
        ("ts = '2024-01-02 12:00:00+02:00'", ["f1"]),
        ("ts = '2023-12-31 23:59:59.999999'", ["f4"]),
        ("ts > '2023-12-31T23:59:59.999998'", ["f0", "f1", "f4"]),
        ("ts = DATE '2024-01-01'", ["f0"]),
        ("ts >= '2024-01-01'", ["f0", "f1"]),
        ("ts = date", ["f0"]),
        ("ntz = TIMESTAMP '2024-01-02 10:00:00'", ["f1"]),
        ("ntz = ts", ["f0", "f1", "f4"]),
        ("ntz > date", ["f1", "f4"]),
    ],
)
def test_dates_and_timestamps(predicate: str, expected: list[str]) -> None:
    assert select(predicate) == expected


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("d = 1.5", ["f0"]),
        ("d = 1.50000", ["f0"]),
        ("d = 1.505", []),
        ("d < 1.505", ["f0", "f4"]),
        ("d = 2", ["f1"]),
        ("d = '2'", ["f1"]),
        ("d > -0.011", ["f0", "f1", "f4"]),
        ("d = 1.5e0", ["f0"]),
        ("d < 99999999999999999999999999999999999999", ["f0", "f1", "f4"]),
        ("n = 3.0", ["f0"]),
        ("n < 3.5", ["f0", "f4"]),
        ("n = '3'", ["f0"]),
        ("n < '3.5'", ["f0", "f4"]),
        ("n < 10000000000", ["f0", "f1", "f4"]),
        ("n > 2.5e0", ["f0", "f1"]),
        ("n = d", []),
        ("n < d", ["f4"]),
        ("big = n", ["f0", "f4"]),
        ("big > n", ["f1"]),
        ("big = 9223372036854775807", []),
        ("big < 9223372036854775808", ["f0", "f1", "f4"]),
        ("f = 0.5", ["f0"]),
        ("f = -1000", ["f1"]),
        ("f > 1e308", ["f4"]),
        ("f > d", ["f4"]),
        ("f = 'Infinity'", ["f4"]),
        ("b", ["f0", "f4"]),
        ("NOT b", ["f1"]),
        ("b = TRUE", ["f0", "f4"]),
        ("b = 'false'", ["f1"]),
        ("b IS NOT NULL AND b <> true", ["f1"]),
        ("b OR n = 5", ["f0", "f1", "f4"]),
    ],
)
def test_numbers_and_booleans(predicate: str, expected: list[str]) -> None:
    assert select(predicate) == expected


def test_binary_columns_compare_with_strings() -> None:
    files = add_files({"a": {"bin": "abc"}, "b": {"bin": "é"}, "c": {}})
    assert select("bin = 'é'", files, {"bin": "binary"}) == ["b"]
    assert select("bin < 'b'", files, {"bin": "binary"}) == ["a"]


def test_schema_fields_give_physical_names_for_column_mapping() -> None:
    field = {
        "name": "region",
        "type": "string",
        "nullable": True,
        "metadata": {"delta.columnMapping.physicalName": "col-5f1a"},
    }
    files = add_files({"a": {"col-5f1a": "eu"}, "b": {"region": "eu"}})
    assert select("region = 'eu'", files, {"region": field}) == ["a"]
    assert select("region = 'eu'", files, {"region": "string"}) == ["b"]


def test_lists_are_anded_and_none_selects_everything() -> None:
    assert select(["n >= 3", "region = 'us'"]) == ["f1"]
    assert select(["n >= 3"]) == ["f0", "f1"]
    assert select(None) == ALL
    assert select([]) == ALL
    combined = parse_predicates(["n >= 3", "region = 'us' OR b"], COLUMNS)
    assert combined.text == "(n >= 3) AND (region = 'us' OR b)"
    assert combined.columns == {"n", "region", "b"}
    assert select(["n >= 3", "region = 'us' OR b"]) == ["f0", "f1"]
    assert parse_predicates(None, COLUMNS) is TRUE
    with pytest.raises(InvalidPredicateError, match="'5' is not SQL text"):
        parse_predicates(["n = 1", 5], COLUMNS)  # type: ignore[list-item]


def test_matches_all_only_for_the_literal_true() -> None:
    assert TRUE.text == "true" and TRUE.matches_all() and TRUE.columns == frozenset()
    assert PartitionPredicate.parse("TRUE", COLUMNS).matches_all()
    assert parse_predicates([], COLUMNS).matches_all()
    for text in ("n = 3", "FALSE", "1 = 1", "TRUE AND TRUE"):
        assert not PartitionPredicate.parse(text, COLUMNS).matches_all()
    assert select("1 = 1") == ALL
    assert select("1 = 2") == []
    assert select("'a' < 'b'") == ALL
    assert select("FALSE") == []


def test_evaluation_edges() -> None:
    predicate = PartitionPredicate.parse("n > 3 OR region IS NULL", COLUMNS)
    assert predicate.evaluate(FILES[3:]).to_pylist() == [True, False, True]
    assert predicate.evaluate(FILES[:0]).to_pylist() == []
    assert TRUE.evaluate(FILES).to_pylist() == [True] * len(FILES)
    assert repr(predicate) == "PartitionPredicate('n > 3 OR region IS NULL')"
    bad = add_files({"a": {"n": "three"}})
    with pytest.raises(CorruptLogError, match="three"):
        predicate.evaluate(bad)


def test_a_hundred_thousand_files() -> None:
    partitions = {
        f"f{i}": {"date": f"2024-01-{i % 28 + 1:02d}", "region": ("eu", "us", None)[i % 3]}
        for i in range(100_000)
    }
    files = add_files(partitions)
    predicate = parse_predicates(
        ["date BETWEEN '2024-01-05' AND '2024-01-10'", "region IN ('eu', NULL) OR n > 3"],
        COLUMNS,
    )
    mask = predicate.evaluate(files)
    expected = sum(5 <= i % 28 + 1 <= 10 and i % 3 == 0 for i in range(100_000))
    assert mask.null_count == 0
    assert mask.true_count == expected


def test_evaluation_does_not_import_pandas() -> None:
    script = (
        "import sys\n"
        "from airflow_delta.engine.protocol.action_types import ADD_TYPE\n"
        "from airflow_delta.engine.protocol.columnar import array_from_pylist\n"
        "from airflow_delta.engine.expressions.predicates import parse_predicates\n"
        "columns = {'d': 'date', 't': 'timestamp', 'x': 'decimal(5,2)', 'f': 'double',\n"
        "           'b': 'binary', 'r': 'string'}\n"
        "files = array_from_pylist([{'path': 'a', 'partitionValues': {'d': '2024-01-01',\n"
        "    't': '2024-01-01 00:00:00', 'x': '1.00', 'f': '1', 'b': 'z', 'r': 'eu'}},\n"
        "    {'path': 'b', 'partitionValues': {}}], ADD_TYPE)\n"
        "p = parse_predicates([\"d = '2024-01-01' AND t < TIMESTAMP '2025-01-01 00:00:00'\",\n"
        "    'x IN (1, 2.5, NULL) OR f > 0.5e0 OR b = \\'z\\' OR r NOT IN (\\'us\\')',\n"
        "    'd <=> NULL OR d BETWEEN DATE \\'2023-01-01\\' AND t'], columns)\n"
        "assert p.evaluate(files).to_pylist() == [True, False]\n"
        "print('pandas' in sys.modules)\n"
    )
    assert not imports_pandas(script)


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("f = 'NaN'", [False, True, False, False]),
        ("f <=> 'NaN'", [False, True, False, False]),
        ("f != 'NaN'", [True, False, True, False]),
        ("f > 1e308", [False, True, True, False]),
        ("f < 'NaN'", [True, False, True, False]),
        ("f >= 'NaN'", [False, True, False, False]),
        ("f <= 2.5", [True, False, False, False]),
        ("f IN ('NaN')", [False, True, False, False]),
    ],
)
def test_floating_point_partitions_compare_as_spark_does(
    predicate: str, expected: list[bool]
) -> None:
    """NaN equals NaN and sorts above every other value (+inf included), as in Spark SQL; a
    null partition value never matches a comparison."""
    values = pa.array(["1.5", "NaN", "Infinity", None])
    files = pa.StructArray.from_arrays(
        [pa.MapArray.from_arrays([0, 1, 2, 3, 4], pa.array(["f"] * 4), values)],
        names=["partitionValues"],
    )
    parsed = PartitionPredicate.parse(predicate, {"f": "double"})
    assert parsed.evaluate(files).to_pylist() == expected


@pytest.mark.parametrize(
    ("text", "without_nulls", "with_a_null"),
    [
        ("n IN (1, 3)", [True, False, True], [True, False, True]),
        ("NOT n IN (1)", [False, True, True], [False, False, True]),
        ("n NOT IN (3, NULL)", [False, False, False], [False, False, False]),
        ("n IN (3, NULL)", [False, False, True], [False, False, True]),
        ("NOT (n IN (NULL))", [False, False, False], [False, False, False]),
    ],
)
def test_in_over_rows_is_unknown_only_where_sql_says(
    text: str, without_nulls: list[bool], with_a_null: list[bool]
) -> None:
    # an operand without NULLs skips the NULL pass: the answers must not change
    predicate = PartitionPredicate.parse(text, {"n": "long"})
    for values, want in (([1, 2, 3], without_nulls), ([1, None, 3], with_a_null)):
        column = pa.chunked_array([pa.array(values[:1], pa.int64()), pa.array(values[1:])])
        assert predicate.evaluate_rows({"n": column}, 3).tolist() == want


_FLOATS = st.sampled_from([0.0, -0.0, 1.5, -1.5, math.inf, -math.inf, math.nan, None])
_ITEMS = st.sampled_from(["0.0", "-0.0", "1.5", "CAST('NaN' AS DOUBLE)", "'NaN'", "NULL", "f"])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(values=st.lists(_FLOATS, min_size=1, max_size=8), items=st.lists(_ITEMS, min_size=1))
def test_in_over_floats_is_the_or_of_its_equalities(values: list[Any], items: list[str]) -> None:
    """`f IN (a, b)` answers as `f = a OR f = b` row by row (Spark: -0.0 equals 0.0, NaN equals
    NaN), whether the items are literals the list looks up or expressions."""
    column = {"f": pa.array(values, pa.float64())}
    listed = PartitionPredicate.parse(f"f IN ({', '.join(items)})", {"f": "double"})
    ored = PartitionPredicate.parse(" OR ".join(f"f = {i}" for i in items), {"f": "double"})
    got = listed.evaluate_rows(column, len(values)).tolist()
    assert got == ored.evaluate_rows(column, len(values)).tolist()
