"""SQL `CAST(x AS type)` over Arrow, as Spark SQL casts with ANSI mode off.

What does not convert is NULL, never an error: a string that is not a number, a date or a
timestamp; a decimal that does not fit its precision. Integers narrow by wrapping and floating
point numbers become integers by truncation, saturating at the type's bounds with NaN as 0 (Java's
conversions). Timestamps are read and shown in UTC (the engine's session time zone).

`cast_kernel` gives the conversion as a function of Arrow values, or None for the conversions
the engine leaves to Spark (floating point to string or decimal, decimal to integer, string to
decimal, numbers to and from dates and timestamps, binary), which callers refuse with their own
typed error. Strings are read by regular expressions, vectorised; only the forms listed at each
reader are accepted (Spark accepts a few more, such as `1d` as a double).
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.expressions.coercion import type_family
from airflow_delta.engine.protocol import columnar

Value: TypeAlias = pa.Array | pa.ChunkedArray | pa.Scalar
Kernel: TypeAlias = Callable[[Value], Value]

_TYPES = {
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMAL = re.compile(r"(?:decimal|dec|numeric)(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?", re.I)
_STRING = pa.string()
_EMPTY = columnar.scalar("", _STRING)
_TRUE_WORDS = ["t", "true", "y", "yes", "1"]
_FALSE_WORDS = ["f", "false", "n", "no", "0"]
_SPACE = r"[\x00-\x20]*"  # what Spark trims around a number, a date or a timestamp
_INTEGER = _SPACE + r"([+-]?[0-9]+)(?:\.[0-9]*)?" + _SPACE
_FLOAT = (
    _SPACE + r"([+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|(?i:inf|infinity|nan)))" + _SPACE
)
_DATE = _SPACE + r"([0-9]{4})(?:-([0-9]{1,2})(?:-([0-9]{1,2})(?:[ T].*)?)?)?" + _SPACE
_TIMESTAMP = (
    _SPACE + r"([0-9]{4})(?:-([0-9]{1,2})(?:-([0-9]{1,2})"
    r"(?:[ T]([0-9]{1,2}):([0-9]{1,2})(?::([0-9]{1,2})(?:\.([0-9]{1,6})[0-9]*)?)?Z?)?)?)?" + _SPACE
)


def sql_type(name: str) -> pa.DataType | None:
    """The Arrow type of a Spark SQL type name (`int`, `decimal(10,2)`, ...), or None."""
    name = name.strip().lower()
    match = _DECIMAL.fullmatch(name)
    if match is not None:
        precision, scale = int(match.group(1) or 10), int(match.group(2) or 0)
        if not 0 < precision <= 38 or scale > precision:
            return None
        return pa.decimal128(precision, scale)
    return _TYPES.get(name)


def cast_kernel(source: pa.DataType, target: pa.DataType) -> Kernel | None:
    """The conversion of `source` values to `target` as Spark's CAST, None if not evaluated."""
    if source.equals(target):
        return lambda v: v
    if pa.types.is_null(source):
        return lambda v: pa.nulls(len(v), target) if not isinstance(v, pa.Scalar) else _null(target)
    src, dst = type_family(source), type_family(target)
    if src == "string":
        return _from_string(target, dst)
    if dst == "string":
        return _to_string(source, src)
    if src in ("integer", "floating", "decimal") and dst == "boolean":
        zero = pa.scalar(0).cast(source)
        return lambda v: pc.not_equal(v, zero)
    if src == "boolean" and dst in ("integer", "floating", "decimal"):
        return lambda v: _cast(_cast(v, pa.int8(), safe=True), target, safe=True)
    if src == "integer" and dst == "integer":
        return lambda v: _cast(v, target, safe=False)
    if src == "integer" and dst == "floating":
        return lambda v: _cast(v, target, safe=False)
    if src == "decimal" and dst == "floating":  # correctly rounded, as Java's doubleValue
        return lambda v: _cast(
            _cast(pc.cast(v, _STRING), pa.float64(), safe=False), target, safe=False
        )
    if src == "floating" and dst == "floating":
        return lambda v: _cast(v, target, safe=False)
    if src == "floating" and dst == "integer":
        return lambda v: _java_integer(v, target)
    if src in ("integer", "decimal") and dst == "decimal":
        return lambda v: _to_decimal(v, target)
    if src in ("date", "timestamp", "timestamp_ntz") and dst in (
        "date",
        "timestamp",
        "timestamp_ntz",
    ):
        return lambda v: _cast(v, target, safe=False)
    return None


# --------------------------------------------------------------------------- helpers


def _null(type_: pa.DataType) -> pa.Scalar:
    return pa.nulls(1, type_)[0]


def _cast(value: Value, target: pa.DataType, *, safe: bool) -> Value:
    return pc.cast(value, target, safe=safe)


