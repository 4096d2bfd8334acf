"""The expression tree of a parsed predicate, and its vectorised evaluation over Arrow.

Every node knows its Arrow type and evaluates, with pyarrow compute, to an array (one value per
row) or a scalar (the same for every row), given the arrays of the columns it references.
Evaluation uses SQL's three-valued logic: a comparison with NULL is unknown (null), AND and OR
are Kleene's. Floating-point comparisons follow Spark: NaN equals NaN and is above every other
value.

Value expressions (arithmetic, CAST, CASE, functions) are `Apply` nodes: a function of their
arguments' values, typed by `values`.

The parser builds `Literal` nodes, which have no type of their own yet; `coerce` turns each into
a `Const` of the type it is compared in, so that the finished tree (an `Expr`) holds none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.expressions.coercion import Value, literal_scalar
from airflow_delta.engine.protocol import columnar

Columns: TypeAlias = Mapping[str, pa.Array]
"""The arrays of the columns an expression references, by column name."""

Result: TypeAlias = pa.Array | pa.Scalar
"""What an expression evaluates to: one value per row, or one value for all rows."""

_FALSE = columnar.scalar(False, pa.bool_())
_UNKNOWN = columnar.scalar(None, pa.bool_())
_ZERO = columnar.scalar(0, pa.int8())  # a scalar: a Python number argument loads pandas
_COMPARISONS: dict[str, Callable[..., Result]] = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


@dataclass(frozen=True)
class Column:
    """A partition column, with its Delta type and the Arrow type of its values."""

    span: tuple[int, int]
    name: str
    delta_type: str
    type: pa.DataType

    def evaluate(self, columns: Columns) -> Result:
        return columns[self.name]


@dataclass(frozen=True)
class Literal:
    """A literal as parsed; every consumer turns it into a `Const` of the type it needs."""

    span: tuple[int, int]
    value: Value
    type: pa.DataType


@dataclass(frozen=True)
class Const:
    """A literal of the type it is compared in, or a folded constant. `literal`: written as a
    literal in the expression (Spark types the decimal of an integer literal by its digits)."""

    span: tuple[int, int]
    scalar: pa.Scalar
    literal: bool = False

    @property
    def type(self) -> pa.DataType:
        return self.scalar.type

    def evaluate(self, columns: Columns) -> Result:
        return self.scalar


@dataclass(frozen=True)
class Cast:
    """An expression converted to the type it is compared in."""

    span: tuple[int, int]
    operand: Expr
    type: pa.DataType

    def evaluate(self, columns: Columns) -> Result:
        return self.operand.evaluate(columns).cast(self.type)


@dataclass(frozen=True)
class Compare:
    """`left op right`, both sides of one type; `op` is =, !=, <, <=, >, >= or <=>."""

    span: tuple[int, int]
    op: str
    left: Expr
    right: Expr
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        left, right = self.left.evaluate(columns), self.right.evaluate(columns)
        if self.op == "<=>":
            both_valid = pc.and_(pc.is_valid(left), pc.is_valid(right))
            both_null = pc.and_(pc.is_null(left), pc.is_null(right))
            return pc.if_else(both_valid, compare("=", left, right), both_null)
        return compare(self.op, left, right)


def _is_nan(value: Result) -> Result:
    return pc.is_nan(value) if pa.types.is_floating(value.type) else _FALSE


def compare(op: str, left: Result, right: Result) -> Result:
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
class In:
    """`operand IN (...)`: the literals of the list as one array, its other items apart."""

    span: tuple[int, int]
    operand: Expr
    value_set: pa.Array | None  # the non-null literals of the list
    has_null: bool  # whether the list holds a NULL literal
    others: tuple[Expr, ...]  # the items that are not literals
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        """As `compare`'s `=` with each item: for floating point, -0.0 is 0.0 (the set lookup
        compares bits, so both sides are normalised first) and NaN is NaN."""
        operand = self.operand.evaluate(columns)
        result: Result = _UNKNOWN if self.has_null else _FALSE
        if self.value_set is not None:
            values = self.value_set
            if pa.types.is_floating(operand.type) or pa.types.is_floating(values.type):
                operand, values = pc.add(operand, _ZERO), pc.add(values, _ZERO)  # -0.0+0.0=0.0
            found = pc.is_in(operand, value_set=values)
            result = pc.or_kleene(found, result) if self.has_null else found
        for other in self.others:
            result = pc.or_kleene(result, compare("=", operand, other.evaluate(columns)))
        if isinstance(result, pa.Scalar) or isinstance(operand, pa.Scalar) or operand.null_count:
            return pc.if_else(pc.is_null(operand), _UNKNOWN, result)
        return result  # no NULL operand: nothing is unknown but what the list makes so


@dataclass(frozen=True)
class IsNull:
    """`operand IS [NOT] NULL`."""

    span: tuple[int, int]
    operand: Expr
    negated: bool
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        value = self.operand.evaluate(columns)
        return pc.is_valid(value) if self.negated else pc.is_null(value)


@dataclass(frozen=True)
class And:
    span: tuple[int, int]
    left: Expr
    right: Expr
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        return pc.and_kleene(self.left.evaluate(columns), self.right.evaluate(columns))


@dataclass(frozen=True)
class Or:
    span: tuple[int, int]
    left: Expr
    right: Expr
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        return pc.or_kleene(self.left.evaluate(columns), self.right.evaluate(columns))


@dataclass(frozen=True)
class Not:
    span: tuple[int, int]
    operand: Expr
    type: ClassVar[pa.DataType] = pa.bool_()

    def evaluate(self, columns: Columns) -> Result:
        return pc.invert(self.operand.evaluate(columns))


@dataclass(frozen=True)
class Apply:
    """A value computed from its arguments' values by `kernel`: arithmetic, a SQL CAST, CASE or
    a function call (`values` builds them, with Spark's result type)."""

    span: tuple[int, int]
    name: str  # the operator or function, for messages
    args: tuple[Expr, ...]
    type: pa.DataType
    kernel: Callable[[list[Result]], Result]

    def evaluate(self, columns: Columns) -> Result:
        return self.kernel([arg.evaluate(columns) for arg in self.args])


Expr: TypeAlias = Column | Const | Cast | Compare | In | IsNull | And | Or | Not | Apply
"""A node that evaluates: the nodes of a finished tree."""

Node: TypeAlias = Expr | Literal
"""A node as the parser builds it: a literal is not typed (coerced) yet."""


def coerce(node: Node, type_: pa.DataType) -> Expr:
    """`node` evaluating to `type_`, which `common_type` chose for it."""
    if isinstance(node, Literal):
        return Const(node.span, literal_scalar(node.value, type_))
    if node.type.equals(type_):
        return node
    return Cast(node.span, node, type_)
