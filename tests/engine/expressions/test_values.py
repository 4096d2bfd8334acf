"""Value expressions: what the engine refuses (the typed error callers fall back on), the
statement's clock, and predicates over computed values (exact on partitions, never pruning a
data file wrongly)."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.expressions.generated import fill_generated, parse_generated_columns
from airflow_delta.engine.expressions.parser import parse_value
from airflow_delta.engine.expressions.predicates import PartitionPredicate
from airflow_delta.engine.expressions.skipping import parse_file_predicates

COLUMNS = {"i": "integer", "s": "string", "d": "date", "m": "decimal(5,2)", "x": "double"}


@pytest.mark.parametrize(
    ("text", "position", "fragment"),
    [
        ("nope(i)", 0, "the function nope is not evaluated in process"),
        ("i + s", 2, "'+' takes numbers"),
        ("d - 1", 2, "'+' takes numbers".replace("+", "-")),
        ("m / 2", 2, "decimal '/' is not evaluated"),
        ("m % i", 2, "decimal '%' is not evaluated"),
        ("CAST(i AS varchar(3))", 10, "a type the engine does not cast to"),
        ("CAST(x AS string)", 0, "not converted to string"),
        ("CAST(d AS int)", 0, "not converted to int32"),
        ("substring(s, i)", 0, "integer literal"),
        ("round(x, -1)", 0, "round to -1 digits"),
        ("upper(s, s)", 0, "upper takes 1 arguments, not 2"),
        ("to_date(s, 'yyyy')", 0, "to_date (without a format) takes 1 arguments"),
        ("CASE WHEN i THEN 1 END", 10, "is not a boolean"),
        ("CASE WHEN i > 0 THEN 1 ELSE d END", 0, "have no common type"),
        ("if(i, 1, 2)", 0, "the first argument of if is a condition"),
        ("CAST(i AS", 9, "expected a type"),
        ("upper(s", 7, "expected ',' or ')'"),
        ("CAST(m AS decimal(38,0)) * m", 25, "beyond 38 digits"),
        ("-s", 0, "'-' takes a number"),
    ],
)
def test_what_the_engine_does_not_evaluate_is_an_invalid_predicate(
    text: str, position: int, fragment: str
) -> None:
    with pytest.raises(InvalidPredicateError) as caught:
        parse_value(text, COLUMNS)
    assert fragment in str(caught.value)
    assert caught.value.position == position


def test_current_date_and_timestamp_are_one_value_per_statement() -> None:
    now = dt.datetime(2024, 5, 6, 23, 59, 59, 999999)
    expr, used = parse_value(
        "concat(CAST(current_date() AS string), ' ', CAST(current_timestamp AS string))",
        {},
        now=now,
    )
    assert not used
    assert expr.evaluate({}).as_py() == "2024-05-06 2024-05-06 23:59:59.999999"
    first = parse_value("current_timestamp()", {})[0].evaluate({}).as_py()
    assert first.tzinfo is not None and abs(first - dt.datetime.now(dt.UTC)) < dt.timedelta(1)


def test_constant_expressions_fold_to_literals() -> None:
    expr, _ = parse_value("upper('a' || 'b') || CAST(1 + 2 AS string)", {})
    assert type(expr).__name__ == "Const" and expr.evaluate({}).as_py() == "AB3"


def test_predicates_over_computed_partition_values_are_exact() -> None:
    predicate = PartitionPredicate.parse(
        "upper(region) = 'EU' AND year(day) * 2 > 4040", {"region": "string", "day": "date"}
    )
    values = [("eu", "2024-01-01"), ("us", "2024-01-01"), ("Eu", "2019-12-31"), (None, None)]
    files = pa.StructArray.from_arrays(
        [
            pa.array(
                [[("region", r), ("day", d)] for r, d in values],
                pa.map_(pa.string(), pa.string()),
            )
        ],
        names=["partitionValues"],
    )
    assert predicate.evaluate(files).to_pylist() == [True, False, False, False]


def test_a_condition_over_a_computed_data_column_never_prunes() -> None:
    """`amount * 2 > 10` cannot be decided from min/max here: every file is kept, while the
    plain conjunct beside it still prunes."""
    predicate = parse_file_predicates(
        ["amount * 2 > 10", "upper(s) = 'X'", "amount > 100"],
        {},
        {"amount": "long", "s": "string"},
    )

    def add(low: int, high: int) -> dict[str, object]:
        stats = {
            "numRecords": 2,
            "minValues": {"amount": low, "s": "a"},
            "maxValues": {"amount": high, "s": "b"},
            "nullCount": {"amount": 0, "s": 0},
        }
        return {"partitionValues": [], "stats": json.dumps(stats)}

    files = pa.array(
        [add(0, 1), add(200, 300)],
        pa.struct([("partitionValues", pa.map_(pa.string(), pa.string())), ("stats", pa.string())]),
    )
    assert predicate.evaluate(files).to_pylist() == [False, True]
    only_computed = parse_file_predicates("amount * 2 > 10000", {}, {"amount": "long"})
    assert only_computed.evaluate(files).to_pylist() == [True, True]


def test_generated_columns_are_computed_when_not_given_and_checked_when_given() -> None:
    columns = {"ts": "timestamp", "c1": "integer", "y": "integer", "d": "date", "c2": "long"}
    generated = parse_generated_columns(
        {"y": "year(ts)", "d": "CAST(ts AS DATE)", "c2": "c1 + 1"}, columns
    )
    assert [g.columns for g in generated] == [("ts",), ("ts",), ("c1",)]
    ts = [
        dt.datetime(2024, 12, 31, 23, 59, tzinfo=dt.UTC),
        dt.datetime(1969, 12, 31, 23, 59, tzinfo=dt.UTC),
        None,
    ]
    rows = pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("us", "UTC")),
            "c1": pa.array([2**31 - 1, None, 5], pa.int32()),
            "y": pa.array([None, 1970, None], pa.int32()),  # 1970 breaks year(ts)
            "d": pa.array([None, None, dt.date(2024, 1, 1)], pa.date32()),  # NULL expected
            "c2": pa.array([None, 7, 6], pa.int64()),  # c1 + 1 is NULL for the second row
        }
    )
    filled, violations = fill_generated(rows, generated)
    assert filled.column("y").to_pylist() == [2024, 1970, None]
    days = [dt.date(2024, 12, 31), dt.date(1969, 12, 31), dt.date(2024, 1, 1)]
    assert filled.column("d").to_pylist() == days
    # int + int wraps around in Spark (ANSI off), then the CAST to the column's long
    assert filled.column("c2").to_pylist() == [-(2**31), 7, 6]
    assert {name: mask.tolist() for name, mask in violations.items()} == {
        "y": [False, True, False],
        "d": [False, False, True],
        "c2": [False, True, False],
    }


def test_generation_expressions_the_engine_does_not_evaluate_are_refused() -> None:
    with pytest.raises(InvalidPredicateError, match="the function md5 is not evaluated"):
        parse_generated_columns({"h": "md5(s)"}, {"s": "string", "h": "string"})
