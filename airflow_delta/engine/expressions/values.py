"""Value expressions, typed and evaluated as Spark SQL does with ANSI mode off.

- Arithmetic `+ - * / %` and unary minus: integers stay integers of the wider operand's type
  and wrap around on overflow (Java's arithmetic); `/` divides as doubles (decimals refused);
  a zero divisor gives NULL for `/` and `%`, whose sign is the dividend's. A float with an
  integer is a float, a double with anything a double, a decimal with an integer a decimal
  whose precision Spark's rules give (refused beyond 38 digits, where Spark loses precision).
- `CAST(x AS type)`: `casts`. `CASE`, `IF`, `COALESCE`/`NVL`/`IFNULL`: the branches in their
  wider common type (a string with a number or a date is a string); an unknown (NULL)
  condition takes the ELSE branch.
- Functions: `year`, `month`, `day`/`dayofmonth`, `hour`, `to_date`, `upper`, `lower`, `trim`
  (spaces only), `length` (characters), `substring`/`substr` (1-based; position and length
  literals), `concat` (NULL if any argument is), `concat_ws` (NULLs skipped), `abs`, `round`
  (HALF_UP on the shortest decimal form of a double, as Spark's BigDecimal), `floor`, `ceil`
  and `current_date()`/`current_timestamp()` (one value per statement, in UTC).

`upper` and `lower` map each character alone (Unicode's simple case mapping): Java's
`toUpperCase` turns `ß` into `SS`, here it stays one character. Anything else raises
ValueError, which the parser reports as an InvalidPredicateError: callers fall back to Spark.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.expressions.casts import Kernel, cast_kernel
from airflow_delta.engine.expressions.coercion import literal_scalar, literal_type, type_family
from airflow_delta.engine.expressions.tree import Apply, Const, Expr, Literal, Node, Result
from airflow_delta.engine.protocol import columnar

_LONG = pa.int64()
_DOUBLE = pa.float64()
_STRING = pa.string()
_DATE = pa.date32()
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_DECIMAL_DIGITS = {8: 3, 16: 5, 32: 10, 64: 20}  # Spark's decimal of each integer type
_NUMBERS = frozenset({"integer", "floating", "decimal"})
_TEMPORAL = frozenset({"date", "timestamp", "timestamp_ntz"})
_MAX_ROUND_DIGITS = 15


def natural(node: Node) -> Expr:
    """`node` typed: a literal as Spark types it (an integer that fits is an int)."""
    if not isinstance(node, Literal):
        return node
    value, type_ = node.value, node.type
    if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
        type_ = pa.int32()
    return Const(node.span, literal_scalar(value, type_), literal=True)


def _decimal_shape(t: pa.DataType) -> tuple[int, int]:
    if pa.types.is_integer(t):
        return _DECIMAL_DIGITS[t.bit_width], 0
    return t.precision, t.scale


def wider_type(a: pa.DataType, b: pa.DataType, *, strings: bool = True) -> pa.DataType:
    """The type two values meet in (Spark's wider common type; with `strings`, a string with a
    number, boolean, date or timestamp is a string). ValueError when there is none."""
    if a.equals(b) or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    families = {type_family(a), type_family(b)}
    if families <= _NUMBERS:
        if (
            pa.types.is_float64(a)
            or pa.types.is_float64(b)
            or ("decimal" in families and "floating" in families)
        ):
            return _DOUBLE
        if "floating" in families:
            return pa.float32()
        if families == {"integer"}:
            return a if a.bit_width >= b.bit_width else b
        (pa_, sa), (pb, sb) = _decimal_shape(a), _decimal_shape(b)
        scale = max(sa, sb)
        return _decimal(max(pa_ - sa, pb - sb) + scale, scale)
    if families <= _TEMPORAL:
        return pa.timestamp("us") if families == {"timestamp_ntz"} else _TIMESTAMP
    if (
        strings
        and "string" in families
        and families - {"string"} <= _NUMBERS | _TEMPORAL | {"boolean"}
        and "floating" not in families
    ):
        return _STRING
    raise ValueError(f"{a} and {b} have no common type")


def _decimal(precision: int, scale: int) -> pa.DataType:
    if precision > 38:
        raise ValueError(
            f"the result needs decimal({precision},{scale}), beyond 38 digits, where Spark "
            "rounds it (not evaluated in process)"
        )
    return pa.decimal128(precision, scale)


def convert(expr: Expr, type_: pa.DataType) -> Expr:
    """`expr` as `type_` by Spark's implicit cast (ValueError when there is none)."""
    if expr.type.equals(type_):
        return expr
    kernel = cast_kernel(expr.type, type_)
    if kernel is None:
        raise ValueError(f"{expr.type} values are not converted to {type_} in process")
    return _apply(expr.span, "cast", [expr], type_, lambda v: kernel(v[0]))