def _flat(value: Value) -> pa.Array:
    """`value` as one array (a scalar as an array of one)."""
    if isinstance(value, pa.Scalar):
        return pa.array([value.as_py()], value.type) if value.is_valid else pa.nulls(1, value.type)
    if isinstance(value, pa.ChunkedArray):
        return columnar.contiguous(value) if value.num_chunks else pa.array([], value.type)
    return value


def _like(result: pa.Array, value: Value) -> Value:
    """`result` (computed over `_flat(value)`) as a scalar when `value` is one."""
    return result[0] if isinstance(value, pa.Scalar) else result


def _where(valid: Value, value: Value, type_: pa.DataType) -> Value:
    """`value` where `valid` is true, NULL elsewhere (and where `valid` is NULL)."""
    return pc.if_else(pc.fill_null(valid, False), value, _null(type_))


def _java_integer(value: Value, target: pa.DataType) -> Value:
    """Floating point to an integer type as Java narrows: truncated, NaN 0, saturated at the
    bounds of int (long for a long), then wrapped to a byte or a short."""
    array = _flat(value).cast(pa.float64())
    data = np.nan_to_num(array.fill_null(0).to_numpy(zero_copy_only=False), nan=0.0)
    wide = pa.int64() if target.bit_width == 64 else pa.int32()
    info = np.iinfo(np.int64 if target.bit_width == 64 else np.int32)
    clipped = np.clip(np.trunc(data), float(info.min), float(info.max))
    high = clipped >= float(info.max)  # the bound as a float is above it: convert apart
    numbers = np.where(high, info.max, np.where(high, 0.0, clipped).astype(np.int64))
    result = pa.array(numbers, pa.int64(), mask=array.is_null().to_numpy(zero_copy_only=False))
    return _like(result.cast(wide).cast(target, safe=False), value)


def _to_decimal(value: Value, target: pa.DataType) -> Value:
    """An integer or decimal as `target`: rounded HALF_UP to its scale, NULL if too large."""
    scale = target.scale
    if pa.types.is_integer(value.type):
        value = pc.cast(value, pa.decimal128(20, 0))
    wide = pa.decimal128(38, max(scale, value.type.scale))
    value = pc.cast(value, wide)
    if wide.scale > scale:
        value = pc.round(value, scale, round_mode="half_towards_infinity")
    limit = pa.scalar(decimal.Decimal(10) ** (target.precision - target.scale)).cast(wide)
    fits = pc.less(pc.abs(pc.cast(value, wide)), limit)
    safe_value = pc.if_else(fits, pc.cast(value, wide), pa.scalar(0).cast(wide))
    return _where(fits, pc.cast(safe_value, target), target)


# --------------------------------------------------------------------------- strings


def _to_string(source: pa.DataType, family: str | None) -> Kernel | None:
    if family in ("integer", "decimal", "boolean"):
        return lambda v: pc.cast(v, _STRING)
    if family == "date":
        return lambda v: pc.strftime(pc.cast(v, pa.timestamp("s")), format="%Y-%m-%d")
    if family in ("timestamp", "timestamp_ntz"):
        return _timestamp_string
    return None


def _timestamp_string(value: Value) -> Value:
    """A timestamp as Spark shows it: `yyyy-MM-dd HH:mm:ss`, then the fraction of a second
    without its trailing zeros (none when it is zero)."""
    naive = pc.cast(pc.cast(value, pa.int64()), pa.timestamp("us"))
    text = pc.strftime(naive, format="%Y-%m-%d %H:%M:%S")  # with .ffffff for microseconds
    text = pc.replace_substring_regex(text, pattern=r"0+$", replacement="")
    return pc.replace_substring_regex(text, pattern=r"\.$", replacement="")


def _from_string(target: pa.DataType, family: str | None) -> Kernel | None:
    if family == "integer":
        return lambda v: _string_to_integer(v, target)
    if family == "floating":
        return lambda v: _string_to_float(v, target)
    if family == "boolean":
        return _string_to_boolean
    if family == "date":
        return _string_to_date
    if family in ("timestamp", "timestamp_ntz"):
        return lambda v: _string_to_timestamp(v, target)
    return None


def _matched(value: Value, pattern: str, replacement: str) -> tuple[Value, Value]:
    """(whether each string matches `pattern` whole, the string rewritten by `replacement`
    where it does, '' elsewhere)."""
    full = f"^(?:{pattern})$"
    matches = pc.match_substring_regex(value, pattern=full)
    rewritten = pc.replace_substring_regex(value, pattern=full, replacement=replacement)
    return matches, pc.if_else(pc.fill_null(matches, False), rewritten, _EMPTY)


