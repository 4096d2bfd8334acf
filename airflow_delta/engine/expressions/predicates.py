"""Partition predicates: SQL boolean expressions over partition columns, evaluated on AddFiles.

`OptimisticTransaction.filter_files` selects files with a predicate such as
`date >= '2024-01-01' AND region IN ('eu', 'us')`, and the conflict checker evaluates the same
predicate on the files that concurrent commits added. The grammar is the part of Spark SQL that
makes sense over partition values:

    predicate  := or
    or         := and (OR and)*
    and        := not (AND not)*
    not        := NOT not | comparison
    comparison := operand [ op operand | [NOT] IN '(' operand (',' operand)* ')'
                          | [NOT] BETWEEN operand AND operand | IS [NOT] NULL ]
    op         := = | == | != | <> | < | <= | > | >= | <=>
    operand    := column | `column` | literal | '(' or ')'
    literal    := 'string' | [+-]number | TRUE | FALSE | NULL | DATE 'yyyy-mm-dd'
                | TIMESTAMP 'yyyy-mm-dd hh:mm:ss[.ffffff][Z|+hh:mm]'

Keywords and column names are case-insensitive. Both sides of a comparison are converted to a
common type as Spark does: integers widen to long, mixed integers and decimals to a decimal that
holds both, anything with a float to double, a date compared with a timestamp to a timestamp; a
string literal compared with a number, boolean, date or timestamp is read as one. A timestamp
literal without a zone is UTC. Evaluation uses SQL's three-valued logic, and a file is selected
when the predicate is true for its partition: unknown (NULL) does not select it.

Evaluation is vectorised with pyarrow compute: each referenced column is looked up in
`partitionValues` once and typed by `schema.partition_values_to_arrow`. Literals become arrow
scalars through `columnar` and raw buffers, never through pyarrow's pandas shim.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.protocol import columnar
from airflow_delta.engine.protocol.schema import arrow_type, partition_values_to_arrow

# --------------------------------------------------------------------------- tokens

_TOKEN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<number>(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<string>'(?:[^']|'')*')"
    r"|(?P<quoted>`(?:[^`]|``)*`)"
    r"|(?P<op><=>|<=|>=|<>|!=|==|[=<>(),+-])"
)
_WORD = re.compile(r"[\w.]*")  # never fails to match
_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "null", "true", "false", "between"})
_COMPARISONS: dict[str, Callable[..., pa.Array | pa.Scalar]] = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
_SYNONYMS = {"==": "=", "<>": "!="}


#: In lenient tokenizing, what the grammar has no token for: a double-quoted string, a word
#: of other characters, or one character (an unclosed quote, `.`, `*`, ...).
_OTHER = re.compile(r'"[^"]*"|\w+|.', re.S)


@dataclass(frozen=True)
class Token:
    """One token of a SQL text: its kind, its value and where it is (`text[start:end]`)."""

    kind: str  # number, ident, string, quoted (a backquoted name), op, other (lenient) or end
    value: str  # identifiers and strings unquoted
    start: int
    end: int


def quote_identifier(name: str) -> str:
    """`name` as a backquoted SQL identifier (a backquote inside is doubled).

    >>> quote_identifier("a`b")
    '`a``b`'
    """
    return "`" + name.replace("`", "``") + "`"


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
        if kind == "number" and _WORD.match(text, end).end() > end:
            bad = text[pos : _WORD.match(text, pos).end()]
            if not lenient:
                raise InvalidPredicateError(
                    text, f"has a malformed number '{bad}' at character {pos + 1}.", pos
                )
            kind, raw, end = "other", bad, pos + len(bad)
        if kind in ("string", "quoted"):
            raw = raw[1:-1].replace(raw[0] * 2, raw[0])
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


# --------------------------------------------------------------------------- types

_NUMERIC = frozenset({"integer", "floating", "decimal"})
_TEMPORAL = frozenset({"date", "timestamp", "timestamp_ntz"})
_INTEGER_DIGITS = {8: 3, 16: 5, 32: 10, 64: 19}  # decimal precision of each integer width
_MAX_PRECISION = 38
_LONG = pa.int64()
_DOUBLE = pa.float64()
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_TIMESTAMP_NTZ = pa.timestamp("us")
_EPOCH = dt.datetime(1970, 1, 1)
_DESCRIPTIONS = {
    "integer": "an integer",
    "floating": "a floating-point number",
    "decimal": "a decimal",
    "boolean": "a boolean",
    "date": "a date",
    "timestamp": "a timestamp",
    "timestamp_ntz": "a timestamp without time zone",
    "string": "a string",
    "binary": "binary",
    "null": "NULL",
}
_EXPECTED = {
    "integer": "a number",
    "floating": "a number",
    "decimal": "a number",
    "boolean": "a boolean (true or false)",
    "date": "a date (yyyy-mm-dd)",
    "timestamp": "a timestamp (yyyy-mm-dd hh:mm:ss[.ffffff][Z|+hh:mm])",
    "timestamp_ntz": "a timestamp (yyyy-mm-dd hh:mm:ss[.ffffff][Z|+hh:mm])",
}


def _family(t: pa.DataType) -> str | None:
    """The kind of values of a type, as far as comparisons are concerned."""
    checks = {
        "integer": pa.types.is_integer,
        "floating": pa.types.is_floating,
        "decimal": pa.types.is_decimal,
        "boolean": pa.types.is_boolean,
        "date": pa.types.is_date,
        "string": pa.types.is_string,
        "binary": pa.types.is_binary,
        "null": pa.types.is_null,
    }
    for family, check in checks.items():
        if check(t):
            return family
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    return None


def _decimal_shape(t: pa.DataType) -> tuple[int, int]:
    """(precision, scale) of a decimal or integer type."""
    if pa.types.is_integer(t):
        return _INTEGER_DIGITS[t.bit_width], 0
    return t.precision, t.scale


def _common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both sides of a comparison are converted to, None if they cannot be compared."""
    if a.equals(b) or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    families = {_family(a), _family(b)}
    if families <= _NUMERIC:
        if "floating" in families:
            return _DOUBLE
        if families == {"integer"}:
            return _LONG
        (precision_a, scale_a), (precision_b, scale_b) = _decimal_shape(a), _decimal_shape(b)
        scale = max(scale_a, scale_b)
        precision = max(precision_a - scale_a, precision_b - scale_b) + scale
        return pa.decimal128(precision, scale) if precision <= _MAX_PRECISION else _DOUBLE
    if families <= _TEMPORAL:
        return _TIMESTAMP_NTZ if "timestamp_ntz" in families else _TIMESTAMP
    if families == {"string", "binary"}:
        return pa.binary()
    return None