def sql_cast(span: tuple[int, int], expr: Expr, type_: pa.DataType) -> Expr:
    """`CAST(expr AS type_)`."""
    if pa.types.is_null(expr.type):
        return Const(span, pa.nulls(1, type_)[0])
    converted = convert(expr, type_)
    if isinstance(converted, Apply):
        return _apply(span, "cast", converted.args, type_, converted.kernel)
    return Const(span, converted.scalar) if isinstance(converted, Const) else converted


def _apply(
    span: tuple[int, int],
    name: str,
    args: Sequence[Expr],
    type_: pa.DataType,
    kernel: Callable[[list[Result]], Result],
) -> Expr:
    """An Apply node; over constants only, its value (a Const)."""
    node = Apply(span, name, tuple(args), type_, kernel)
    if all(isinstance(a, Const) for a in args):
        value = node.evaluate({})
        scalar = value if isinstance(value, pa.Scalar) else value[0]
        return Const(span, scalar.cast(type_) if not scalar.type.equals(type_) else scalar)
    return node


# --------------------------------------------------------------------------- arithmetic


def _operands(left: Expr, right: Expr, op: str) -> tuple[Expr, Expr, pa.DataType]:
    """Both operands in the type the operation computes in."""
    for side in (left, right):
        if type_family(side.type) not in _NUMBERS | {"null"}:
            raise ValueError(f"'{op}' takes numbers, not {side.type} values")
    if pa.types.is_null(left.type) and pa.types.is_null(right.type):
        type_: pa.DataType = _DOUBLE  # as Spark types NULL op NULL
    else:
        type_ = wider_type(left.type, right.type, strings=False)
    if op == "/" and not pa.types.is_decimal(type_):
        type_ = _DOUBLE
    if pa.types.is_decimal(type_):
        if op in ("/", "%"):
            raise ValueError(f"decimal '{op}' is not evaluated in process")
        left, right = (convert(e, type_) if pa.types.is_null(e.type) else e for e in (left, right))
        return left, right, type_  # each keeps its own precision and scale
    return convert(left, type_), convert(right, type_), type_


def arithmetic(span: tuple[int, int], op: str, left: Expr, right: Expr) -> Expr:
    """`left op right` for op in + - * / %."""
    left, right, type_ = _operands(left, right, op)
    if pa.types.is_decimal(type_):
        return _decimal_arithmetic(span, op, left, right)
    if op in ("+", "-", "*"):
        function = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op]
        return _apply(span, op, [left, right], type_, lambda v: function(v[0], v[1]))
    if op == "/":
        return _apply(span, op, [left, right], type_, lambda v: _divide(v[0], v[1]))
    return _apply(span, op, [left, right], type_, lambda v: _remainder(v[0], v[1], type_))


def _decimal_arithmetic(span: tuple[int, int], op: str, left: Expr, right: Expr) -> Expr:
    (p1, s1), (p2, s2) = (_operand_shape(e) for e in (left, right))
    if op == "*":
        type_ = _decimal(p1 + p2 + 1, s1 + s2)
    else:
        scale = max(s1, s2)
        type_ = _decimal(max(p1 - s1, p2 - s2) + scale + 1, scale)
    operands = [convert(e, _decimal(*_operand_shape(e))) for e in (left, right)]
    function = {"+": pc.add, "-": pc.subtract, "*": pc.multiply}[op]

    def kernel(v: list[Result]) -> Result:
        wide = [pc.cast(x, pa.decimal256(x.type.precision, x.type.scale)) for x in v]
        return pc.cast(function(*wide), type_)

    return _apply(span, op, operands, type_, kernel)


