"""The types of a comparison, as Spark chooses them, and literal values as Arrow arrays.

Both sides of a comparison are converted to a common type as Spark does: integers widen to
long, mixed integers and decimals to a decimal that holds both, anything with a float to double,
a date compared with a timestamp to a timestamp; a string literal compared with a number,
boolean, date or timestamp is read as one (`read_literal`). A timestamp literal without a zone
is UTC.

Literals become Arrow arrays and scalars through `columnar` and raw buffers, never through
pyarrow's pandas shim.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from airflow_delta.engine.protocol import columnar

Value = None | bool | int | decimal.Decimal | float | str | dt.date | dt.datetime
"""The Python value of a literal; timestamps are naive datetimes in UTC."""

NUMERIC = frozenset({"integer", "floating", "decimal"})
"""The families of numbers (see `type_family`)."""

EXPECTED = {
    "integer": "a number",
    "floating": "a number",
    "decimal": "a number",
    "boolean": "a boolean (true or false)",
    "date": "a date (yyyy-mm-dd)",
    "timestamp": "a timestamp (yyyy-mm-dd hh:mm:ss[.ffffff][Z|+hh:mm])",
    "timestamp_ntz": "a timestamp (yyyy-mm-dd hh:mm:ss[.ffffff][Z|+hh:mm])",
}
"""The families a string literal can be read as, each with what such a string must be."""

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

# --------------------------------------------------------------------------- types


def type_family(t: pa.DataType) -> str | None:
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


def describe_type(t: pa.DataType) -> str:
    """The kind of values of a type, for an error message: "an integer", "a date"..."""
    return _DESCRIPTIONS.get(type_family(t) or "", str(t))


def _decimal_shape(t: pa.DataType) -> tuple[int, int]:
    """(precision, scale) of a decimal or integer type."""
    if pa.types.is_integer(t):
        return _INTEGER_DIGITS[t.bit_width], 0
    return t.precision, t.scale


def common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both sides of a comparison are converted to, None if they cannot be compared."""
    if a.equals(b) or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    families = {type_family(a), type_family(b)}
    if families <= NUMERIC:
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


# --------------------------------------------------------------------------- literal values


def literal_type(value: Value) -> tuple[Value, pa.DataType]:
    """A literal's value and natural type: Spark's, with decimals over 38 digits as doubles.

    Raises ValueError for an integer of more than 38 digits.
    """
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


def read_number(text: str) -> int | decimal.Decimal | float:
    """The value of a number as Spark reads it: integer, decimal, or double with an exponent.

    >>> read_number("1.50"), read_number("-2"), read_number("1e3")
    (Decimal('1.50'), -2, 1000.0)
    """
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


def read_literal(text: str, family: str) -> Value:
    """The string `text` read as a value of `family` (one of `EXPECTED`); ValueError if not.

    >>> read_literal("2024-01-02 12:00:00+02:00", "timestamp")
    datetime.datetime(2024, 1, 2, 10, 0)
    """
    if family in NUMERIC:
        return read_number(text)
    if family == "boolean":
        booleans = {"true": True, "false": False}
        if text.lower() not in booleans:
            raise ValueError(f"{text!r} is not a boolean")
        return booleans[text.lower()]
    if family == "date":
        return dt.date.fromisoformat(text)
    return _timestamp(text)


# --------------------------------------------------------------------------- as arrow


def literal_array(values: Sequence[Value], type_: pa.DataType) -> pa.Array:
    """A `type_` array of non-null literal values that `common_type` said fit it."""
    if pa.types.is_binary(type_):
        return columnar.array_from_pylist(values, pa.string()).cast(type_)
    if pa.types.is_floating(type_):
        return _fixed_width(type_, np.array([_float(v) for v in values], dtype=np.float64))
    if pa.types.is_decimal(type_):
        data = b"".join(
            _unscaled(v, type_.scale).to_bytes(16, "little", signed=True) for v in values
        )
        return pa.Array.from_buffers(type_, len(values), [None, pa.py_buffer(data)])
    if pa.types.is_date(type_):
        return _fixed_width(type_, np.array([_days(v) for v in values], dtype=np.int32))
    if pa.types.is_timestamp(type_):
        return _fixed_width(type_, np.array([_micros(v) for v in values], dtype=np.int64))
    return columnar.array_from_pylist(values, type_)


def literal_scalar(value: Value, type_: pa.DataType) -> pa.Scalar:
    """A `type_` scalar of a literal value (NULL for None) that `common_type` said fits it."""
    return pa.nulls(1, type_)[0] if value is None else literal_array([value], type_)[0]


def _fixed_width(type_: pa.DataType, data: np.ndarray) -> pa.Array:
    return pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])


def _misfit(value: Value, expected: str) -> TypeError:
    return TypeError(f"the literal {value!r} is not {expected}")


def _float(value: Value) -> float:
    if isinstance(value, int | float | decimal.Decimal):
        return float(value)
    raise _misfit(value, "a number")


def _unscaled(value: Value, scale: int) -> int:
    """The integer holding `value` at `scale` (which is at least the value's own scale)."""
    if isinstance(value, int):
        shift: int = 10**scale
        return value * shift
    if not isinstance(value, decimal.Decimal):
        raise _misfit(value, "an integer or a decimal")
    sign, digits, exponent = value.as_tuple()
    shift = 10 ** (int(exponent) + scale)
    unscaled = int("".join(map(str, digits))) * shift
    return -unscaled if sign else unscaled


def _days(value: Value) -> int:
    """Days since the epoch of a date."""
    if not isinstance(value, dt.date):
        raise _misfit(value, "a date")
    return (value - _EPOCH.date()).days


def _micros(value: Value) -> int:
    """Microseconds since the epoch of a date or a (naive UTC) timestamp."""
    if not isinstance(value, dt.date):
        raise _misfit(value, "a date or a timestamp")
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    return (value - _EPOCH) // dt.timedelta(microseconds=1)
