"""The parser: syntax errors and type errors that point at their place in the text."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.expressions.parser import parse
from airflow_delta.engine.expressions.predicates import PartitionPredicate
from tests.engine.expressions.predicate_helpers import COLUMNS


def error(predicate: str, columns: dict[str, Any] = COLUMNS) -> InvalidPredicateError:
    with pytest.raises(InvalidPredicateError) as info:
        parse(predicate, columns)
    return info.value


def test_unknown_or_non_partition_columns_are_refused() -> None:
    exc = error("x = 1 AND n = 2")
    assert str(exc).splitlines()[0] == (
        "Predicate 'x = 1 AND n = 2' references column 'x', which is not a partition column "
        "of this table (partition columns: date, region, n, big, ts, ntz, d, f, b). Only "
        "partition columns can be used to select files."
    )
    assert exc.position == 0
    assert "partition columns: none" in str(error("value > 1", {}))
    assert error("n = 1 AND other = 'x'").position == 10
    assert isinstance(exc, ValueError)


@pytest.mark.parametrize(
    ("predicate", "position", "fragment"),
    [
        ("n = = 1", 4, "expected a column, a literal or '(' at character 5, found '='"),
        ("n = 1 AND", 9, "found the end of the predicate"),
        ("", 0, "found the end of the predicate"),
        ("n = 1)", 5, "expected an operator, AND, OR or the end of the predicate"),
        ("(n = 1", 6, "expected ')'"),
        ("n IN ()", 6, "found ')'"),
        ("n IN (1 2)", 8, "expected ',' or ')'"),
        ("n NOT = 3", 6, "expected IN, BETWEEN or LIKE"),
        ("n IS 3", 5, "expected NULL"),
        ("n BETWEEN 1 OR 2", 12, "expected AND"),
        ("and = 1", 0, "backquote column names that are SQL keywords"),
        ("region = 'eu", 9, "string literal at character 10 that is never closed"),
        ("`region = 'eu'", 0, "backquoted column name at character 1 that is never closed"),
        ('region = "eu"', 9, "string literals take single quotes"),
        ("n = 1; DROP TABLE t", 5, "unexpected character ';'"),
        ("n = 1abc", 4, "malformed number '1abc'"),
        ("n = 1.2.3", 4, "malformed number '1.2.3'"),
        ("n = to_date(1)", 4, "does not evaluate"),
        ("n = upper(zz)", 10, "not a partition column"),
    ],
)
def test_syntax_errors_point_at_the_problem(predicate: str, position: int, fragment: str) -> None:
    exc = error(predicate)
    assert exc.position == position
    message = str(exc)
    assert message.startswith(f"Predicate '{predicate}' ")
    assert fragment in message
    assert message.splitlines()[-1] == "  " + " " * position + "^"


@pytest.mark.parametrize(
    ("predicate", "position", "fragment"),
    [
        ("date = 5", 7, "cannot compare date (partition column of type date) with 5 (an integer)"),
        ("date = 'yesterday'", 7, "'yesterday' at character 8, which is not a date"),
        ("date = '2024-01-01 10:00:00'", 7, "which is not a date"),
        ("n = 'abc'", 4, "cannot compare n (partition column of type integer) with 'abc'"),
        ("n IN (1, 'x')", 9, "which is not a number"),
        ("b = 'yes'", 4, "which is not a boolean"),
        ("ts < 'noon'", 5, "which is not a timestamp"),
        ("region = 1", 9, "cannot compare region (partition column of type string) with 1"),
        ("region = n", 9, "with n (partition column of type integer)"),
        ("ts > 5.5", 5, "with 5.5 (a decimal)"),
        ("b = 1", 4, "with 1 (an integer)"),
        ("date = DATE '2024-13-01'", 12, "DATE '2024-13-01' at character 13, which is not a date"),
        ("ts = TIMESTAMP 'soon'", 15, "which is not a timestamp"),
        ("n", 0, "expects a condition at character 1, but n (partition column of type integer)"),
        ("n = 1 AND 'x'", 10, "but 'x' (a string) is not a boolean"),
        ("NOT region", 4, "is not a boolean"),
        ("n = 1" + "0" * 39, 4, "more than 38 digits"),
    ],
)
def test_type_errors_name_both_sides(predicate: str, position: int, fragment: str) -> None:
    exc = error(predicate)
    assert fragment in str(exc)
    assert exc.position == position


def test_partition_columns_of_unsupported_types_are_refused() -> None:
    columns = {"s": {"type": "struct", "fields": []}, "v": "void"}
    assert "type struct, which predicates cannot compare" in str(error("s IS NULL", columns))
    assert "type void" in str(error("v IS NULL", columns))


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("s LIKE 'ab%'", [True, False, False, False]),
        ("s NOT LIKE 'ab%'", [False, True, True, False]),  # NULL LIKE ... is NULL: not kept
        ("s ILIKE 'AB_'", [True, True, False, False]),
        ("s LIKE 'a\\\\%c'", [False, False, True, False]),
        ("s LIKE NULL", [False, False, False, False]),
    ],
)
def test_like_and_ilike(where: str, expected: list[bool]) -> None:
    column = pa.chunked_array([pa.array(["abc", "ABD", "a%c", None])])
    predicate = PartitionPredicate.parse(where, {"s": "string"})
    assert predicate.evaluate_rows({"s": column}, 4).tolist() == expected


def test_a_like_pattern_other_engines_would_read_otherwise_is_refused() -> None:
    with pytest.raises(InvalidPredicateError, match="escapes a character other than % or _"):
        PartitionPredicate.parse("s LIKE 'a\\\\qc'", {"s": "string"})
    with pytest.raises(InvalidPredicateError, match="string literal pattern only"):
        PartitionPredicate.parse("s LIKE s", {"s": "string"})
