"""The tokenizer: strict tokens of predicates, lenient tokens and conjuncts of any Spark SQL."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.expressions.tokens import quote_string, split_conjuncts, tokenize


def test_tokenize_strict_and_lenient() -> None:
    tokens = tokenize("`my col` IN ('a', 'it''s') AND n <=> -1.5e3")
    assert [(t.kind, t.value) for t in tokens] == [
        ("quoted", "my col"),
        ("ident", "IN"),
        ("op", "("),
        ("string", "a"),
        ("op", ","),
        ("string", "it's"),
        ("op", ")"),
        ("ident", "AND"),
        ("ident", "n"),
        ("op", "<=>"),
        ("op", "-"),
        ("number", "1.5e3"),
        ("end", ""),
    ]
    assert (tokens[3].start, tokens[3].end) == (13, 16)
    text = 't.id = "x" AND 1abc * café; \'open'
    with pytest.raises(InvalidPredicateError, match=r"unexpected character '\.'"):
        tokenize(text)
    lenient = [(t.kind, t.value) for t in tokenize(text, lenient=True)]
    assert lenient == [
        ("ident", "t"),
        ("other", "."),
        ("ident", "id"),
        ("op", "="),
        ("other", '"x"'),
        ("ident", "AND"),
        ("other", "1abc"),
        ("op", "*"),  # arithmetic is a token of the grammar
        ("ident", "caf"),
        ("other", "é"),
        ("other", ";"),
        ("other", "'"),
        ("ident", "open"),
        ("end", ""),
    ]


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ("t.id = s.id", ["t.id = s.id"]),
        ("t.id = s.id AND t.day = s.day", ["t.id = s.id", "t.day = s.day"]),
        ("(t.a = s.a AND (t.b = 1 and t.c = 2)) AND x", ["t.a = s.a", "t.b = 1", "t.c = 2", "x"]),
        ("s.v BETWEEN 1 AND 2 AND t.p = 'x'", ["s.v BETWEEN 1 AND 2", "t.p = 'x'"]),
        ("t.a = 'x AND y' AND `and` = \"b and c\"", ["t.a = 'x AND y'", '`and` = "b and c"']),
        ("(a OR b) AND (c) = d", ["a OR b", "(c) = d"]),
        ("a OR b AND c", ["a OR b", "c"]),
        ("f(a AND b) AND\nc", ["f(a AND b)", "c"]),
        ("", [""]),
    ],
)
def test_split_conjuncts(condition: str, expected: list[str]) -> None:
    assert split_conjuncts(condition) == expected


#: String literals and their values as Spark SQL 4 reads them (spark.sql("SELECT " + literal)).
SPARK_STRINGS = [
    (r"'it''s'", "it's"),
    (r"'q\'s'", "q's"),
    (r"'a\\b'", "a\\b"),
    (r"'tab\tx'", "tab\tx"),
    (r"'nl\ny'", "nl\ny"),
    (r"'x\%y'", "x\\%y"),
    (r"'x\_y'", "x\\_y"),
    (r"'u\u0041'", "uA"),
    (r"'n\zq'", "nzq"),
    (r"'o\101'", "oA"),
    (r"'nul\0'", "nul\0"),
    (r"'ctl\Z'", "ctl\x1a"),
]


@pytest.mark.parametrize(("literal", "value"), SPARK_STRINGS)
def test_string_literals_read_as_spark_reads_them(literal: str, value: str) -> None:
    assert [(t.kind, t.value) for t in tokenize(literal)] == [("string", value), ("end", "")]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20))
def test_quote_string_reads_back_as_the_value(value: str) -> None:
    """Every value quoted for SQL (partition values in a recorded predicate, replace_where)
    reads back as itself: backslashes and quotes included."""
    assert [(t.kind, t.value) for t in tokenize(quote_string(value))] == [
        ("string", value),
        ("end", ""),
    ]
