"""write_table(schema_mode="merge") adds nested fields as delta-spark's mergeSchema does: inside
structs, list elements and map values, nullable, after the existing ones; rows written
without them read as NULL there, by us and by deltalake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog, read_table, write_table
from airflow_delta.engine.errors import SchemaMismatchError
from airflow_delta.engine.protocol.column_mapping import column_mapping_problems


def struct(**fields: pa.DataType) -> pa.StructType:
    return pa.struct([pa.field(n, t) for n, t in fields.items()])


#: (the table's column type, a later write's type with fields the table lacks)
CASES = {
    "struct": (struct(a=pa.int64()), struct(a=pa.int64(), b=pa.string())),
    "deeper": (
        struct(a=struct(x=pa.int64())),
        struct(a=struct(x=pa.int64(), y=pa.float64()), b=pa.string()),
    ),
    "reordered": (
        struct(a=pa.int64(), b=pa.string()),
        struct(c=pa.int32(), b=pa.string(), a=pa.int64()),
    ),
    "list element": (
        pa.list_(struct(a=pa.int64())),
        pa.list_(struct(a=pa.int64(), b=pa.string())),
    ),
}


def values(t: pa.DataType, seed: int) -> Any:
    """A value of type `t` (every field set)."""
    if pa.types.is_struct(t):
        return {t.field(i).name: values(t.field(i).type, seed + i) for i in range(t.num_fields)}
    if pa.types.is_list(t):
        return [values(t.value_type, seed), None, values(t.value_type, seed + 1)]
    if pa.types.is_string(t):
        return f"v{seed}"
    return float(seed) / 2 if pa.types.is_floating(t) else seed


def rows(t: pa.DataType, ids: range) -> pa.Table:
    column = [values(t, i) if i % 3 else None for i in ids]
    return pa.table({"id": pa.array(list(ids), pa.int64()), "c": pa.array(column, t)})


def by_id(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_nested_fields_are_added_as_deltalake_adds_them(tmp_path: Path, case: str) -> None:
    old, new = CASES[case]
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    for uri, write in ((ours, write_table), (theirs, write_deltalake)):
        write(uri, rows(old, range(0, 4)))
    fix = "schema_mode='merge' adds its new nested fields"
    with pytest.raises(SchemaMismatchError, match=f"(?s)WRITE to {ours} \\(version 0\\).*{fix}"):
        write_table(ours, rows(new, range(4, 8)), mode="append")
    assert DeltaLog.for_table(ours).update().version == 0
    write_table(ours, rows(new, range(4, 8)), mode="append", schema_mode="merge")
    write_deltalake(theirs, rows(new, range(4, 8)), mode="append", schema_mode="merge")
    # a write in the old shape after the merge: the new fields are NULL
    write_table(ours, rows(old, range(8, 10)), mode="append")
    write_deltalake(theirs, rows(old, range(8, 10)), mode="append", schema_mode="merge")
    assert DeltaTable(ours).schema().to_json() == DeltaTable(theirs).schema().to_json()
    expected = by_id(DeltaTable(theirs).to_pyarrow_table())
    assert by_id(DeltaTable(ours).to_pyarrow_table()) == expected
    assert by_id(read_table(ours)) == expected
    assert by_id(read_table(theirs)) == expected


def test_a_nested_field_of_a_column_mapping_table_gets_an_id(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    old, new = CASES["deeper"]
    write_table(uri, rows(old, range(3)), configuration={"delta.columnMapping.mode": "name"})
    write_table(uri, rows(new, range(3, 6)), mode="append", schema_mode="merge")
    metadata = DeltaLog.for_table(uri).update().metadata
    schema = json.loads(metadata.schema_string or "{}")
    top = int(metadata.configuration["delta.columnMapping.maxColumnId"])
    assert column_mapping_problems(schema, top) == []
    assert top == 6  # id, c, c.a, c.a.x, then c.a.y and c.b
    expected = rows(new, range(3, 6)).to_pylist()
    for row in rows(old, range(3)).to_pylist():
        if row["c"] is not None:
            row["c"]["a"]["y"], row["c"]["b"] = None, None
        expected.append(row)
    assert by_id(read_table(uri)) == sorted(expected, key=lambda r: r["id"])


def test_a_non_nullable_nested_field_is_not_left_null(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    strict = pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.string(), nullable=False)])
    write_table(uri, pa.table({"id": [1], "c": pa.array([{"a": 1, "b": "x"}], strict)}))
    loose = pa.table({"id": [2], "c": pa.array([{"a": 2}], struct(a=pa.int64()))})
    with pytest.raises(SchemaMismatchError, match="column c"):
        write_table(uri, loose, mode="append")
    assert DeltaLog.for_table(uri).update().version == 0


_NAMES = st.sampled_from(["a", "b", "c", "d"])
_LEAVES = st.sampled_from([pa.int64(), pa.string()])


def _structs(depth: int) -> st.SearchStrategy[pa.StructType]:
    child = _LEAVES if depth == 0 else st.one_of(_LEAVES, _structs(depth - 1))
    fields = st.lists(st.tuples(_NAMES, child), min_size=1, max_size=3, unique_by=lambda f: f[0])
    return fields.map(lambda fs: pa.struct([pa.field(n, t) for n, t in fs]))


def _extended(t: pa.DataType, draw: Any) -> pa.DataType:
    """`t` with some fields added at any depth and its fields shuffled."""
    if not pa.types.is_struct(t):
        return t
    fields = [t.field(i).with_type(_extended(t.field(i).type, draw)) for i in range(t.num_fields)]
    have = {f.name for f in fields}
    extra = draw(st.lists(st.sampled_from(["e", "f"]), max_size=2, unique=True))
    fields += [pa.field(n, draw(_LEAVES)) for n in extra if n not in have]
    return pa.struct(draw(st.permutations(fields)))


@given(st.data())
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_random_nested_evolution_reads_as_deltalake_reads_it(
    tmp_path_factory: Any, data: Any
) -> None:
    old = data.draw(_structs(2))
    new = _extended(old, data.draw)
    uri = str(tmp_path_factory.mktemp("t") / "t")
    write_table(uri, rows(old, range(0, 3)))
    write_table(uri, rows(new, range(3, 6)), mode="append", schema_mode="merge")
    write_table(uri, rows(old, range(6, 8)), mode="append")
    assert by_id(read_table(uri)) == by_id(DeltaTable(uri).to_pyarrow_table())
    got = {r["id"]: r["c"] for r in read_table(uri).to_pylist()}
    for row in rows(old, range(0, 3)).to_pylist() + rows(new, range(3, 6)).to_pylist():
        assert _set_fields(row["c"]) == _set_fields(got[row["id"]])


def _set_fields(value: Any) -> Any:
    """`value` without its NULL fields (a row written without a field holds it NULL)."""
    if isinstance(value, dict):
        return {k: _set_fields(v) for k, v in value.items() if v is not None}
    return value
