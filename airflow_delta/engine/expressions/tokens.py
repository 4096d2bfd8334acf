"""The tokenizer of SQL texts: partition predicates (strictly) and any Spark SQL (leniently).

A token is a number, an identifier, a 'string', a `backquoted` name, an operator or the end of
the text. Strict tokenizing refuses what the predicate grammar has no token for; lenient
tokenizing gives it as an "other" token, so that MERGE conditions can be split and scanned
(`split_conjuncts`) without being parsed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from airflow_delta.engine.errors import InvalidPredicateError

_TOKEN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<string>'(?:[^'\\]|\\[\s\S]|'')*')"
    r"|(?P<quoted>`(?:[^`]|``)*`)"
    r"|(?P<op><=>|<=|>=|<>|!=|==|\|\||[=<>(),+*/%-])"
)
_WORD = re.compile(r"[\w.]*")  # never fails to match

#: In lenient tokenizing, what the grammar has no token for: a double-quoted string, a word
#: of other characters, or one character (an unclosed quote, `.`, `*`, ...).
_OTHER = re.compile(r'"[^"]*"|\w+|.', re.S)

KEYWORDS = frozenset({"and", "or", "not", "in", "is", "null", "true", "false", "between"})
"""The words of the predicate grammar: a column with such a name must be backquoted."""


class Token(NamedTuple):
    """One token of a SQL text: its kind, its value and where it is (`text[start:end]`). A
    named tuple: a 2,000-value IN list is 4,000 tokens, made quickly."""

    kind: str  # number, ident, string, quoted (a backquoted name), op, other (lenient) or end
    value: str  # identifiers and strings unquoted
    start: int
    end: int


#: Spark SQL's escapes in a string literal (a backslash, then one character); any other
#: escaped character stands for itself, but `%` and `_` keep their backslash (for LIKE).
_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}
_ESCAPES |= {"%": "\\%", "_": "\\_"}
_ESCAPE = re.compile(r"''|\\(u[0-9A-Fa-f]{4}|[01][0-7]{2}|[\s\S])")


def unescape_string(body: str) -> str:
    r"""The value of a string literal's `body` (between its quotes) as Spark SQL reads it: `''`
    is a quote, and backslash escapes (`\'`, `\\`, `\n`, `\t`, `\u0041`, octal `\101`...).

    >>> unescape_string(r"it''s a\\b, c\td")
    "it's a\\b, c\td"
    """

    def one(match: re.Match[str]) -> str:
        escaped = match.group(1)
        if escaped is None:
            return "'"
        if len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        if len(escaped) == 3:
            return chr(int(escaped, 8))
        return _ESCAPES.get(escaped, escaped)

    return _ESCAPE.sub(one, body) if "'" in body or "\\" in body else body


def quote_string(value: str) -> str:
    r"""`value` as a SQL string literal this engine and Spark read back as `value`.

    >>> print(quote_string("it's a\\b"))
    'it''s a\\b'
    """
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def quote_identifier(name: str) -> str:
    """`name` as a backquoted SQL identifier (a backquote inside is doubled).

    >>> quote_identifier("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


def assigned_columns(
    names: Sequence[str], assignments: Mapping[str, str], alias: str | None = None
) -> tuple[dict[str, str], tuple[str, str] | None]:
    """`assignments` keyed by the column of `names` each key names (without regard to case,
    backquotes taken off, an `alias.` prefix dropped), and the first bad key with what is
    wrong with it ("is not a column of" or "is assigned twice in"; None: no bad key). The
    caller raises its own error."""
    by_lower = {name.lower(): name for name in names}
    prefix = f"{alias.lower()}." if alias else None
    assigned: dict[str, str] = {}
    for key, sql in assignments.items():
        name = key.strip()
        if prefix is not None and name.lower().startswith(prefix):
            name = name[len(prefix) :]
        if len(name) > 1 and name[0] == name[-1] == "`":
            name = name[1:-1].replace("``", "`")
        column = by_lower.get(name.lower())
        if column is None:
            return assigned, (key, "is not a column of")
        if column in assigned:
            return assigned, (key, "is assigned twice in")
        assigned[column] = sql
    return assigned, None


def tokenize(text: str, *, lenient: bool = False) -> list[Token]:
    """The tokens of the SQL `text` (whitespace left out), ending with an "end" token.

    Strict (the default), a character the grammar has no token for, an unclosed quote or a
    malformed number raises InvalidPredicateError. `lenient` reads any Spark SQL instead
    (MERGE conditions, for one) and gives such a piece as an "other" token: a
    double-quoted string, a word, or one character, so that `t.id` is `t`, `.` and `id`.

    >>> [(t.kind, t.value) for t in tokenize("`my col` IN ('a', 'it''s')")][:4]
    [('quoted', 'my col'), ('ident', 'IN'), ('op', '('), ('string', 'a')]
    >>> [t.value for t in tokenize("t.id = s.id", lenient=True)]
    ['t', '.', 'id', '=', 's', '.', 'id', '']
    """
    tokens = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos) or (_OTHER.match(text, pos) if lenient else None)
        if match is None:
            raise InvalidPredicateError(text, _bad_character(text[pos], pos), pos)
        kind, raw, end = match.lastgroup or "other", match.group(), match.end()
        if kind == "number" and end < len(text) and _continues_word(text[end]):
            bad = text[pos : _word_end(text, pos)]
            if not lenient:
                raise InvalidPredicateError(
                    text, f"has a malformed number '{bad}' at character {pos + 1}.", pos
                )
            kind, raw, end = "other", bad, pos + len(bad)
        if kind == "string":
            raw = unescape_string(raw[1:-1])
        elif kind == "quoted":
            raw = raw[1:-1].replace("``", "`")
        if kind != "space":
            tokens.append(Token(kind, raw, pos, end))
        pos = end
    tokens.append(Token("end", "", len(text), len(text)))
    return tokens


