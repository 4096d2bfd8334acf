"""Delta schema JSON <-> pyarrow, partition values and Hive partition directories."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import re
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine.errors import CorruptLogError, DeltaProtocolError
from airflow_delta.engine.protocol.schema import (
    DELTA_METADATA_KEY,
    HIVE_DEFAULT_PARTITION,
    arrow_type,
    delta_field_metadata,
    delta_type_name,
    escape_partition_value,
    parse_partition_value,
    partition_path,
    partition_values_to_arrow,
    schema_from_json,
    schema_to_json,
    serialize_partition_value,
    unescape_partition_value,
)

UTC = dt.UTC

PRIMITIVES = [
    ("string", pa.string()),
    ("long", pa.int64()),
    ("integer", pa.int32()),
    ("short", pa.int16()),
    ("byte", pa.int8()),
    ("float", pa.float32()),
    ("double", pa.float64()),
    ("boolean", pa.bool_()),
    ("binary", pa.binary()),
    ("date", pa.date32()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("timestamp_ntz", pa.timestamp("us")),
    ("decimal(10,2)", pa.decimal128(10, 2)),
    ("decimal(38,0)", pa.decimal128(38, 0)),
    ("decimal(1,1)", pa.decimal128(1, 1)),
    ("void", pa.null()),
]

# The example of PROTOCOL.md, "Schema Serialization Format".
SPEC_EXAMPLE = """
{
  "type" : "struct",
  "fields" : [ {
    "name" : "a", "type" : "integer", "nullable" : false, "metadata" : { }
  }, {
    "name" : "b",
    "type" : {
      "type" : "struct",
      "fields" : [ { "name" : "d", "type" : "integer", "nullable" : false, "metadata" : { } } ]
    },
    "nullable" : true, "metadata" : { }
  }, {
    "name" : "c",
    "type" : { "type" : "array", "elementType" : "integer", "containsNull" : false },
    "nullable" : true, "metadata" : { }
  }, {
    "name" : "e",
    "type" : {
      "type" : "array",
      "elementType" : {
        "type" : "struct",
        "fields" : [ { "name" : "d", "type" : "integer", "nullable" : false, "metadata" : { } } ]
      },
      "containsNull" : true
    },
    "nullable" : true, "metadata" : { }
  }, {
    "name" : "f",
    "type" : {
      "type" : "map", "keyType" : "string", "valueType" : "string", "valueContainsNull" : true
    },
    "nullable" : true, "metadata" : { }
  } ]
}
"""

# The column mapping example of PROTOCOL.md, "Checkpoint Schema".
COLUMN_MAPPING_EXAMPLE = """
{
  "type" : "struct",
  "fields" : [ {
    "name" : "asset", "type" : "string", "nullable" : true,
    "metadata" : {
      "delta.columnMapping.id": 1,
      "delta.columnMapping.physicalName": "col-b96921f0-2329-4cb3-8d79-184b2bdab23b"
    }
  }, {
    "name" : "quantity", "type" : "double", "nullable" : true,
    "metadata" : {
      "delta.columnMapping.id": 2,
      "delta.columnMapping.physicalName": "col-04ee4877-ee53-4cb9-b1fb-1a4eb74b508c"
    }
  }, {
    "name" : "date", "type" : "date", "nullable" : true,
    "metadata" : {
      "delta.columnMapping.id": 3,
      "delta.columnMapping.physicalName": "col-798f4abc-c63f-444c-9a04-e2cf1ecba115"
    }
  }, {
    "name" : "region", "type" : "string", "nullable" : true,
    "metadata" : {
      "delta.columnMapping.id": 4,
      "delta.columnMapping.physicalName": "col-19034dc3-8e3d-4156-82fc-8e05533c088e"
    }
  } ]
}
"""


def one_column(delta_type: str | dict, nullable: bool = True, metadata: dict | None = None) -> str:
    """A schemaString with a single column `x`."""
    field = {"name": "x", "type": delta_type, "nullable": nullable, "metadata": metadata or {}}
    return json.dumps({"type": "struct", "fields": [field]})


def assert_round_trips(schema_string: str) -> pa.Schema:
    """Both round trips hold for `schema_string`; returns its pyarrow schema."""
    schema = schema_from_json(schema_string)
    text = schema_to_json(schema)
    assert json.loads(text) == json.loads(schema_string)
    assert schema_from_json(text).equals(schema, check_metadata=True)
    return schema


# --------------------------------------------------------------------------- schema


@pytest.mark.parametrize(("name", "expected"), PRIMITIVES)
def test_primitive_types_both_ways(name: str, expected: pa.DataType) -> None:
    assert arrow_type(name) == expected
    assert delta_type_name(expected) == name
    schema = assert_round_trips(one_column(name))
    assert schema.field("x").type == expected


def test_decimal_with_spaces_is_read_and_written_compactly() -> None:
    schema = schema_from_json(one_column("decimal( 10 , 2 )"))
    assert schema.field("x").type == pa.decimal128(10, 2)
    assert json.loads(schema_to_json(schema))["fields"][0]["type"] == "decimal(10,2)"


@pytest.mark.parametrize(
    "name",
    ["interval", "int", "char(3)", "decimal", "decimal(39,0)", "decimal(5,6)", "decimal(0,0)"],
)
def test_unknown_type_name_is_a_protocol_error(name: str) -> None:
    with pytest.raises(DeltaProtocolError, match=re.escape(repr(name))):
        schema_from_json(one_column(name))


def test_unknown_complex_type_is_a_protocol_error() -> None:
    with pytest.raises(DeltaProtocolError, match="udt"):
        schema_from_json(one_column({"type": "udt", "class": "x.Y"}))


@pytest.mark.parametrize(
    ("schema_string", "shown"),
    [
        ('{"type":"struct","fields":[', '{"type":"struct","fields":['),
        ('{"type":"array","elementType":"long","containsNull":true}', '"array"'),
        ('{"type":"struct"}', '{"type":"struct"}'),
        ('{"type":"struct","fields":[{"name":"x","type":"long","metadata":{}}]}', '"x"'),
        ('{"type":"struct","fields":[{"name":"x","nullable":true}]}', '"x"'),
        ('{"type":"struct","fields":[{"type":"long","nullable":true}]}', '"long"'),
        ('{"type":"struct","fields":[{"name":"x","type":7,"nullable":true}]}', "7"),
        ('{"type":"struct","fields":["x"]}', "x"),
        (one_column("long", metadata=None).replace("{}", "[]"), "[]"),
        (one_column({"type": "array", "elementType": "long"}), '"elementType"'),
        (one_column({"type": "array", "containsNull": True}), '"containsNull"'),
        (one_column({"type": "map", "keyType": "string", "valueType": "long"}), '"keyType"'),
        (one_column({"type": "struct", "fields": {}}), '"fields"'),
    ],
)
def test_malformed_schema_string_is_corrupt(schema_string: str, shown: str) -> None:
    with pytest.raises(CorruptLogError) as info:
        schema_from_json(schema_string)
    assert shown in str(info.value)


def test_column_names_must_be_unique_regardless_of_case() -> None:
    fields = [
        {"name": "Id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "iD", "type": "long", "nullable": True, "metadata": {}},
    ]
    with pytest.raises(CorruptLogError, match="iD"):
        schema_from_json({"type": "struct", "fields": fields})
    nested = one_column({"type": "struct", "fields": fields})
    with pytest.raises(CorruptLogError, match="iD"):
        schema_from_json(nested)
    with pytest.raises(ValueError, match="iD"):
        schema_to_json(pa.schema([pa.field("Id", pa.int64()), pa.field("iD", pa.int64())]))


def test_spec_example_schema() -> None:
    schema = assert_round_trips(SPEC_EXAMPLE)
    struct_d = pa.struct([pa.field("d", pa.int32(), nullable=False)])
    expected = pa.schema(
        [
            pa.field("a", pa.int32(), nullable=False),
            pa.field("b", struct_d),
            pa.field("c", pa.list_(pa.field("element", pa.int32(), nullable=False))),
            pa.field("e", pa.list_(pa.field("element", struct_d, nullable=True))),
            pa.field(
                "f",
                pa.map_(
                    pa.field("key", pa.string(), nullable=False),
                    pa.field("value", pa.string(), nullable=True),
                ),
            ),
        ]
    )
    assert schema.equals(expected, check_metadata=True)
    assert schema.field("c").type.value_field.nullable is False
    assert schema.field("e").type.value_field.nullable is True
    assert schema.field("f").type.item_field.nullable is True


@pytest.mark.parametrize("contains_null", [True, False])
@pytest.mark.parametrize("nullable", [True, False])
def test_nested_nullability_both_ways(contains_null: bool, nullable: bool) -> None:
    element = {
        "type": "map",
        "keyType": {"type": "array", "elementType": "string", "containsNull": contains_null},
        "valueType": {
            "type": "struct",
            "fields": [{"name": "y", "type": "date", "nullable": nullable, "metadata": {}}],
        },
        "valueContainsNull": not contains_null,
    }
    array = {"type": "array", "elementType": element, "containsNull": contains_null}
    schema = assert_round_trips(one_column(array, nullable=nullable))
    field = schema.field("x")
    assert field.nullable is nullable
    assert field.type.value_field.nullable is contains_null
    map_type = field.type.value_type
    assert map_type.key_field.nullable is False
    assert map_type.key_type.value_field.nullable is contains_null
    assert map_type.item_field.nullable is (not contains_null)
    assert map_type.item_type.field("y").nullable is nullable


def test_column_mapping_metadata_is_preserved() -> None:
    schema = assert_round_trips(COLUMN_MAPPING_EXAMPLE)
    asset = schema.field("asset")
    assert asset.metadata == {
        DELTA_METADATA_KEY: b'{"delta.columnMapping.id":1,'
        b'"delta.columnMapping.physicalName":"col-b96921f0-2329-4cb3-8d79-184b2bdab23b"}'
    }
    assert delta_field_metadata(schema.field("region")) == {
        "delta.columnMapping.id": 4,
        "delta.columnMapping.physicalName": "col-19034dc3-8e3d-4156-82fc-8e05533c088e",
    }


def test_nested_and_rich_metadata_is_preserved_exactly() -> None:
    inner_meta = {"comment": "prix en €", "delta.columnMapping.id": 7}
    outer_meta = {
        "delta.generationExpression": "CAST(ts AS DATE)",
        "delta.invariants": '{"expression":{"expression":"x > 3"}}',
        "delta.typeChanges": [{"fromType": "integer", "toType": "long", "tableVersion": 3}],
        "delta.identity.start": 1,
        "delta.identity.allowExplicitInsert": False,
        "nested": {"b": 1.5, "a": None},
    }
    inner = {"name": "p", "type": "long", "nullable": True, "metadata": inner_meta}
    element = {"type": "struct", "fields": [inner]}
    schema_string = one_column(
        {"type": "array", "elementType": element, "containsNull": True}, metadata=outer_meta
    )
    schema = assert_round_trips(schema_string)
    assert delta_field_metadata(schema.field("x")) == outer_meta
    assert list(delta_field_metadata(schema.field("x"))["nested"]) == ["b", "a"]
    assert delta_field_metadata(schema.field("x").type.value_type.field("p")) == inner_meta
    assert schema.field("x").type.value_type.field("p").metadata[DELTA_METADATA_KEY].decode() == (
        '{"comment":"prix en €","delta.columnMapping.id":7}'
    )


def test_empty_metadata_leaves_the_field_bare_and_is_always_written() -> None:
    schema = schema_from_json(
        '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true}]}'
    )
    assert schema.field("x").metadata is None
    assert schema_to_json(schema) == (
        '{"type":"struct","fields":[{"name":"x","type":"long","nullable":true,"metadata":{}}]}'
    )


def test_schema_from_json_accepts_a_parsed_object() -> None:
    parsed = json.loads(SPEC_EXAMPLE)
    assert schema_from_json(parsed).equals(schema_from_json(SPEC_EXAMPLE), check_metadata=True)


def test_variant_is_a_marked_struct_and_a_plain_struct_stays_a_struct() -> None:
    variant = arrow_type("variant")
    assert variant == pa.struct(  # null binaries where the variant is null
        [pa.field("value", pa.binary()), pa.field("metadata", pa.binary())]
    )
    assert delta_type_name(variant) == "variant"
    assert_round_trips(one_column("variant"))
    look_alike = {
        "type": "struct",
        "fields": [
            {"name": "value", "type": "binary", "nullable": True, "metadata": {}},
            {"name": "metadata", "type": "binary", "nullable": True, "metadata": {}},
        ],
    }
    schema = assert_round_trips(one_column(look_alike))
    assert schema.field("x").type == variant
    assert delta_type_name(pa.struct(list(variant))) == "variant"  # fields keep the marker
    unmarked = pa.struct([pa.field(f.name, f.type) for f in variant])
    assert isinstance(delta_type_name(unmarked), dict)


@pytest.mark.parametrize(
    ("arrow", "expected"),
    [
        (pa.large_string(), "string"),
        (pa.string_view(), "string"),
        (pa.dictionary(pa.int32(), pa.string()), "string"),
        (pa.dictionary(pa.int8(), pa.large_string()), "string"),
        (pa.large_binary(), "binary"),
        (pa.binary_view(), "binary"),
        (pa.binary(16), "binary"),
        (pa.timestamp("s", tz="UTC"), "timestamp"),
        (pa.timestamp("ms", tz="Europe/Paris"), "timestamp"),
        (pa.timestamp("us", tz="+02:00"), "timestamp"),
        (pa.timestamp("ns", tz="UTC"), "timestamp"),
        (pa.timestamp("s"), "timestamp_ntz"),
        (pa.timestamp("ms"), "timestamp_ntz"),
        (pa.timestamp("ns"), "timestamp_ntz"),
        (pa.date64(), "date"),
        (pa.uint8(), "short"),
        (pa.uint16(), "integer"),
        (pa.uint32(), "long"),
        (pa.float16(), "float"),
        (pa.decimal256(20, 3), "decimal(20,3)"),
        (pa.decimal32(5, 1), "decimal(5,1)"),
        (pa.decimal64(18, 18), "decimal(18,18)"),
        (pa.list_(pa.int64()), {"type": "array", "elementType": "long", "containsNull": True}),
        (
            pa.large_list(pa.field("v", pa.large_string(), nullable=False)),
            {"type": "array", "elementType": "string", "containsNull": False},
        ),
        (pa.list_(pa.int8(), 3), {"type": "array", "elementType": "byte", "containsNull": True}),
        (
            pa.list_view(pa.bool_()),
            {"type": "array", "elementType": "boolean", "containsNull": True},
        ),
        (
            pa.map_(pa.large_string(), pa.uint8()),
            {"type": "map", "keyType": "string", "valueType": "short", "valueContainsNull": True},
        ),
    ],
)
def test_pyarrow_only_types_map_to_delta(arrow: pa.DataType, expected: str | dict) -> None:
    assert delta_type_name(arrow) == expected


@pytest.mark.parametrize(
    "arrow",
    [
        pa.uint64(),
        pa.time32("s"),
        pa.time64("us"),
        pa.duration("us"),
        pa.month_day_nano_interval(),
        pa.dictionary(pa.int8(), pa.int64()),
        pa.decimal256(40, 2),
        pa.decimal128(10, -2),
        pa.dense_union([pa.field("a", pa.int8())]),
        pa.uuid(),
        pa.list_(pa.uint64()),
        pa.struct([pa.field("t", pa.time32("ms"))]),
    ],
)
def test_types_delta_cannot_hold_are_refused(arrow: pa.DataType) -> None:
    with pytest.raises(ValueError, match="Delta"):
        delta_type_name(arrow)
    with pytest.raises(ValueError):
        schema_to_json(pa.schema([pa.field("x", arrow)]))


def test_schema_to_json_of_a_pandas_style_schema() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.uint32(), nullable=False),
            pa.field("name", pa.large_string()),
            pa.field("at", pa.timestamp("ns")),
            pa.field("tags", pa.list_(pa.string())),
        ],
        metadata={b"pandas": b"{}"},
    )
    assert json.loads(schema_to_json(schema)) == {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": False, "metadata": {}},
            {"name": "name", "type": "string", "nullable": True, "metadata": {}},
            {"name": "at", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
            {
                "name": "tags",
                "type": {"type": "array", "elementType": "string", "containsNull": True},
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    assert " " not in schema_to_json(schema)


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]"])
def test_bad_delta_metadata_on_a_field_is_refused(raw: bytes) -> None:
    field = pa.field("x", pa.int64(), metadata={DELTA_METADATA_KEY: raw})
    with pytest.raises(ValueError, match="'x'"):
        schema_to_json(pa.schema([field]))


# --------------------------------------------------------------------------- partition values

AWARE = dt.datetime(2020, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)

PARSED = [
    ("string", "a b/c=d%e", "a b/c=d%e"),
    ("string", "\u00e9\n\t\"'", "\u00e9\n\t\"'"),
    ("string", " ", " "),
    ("long", "-9223372036854775808", -(2**63)),
    ("long", "9223372036854775807", 2**63 - 1),
    ("integer", "-2147483648", -(2**31)),
    ("integer", "007", 7),
    ("short", "32767", 32767),
    ("byte", "-128", -128),
    ("byte", "-0", 0),
    ("double", "1.5", 1.5),
    ("double", "-1.0E-5", -1e-5),
    ("double", "1e+20", 1e20),
    ("double", ".5", 0.5),
    ("double", "1.", 1.0),
    ("double", "Infinity", math.inf),
    ("double", "-Infinity", -math.inf),
    ("double", "inf", math.inf),
    ("double", "1e400", math.inf),
    ("float", "0.1", 0.10000000149011612),
    ("float", "1e39", math.inf),
    ("float", "-3.4028235e38", -3.4028234663852886e38),
    ("decimal(10,2)", "1.5", Decimal("1.50")),
    ("decimal(10,2)", "-12345678.99", Decimal("-12345678.99")),
    ("decimal(10,2)", "1E+2", Decimal("100.00")),
    ("decimal(10,2)", "100.000", Decimal("100.00")),
    ("decimal(38,8)", "1E-8", Decimal("0.00000001")),
    ("decimal(2,2)", "0", Decimal("0.00")),
    ("decimal(2,2)", "-.99", Decimal("-0.99")),
    ("decimal(38,0)", "9" * 38, Decimal("9" * 38)),
    ("boolean", "true", True),
    ("boolean", "false", False),
    ("boolean", "TRUE", True),
    ("boolean", "False", False),
    ("date", "2020-02-29", dt.date(2020, 2, 29)),
    ("date", "0001-01-01", dt.date(1, 1, 1)),
    ("date", "9999-12-31", dt.date(9999, 12, 31)),
    ("timestamp", "2020-01-02 03:04:05.123456", AWARE),
    ("timestamp", "2020-01-02T03:04:05.123456Z", AWARE),
    ("timestamp", "2020-01-02 03:04:05", AWARE.replace(microsecond=0)),
    ("timestamp", "2020-01-02T03:04:05Z", AWARE.replace(microsecond=0)),
    ("timestamp", "2020-01-02 03:04:05.1", AWARE.replace(microsecond=100000)),
    # other writers' ISO 8601 with an offset: the same instant in UTC
    ("timestamp", "2020-01-02T03:04:05.123456+00:00", AWARE),
    ("timestamp", "2020-01-02T04:34:05.123456+01:30", AWARE),
    ("timestamp", "2020-01-02 01:34:05.123456-0130", AWARE),
    ("timestamp", "2020-01-02 03:04:05.0001", AWARE.replace(microsecond=100)),
    ("timestamp_ntz", "2020-01-02 03:04:05.123456", AWARE.replace(tzinfo=None)),
    ("timestamp_ntz", "2020-01-02T03:04:05", AWARE.replace(tzinfo=None, microsecond=0)),
    ("binary", "\u0001\u0002\u0003", b"\x01\x02\x03"),
    ("binary", "caf\u00e9", b"caf\xc3\xa9"),
    ("binary", "\u20ac", b"\xe2\x82\xac"),
]

BAD = [
    ("long", "9223372036854775808"),
    ("integer", "2147483648"),
    ("short", "-32769"),
    ("byte", "128"),
    ("integer", "+5"),
    ("integer", "0x10"),
    ("integer", " 5"),
    ("integer", "1_000"),
    ("integer", "1.0"),
    ("long", "twelve"),
    ("double", "1,5"),
    ("double", "0x1p3"),
    ("double", "1_0.0"),
    ("double", " 1.5"),
    ("double", "nan nan"),
    ("decimal(10,2)", "1.234"),
    ("decimal(10,2)", "123456789.1"),
    ("decimal(2,2)", "1"),
    ("decimal(10,2)", "NaN"),
    ("decimal(10,2)", "1,5"),
    ("decimal(38,0)", "1E+38"),
    ("boolean", "1"),
    ("boolean", "yes"),
    ("boolean", "t"),
    ("date", "2020-02-30"),
    ("date", "1900-02-29"),
    ("date", "2020-1-1"),
    ("date", "20200101"),
    ("date", "0000-01-01"),
    ("date", "2020-01-01 00:00:00"),
    ("timestamp", "2020-01-01"),
    ("timestamp", "2020-01-01 00:00"),
    ("timestamp", "2020-01-01 24:00:00"),
    ("timestamp", "2020-01-01 23:59:60"),
    ("timestamp", "2020-01-01 00:00:00.1234567"),
    ("timestamp", "2020-01-01 00:00:00+1:00"),
    ("timestamp", "2020-01-01 00:00:00 +01:00"),
    ("timestamp_ntz", "2020-01-01T00:00:00+01:00"),
    ("timestamp", "2020-01-01T00:00:00z"),
    ("timestamp", "0000-01-01 00:00:00"),
    ("timestamp_ntz", "2020-01-01T00:00:00Z"),
    ("timestamp_ntz", "2020-13-01 00:00:00"),
    ("void", "x"),
]


@pytest.mark.parametrize(("delta_type", "text", "expected"), PARSED)
def test_parse_partition_value(delta_type: str, text: str, expected: object) -> None:
    value = parse_partition_value(text, delta_type)
    assert type(value) is type(expected)
    assert value == expected
    if isinstance(expected, dt.datetime):
        assert value.tzinfo == expected.tzinfo
    if isinstance(expected, Decimal):
        assert value.as_tuple() == expected.as_tuple()


@pytest.mark.parametrize("text", ["NaN", "nan", "-nan", "NAN"])
@pytest.mark.parametrize("delta_type", ["double", "float"])
def test_parse_nan(text: str, delta_type: str) -> None:
    assert math.isnan(parse_partition_value(text, delta_type))


@pytest.mark.parametrize("delta_type", [name for name, _ in PRIMITIVES])
@pytest.mark.parametrize("text", [None, ""])
def test_null_and_empty_partition_values_are_null(text: str | None, delta_type: str) -> None:
    assert parse_partition_value(text, delta_type) is None
    assert partition_values_to_arrow(pa.array([text], pa.string()), delta_type).to_pylist() == [
        None
    ]


@pytest.mark.parametrize(("delta_type", "text"), BAD)
def test_malformed_partition_values_are_corrupt(delta_type: str, text: str) -> None:
    with pytest.raises(CorruptLogError) as info:
        parse_partition_value(text, delta_type)
    assert repr(text) in str(info.value)
    assert delta_type in str(info.value)


@pytest.mark.parametrize("delta_type", ["interval", "variant", "decimal(50,2)"])
def test_partition_value_of_an_unsupported_type(delta_type: str) -> None:
    with pytest.raises(DeltaProtocolError):
        parse_partition_value("1", delta_type)
    with pytest.raises(DeltaProtocolError):
        partition_values_to_arrow(pa.array(["1"]), delta_type)
    with pytest.raises(DeltaProtocolError):
        serialize_partition_value(1, delta_type)


SERIALIZED = [
    ("string", "a=b", "a=b"),
    ("long", 2**63 - 1, "9223372036854775807"),
    ("byte", -128, "-128"),
    ("double", 0.1, "0.1"),
    ("double", 1e20, "1e+20"),
    ("double", -0.0, "-0.0"),
    ("double", math.inf, "Infinity"),
    ("double", -math.inf, "-Infinity"),
    ("float", 2, "2.0"),
    ("decimal(10,2)", Decimal("1.5"), "1.50"),
    ("decimal(38,8)", Decimal("1E-8"), "0.00000001"),
    ("decimal(10,0)", Decimal("1E+3"), "1000"),
    ("decimal(5,1)", 42, "42.0"),
    ("boolean", True, "true"),
    ("boolean", False, "false"),
    ("date", dt.date(999, 1, 2), "0999-01-02"),
    ("timestamp", AWARE, "2020-01-02 03:04:05.123456"),
    (
        "timestamp",
        dt.datetime(2020, 1, 2, 5, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        "2020-01-02 03:04:05.000000",
    ),
    ("timestamp", dt.datetime(2020, 1, 2, 3, 4, 5), "2020-01-02 03:04:05.000000"),
    ("timestamp_ntz", dt.datetime(1, 1, 1), "0001-01-01 00:00:00.000000"),
    ("binary", b"\x00caf\xc3\xa9", "\x00caf\u00e9"),
    ("binary", bytearray(b"ab"), "ab"),
]


@pytest.mark.parametrize(("delta_type", "value", "text"), SERIALIZED)
def test_serialize_partition_value(delta_type: str, value: object, text: str) -> None:
    assert serialize_partition_value(value, delta_type) == text
    parsed = parse_partition_value(text, delta_type)
    if isinstance(value, dt.datetime) and value.tzinfo is None and delta_type == "timestamp":
        value = value.replace(tzinfo=UTC)
    assert parsed == value


def test_serialize_round_trips_parsed_values() -> None:
    for delta_type, text, expected in PARSED:
        serialized = serialize_partition_value(expected, delta_type)
        assert parse_partition_value(serialized, delta_type) == expected, (delta_type, text)
    assert serialize_partition_value(math.nan, "double") == "NaN"
    assert serialize_partition_value(None, "date") is None


@pytest.mark.parametrize(
    ("delta_type", "value", "error"),
    [
        ("long", 1.5, TypeError),
        ("long", True, TypeError),
        ("long", "1", TypeError),
        ("byte", 128, ValueError),
        ("double", "1.5", TypeError),
        ("decimal(10,2)", 1.5, TypeError),
        ("decimal(10,2)", Decimal("1.234"), ValueError),
        ("decimal(3,2)", Decimal("10"), ValueError),
        ("decimal(10,2)", Decimal("NaN"), ValueError),
        ("date", dt.datetime(2020, 1, 1), TypeError),
        ("date", "2020-01-01", TypeError),
        ("timestamp", dt.date(2020, 1, 1), TypeError),
        ("timestamp_ntz", AWARE, ValueError),
        ("boolean", 1, TypeError),
        ("binary", "abc", TypeError),
        ("binary", b"\xff", ValueError),
        ("string", 5, TypeError),
        ("void", "x", TypeError),
    ],
)
def test_serialize_refuses_wrong_values(
    delta_type: str, value: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        serialize_partition_value(value, delta_type)


def comparable(values: list) -> list:
    """`values` with NaN replaced by a marker, so that lists compare equal."""
    return ["NaN" if isinstance(v, float) and math.isnan(v) else v for v in values]


VECTOR_TYPES = [*sorted({delta_type for delta_type, _, _ in PARSED}), "void"]


@pytest.mark.parametrize("delta_type", VECTOR_TYPES)
def test_partition_values_to_arrow_agrees_with_parse(delta_type: str) -> None:
    texts = [text for t, text, _ in PARSED if t == delta_type] + [None, ""]
    if delta_type in ("double", "float"):
        texts += ["NaN", "-nan", "+Infinity", "-inf"]
    expected = pa.array(
        [parse_partition_value(t, delta_type) for t in texts], arrow_type(delta_type)
    )
    result = partition_values_to_arrow(pa.array(texts, pa.string()), delta_type)
    assert isinstance(result, pa.Array)
    assert result.type == arrow_type(delta_type)
    assert comparable(result.to_pylist()) == comparable(expected.to_pylist())
    chunked = pa.chunked_array([pa.array(texts[:2], pa.string()), pa.array(texts[2:], pa.string())])
    assert comparable(partition_values_to_arrow(chunked, delta_type).to_pylist()) == comparable(
        expected.to_pylist()
    )


def test_partition_values_to_arrow_timestamps_are_utc_instants() -> None:
    result = partition_values_to_arrow(
        pa.array(["1970-01-01 00:00:01", "1970-01-01T00:00:00.000002Z"]), "timestamp"
    )
    assert result.type == pa.timestamp("us", tz="UTC")
    assert result.cast(pa.int64()).to_pylist() == [1_000_000, 2]


def test_partition_values_to_arrow_accepts_other_string_encodings() -> None:
    dictionary = pa.array(["1", "", None, "1"]).dictionary_encode()
    assert partition_values_to_arrow(dictionary, "integer").to_pylist() == [1, None, None, 1]
    large = pa.array(["true", "false"], pa.large_string())
    assert partition_values_to_arrow(large, "boolean").to_pylist() == [True, False]
    assert partition_values_to_arrow(pa.nulls(2), "date").to_pylist() == [None, None]
    assert partition_values_to_arrow(pa.array([], pa.string()), "long").to_pylist() == []


@pytest.mark.parametrize(("delta_type", "text"), BAD)
def test_partition_values_to_arrow_refuses_what_parse_refuses(delta_type: str, text: str) -> None:
    with pytest.raises(CorruptLogError) as info:
        partition_values_to_arrow(pa.array([None, "", text]), delta_type)
    assert repr(text) in str(info.value)
    assert delta_type in str(info.value)


# --------------------------------------------------------------------------- Hive directories


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("eu=west", "eu%3Dwest"),
        ("2020-01-01 00:00:00", "2020-01-01 00%3A00%3A00"),
        ("a/b\\c", "a%2Fb%5Cc"),
        ("100%", "100%25"),
        ("\"#'*?", "%22%23%27%2A%3F"),
        ("{[^]}", "%7B%5B%5E%5D%7D"),
        ("\x01\x1f\x7f", "%01%1F%7F"),
        ("\n\t", "%0A%09"),
        ("caf\u00e9 +-_.~,;!@$&()<>|`", "caf\u00e9 +-_.~,;!@$&()<>|`"),
        ("\x00", "\x00"),
        ("", ""),
    ],
)
def test_escape_partition_value(raw: str, escaped: str) -> None:
    assert escape_partition_value(raw) == escaped
    assert unescape_partition_value(escaped) == raw


def test_escape_unescape_round_trip() -> None:
    rng = random.Random(7)
    alphabet = [chr(c) for c in range(0x300)] + ["%", "%2", "%ZZ", "\u20ac", "\U0001f600"]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        escaped = escape_partition_value(text)
        assert "/" not in escaped and "=" not in escaped and ":" not in escaped
        assert unescape_partition_value(escaped) == text


def test_unescape_keeps_what_is_not_an_escape() -> None:
    assert unescape_partition_value("100%") == "100%"
    assert unescape_partition_value("%zz%4") == "%zz%4"
    assert unescape_partition_value("%3d%3D") == "=="


def test_partition_path() -> None:
    values = {"region": "eu=west", "date": "2020-01-01", "hour": None, "tag": ""}
    assert partition_path(values, ["date", "region"]) == "date=2020-01-01/region=eu%3Dwest"
    assert partition_path(values, ["hour", "tag"]) == (
        f"hour={HIVE_DEFAULT_PARTITION}/tag={HIVE_DEFAULT_PARTITION}"
    )
    assert partition_path({"a=b": "c/d"}, ["a=b"]) == "a%3Db=c%2Fd"
    assert partition_path({}, []) == ""
    with pytest.raises(KeyError):
        partition_path(values, ["missing"])


# --------------------------------------------------------------------------- delta-rs cross-check


def delta_log_actions(table: Path) -> list[dict]:
    log = table / "_delta_log" / "00000000000000000000.json"
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_schema_written_by_delta_rs(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    item = pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.string())])
    expected = pa.schema(
        [
            pa.field("s", pa.string()),
            pa.field("l", pa.int64(), nullable=False),
            pa.field("i", pa.int32()),
            pa.field("sh", pa.int16()),
            pa.field("by", pa.int8()),
            pa.field("f", pa.float32()),
            pa.field("d", pa.float64()),
            pa.field("bo", pa.bool_()),
            pa.field("bi", pa.binary()),
            pa.field("da", pa.date32()),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("ntz", pa.timestamp("us")),
            pa.field("dec", pa.decimal128(12, 3)),
            pa.field("st", item),
            pa.field("li", pa.list_(pa.field("element", pa.int64(), nullable=False))),
            pa.field("lis", pa.list_(pa.field("element", item, nullable=True))),
            pa.field(
                "ma",
                pa.map_(
                    pa.field("key", pa.string(), nullable=False),
                    pa.field("value", pa.float64(), nullable=True),
                ),
            ),
        ]
    )
    row = {
        "s": "a", "l": 1, "i": 2, "sh": 3, "by": 4, "f": 1.5, "d": 2.5, "bo": True, "bi": b"x",
        "da": dt.date(2020, 1, 1), "ts": AWARE, "ntz": dt.datetime(2020, 1, 1),
        "dec": Decimal("1.500"), "st": {"a": 1, "b": "x"}, "li": [1, 2],
        "lis": [{"a": 1, "b": None}, None], "ma": [("k", 1.0), ("n", None)],
    }  # fmt: skip
    deltalake.write_deltalake(str(tmp_path), pa.Table.from_pylist([row], schema=expected))
    (metadata,) = [a["metaData"] for a in delta_log_actions(tmp_path) if "metaData" in a]
    schema = schema_from_json(metadata["schemaString"])
    assert schema.equals(expected, check_metadata=True)
    assert json.loads(schema_to_json(schema)) == json.loads(metadata["schemaString"])
    assert schema_to_json(schema) == metadata["schemaString"]


def test_partition_values_written_by_delta_rs(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    columns = {
        "i": pa.array([-5, 7, None], pa.int32()),
        "d": pa.array([math.inf, -0.25, math.nan], pa.float64()),
        "dec": pa.array([Decimal("1.50"), Decimal("0.05"), None], pa.decimal128(10, 2)),
        "b": pa.array([True, False, None]),
        "da": pa.array([dt.date(2020, 2, 29), dt.date(1, 1, 1), None]),
        "ts": pa.array(
            [AWARE, dt.datetime(1970, 1, 1, tzinfo=UTC), None], pa.timestamp("us", "UTC")
        ),
        "ntz": pa.array([dt.datetime(2020, 1, 1, 12), None, dt.datetime(1999, 12, 31)]),
        "s": pa.array(["a b/c=d%e:f", "", None]),
    }
    table = pa.table({**columns, "x": pa.array([1, 2, 3])})
    deltalake.write_deltalake(str(tmp_path), table, partition_by=list(columns))
    adds = [a["add"] for a in delta_log_actions(tmp_path) if "add" in a]
    assert len(adds) == 3
    schema = schema_from_json(
        next(a["metaData"] for a in delta_log_actions(tmp_path) if "metaData" in a)["schemaString"]
    )
    rows = {row["i"]: row for row in table.to_pylist()}
    for add in adds:
        row = rows[parse_partition_value(add["partitionValues"]["i"], "integer")]
        for column in columns:
            delta_type = delta_type_name(schema.field(column).type)
            text = add["partitionValues"][column]
            expected = row[column] if row[column] != "" else None
            parsed = parse_partition_value(text, delta_type)
            vector = partition_values_to_arrow(pa.array([text], pa.string()), delta_type)
            assert comparable([parsed]) == comparable([expected]), (column, text)
            assert comparable(vector.to_pylist()) == comparable([expected]), (column, text)