def _operand_shape(expr: Expr) -> tuple[int, int]:
    """(precision, scale) of a decimal operand; an integer literal takes its digits only, as
    Spark's `DecimalType.fromLiteral` (a folded constant, such as `-(1)`, takes its type's)."""
    if (
        isinstance(expr, Const)
        and expr.literal
        and pa.types.is_integer(expr.type)
        and expr.scalar.is_valid
    ):
        return max(len(str(abs(expr.scalar.as_py()))), 1), 0
    return _decimal_shape(expr.type)


def _zero(divisor: Result) -> Result:
    return pc.fill_null(pc.equal(divisor, pa.scalar(0, divisor.type)), True)


def _divide(left: Result, right: Result) -> Result:
    """Doubles divided, NULL for a zero (or NULL) divisor."""
    zero = _zero(right)
    safe = pc.if_else(zero, pa.scalar(1.0, _DOUBLE), right)
    return pc.if_else(zero, pa.scalar(None, _DOUBLE), pc.divide(left, safe))


def _remainder(left: Result, right: Result, type_: pa.DataType) -> Result:
    """Java's `%` (the sign of the dividend; exact for floating point), NULL for a zero
    divisor."""
    zero = _zero(right)
    (a, a_null), (b, b_null) = _numbers(left), _numbers(right)
    b = np.where(np.asarray(columnar.bool_values(_as_array(zero, a.shape))), 1, b)
    with np.errstate(all="ignore"):
        values = np.fmod(a, b)
    result = pa.array(
        values,
        type_,
        mask=a_null | b_null | np.asarray(columnar.bool_values(_as_array(zero, a.shape))),
    )
    return result[0] if isinstance(left, pa.Scalar) and isinstance(right, pa.Scalar) else result


def _as_array(value: Result, shape: tuple[int, ...]) -> pa.Array:
    if isinstance(value, pa.Scalar):
        return pa.array(np.full(shape, value.as_py()), value.type)
    if isinstance(value, pa.ChunkedArray):
        return columnar.contiguous(value) if value.num_chunks else pa.array([], value.type)
    return value


def _numbers(value: Result) -> tuple[np.ndarray, np.ndarray]:
    """(the values as numpy, NULL slots holding 0; the NULL mask), a scalar as an array of 1."""
    if isinstance(value, pa.Scalar):
        number = value.as_py() if value.is_valid else 0
        return np.array([number]), np.array([not value.is_valid])
    array = _as_array(value, ())
    nulls = np.asarray(columnar.bool_values(array.is_null()))
    filled = array.fill_null(pa.scalar(0, array.type)) if array.null_count else array
    return filled.to_numpy(zero_copy_only=False), nulls


def negate(span: tuple[int, int], operand: Expr) -> Expr:
    """`-operand`: integers wrap around (the negation of the smallest is itself)."""
    if type_family(operand.type) not in _NUMBERS | {"null"}:
        raise ValueError(f"'-' takes a number, not {operand.type} values")
    operand = convert(operand, _number(operand.type))
    return _apply(span, "-", [operand], operand.type, lambda v: pc.negate(v[0]))


# --------------------------------------------------------------------------- conditionals


def case(span: tuple[int, int], branches: Sequence[tuple[Expr, Expr]], otherwise: Expr) -> Expr:
    """`CASE WHEN c THEN v ... ELSE otherwise END` (conditions already booleans)."""
    type_ = otherwise.type
    for _, value in branches:
        type_ = wider_type(type_, value.type)
    values = [convert(v, type_) for _, v in branches]
    args = [*(c for c, _ in branches), *values, convert(otherwise, type_)]
    count = len(branches)

    def kernel(v: list[Result]) -> Result:
        result = v[-1]
        for i in reversed(range(count)):
            result = pc.if_else(pc.fill_null(v[i], False), v[count + i], result)
        return result

    return _apply(span, "case", args, type_, kernel)