def split_conjuncts(condition: str) -> list[str]:
    """The top-level AND operands of a SQL condition, each without parentheses that enclose
    all of it (and split again inside them). `x BETWEEN a AND b` stays one operand, and so
    does an AND inside a string or a backquoted name. Any Spark SQL is read (leniently).

    >>> split_conjuncts("(t.id = s.id AND t.day = s.day) AND s.v BETWEEN 1 AND 2")
    ['t.id = s.id', 't.day = s.day', 's.v BETWEEN 1 AND 2']
    """
    parts, depth, start, between = [], 0, 0, False
    for token in tokenize(condition, lenient=True):
        word = token.value.lower() if token.kind in ("ident", "op") else ""
        depth += {"(": 1, ")": -1}.get(word, 0)
        if depth or word not in ("and", "between"):
            continue
        if word == "between" or between:
            between = word == "between"
            continue
        parts.append(condition[start : token.start])
        start = token.end
    parts.append(condition[start:])
    result = []
    for part in (p.strip() for p in parts):
        inner = _unwrap(part)
        result.extend(split_conjuncts(inner) if inner is not None else [part])
    return result


def _unwrap(text: str) -> str | None:
    """`text` without the parentheses that enclose all of it, or None."""
    if not text.startswith("("):
        return None
    depth = 0
    for token in tokenize(text, lenient=True):
        if token.kind == "op":
            depth += {"(": 1, ")": -1}.get(token.value, 0)
        if depth == 0:
            return text[1:-1] if token.end == len(text) else None
    return None


def _continues_word(char: str) -> bool:
    """Whether `char` would continue a word (`_WORD`: \\w or a dot) after a number."""
    return char.isalnum() or char in "_."


def _word_end(text: str, pos: int) -> int:
    """Where the run of word characters and dots that starts at `pos` ends."""
    match = _WORD.match(text, pos)
    return match.end() if match is not None else pos


def _bad_character(char: str, pos: int) -> str:
    where = f"at character {pos + 1}"
    if char == "'":
        return f"has a string literal {where} that is never closed."
    if char == "`":
        return f"has a backquoted column name {where} that is never closed."
    if char == '"':
        return (
            f"has an unexpected '\"' {where}: string literals take single quotes "
            "and column names backquotes."
        )
    return f"has an unexpected character {char!r} {where}."