def _string_to_integer(value: Value, target: pa.DataType) -> Value:
    """`[+-]digits[.digits]` (the fraction truncated), NULL when out of the type's range."""
    matches, digits = _matched(value, _INTEGER, r"\1")
    digits = pc.replace_substring_regex(digits, pattern=r"^\+?(-?)0*([0-9])", replacement=r"\1\2")
    ok = pc.and_(pc.fill_null(matches, False), pc.less_equal(pc.utf8_length(digits), 20))
    wide_type = pa.decimal128(38, 0)
    wide = pc.cast(pc.if_else(ok, digits, columnar.scalar("0", _STRING)), wide_type)
    info = np.iinfo(target.to_pandas_dtype())
    low, high = (pa.scalar(int(b)).cast(wide_type) for b in (info.min, info.max))
    ok = pc.and_(ok, pc.and_(pc.greater_equal(wide, low), pc.less_equal(wide, high)))
    safe = pc.if_else(ok, wide, pa.scalar(0).cast(wide_type))
    return _where(ok, pc.cast(safe, target), target)


def _string_to_float(value: Value, target: pa.DataType) -> Value:
    """A decimal number, with an exponent or not, or inf, infinity or nan in any case."""
    matches, text = _matched(value, _FLOAT, r"\1")
    text = pc.utf8_lower(text)
    text = pc.replace_substring_regex(text, pattern=r"^([+-]?)inf(inity)?$", replacement=r"\1inf")
    ok = pc.fill_null(matches, False)
    safe = pc.if_else(ok, text, columnar.scalar("0", _STRING))
    return _where(ok, pc.cast(pc.cast(safe, pa.float64()), target), target)


def _string_to_boolean(value: Value) -> Value:
    words = pc.utf8_lower(pc.utf8_trim_whitespace(value))
    true = pc.is_in(words, value_set=pa.array(_TRUE_WORDS))
    false = pc.is_in(words, value_set=pa.array(_FALSE_WORDS))
    return _where(pc.or_(true, false), true, pa.bool_())


def _dates(text: Value) -> Value:
    """`yyyy-m<month>-d<day>...` with the month and the day padded to two digits (01 when
    missing); what follows the day is kept."""
    text = pc.replace_substring_regex(text, pattern=r"-m-d", replacement="-m1-d1")
    text = pc.replace_substring_regex(text, pattern=r"-d( |$)", replacement=r"-d1\1")
    text = pc.replace_substring_regex(
        text, pattern=r"^(\d{4})-m(\d{1,2})-d(\d{1,2})", replacement=r"\1-0\2-0\3"
    )
    return pc.replace_substring_regex(
        text, pattern=r"^(\d{4})-0*(\d{2})-0*(\d{2})", replacement=r"\1-\2-\3"
    )


def _string_to_date(value: Value) -> Value:
    """`yyyy`, `yyyy-[m]m`, `yyyy-[m]m-[d]d`, optionally followed by a space or `T` and
    anything; NULL for a day that does not exist."""
    matches, text = _matched(value, _DATE, r"\1-m\2-d\3")
    return _checked_time(pc.fill_null(matches, False), _dates(text), "%Y-%m-%d", pa.date32())


def _string_to_timestamp(value: Value, target: pa.DataType) -> Value:
    """`yyyy[-[m]m[-[d]d]]` then optionally a space or `T`, `[h]h:[m]m[:[s]s[.fraction]]` and
    `Z` (UTC); microseconds kept, finer digits dropped."""
    matches, text = _matched(value, _TIMESTAMP, r"\1-m\2-d\3 00\4:00\5:00\6.\7000000")
    pattern = r" 0*(\d{2}):0*(\d{2}):0*(\d{2})\.(\d{6})\d*$"
    text = pc.replace_substring_regex(_dates(text), pattern=pattern, replacement=r" \1:\2:\3.\4")
    return _checked_time(pc.fill_null(matches, False), text, "%Y-%m-%d %H:%M:%S", target)


def _checked_time(ok: Value, text: Value, form: str, target: pa.DataType) -> Value:
    """`text` (normalised to `form`, with `.ffffff` after a time) as `target` where `ok`, NULL
    where not or where the date or the time does not exist (it would not format back)."""
    fraction = "%S" in form
    whole = pc.utf8_slice_codeunits(text, 0, 19) if fraction else text
    placeholder = columnar.scalar("1970-01-01 00:00:00" if fraction else "1970-01-01", _STRING)
    whole = pc.if_else(ok, whole, placeholder)
    parsed = pc.strptime(whole, format=form, unit="s", error_is_null=True)
    back = pc.strftime(parsed, format=form)
    exists = pc.and_(ok, pc.fill_null(pc.equal(back, whole), False))
    micros = pc.multiply(pc.cast(parsed, pa.int64()), 1_000_000)
    if fraction:
        digits = pc.if_else(
            exists, pc.utf8_slice_codeunits(text, 20, 26), columnar.scalar("0", _STRING)
        )
        micros = pc.add(micros, pc.cast(digits, pa.int64()))
    micros = pc.if_else(exists, micros, pa.scalar(0, pa.int64()))
    if pa.types.is_date(target):
        result = pc.cast(pc.divide(micros, 86_400_000_000), pa.int32()).cast(pa.date32())
    else:
        result = pc.cast(micros, pa.timestamp("us")).cast(target)
    return _where(exists, result, target)