def coalesce(span: tuple[int, int], args: Sequence[Expr]) -> Expr:
    type_ = args[0].type
    for arg in args[1:]:
        type_ = wider_type(type_, arg.type)
    converted = [convert(a, type_) for a in args]
    return _apply(span, "coalesce", converted, type_, lambda v: pc.coalesce(*v))


# --------------------------------------------------------------------------- functions

Function = Callable[[tuple[int, int], list[Expr], dt.datetime], Expr]


def call(span: tuple[int, int], name: str, args: list[Expr], now: dt.datetime) -> Expr:
    """The function `name` applied to `args`; ValueError for one the engine does not know."""
    function = FUNCTIONS.get(name.lower())
    if function is None:
        raise ValueError(f"the function {name} is not evaluated in process")
    return function(span, args, now)


def _arity(name: str, args: Sequence[Expr], low: int, high: int | None = None) -> None:
    high = low if high is None else high
    if not low <= len(args) <= high:
        wanted = str(low) if low == high else f"{low} to {high}"
        raise ValueError(f"{name} takes {wanted} arguments, not {len(args)}")


def _literal_int(name: str, arg: Expr) -> int:
    if isinstance(arg, Const) and type_family(arg.type) == "integer" and arg.scalar.is_valid:
        value: int = arg.scalar.as_py()
        return value
    raise ValueError(f"{name} is evaluated in process with an integer literal there only")