Value = None | bool | int | decimal.Decimal | float | str | dt.date | dt.datetime
"""The Python value of a literal; timestamps are naive datetimes in UTC."""


def _literal_type(value: Value) -> tuple[Value, pa.DataType]:
    """A literal's value and natural type: Spark's, with decimals over 38 digits as doubles."""
    if value is None:
        return value, pa.null()
    if isinstance(value, bool):
        return value, pa.bool_()
    if isinstance(value, int):
        if -(2**63) <= value < 2**63:
            return value, _LONG
        if len(str(abs(value))) <= _MAX_PRECISION:
            return value, pa.decimal128(_MAX_PRECISION, 0)
        raise ValueError(f"the integer {value} has more than {_MAX_PRECISION} digits")
    if isinstance(value, decimal.Decimal):
        _sign, digits, exponent = value.as_tuple()
        scale = max(0, -int(exponent))
        precision = max(len(digits) + max(0, int(exponent)), scale, 1)
        if precision > _MAX_PRECISION:
            return float(value), _DOUBLE
        return value, pa.decimal128(precision, scale)
    if isinstance(value, float):
        return value, _DOUBLE
    if isinstance(value, str):
        return value, pa.string()
    if isinstance(value, dt.datetime):
        return value, _TIMESTAMP
    return value, pa.date32()


_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)")
_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][+-]?[0-9]+|(?i:inf|infinity|nan))")


