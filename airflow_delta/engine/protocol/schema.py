"""Delta schemas and partition values, as pyarrow types and Python values.

The table schema lives in the log as `metaData.schemaString`: Spark SQL's JSON struct format
(PROTOCOL.md, "Schema Serialization Format"). `schema_from_json` turns it into a `pa.Schema`,
`schema_to_json` turns a `pa.Schema` back into it. Each Delta field's `metadata` object (column
mapping ids and physical names, generation expressions, invariants, type changes, comments...)
travels on the pyarrow field as compact JSON under `DELTA_METADATA_KEY`, so the round trip is
lossless.

A `variant` column is a struct of two binary fields, `value` and `metadata` (null where the
variant is); both carry a marker in their pyarrow field metadata so that a genuine struct of the
same shape stays a struct.

Partition values are strings in the log (PROTOCOL.md, "Partition Value Serialization"); the empty
string is null for every type. `parse_partition_value` and `serialize_partition_value` convert one
value, `partition_values_to_arrow` converts a whole column with pyarrow compute. The directory
names of Hive-style partitioned layouts are built by `partition_path`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import numbers
import operator
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.errors import CorruptLogError, DeltaProtocolError
from airflow_delta.engine.protocol.columnar import contiguous, scalar
from airflow_delta.engine.protocol.log_json import parse_json

DELTA_METADATA_KEY = b"delta.metadata"
"""The pyarrow field metadata key holding the Delta field's `metadata` object as JSON."""

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""The directory name Hive and Spark give a null (or empty) partition value."""

_VARIANT_MARKER = {b"delta.variant": b"true"}
_VARIANT = pa.struct(
    [
        pa.field("value", pa.binary(), metadata=_VARIANT_MARKER),
        pa.field("metadata", pa.binary(), metadata=_VARIANT_MARKER),
    ]
)


def is_variant(t: pa.DataType) -> bool:
    """Whether `t` is the Arrow type of a Delta `variant` column (not a look-alike struct):
    its two binaries carry the marker; nullable or not (as data files hold them)."""
    return (
        pa.types.is_struct(t)
        and [f.name for f in t] == ["value", "metadata"]
        and all(f.type == pa.binary() and f.metadata == _VARIANT_MARKER for f in t)
    )


_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "integer": pa.int32(),
    "short": pa.int16(),
    "byte": pa.int8(),
    "float": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "void": pa.null(),
    "variant": _VARIANT,
}

# pyarrow types without parameters that Delta can hold, some of them widened.
_ARROW_NAMES: dict[pa.DataType, str] = {
    pa.string(): "string",
    pa.large_string(): "string",
    pa.string_view(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.binary_view(): "binary",
    pa.int8(): "byte",
    pa.int16(): "short",
    pa.int32(): "integer",
    pa.int64(): "long",
    pa.uint8(): "short",
    pa.uint16(): "integer",
    pa.uint32(): "long",
    pa.float16(): "float",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.date32(): "date",
    pa.date64(): "date",
    pa.null(): "void",
}

_STRING_TYPES = (pa.string(), pa.large_string(), pa.string_view())
_DECIMAL = re.compile(r"decimal\(\s*([0-9]+)\s*,\s*([0-9]+)\s*\)")
_MAX_DECIMAL_PRECISION = 38
_DECIMAL_CONTEXT = decimal.Context(prec=_MAX_DECIMAL_PRECISION)


def _shown(value: Any, limit: int = 200) -> str:
    """`value` as text for an error message, cut to `limit` characters."""
    text = value if isinstance(value, str) else _compact(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=repr)


def _decimal_type(precision: int, scale: int) -> pa.Decimal128Type | None:
    """decimal128(precision, scale) when Delta allows it, else None."""
    if 1 <= precision <= _MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
        return pa.decimal128(precision, scale)
    return None


# --------------------------------------------------------------------------- Delta -> pyarrow


def schema_from_json(schema_string: str | dict[str, Any]) -> pa.Schema:
    """The pyarrow schema of a Delta `schemaString` (a JSON text or its parsed object)."""
    if isinstance(schema_string, str):
        schema_string = parse_json(schema_string, f"schemaString {_shown(schema_string)}")
    if not isinstance(schema_string, dict) or schema_string.get("type") != "struct":
        raise CorruptLogError(f"schemaString is not a struct type: {_shown(schema_string)}")
    return pa.schema(_fields_from_json(schema_string))


def arrow_type(delta_type: str | dict[str, Any]) -> pa.DataType:
    """The pyarrow type of a Delta type: a primitive type name or a struct/array/map object."""
    if isinstance(delta_type, str):
        if delta_type in _PRIMITIVES:
            return _PRIMITIVES[delta_type]
        match = _DECIMAL.fullmatch(delta_type)
        decimal_type = _decimal_type(int(match[1]), int(match[2])) if match else None
        if decimal_type is not None:
            return decimal_type
        raise DeltaProtocolError(f"unsupported Delta data type {delta_type!r}")
    if not isinstance(delta_type, dict):
        raise CorruptLogError(
            f"schema holds a data type that is neither a name nor an object: {_shown(delta_type)}"
        )
    kind = delta_type.get("type")
    if kind == "struct":
        return pa.struct(_fields_from_json(delta_type))
    if kind == "array":
        element = arrow_type(_member(delta_type, "elementType", (str, dict)))
        contains_null = _member(delta_type, "containsNull", bool)
        return pa.list_(pa.field("element", element, nullable=contains_null))
    if kind == "map":
        key = arrow_type(_member(delta_type, "keyType", (str, dict)))
        value = arrow_type(_member(delta_type, "valueType", (str, dict)))
        value_contains_null = _member(delta_type, "valueContainsNull", bool)
        return pa.map_(
            pa.field("key", key, nullable=False),
            pa.field("value", value, nullable=value_contains_null),
        )
    raise DeltaProtocolError(f"unsupported Delta data type {_shown(delta_type)}")


def _member(obj: dict[str, Any], key: str, kinds: type | tuple[type, ...]) -> Any:
    """`obj[key]`, which must be an instance of `kinds`."""
    value = obj.get(key)
    if not isinstance(value, kinds):
        raise CorruptLogError(f"schema entry has a missing or malformed {key!r}: {_shown(obj)}")
    return value


def _fields_from_json(struct_json: dict[str, Any]) -> list[pa.Field]:
    fields = [_field_from_json(f) for f in _member(struct_json, "fields", list)]
    duplicate = _first_duplicate(f.name for f in fields)
    if duplicate is not None:
        raise CorruptLogError(
            f"schema has two columns named {duplicate!r} (names are case-insensitive): "
            f"{_shown(struct_json)}"
        )
    return fields


def _field_from_json(field_json: Any) -> pa.Field:
    if not isinstance(field_json, dict):
        raise CorruptLogError(f"schema field is not an object: {_shown(field_json)}")
    name = _member(field_json, "name", str)
    data_type = arrow_type(_member(field_json, "type", (str, dict)))
    nullable = _member(field_json, "nullable", bool)
    metadata = field_json.get("metadata", {})
    if not isinstance(metadata, dict):
        raise CorruptLogError(
            f"schema field {name!r} has a non-object metadata: {_shown(field_json)}"
        )
    field_metadata = {DELTA_METADATA_KEY: _compact(metadata).encode()} if metadata else None
    return pa.field(name, data_type, nullable=nullable, metadata=field_metadata)


def _first_duplicate(names: Iterable[str]) -> str | None:
    seen: set[str] = set()
    for name in names:
        if name.lower() in seen:
            return name
        seen.add(name.lower())
    return None


# --------------------------------------------------------------------------- pyarrow -> Delta


def schema_to_json(schema: pa.Schema) -> str:
    """The Delta `schemaString` (compact JSON) of a pyarrow schema.

    Raises ValueError for a type Delta cannot hold (see `delta_type_name`).
    """
    return _compact(_struct_json(schema))


def table_schema_json(schema: pa.Schema) -> dict[str, Any]:
    """The Delta schema (a JSON object) of `schema` as a table's new schema.

    Raises ValueError for a schema with no column or with a column of pyarrow type null (what
    an all-None column of pandas or `from_pylist` gets: as Delta's `void` no other engine
    reads it), besides `schema_to_json`'s.
    """
    if not len(schema):
        raise ValueError("the data has no column; a Delta table needs at least one")

    def void(t: pa.DataType) -> bool:
        if pa.types.is_null(t):
            return True
        return any(void(t.field(i).type) for i in range(t.num_fields))

    untyped = [f.name for f in schema if void(f.type)]
    if untyped:
        raise ValueError(
            f"columns {untyped} have pyarrow type null (every value None), which other Delta "
            "readers cannot read; cast them to the type they should hold (data.cast(schema))"
        )
    return dict(json.loads(schema_to_json(schema)))


def merged_schema_json(table: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """Delta's schema merging for a write with mergeSchema: `table` (a schemaString object)
    with the fields of `given` it lacks, at any depth (structs, array elements, map keys and
    values), added nullable after its own; names match without regard to case. A type that
    differs otherwise stays the table's (the write then checks that the data fits it).

    >>> long, text = {"name": "a", "type": "long"}, {"name": "b", "type": "string"}
    >>> s = merged_schema_json({"type": "struct", "fields": [{"name": "s", "type":
    ...     {"type": "struct", "fields": [long]}}]}, {"type": "struct", "fields": [{"name":
    ...     "s", "type": {"type": "struct", "fields": [long, text]}}]})
    >>> [f["name"] for f in s["fields"][0]["type"]["fields"]]
    ['a', 'b']
    """
    merged = _merged_type(table, given)
    assert isinstance(merged, dict), "a schemaString object is a struct"
    return merged


def _merged_type(table: Any, given: Any) -> Any:
    if not isinstance(table, Mapping) or not isinstance(given, Mapping):
        return table
    kind = table.get("type")
    if kind != given.get("type"):
        return table
    if kind == "array":
        return {**table, "elementType": _merged_type(table["elementType"], given["elementType"])}
    if kind == "map":
        key = _merged_type(table["keyType"], given["keyType"])
        value = _merged_type(table["valueType"], given["valueType"])
        return {**table, "keyType": key, "valueType": value}
    if kind != "struct":
        return table
    theirs = {f["name"].lower(): f for f in given["fields"]}
    fields = [
        {**f, "type": _merged_type(f["type"], theirs[f["name"].lower()]["type"])}
        if f["name"].lower() in theirs
        else dict(f)
        for f in table["fields"]
    ]
    ours = {f["name"].lower() for f in table["fields"]}
    fields += [{**f, "nullable": True} for f in given["fields"] if f["name"].lower() not in ours]
    return {**table, "fields": fields}


def delta_field_metadata(field: pa.Field) -> dict[str, Any]:
    """The Delta `metadata` object carried by a pyarrow field ({} when it has none)."""
    raw = (field.metadata or {}).get(DELTA_METADATA_KEY)
    if raw is None:
        return {}
    try:
        metadata = json.loads(raw)
    except ValueError as exc:
        raise ValueError(
            f"field {field.name!r} has Delta metadata that is not JSON: {raw!r}"
        ) from exc
    if not isinstance(metadata, dict):
        raise ValueError(f"field {field.name!r} has Delta metadata that is not an object: {raw!r}")
    return metadata


def delta_type_name(t: pa.DataType) -> str | dict[str, Any]:
    """The Delta type of a pyarrow type: a primitive type name or a struct/array/map object.

    Wider pyarrow types map to the Delta type that holds them: large/view strings and binaries,
    any timestamp unit (with a time zone: `timestamp`, without: `timestamp_ntz`), date64,
    float16, uint8/16/32 (to the next wider signed integer), dictionary-encoded strings and every
    list flavour. Raises ValueError for the types Delta cannot hold, such as uint64, time,
    duration, intervals, unions and other dictionaries.
    """
    if t in _ARROW_NAMES:
        return _ARROW_NAMES[t]
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t):
        if _decimal_type(t.precision, t.scale) is None:
            raise ValueError(f"Delta cannot hold {t}: precision must be 1-38, scale 0-precision")
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_struct(t):
        return "variant" if is_variant(t) else _struct_json(t)
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return {
            "type": "array",
            "elementType": delta_type_name(t.value_type),
            "containsNull": t.value_field.nullable,
        }
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": delta_type_name(t.key_type),
            "valueType": delta_type_name(t.item_type),
            "valueContainsNull": t.item_field.nullable,
        }
    if pa.types.is_dictionary(t) and t.value_type in _STRING_TYPES:
        return "string"
    raise ValueError(f"Delta has no data type for pyarrow type {t}")


def _struct_json(fields: pa.Schema | pa.StructType) -> dict[str, Any]:
    duplicate = _first_duplicate(f.name for f in fields)
    if duplicate is not None:
        raise ValueError(f"Delta needs column names unique regardless of case: {duplicate!r}")
    return {
        "type": "struct",
        "fields": [
            {
                "name": f.name,
                "type": delta_type_name(f.type),
                "nullable": f.nullable,
                "metadata": delta_field_metadata(f),
            }
            for f in fields
        ],
    }


# --------------------------------------------------------------------------- partition values

# What each partition column type accepts; the same patterns drive the scalar and the vectorised
# parsers (Python `re` and RE2 agree on them), so both accept exactly the same strings.
_NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001-9999, as Python dates
_DATE = _YEAR + r"-[0-9]{2}-[0-9]{2}"
_TIMESTAMP = _DATE + r"[ T][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,6})?"
_PATTERNS = {
    "integer": r"-?[0-9]+",
    "floating": _NUMBER + r"|[+-]?(?i:inf|infinity|nan)",
    "decimal": _NUMBER,
    "boolean": r"(?i:true|false)",
    "date": _DATE,
    "timestamp": _TIMESTAMP + "(?:Z|[+-][0-9]{2}:?[0-9]{2})?",  # UTC, or an offset to it
    "timestamp_ntz": _TIMESTAMP,
}
_COMPILED = {kind: re.compile(pattern) for kind, pattern in _PATTERNS.items()}


def _kind(t: pa.DataType) -> str:
    """The partition value family of the pyarrow type of a Delta primitive type."""
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t):
        return "floating"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_string(t):
        return "string"
    if pa.types.is_binary(t):
        return "binary"
    if pa.types.is_null(t):
        return "void"
    raise DeltaProtocolError(f"a partition column cannot have the Delta type {t}")


def _bad_value(value: str, delta_type: str, why: str = "") -> CorruptLogError:
    reason = f" ({why})" if why else ""
    return CorruptLogError(f"partition value {value!r} is not a valid {delta_type}{reason}")


def parse_partition_value(value: str | None, delta_type: str) -> object:
    """The Python value of a serialized partition value of Delta type `delta_type`.

    None and "" are null. Timestamps are accepted as `YYYY-MM-DD HH:MM:SS[.ffffff]` and as ISO 8601
    `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`, a `timestamp` also with an offset (`+00:00`, `-0130`: other
    writers' ISO 8601); `timestamp` values are timezone-aware UTC datetimes. The
    spec reads the first form in "the time zone of the system which wrote to the table"; like
    delta-rs, we take it as UTC, which is what delta-rs and Spark with a UTC session write.
    `timestamp_ntz` values are naive datetimes. Binary values are the UTF-8 bytes of the string,
    as Spark and the Delta kernels read them. Raises CorruptLogError for a malformed value.
    """
    target = arrow_type(delta_type)
    kind = _kind(target)
    if value is None or value == "":
        return None
    if kind == "string":
        return value
    if kind == "binary":
        return value.encode("utf-8")
    if kind == "void" or not _COMPILED[kind].fullmatch(value):
        raise _bad_value(value, delta_type)
    try:
        return _PARSERS[kind](value, target)
    except (ValueError, ArithmeticError) as exc:
        raise _bad_value(value, delta_type, str(exc)) from exc


def _in_range(number: int, t: pa.DataType) -> int:
    """`number`, if the signed integer type `t` holds it."""
    bound = 1 << (t.bit_width - 1)
    if not -bound <= number < bound:
        raise ValueError(f"{number} is out of range for {t}")
    return number


def _parse_floating(value: str, t: pa.DataType) -> float:
    number = float(value)
    return number if t.bit_width == 64 else _to_float32(number)


def _to_float32(number: float) -> float:
    """`number` rounded to the nearest float32, overflowing to infinity as a cast does."""
    try:
        rounded: float = struct.unpack("<f", struct.pack("<f", number))[0]
        return rounded
    except OverflowError:
        return math.copysign(math.inf, number)


def _parse_decimal(value: str, t: pa.DataType) -> decimal.Decimal:
    return _fit_decimal(decimal.Decimal(value), t)


def _fit_decimal(number: decimal.Decimal, t: pa.DataType) -> decimal.Decimal:
    """`number` at the scale of decimal type `t`; ValueError if that loses digits or overflows."""
    if not number.is_finite():
        raise ValueError("not a finite number")
    whole_digits = t.precision - t.scale
    if number and number.adjusted() >= whole_digits:
        raise ValueError(f"more than {whole_digits} digits before the decimal point")
    fitted = number.quantize(decimal.Decimal(1).scaleb(-t.scale), context=_DECIMAL_CONTEXT)
    if fitted != number:
        raise ValueError(f"more than {t.scale} digits after the decimal point")
    return fitted


def _parse_timestamp(value: str, t: pa.DataType) -> dt.datetime:
    parsed = dt.datetime.fromisoformat(value.removesuffix("Z"))
    if t.tz is None:
        return parsed
    return parsed.astimezone(dt.UTC) if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


_PARSERS = {
    "integer": lambda value, t: _in_range(int(value), t),
    "floating": _parse_floating,
    "decimal": _parse_decimal,
    "boolean": lambda value, _t: value.lower() == "true",
    "date": lambda value, _t: dt.date.fromisoformat(value),
    "timestamp": _parse_timestamp,
    "timestamp_ntz": _parse_timestamp,
}


def serialize_partition_value(value: object, delta_type: str) -> str | None:
    """The partition value string of `value` for a column of Delta type `delta_type`.

    None stays None (and a string "" reads back as null). Timestamps are written as
    `YYYY-MM-DD HH:MM:SS.ffffff` in UTC: aware datetimes are converted, naive ones are taken as
    UTC; `timestamp_ntz` takes naive datetimes only. Decimals are written at the column's scale
    without exponent, floats as Python's repr with Java's spellings of NaN and the infinities,
    binary values as their UTF-8 text (other bytes are refused).
    Raises TypeError for a Python value of the wrong kind and ValueError for one out of range.
    """
    target = arrow_type(delta_type)
    kind = _kind(target)
    if value is None:
        return None
    if not isinstance(value, _ACCEPTED[kind]) or (kind != "boolean" and isinstance(value, bool)):
        raise TypeError(f"cannot write {value!r} as a partition value of type {delta_type}")
    serialized: str = _SERIALIZERS[kind](value, target)
    return serialized


def _serialize_integer(value: Any, t: pa.DataType) -> str:
    return str(_in_range(operator.index(value), t))


def _serialize_floating(value: Any, _t: pa.DataType) -> str:
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    return repr(number)


def _serialize_timestamp(value: dt.datetime, t: pa.DataType) -> str:
    if value.tzinfo is not None:
        if t.tz is None:
            raise ValueError(f"a timestamp_ntz partition value must be naive, got {value!r}")
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    return value.isoformat(sep=" ", timespec="microseconds")


def _serialize_binary(value: bytes | bytearray | memoryview, _t: pa.DataType) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"binary partition value {bytes(value)!r} is not UTF-8, which Delta readers expect"
        ) from exc


_ACCEPTED: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "binary": (bytes, bytearray, memoryview),
    "integer": numbers.Integral,
    "floating": numbers.Real,
    "decimal": (decimal.Decimal, numbers.Integral),
    "boolean": bool,
    "date": dt.date,
    "timestamp": dt.datetime,
    "timestamp_ntz": dt.datetime,
    "void": (),
}

_SERIALIZERS: dict[str, Callable[[Any, pa.DataType], str]] = {
    "string": lambda value, _t: value,
    "binary": _serialize_binary,
    "integer": _serialize_integer,
    "floating": _serialize_floating,
    "decimal": lambda value, t: format(_fit_decimal(decimal.Decimal(value), t), "f"),
    "boolean": lambda value, _t: "true" if value else "false",
    "date": lambda value, _t: _serialize_date(value),
    "timestamp": _serialize_timestamp,
    "timestamp_ntz": _serialize_timestamp,
}


def _serialize_date(value: dt.date) -> str:
    if isinstance(value, dt.datetime):
        raise TypeError(f"cannot write the datetime {value!r} as a date partition value")
    return value.isoformat()


def partition_values_to_arrow(values: pa.Array | pa.ChunkedArray, delta_type: str) -> pa.Array:
    """The typed array (`arrow_type(delta_type)`) of a column of serialized partition values.

    Vectorised with pyarrow compute; accepts exactly what `parse_partition_value` accepts and
    gives the same values. Raises CorruptLogError naming the first malformed value.
    """
    target = arrow_type(delta_type)
    kind = _kind(target)
    strings = values.cast(pa.string())
    if isinstance(strings, pa.ChunkedArray):
        strings = contiguous(strings)
    empty = pc.equal(strings, scalar("", pa.string()))
    strings = pc.if_else(empty, scalar(None, pa.string()), strings)
    if kind == "string":
        return strings
    if kind == "binary":
        return strings.cast(pa.binary())
    if kind == "void":
        if strings.null_count < len(strings):
            raise _bad_value(strings.drop_null()[0].as_py(), delta_type)
        return pa.nulls(len(strings))
    valid = pc.match_substring_regex(strings, f"^(?:{_PATTERNS[kind]})$")
    bad = pc.invert(pc.fill_null(valid, scalar(True, pa.bool_())))
    if pc.any(bad).as_py():
        raise _bad_value(strings.filter(bad)[0].as_py(), delta_type)
    try:
        if kind == "timestamp":  # each with its zone (Z when it has none), as Arrow casts them
            zoned = pc.match_substring_regex(strings, "(?:Z|[+-][0-9]{2}:?[0-9]{2})$")
            z, none = scalar("Z", pa.string()), scalar("", pa.string())  # (str args load pandas)
            utc = pc.if_else(zoned, strings, pc.binary_join_element_wise(strings, z, none))
            return utc.cast(pa.timestamp("us", "UTC")).cast(target)
        if kind == "timestamp_ntz":
            return strings.cast(pa.timestamp("us")).cast(target)
        return strings.cast(target)
    except pa.ArrowInvalid as exc:
        # Out of range or not a calendar value: name the culprit with the scalar parser's message.
        for text in strings.unique().drop_null().to_pylist():
            parse_partition_value(text, delta_type)
        raise CorruptLogError(f"partition values of type {delta_type} do not parse: {exc}") from exc


# --------------------------------------------------------------------------- partition directories

# The characters Hive and Spark percent-encode in partition directory names.
_ESCAPED = [*range(0x01, 0x20), *b"\"#%'*/:=?\\\x7f{[]}^"]
_ESCAPES = {code: f"%{code:02X}" for code in _ESCAPED}
_PERCENT_CODE = re.compile(r"%([0-9A-Fa-f]{2})")


def escape_partition_value(value: str) -> str:
    """`value` with the characters Hive escapes in partition directory names as `%XX`."""
    return value.translate(_ESCAPES)


def unescape_partition_value(text: str) -> str:
    """The inverse of `escape_partition_value`: every `%XX` decoded, other text kept."""
    return _PERCENT_CODE.sub(lambda match: chr(int(match[1], 16)), text)


def partition_path(
    partition_values: Mapping[str, str | None], partition_columns: Sequence[str]
) -> str:
    """The Hive-style directory of a partition, such as `date=2020-01-01/region=eu%3Dwest`.

    `partition_values` holds serialized values; null and "" become `__HIVE_DEFAULT_PARTITION__`.
    """
    parts = []
    for column in partition_columns:
        value = partition_values[column]
        text = escape_partition_value(value) if value else HIVE_DEFAULT_PARTITION
        parts.append(f"{escape_partition_value(column)}={text}")
    return "/".join(parts)