def _unary(
    name: str,
    accepts: Callable[[pa.DataType], pa.DataType],
    out: pa.DataType | None,
    kernel: Kernel,
) -> Function:
    """A function of one argument, converted to `accepts(its type)`, giving `out` (the
    converted type when None)."""

    def build(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
        _arity(name, args, 1)
        arg = convert(args[0], accepts(args[0].type))
        return _apply(span, name, [arg], out or arg.type, lambda v: kernel(v[0]))

    return build


def _as(type_: pa.DataType) -> Callable[[pa.DataType], pa.DataType]:
    return lambda _: type_


def _as_datetime(date: bool) -> Callable[[pa.DataType], pa.DataType]:
    """Dates for year/month/day (timestamps kept), timestamps for hour; strings converted."""

    def accepts(t: pa.DataType) -> pa.DataType:
        family = type_family(t)
        if family in ("timestamp", "timestamp_ntz") or (family == "date" and date):
            return t
        if family in ("string", "date", "null"):
            return _DATE if date else _TIMESTAMP
        raise ValueError(f"{t} values are not dates")

    return accepts


def _number(t: pa.DataType) -> pa.DataType:
    if type_family(t) in _NUMBERS:
        return t
    if pa.types.is_null(t):
        return _DOUBLE  # as Spark types abs(NULL)
    raise ValueError(f"{t} values are not numbers")


def _utc(value: Result) -> Result:
    if pa.types.is_timestamp(value.type) and value.type.tz is not None:
        return pc.cast(value, pa.timestamp("us"))
    return value


def _field(extract: Callable[..., Result]) -> Kernel:
    return lambda v: pc.cast(extract(_utc(v)), pa.int32())


def _substring(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
    """Spark's `substring(s, pos[, len])`: characters from `pos` (1-based; 0 is 1; negative
    counts from the end), `len` of them (none when `len` < 1)."""
    _arity("substring", args, 2, 3)
    text = convert(args[0], _STRING)
    pos = _literal_int("substring", args[1])
    length = _literal_int("substring", args[2]) if len(args) == 3 else 2**31 - 1
    begin, stop = _substring_slice(pos, length)
    return _apply(
        span, "substring", [text], _STRING, lambda v: pc.utf8_slice_codeunits(v[0], begin, stop)
    )


def _substring_slice(pos: int, length: int) -> tuple[int, int | None]:
    """Spark's substring(pos, length) as a Python slice of the characters."""
    if length <= 0:
        return 0, 0
    if pos < 0:
        return pos, None if pos + length >= 0 else pos + length
    begin = max(pos - 1, 0)
    return begin, begin + length


def _concat(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
    _arity("concat", args, 1, 255)
    texts = [convert(a, _STRING) for a in args]
    empty = pa.scalar("", _STRING)
    return _apply(
        span,
        "concat",
        texts,
        _STRING,
        lambda v: pc.binary_join_element_wise(*v, empty, null_handling="emit_null"),
    )


def _concat_ws(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
    """`concat_ws(sep, ...)`: the non-NULL strings joined by `sep` ('' when none; NULL when
    `sep` is NULL)."""
    _arity("concat_ws", args, 1, 255)
    texts = [convert(a, _STRING) for a in args]

    def kernel(v: list[Result]) -> Result:
        separator, joined = v[0], pa.scalar(None, _STRING)
        for value in v[1:]:
            both = pc.binary_join_element_wise(joined, value, separator)
            joined = pc.coalesce(both, joined, value)
        blank = pc.if_else(pc.is_valid(separator), pa.scalar("", _STRING), pa.scalar(None, _STRING))
        return pc.if_else(pc.is_valid(separator), pc.coalesce(joined, blank), blank)

    return _apply(span, "concat_ws", texts, _STRING, kernel)


def _round(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
    """`round(x[, d])` HALF_UP: a double as the decimal it prints as (Spark's BigDecimal)."""
    _arity("round", args, 1, 2)
    value = convert(args[0], _number(args[0].type))
    digits = _literal_int("round", args[1]) if len(args) == 2 else 0
    family = type_family(value.type)
    if digits < 0 or digits > _MAX_ROUND_DIGITS:
        raise ValueError(f"round to {digits} digits is not evaluated in process")
    if family == "integer":
        return value
    mode = "half_towards_infinity"
    if family == "decimal":
        p, s = value.type.precision, value.type.scale
        scale = min(digits, s)
        type_ = _decimal(min(p - s + 1 + scale, 38), scale)
        return _apply(
            span,
            "round",
            [value],
            type_,
            lambda v: pc.cast(
                pc.round(pc.cast(v[0], pa.decimal128(38, s)), scale, round_mode=mode), type_
            ),
        )
    return _apply(span, "round", [value], value.type, lambda v: _round_float(v[0], digits))


def _round_float(value: Result, digits: int) -> Result:
    """HALF_UP on the shortest decimal form; NaN, infinities and |x| >= 1e19 (integers
    already) unchanged, |x| < 1e-17 rounds to 0."""
    wide = pc.cast(value, _DOUBLE)
    finite = pc.fill_null(pc.is_finite(wide), False)
    magnitude = pc.abs(wide)
    small = pc.fill_null(pc.less(magnitude, pa.scalar(1e-17)), False)
    exact = pc.and_(finite, pc.and_(pc.invert(small), pc.less(magnitude, pa.scalar(1e19))))
    exact = pc.fill_null(exact, False)
    text = pc.if_else(exact, pc.cast(wide, _STRING), pa.scalar("0", _STRING))
    rounded = pc.round(
        pc.cast(text, pa.decimal256(76, 38)), digits, round_mode="half_towards_infinity"
    )
    back = pc.cast(pc.cast(rounded, _STRING), _DOUBLE)
    result = pc.if_else(exact, back, pc.if_else(small, pa.scalar(0.0), wide))
    return pc.cast(result, value.type)


def _floor_ceil(name: str) -> Function:
    mode = "down" if name == "floor" else "up"

    def build(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
        _arity(name, args, 1)
        value = convert(args[0], _number(args[0].type))
        family = type_family(value.type)
        if family == "integer":
            return convert(value, _LONG)
        if family == "decimal":
            p, s = value.type.precision, value.type.scale
            if s == 0:  # already whole: Spark keeps the type
                return value
            type_ = _decimal(p - s + 1, 0)
            return _apply(
                span,
                name,
                [value],
                type_,
                lambda v: pc.cast(
                    pc.round(pc.cast(v[0], pa.decimal128(38, s)), 0, round_mode=mode), type_
                ),
            )
        to_long = cast_kernel(_DOUBLE, _LONG)
        assert to_long is not None
        function = pc.floor if name == "floor" else pc.ceil
        return _apply(
            span, name, [value], _LONG, lambda v: to_long(function(pc.cast(v[0], _DOUBLE)))
        )

    return build


def _coalesce(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
    _arity("coalesce", args, 1, 255)
    return coalesce(span, args)


def _if(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
    _arity("if", args, 3)
    if type_family(args[0].type) not in ("boolean", "null"):
        raise ValueError("the first argument of if is a condition")
    return case(span, [(convert(args[0], pa.bool_()), args[1])], args[2])


def _now(date: bool) -> Function:
    def build(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
        _arity("current_date" if date else "current_timestamp", args, 0)
        value, _ = literal_type(now.date() if date else now)
        return Const(span, literal_scalar(value, _DATE if date else _TIMESTAMP))

    return build


def _to_date(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
    _arity("to_date (without a format)", args, 1)
    return sql_cast(span, args[0], _DATE)


#: A LIKE pattern Spark and Arrow read alike: a backslash escapes only `%`, `_` or itself.
_LIKE_PATTERN = re.compile(r"(?:[^\\]|\\[%_\\])*")


def _like(name: str, ignore_case: bool) -> Function:
    """`str LIKE pattern` (ILIKE: ignoring case) with a literal pattern: `%` any characters,
    `_` one, a backslash escaping either; NULL for a NULL string or pattern."""

    def build(span: tuple[int, int], args: list[Expr], now: dt.datetime) -> Expr:
        _arity(name, args, 2)
        value, pattern = convert(args[0], _STRING), args[1]
        if not isinstance(pattern, Const) or type_family(pattern.type) not in ("string", "null"):
            raise ValueError(f"{name} is evaluated in process with a string literal pattern only")
        text = pattern.scalar.as_py()
        if text is None:
            return Const(span, pa.nulls(1, pa.bool_())[0])
        if not _LIKE_PATTERN.fullmatch(text):
            raise ValueError(f"the {name} pattern {text!r} escapes a character other than % or _")
        options = pc.MatchSubstringOptions(text, ignore_case=ignore_case)
        return _apply(
            span, name, [value], pa.bool_(), lambda v: pc.match_like(v[0], options=options)
        )

    return build


_STRINGS = _as(_STRING)
FUNCTIONS: dict[str, Function] = {
    "like": _like("like", False),
    "ilike": _like("ilike", True),
    "year": _unary("year", _as_datetime(True), pa.int32(), _field(pc.year)),
    "month": _unary("month", _as_datetime(True), pa.int32(), _field(pc.month)),
    "day": _unary("day", _as_datetime(True), pa.int32(), _field(pc.day)),
    "dayofmonth": _unary("dayofmonth", _as_datetime(True), pa.int32(), _field(pc.day)),
    "hour": _unary("hour", _as_datetime(False), pa.int32(), _field(pc.hour)),
    "to_date": _to_date,
    "upper": _unary("upper", _STRINGS, None, pc.utf8_upper),
    "ucase": _unary("ucase", _STRINGS, None, pc.utf8_upper),
    "lower": _unary("lower", _STRINGS, None, pc.utf8_lower),
    "lcase": _unary("lcase", _STRINGS, None, pc.utf8_lower),
    "trim": _unary("trim", _STRINGS, None, lambda v: pc.utf8_trim(v, characters=" ")),
    "length": _unary(
        "length", _STRINGS, pa.int32(), lambda v: pc.cast(pc.utf8_length(v), pa.int32())
    ),
    "char_length": _unary(
        "char_length", _STRINGS, pa.int32(), lambda v: pc.cast(pc.utf8_length(v), pa.int32())
    ),
    "substring": _substring,
    "substr": _substring,
    "concat": _concat,
    "concat_ws": _concat_ws,
    "abs": _unary("abs", _number, None, pc.abs),
    "round": _round,
    "floor": _floor_ceil("floor"),
    "ceil": _floor_ceil("ceil"),
    "ceiling": _floor_ceil("ceil"),
    "coalesce": _coalesce,
    "nvl": _coalesce,
    "ifnull": _coalesce,
    "if": _if,
    "current_date": _now(True),
    "current_timestamp": _now(False),
}
"""The functions evaluated in process, by lower-case name."""