def _number(text: str) -> int | decimal.Decimal | float:
    """The value of a number as Spark reads it: integer, decimal, or double with an exponent."""
    if _INTEGER.fullmatch(text):
        return int(text)
    if _DECIMAL.fullmatch(text):
        return decimal.Decimal(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    raise ValueError(f"{text!r} is not a number")


def _timestamp(text: str) -> dt.datetime:
    """A timestamp literal as a naive UTC datetime; without a zone it is UTC already."""
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value


def _unscaled(value: int | decimal.Decimal, scale: int) -> int:
    """The integer holding `value` at `scale` (which is at least the value's own scale)."""
    if isinstance(value, int):
        return value * 10**scale
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits))) * 10 ** (int(exponent) + scale)
    return -unscaled if sign else unscaled


def _micros(value: dt.date) -> int:
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    return (value - _EPOCH) // dt.timedelta(microseconds=1)


def _fixed_width(type_: pa.DataType, data: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])


def _array(values: Sequence[Value], type_: pa.DataType) -> pa.Array:
    """A `type_` array of non-null literal values that `_common_type` said fit it."""
    if pa.types.is_binary(type_):
        return columnar.array_from_pylist(values, pa.string()).cast(type_)
    if pa.types.is_floating(type_):
        return _fixed_width(type_, np.array([float(v) for v in values], dtype=np.float64))
    if pa.types.is_decimal(type_):
        data = b"".join(
            _unscaled(v, type_.scale).to_bytes(16, "little", signed=True) for v in values
        )
        return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(data)])
    if pa.types.is_date(type_):
        days = [(v - _EPOCH.date()).days for v in values]
        return _fixed_width(type_, np.array(days, dtype=np.int32))
    if pa.types.is_timestamp(type_):
        return _fixed_width(type_, np.array([_micros(v) for v in values], dtype=np.int64))
    return columnar.array_from_pylist(values, type_)


def _scalar(value: Value, type_: pa.DataType) -> pa.Scalar:
    return pa.nulls(1, type_)[0] if value is None else _array([value], type_)[0]


_FALSE = columnar.scalar(False, pa.bool_())
_UNKNOWN = columnar.scalar(None, pa.bool_())


# --------------------------------------------------------------------------- expression tree

Columns = Mapping[str, pa.Array]
Result = pa.Array | pa.Scalar


@dataclass(frozen=True)
class _Column:
    span: tuple[int, int]
    name: str
    delta_type: str
    type: pa.DataType

    def evaluate(self, columns: Columns) -> Result:
        return columns[self.name]


@dataclass(frozen=True)
class _Literal:
    """A literal as parsed; every consumer turns it into a `_Const` of the type it needs."""

    span: tuple[int, int]
    value: Value
    type: pa.DataType


@dataclass(frozen=True)
class _Const:
    span: tuple[int, int]
    scalar: pa.Scalar

    @property
    def type(self) -> pa.DataType:
        return self.scalar.type

    def evaluate(self, columns: Columns) -> Result:
        return self.scalar


@dataclass(frozen=True)
class _Cast:
    span: tuple[int, int]
    operand: _Node
    type: pa.DataType

    def evaluate(self, columns: Columns) -> Result:
        return self.operand.evaluate(columns).cast(self.type)


@dataclass(frozen=True)
class _Compare:
    span: tuple[int, int]
    op: str
    left: _Node
    right: _Node
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        left, right = self.left.evaluate(columns), self.right.evaluate(columns)
        if self.op == "<=>":
            both_valid = pc.and_(pc.is_valid(left), pc.is_valid(right))
            both_null = pc.and_(pc.is_null(left), pc.is_null(right))
            return pc.if_else(both_valid, _compare("=", left, right), both_null)
        return _compare(self.op, left, right)


def _is_nan(value: Result) -> Result:
    return pc.is_nan(value) if pa.types.is_floating(value.type) else _FALSE


def _compare(op: str, left: Result, right: Result) -> Result:
    """`left op right` as Spark SQL compares: for floating point, NaN equals NaN and is above
    every other value (so a partition `c = 'NaN'` matches NaN partition values)."""
    if not (pa.types.is_floating(left.type) or pa.types.is_floating(right.type)):
        return _COMPARISONS[op](left, right)
    left_nan, right_nan = _is_nan(left), _is_nan(right)
    if op in ("=", "!="):
        equal = pc.or_(pc.equal(left, right), pc.and_(left_nan, right_nan))
        return equal if op == "=" else pc.invert(equal)
    if op == "<":
        return pc.or_(pc.less(left, right), pc.and_(pc.invert(left_nan), right_nan))
    if op == "<=":
        return pc.or_(pc.less_equal(left, right), right_nan)
    if op == ">":
        return pc.or_(pc.greater(left, right), pc.and_(left_nan, pc.invert(right_nan)))
    return pc.or_(pc.greater_equal(left, right), left_nan)


