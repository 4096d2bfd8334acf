"""The parser of partition predicates: SQL text to a typed expression tree.

The grammar is the part of Spark SQL that makes sense over partition values:

    predicate  := or
    or         := and (OR and)*
    and        := not (AND not)*
    not        := NOT not | comparison
    comparison := sum [ op sum | [NOT] IN '(' sum (',' sum)* ')'
                      | [NOT] BETWEEN sum AND sum | IS [NOT] NULL ]
    op         := = | == | != | <> | < | <= | > | >= | <=>
    sum        := product (('+' | '-' | '||') product)*
    product    := unary (('*' | '/' | '%') unary)*
    unary      := '-' unary | '+' unary | operand
    operand    := column | `column` | literal | '(' or ')' | CAST '(' or AS type ')'
                | CASE [sum] (WHEN or THEN or)+ [ELSE or] END | function '(' [or (',' or)*] ')'
    literal    := 'string' | [+-]number | TRUE | FALSE | NULL | DATE 'yyyy-mm-dd'
                | TIMESTAMP 'yyyy-mm-dd hh:mm:ss[.ffffff][Z|+hh:mm]'

Keywords and column names are case-insensitive. Columns are resolved against the table's
partition columns, and both sides of each comparison converted to their common type
(`coercion`), as the parser goes: every error points at its place in the text. Value
expressions (arithmetic, CAST, CASE, functions) are typed and built by `values`; what it does not
evaluate is an InvalidPredicateError too, so that callers can fall back to Spark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import pyarrow as pa

from airflow_delta.engine.errors import InvalidPredicateError
from airflow_delta.engine.expressions import values
from airflow_delta.engine.expressions.casts import sql_type
from airflow_delta.engine.expressions.coercion import (
    EXPECTED,
    Value,
    common_type,
    describe_type,
    literal_array,
    literal_type,
    read_literal,
    read_number,
    type_family,
)
from airflow_delta.engine.expressions.tokens import KEYWORDS, Token, tokenize
from airflow_delta.engine.expressions.tree import (
    And,
    Column,
    Compare,
    Const,
    Expr,
    In,
    IsNull,
    Literal,
    Node,
    Not,
    Or,
    coerce,
)
from airflow_delta.engine.protocol.schema import arrow_type

PartitionColumns: TypeAlias = Mapping[str, str | dict[str, Any]]
"""A table's partition columns: name -> Delta type, or the column's schema field object."""

UsedColumns: TypeAlias = dict[str, tuple[str, str]]
"""The partition columns a predicate uses: name -> (partitionValues key, Delta type)."""

_SYNONYMS = {"==": "=", "<>": "!="}


def parse(
    text: str,
    partition_columns: PartitionColumns,
    data_columns: PartitionColumns | None = None,
    *,
    now: dt.datetime | None = None,
) -> tuple[Expr, UsedColumns]:
    """The boolean expression tree of the predicate `text`, and the columns it uses.

    With `data_columns` (the table's other columns, same form), the predicate may also use
    those (data skipping reads their statistics). Raises InvalidPredicateError for a syntax
    error, an unknown column, or a literal that cannot be compared with what it is compared
    with. `now` (naive UTC; the current time by default) is the statement's
    `current_timestamp()`.
    """
    return _Parser(text, partition_columns, data_columns, now=now).parse()


def parse_value(
    text: str, columns: PartitionColumns, *, now: dt.datetime | None = None
) -> tuple[Expr, UsedColumns]:
    """The expression tree of the value expression `text` over `columns` (name -> Delta type,
    or schema field), and the columns it uses: a column, a literal (typed as Spark types it:
    `5` an int, `5000000000` a long, `1.5` a decimal, `'x'` a string, `DATE '...'`, `NULL` of
    type null), a condition (a boolean, NULL when unknown), or a value expression (`values`:
    arithmetic, CAST, CASE, functions), as the right side of an UPDATE assignment. Raises
    InvalidPredicateError as `parse` does, also for what `values` does not evaluate.

    >>> parse_value("DATE '2024-01-02'", {})[0].type
    DataType(date32[day])
    """
    parser = _Parser(text, {}, columns, now=now)
    node = parser._or()
    parser._expect("end", "an operator, AND, OR or the end of the expression")
    return values.natural(node), parser.used


class _Parser:
    """A recursive-descent parser that resolves columns and types as it goes."""

    def __init__(
        self,
        text: str,
        partition_columns: PartitionColumns,
        data_columns: PartitionColumns | None = None,
        *,
        now: dt.datetime | None = None,
    ) -> None:
        self.text = text
        self.now = now or dt.datetime.now(dt.UTC).replace(tzinfo=None)
        self.data_columns = data_columns
        self.partition_columns = {**(data_columns or {}), **partition_columns}
        self.by_lower = {name.lower(): name for name in self.partition_columns}
        self.used: UsedColumns = {}
        self.tokens = tokenize(text)
        self.index = 0

    def parse(self) -> tuple[Expr, UsedColumns]:
        root = self._boolean(self._or())
        self._expect("end", "an operator, AND, OR or the end of the predicate")
        return root, self.used

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
        if token.kind == "ident" and token.value.lower() in KEYWORDS:
            found += " (backquote column names that are SQL keywords)"
        return self._error(
            f"is not valid: expected {expected} at character {token.start + 1}, found {found}.",
            token.start,
        )

    def _error(self, problem: str, position: int) -> InvalidPredicateError:
        return InvalidPredicateError(self.text, problem, position)

    # -- grammar

    def _or(self) -> Node:
        start = self._peek().start
        node = self._and()
        while self._keyword("or"):
            right = self._and()
            node = Or(self._span(start), self._boolean(node), self._boolean(right))
        return node

    def _and(self) -> Node:
        start = self._peek().start
        node = self._not()
        while self._keyword("and"):
            right = self._not()
            node = And(self._span(start), self._boolean(node), self._boolean(right))
        return node

    def _not(self) -> Node:
        start = self._peek().start
        if self._keyword("not"):
            operand = self._boolean(self._not())
            return Not(self._span(start), operand)
        return self._comparison()

    def _comparison(self) -> Node:
        start = self._peek().start
        left = self._sum()
        token = self._op("=", "==", "!=", "<>", "<", "<=", ">", ">=", "<=>")
        if token is not None:
            op = _SYNONYMS.get(token.value, token.value)
            compared, right = self._unify([left, self._sum()])
            return Compare(self._span(start), op, compared, right)
        if self._keyword("is"):
            negated = self._keyword("not") is not None
            self._expect("ident", "NULL", "null")
            return IsNull(self._span(start), coerce(left, left.type), negated)
        negated = self._keyword("not") is not None
        if self._keyword("in"):
            node = self._in(start, left)
        elif self._keyword("between"):
            node = self._between(start, left)
        elif (like := self._keyword("like", "ilike")) is not None:
            args = [values.natural(left), values.natural(self._sum())]
            call = (self._span(start), like.value.lower(), args, self.now)
            node = self._value(like.start, values.call, *call)
        elif negated:
            raise self._syntax_error("IN, BETWEEN or LIKE", self._peek())
        else:
            return left
        return Not(node.span, node) if negated else node

    def _in(self, start: int, operand: Node) -> Expr:
        self._expect("op", "'('", "(")
        items = [self._sum()]
        while self._op(","):
            items.append(self._sum())
        self._expect("op", "',' or ')'", ")")
        operand, *items = self._reinterpret_all([operand, *items])
        type_ = self._common([operand, *items])
        values = [n.value for n in items if isinstance(n, Literal) and n.value is not None]
        return In(
            self._span(start),
            coerce(operand, type_),
            literal_array(values, type_) if values else None,
            any(isinstance(n, Literal) and n.value is None for n in items),
            tuple(coerce(n, type_) for n in items if not isinstance(n, Literal)),
        )

    def _between(self, start: int, operand: Node) -> Expr:
        low = self._sum()
        self._expect("ident", "AND", "and")
        high = self._sum()
        compared, lowest, highest = self._unify([operand, low, high])
        span = self._span(start)
        return And(
            span, Compare(span, ">=", compared, lowest), Compare(span, "<=", compared, highest)
        )

    # -- value expressions

    def _value(self, position: int, build: Callable[..., Expr], *args: Any) -> Expr:
        """`build(*args)`, its ValueError (what `values` does not evaluate) reported at
        `position`."""
        try:
            return build(*args)
        except ValueError as exc:
            if isinstance(exc, InvalidPredicateError):
                raise
            raise self._error(
                f"has an expression at character {position + 1} that the "
                f"engine does not evaluate: {exc}.",
                position,
            ) from None

    def _sum(self) -> Node:
        start = self._peek().start
        node = self._product()
        while (token := self._op("+", "-", "||")) is not None:
            left, right = values.natural(node), values.natural(self._product())
            span, op = self._span(start), token.value
            if op == "||":
                node = self._value(
                    token.start, values.call, span, "concat", [left, right], self.now
                )
            else:
                node = self._value(token.start, values.arithmetic, span, op, left, right)
        return node

    def _product(self) -> Node:
        start = self._peek().start
        node = self._unary()
        while (token := self._op("*", "/", "%")) is not None:
            left, right = values.natural(node), values.natural(self._unary())
            span, op = self._span(start), token.value
            node = self._value(token.start, values.arithmetic, span, op, left, right)
        return node

    def _unary(self) -> Node:
        token = self._peek()
        if (
            token.kind == "op"
            and token.value in ("+", "-")
            and self.tokens[self.index + 1].kind != "number"
        ):
            self._next()
            operand = values.natural(self._unary())
            if token.value == "+":
                return operand
            span = self._span(token.start)
            return self._value(token.start, values.negate, span, operand)
        return self._operand()

    def _arguments(self) -> list[Expr]:
        """The arguments of a call, after its '('; the ')' consumed."""
        args: list[Expr] = []
        if self._op(")"):
            return args
        args.append(values.natural(self._or()))
        while self._op(","):
            args.append(values.natural(self._or()))
        self._expect("op", "',' or ')'", ")")
        return args

    def _call(self, name: Token) -> Expr:
        if name.value.lower() == "cast":
            return self._cast(name)
        args = self._arguments()
        span = self._span(name.start)
        return self._value(name.start, values.call, span, name.value, args, self.now)

    def _cast(self, keyword: Token) -> Expr:
        operand = values.natural(self._or())
        self._expect("ident", "AS", "as")
        first = self._expect("ident", "a type")
        depth = 0
        while self._peek().kind != "end" and (depth or self._peek().value != ")"):
            depth += {"(": 1, ")": -1}.get(self._next().value, 0)
        name = self.text[first.start : self._peek().start]
        self._expect("op", "')'", ")")
        type_ = sql_type(name)
        span = self._span(keyword.start)
        if type_ is None:
            raise self._error(
                f"casts to {name.strip()} at character {first.start + 1}, a type the engine "
                "does not cast to.",
                first.start,
            )
        return self._value(keyword.start, values.sql_cast, span, operand, type_)

    def _case(self, keyword: Token) -> Expr:
        subject = None if self._keyword("when") else values.natural(self._sum())
        if subject is not None:
            self._expect("ident", "WHEN", "when")
        branches: list[tuple[Expr, Expr]] = []
        while True:
            condition: Node = self._or()
            if subject is not None:
                condition = self._unify_compare(subject, condition)
            self._expect("ident", "THEN", "then")
            branches.append((self._boolean(condition), values.natural(self._or())))
            if not self._keyword("when"):
                break
        null = Const((keyword.start, keyword.start), pa.nulls(1, pa.null())[0])
        otherwise: Expr = values.natural(self._or()) if self._keyword("else") else null
        self._expect("ident", "WHEN, ELSE or END", "end")
        span = self._span(keyword.start)
        return self._value(keyword.start, values.case, span, branches, otherwise)

    def _unify_compare(self, subject: Expr, value: Node) -> Expr:
        """`subject = value`, for a simple CASE's WHEN."""
        compared, right = self._unify([subject, value])
        return Compare(value.span, "=", compared, right)

    def _operand(self) -> Node:
        token = self._next()
        span = (token.start, token.end)
        if token.kind == "op" and token.value == "(":
            node = self._or()
            self._expect("op", "')'", ")")
            return node
        if token.kind == "op" and token.value in ("+", "-") and self._peek().kind == "number":
            number = self._next()
            return self._literal(self._span(token.start), read_number(token.value + number.value))
        if token.kind == "number":
            return self._literal(span, read_number(token.value))
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
            if self._op("("):
                return self._call(token)
            if word == "case" and self._peek().kind not in ("op", "end"):
                return self._case(token)
            if word in ("current_date", "current_timestamp"):
                span_ = self._span(token.start)
                return self._value(token.start, values.call, span_, word, [], self.now)
            if word not in KEYWORDS:
                return self._column(token)
        raise self._syntax_error("a column, a literal or '('", token)

    def _typed_literal(self, keyword: Token, string: Token) -> Literal:
        family = keyword.value.lower()
        try:
            value = read_literal(string.value.strip(), family)
        except ValueError:
            raise self._error(
                f"has {keyword.value.upper()} '{string.value}' at character {string.start + 1},"
                f" which is not {EXPECTED[family]}.",
                string.start,
            ) from None
        return self._literal(self._span(keyword.start), value)

    def _literal(self, span: tuple[int, int], value: Value) -> Literal:
        try:
            value, type_ = literal_type(value)
        except ValueError as exc:
            raise self._error(
                f"has a literal out of range at character {span[0] + 1}: {exc}.", span[0]
            ) from None
        return Literal(span, value, type_)

    def _column(self, token: Token) -> Column:
        name = self.by_lower.get(token.value.lower())
        if name is None and self.data_columns is not None:
            listed = ", ".join(self.partition_columns) or "none"
            raise self._error(
                f"references column '{token.value}', which is not a column of this table "
                f"(columns: {listed}).",
                token.start,
            )
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
        if not isinstance(delta_type, str) or type_family(type_) in (None, "null"):
            shown = delta_type if isinstance(delta_type, str) else delta_type.get("type")
            raise self._error(
                f"references column '{name}' of type {shown}, which predicates cannot compare.",
                token.start,
            )
        self.used[name] = (key, delta_type)
        return Column((token.start, token.end), name, delta_type, type_)

    # -- types

    def _boolean(self, node: Node) -> Expr:
        """`node` as a condition: a boolean expression, or NULL (unknown)."""
        if type_family(node.type) in ("boolean", "null"):
            return coerce(node, pa.bool_())
        raise self._error(
            f"expects a condition at character {node.span[0] + 1}, but "
            f"{self._describe(node)} is not a boolean.",
            node.span[0],
        )

    def _unify(self, nodes: list[Node]) -> list[Expr]:
        """`nodes` converted to their common type, for comparing with each other."""
        nodes = self._reinterpret_all(nodes)
        type_ = self._common(nodes)
        return [coerce(n, type_) for n in nodes]

    def _reinterpret_all(self, nodes: list[Node]) -> list[Node]:
        """String literals read as the type of the other operands, when that is not a string."""
        typed = [n for n in nodes if not _is_string_literal(n)]
        type_ = self._common(typed)
        family = type_family(type_) or ""
        if family not in EXPECTED:
            return nodes
        against = next(n for n in typed if not pa.types.is_null(n.type))
        return [
            self._reinterpret(n, family, against) if isinstance(n, Literal) else n for n in nodes
        ]

    def _reinterpret(self, node: Literal, family: str, against: Node) -> Node:
        """A string literal read as a value of `family`, to be compared with `against`."""
        if not isinstance(node.value, str):
            return node
        try:
            value = read_literal(node.value.strip(), family)
        except ValueError:
            source = self.text[node.span[0] : node.span[1]]
            raise self._error(
                f"cannot compare {self._describe(against)} with {source} at character "
                f"{node.span[0] + 1}, which is not {EXPECTED[family]}.",
                node.span[0],
            ) from None
        return self._literal(node.span, value)

    def _common(self, nodes: Sequence[Node]) -> pa.DataType:
        """The type to compare `nodes` in (string when all are NULL)."""
        typed = [n for n in nodes if not pa.types.is_null(n.type)]
        if not typed:
            return pa.string()
        first, type_ = typed[0], typed[0].type
        for node in typed[1:]:
            common = common_type(type_, node.type)
            if common is None:
                raise self._error(
                    f"cannot compare {self._describe(first)} with {self._describe(node)} "
                    f"at character {node.span[0] + 1}.",
                    node.span[0],
                )
            type_ = common
        return type_

    def _describe(self, node: Node) -> str:
        source = self.text[node.span[0] : node.span[1]]
        if isinstance(node, Column):
            kind = "column" if node.name in (self.data_columns or {}) else "partition column"
            return f"{source} ({kind} of type {node.delta_type})"
        return f"{source} ({describe_type(node.type)})"


def _is_string_literal(node: Node) -> bool:
    return isinstance(node, Literal) and isinstance(node.value, str)