@dataclass(frozen=True)
class _In:
    span: tuple[int, int]
    operand: _Node
    value_set: pa.Array | None  # the non-null literals of the list
    has_null: bool  # whether the list holds a NULL literal
    others: tuple[_Node, ...]  # the items that are not literals
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        operand = self.operand.evaluate(columns)
        result = _UNKNOWN if self.has_null else _FALSE
        if self.value_set is not None:
            result = pc.or_kleene(pc.is_in(operand, value_set=self.value_set), result)
        for other in self.others:
            result = pc.or_kleene(result, pc.equal(operand, other.evaluate(columns)))
        return pc.if_else(pc.is_null(operand), _UNKNOWN, result)


@dataclass(frozen=True)
class _IsNull:
    span: tuple[int, int]
    operand: _Node
    negated: bool
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        value = self.operand.evaluate(columns)
        return pc.is_valid(value) if self.negated else pc.is_null(value)


@dataclass(frozen=True)
class _And:
    span: tuple[int, int]
    left: _Node
    right: _Node
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        return pc.and_kleene(self.left.evaluate(columns), self.right.evaluate(columns))


@dataclass(frozen=True)
class _Or:
    span: tuple[int, int]
    left: _Node
    right: _Node
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        return pc.or_kleene(self.left.evaluate(columns), self.right.evaluate(columns))


@dataclass(frozen=True)
class _Not:
    span: tuple[int, int]
    operand: _Node
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        return pc.invert(self.operand.evaluate(columns))


_Node = _Column | _Literal | _Const | _Cast | _Compare | _In | _IsNull | _And | _Or | _Not


def _is_string_literal(node: _Node) -> bool:
    return isinstance(node, _Literal) and isinstance(node.value, str)


def _coerce(node: _Node, type_: pa.DataType) -> _Node:
    """`node` evaluating to `type_`, which `_common_type` chose for it."""
    if isinstance(node, _Literal):
        return _Const(node.span, _scalar(node.value, type_))
    if node.type.equals(type_):
        return node
    return _Cast(node.span, node, type_)


# --------------------------------------------------------------------------- parser


class _Parser:
    """A recursive-descent parser that resolves columns and types as it goes."""

    def __init__(self, text: str, partition_columns: Mapping[str, str | dict]) -> None:
        self.text = text
        self.partition_columns = partition_columns
        self.by_lower = {name.lower(): name for name in partition_columns}
        self.used: dict[str, tuple[str, str]] = {}  # name -> (partitionValues key, Delta type)
        self.tokens = tokenize(text)
        self.index = 0

    def parse(self) -> PartitionPredicate:
        root = self._boolean(self._or())
        self._expect("end", "an operator, AND, OR or the end of the predicate")
        return PartitionPredicate(self.text, root, self.used)

    # -- token helpers

    def _peek(self) -> Token:
        return self.tokens[self.index]

    def _next(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def _keyword(self, *words: str) -> Token | None:
        """The next token if it is one of the keywords `words`, consumed."""
        token = self._peek()
        if token.kind == "ident" and token.value.lower() in words:
            return self._next()
        return None

    def _op(self, *ops: str) -> Token | None:
        token = self._peek()
        if token.kind == "op" and token.value in ops:
            return self._next()
        return None

    def _expect(self, kind: str, expected: str, value: str | None = None) -> Token:
        token = self._peek()
        matches = token.kind == kind and (value is None or token.value.lower() == value)
        if not matches:
            raise self._syntax_error(expected, token)
        return self._next()

    def _span(self, start: int) -> tuple[int, int]:
        return start, self.tokens[self.index - 1].end

    def _syntax_error(self, expected: str, token: Token) -> InvalidPredicateError:
        found = (
            "the end of the predicate"
            if token.kind == "end"
            else f"'{self.text[token.start : token.end]}'"
        )
        if token.kind == "ident" and token.value.lower() in _KEYWORDS:
            found += " (backquote column names that are SQL keywords)"
        return self._error(
            f"is not valid: expected {expected} at character {token.start + 1}, found {found}.",
            token.start,
        )

    def _error(self, problem: str, position: int) -> InvalidPredicateError:
        return InvalidPredicateError(self.text, problem, position)

    # -- grammar

    def _or(self) -> _Node:
        start = self._peek().start
        node = self._and()
        while self._keyword("or"):
            right = self._and()
            node = _Or(self._span(start), self._boolean(node), self._boolean(right))
        return node

    def _and(self) -> _Node:
        start = self._peek().start
        node = self._not()
        while self._keyword("and"):
            right = self._not()
            node = _And(self._span(start), self._boolean(node), self._boolean(right))
        return node

    def _not(self) -> _Node:
        start = self._peek().start
        if self._keyword("not"):
            operand = self._boolean(self._not())
            return _Not(self._span(start), operand)
        return self._comparison()

    def _comparison(self) -> _Node:
        start = self._peek().start
        left = self._operand()
        token = self._op("=", "==", "!=", "<>", "<", "<=", ">", ">=", "<=>")
        if token is not None:
            op = _SYNONYMS.get(token.value, token.value)
            left, right = self._unify([left, self._operand()])
            return _Compare(self._span(start), op, left, right)
        if self._keyword("is"):
            negated = self._keyword("not") is not None
            self._expect("ident", "NULL", "null")
            return _IsNull(self._span(start), _coerce(left, left.type), negated)
        negated = self._keyword("not") is not None
        if self._keyword("in"):
            node = self._in(start, left)
        elif self._keyword("between"):
            node = self._between(start, left)
        elif negated:
            raise self._syntax_error("IN or BETWEEN", self._peek())
        else:
            return left
        return _Not(node.span, node) if negated else node

    def _in(self, start: int, operand: _Node) -> _Node:
        self._expect("op", "'('", "(")
        items = [self._operand()]
        while self._op(","):
            items.append(self._operand())
        self._expect("op", "',' or ')'", ")")
        operand, *items = self._reinterpret_all([operand, *items])
        type_ = self._common([operand, *items])
        values = [n.value for n in items if isinstance(n, _Literal) and n.value is not None]
        return _In(
            self._span(start),
            _coerce(operand, type_),
            _array(values, type_) if values else None,
            any(isinstance(n, _Literal) and n.value is None for n in items),
            tuple(_coerce(n, type_) for n in items if not isinstance(n, _Literal)),
        )

    def _between(self, start: int, operand: _Node) -> _Node:
        low = self._operand()
        self._expect("ident", "AND", "and")
        high = self._operand()
        operand, low, high = self._unify([operand, low, high])
        span = self._span(start)
        return _And(span, _Compare(span, ">=", operand, low), _Compare(span, "<=", operand, high))

    def _operand(self) -> _Node:
        token = self._next()
        span = (token.start, token.end)
        if token.kind == "op" and token.value == "(":
            node = self._or()
            self._expect("op", "')'", ")")
            return node
        if token.kind == "op" and token.value in ("+", "-") and self._peek().kind == "number":
            number = self._next()
            return self._literal(self._span(token.start), _number(token.value + number.value))
        if token.kind == "number":
            return self._literal(span, _number(token.value))
        if token.kind == "string":
            return self._literal(span, token.value)
        if token.kind == "quoted":
            return self._column(token)
        if token.kind == "ident":
            word = token.value.lower()
            if word in ("true", "false", "null"):
                return self._literal(span, {"true": True, "false": False, "null": None}[word])
            if word in ("date", "timestamp") and self._peek().kind == "string":
                return self._typed_literal(token, self._next())
            if word not in _KEYWORDS:
                return self._column(token)
        raise self._syntax_error("a column, a literal or '('", token)

    def _typed_literal(self, keyword: Token, string: Token) -> _Literal:
        family = keyword.value.lower()
        try:
            if family == "date":
                value: Value = dt.date.fromisoformat(string.value.strip())
            else:
                value = _timestamp(string.value.strip())
        except ValueError:
            raise self._error(
                f"has {keyword.value.upper()} '{string.value}' at character {string.start + 1},"
                f" which is not {_EXPECTED[family]}.",
                string.start,
            ) from None
        return self._literal(self._span(keyword.start), value)

    def _literal(self, span: tuple[int, int], value: Value) -> _Literal:
        try:
            value, type_ = _literal_type(value)
        except ValueError as exc:
            raise self._error(
                f"has a literal out of range at character {span[0] + 1}: {exc}.", span[0]
            ) from None
        return _Literal(span, value, type_)

    def _column(self, token: Token) -> _Column:
        name = self.by_lower.get(token.value.lower())
        if name is None:
            listed = ", ".join(self.partition_columns) or "none"
            raise self._error(
                f"references column '{token.value}', which is not a partition column of this "
                f"table (partition columns: {listed}). Only partition columns can be used to "
                "select files.",
                token.start,
            )
        spec = self.partition_columns[name]
        key, delta_type = name, spec
        if isinstance(spec, dict) and "name" in spec:  # a schema field: mind column mapping
            key = spec.get("metadata", {}).get("delta.columnMapping.physicalName", name)
            delta_type = spec["type"]
        type_ = arrow_type(delta_type)
        if not isinstance(delta_type, str) or _family(type_) in (None, "null"):
            shown = delta_type if isinstance(delta_type, str) else delta_type.get("type")
            raise self._error(
                f"references column '{name}' of type {shown}, which predicates cannot compare.",
                token.start,
            )
        self.used[name] = (key, delta_type)
        return _Column((token.start, token.end), name, delta_type, type_)

    # -- types

    def _boolean(self, node: _Node) -> _Node:
        """`node` as a condition: a boolean expression, or NULL (unknown)."""
        if _family(node.type) in ("boolean", "null"):
            return _coerce(node, pa.bool_())
        raise self._error(
            f"expects a condition at character {node.span[0] + 1}, but "
            f"{self._describe(node)} is not a boolean.",
            node.span[0],
        )

    def _unify(self, nodes: list[_Node]) -> list[_Node]:
        """`nodes` converted to their common type, for comparing with each other."""
        nodes = self._reinterpret_all(nodes)
        type_ = self._common(nodes)
        return [_coerce(n, type_) for n in nodes]

    def _reinterpret_all(self, nodes: list[_Node]) -> list[_Node]:
        """String literals read as the type of the other operands, when that is not a string."""
        typed = [n for n in nodes if not _is_string_literal(n)]
        type_ = self._common(typed)
        family = _family(type_) or ""
        if family not in _EXPECTED:
            return nodes
        against = next(n for n in typed if not pa.types.is_null(n.type))
        return [
            self._reinterpret(n, family, against) if isinstance(n, _Literal) else n for n in nodes
        ]

    def _reinterpret(self, node: _Literal, family: str, against: _Node) -> _Node:
        """A string literal read as a value of `family`, to be compared with `against`."""
        if not isinstance(node.value, str):
            return node
        text = node.value.strip()
        try:
            if family in _NUMERIC:
                value: Value = _number(text)
            elif family == "boolean":
                value = {"true": True, "false": False}[text.lower()]
            elif family == "date":
                value = dt.date.fromisoformat(text)
            else:
                value = _timestamp(text)
        except (ValueError, KeyError):
            source = self.text[node.span[0] : node.span[1]]
            raise self._error(
                f"cannot compare {self._describe(against)} with {source} at character "
                f"{node.span[0] + 1}, which is not {_EXPECTED[family]}.",
                node.span[0],
            ) from None
        return self._literal(node.span, value)

    def _common(self, nodes: Sequence[_Node]) -> pa.DataType:
        """The type to compare `nodes` in (string when all are NULL)."""
        type_: pa.DataType = pa.null()
        first: _Node | None = None
        for node in nodes:
            common = _common_type(type_, node.type)
            if common is None:
                raise self._error(
                    f"cannot compare {self._describe(first)} with {self._describe(node)} "
                    f"at character {node.span[0] + 1}.",
                    node.span[0],
                )
            if first is None and not pa.types.is_null(node.type):
                first = node
            type_ = common
        return pa.string() if pa.types.is_null(type_) else type_

    def _describe(self, node: _Node) -> str:
        source = self.text[node.span[0] : node.span[1]]
        if isinstance(node, _Column):
            return f"{source} (partition column of type {node.delta_type})"
        family = _family(node.type)
        return f"{source} ({_DESCRIPTIONS.get(family or '', str(node.type))})"


# --------------------------------------------------------------------------- public API


class PartitionPredicate:
    """A parsed SQL boolean expression over partition columns."""

    def __init__(self, text: str, root: _Node, used: Mapping[str, tuple[str, str]]) -> None:
        self.text = text
        self._root = root
        self._used = dict(used)  # name -> (partitionValues key, Delta type)
        self.columns: frozenset[str] = frozenset(self._used)

    @classmethod
    def parse(cls, text: str, partition_columns: Mapping[str, str | dict]) -> PartitionPredicate:
        """Parse `text` for a table with `partition_columns` (name -> Delta type).

        A value may also be the column's schema field object (with `name`, `type` and
        `metadata`), so that a column-mapped table's physical names key `partitionValues`.
        Raises InvalidPredicateError for a syntax error, a column that is not a partition
        column, or a literal that cannot be compared with what it is compared with.
        """
        return _Parser(text, partition_columns).parse()

    @classmethod
    def all_of(cls, predicates: Sequence[PartitionPredicate]) -> PartitionPredicate:
        """The AND of `predicates` (TRUE when there are none)."""
        if not predicates:
            return TRUE
        if len(predicates) == 1:
            return predicates[0]
        text = " AND ".join(f"({p.text})" for p in predicates)
        root = predicates[0]._root
        used = dict(predicates[0]._used)
        for predicate in predicates[1:]:
            root = _And((0, len(text)), root, predicate._root)
            used.update(predicate._used)
        return cls(text, root, used)

    def evaluate(self, files: pa.StructArray) -> pa.BooleanArray:
        """For each file (ADD_TYPE-shaped), whether its partition may satisfy the predicate.

        Only `partitionValues` is read; a missing key is null. Unknown (NULL) counts as False,
        as in a SQL WHERE clause. Raises CorruptLogError for a malformed partition value.
        """
        columns = {}
        if self._used:
            values = pc.struct_field(files, "partitionValues")
            for name, (key, delta_type) in self._used.items():
                raw = pc.map_lookup(values, columnar.scalar(key, pa.string()), "first")
                columns[name] = partition_values_to_arrow(raw, delta_type)
        result = self._root.evaluate(columns)
        if isinstance(result, pa.Scalar):
            return columnar.bool_mask(np.full(len(files), result.as_py() is True))
        return pc.fill_null(result, _FALSE)

    def evaluate_rows(
        self, columns: Mapping[str, pa.Array | pa.ChunkedArray], rows: int
    ) -> np.ndarray:
        """For each of `rows` rows, whether the predicate is true (NULL counts as False), given
        the values of the columns it uses (`columns`: name -> array of the column's type)."""
        result = self._root.evaluate(dict(columns))
        if isinstance(result, pa.Scalar):
            return np.full(rows, result.as_py() is True)
        return pc.fill_null(result, _FALSE).to_numpy(zero_copy_only=False)

    def matches_all(self) -> bool:
        """Whether this is the literal TRUE, which selects the whole table."""
        root = self._root
        return isinstance(root, _Const) and root.scalar.as_py() is True

    def __repr__(self) -> str:
        return f"PartitionPredicate({self.text!r})"


TRUE = PartitionPredicate("true", _Const((0, 4), columnar.scalar(True, pa.bool_())), {})
"""The predicate that selects every file."""


def parse_predicates(
    predicate: str | Sequence[str] | None, partition_columns: Mapping[str, str | dict]
) -> PartitionPredicate:
    """One predicate from None (TRUE), a SQL text, or a list of texts (their AND)."""
    if predicate is None:
        return TRUE
    if isinstance(predicate, str):
        return PartitionPredicate.parse(predicate, partition_columns)
    for item in predicate:
        if not isinstance(item, str):
            raise TypeError(f"a predicate must be a SQL string, got {item!r}")
    return PartitionPredicate.all_of(
        [PartitionPredicate.parse(p, partition_columns) for p in predicate]
    )
