"""Column mapping (PROTOCOL.md, "Column Mapping"): each field of a column-mapped table carries
an id and a physical name in its metadata; data files name columns by those. This module checks
a schema has them and assigns them to a new table's fields.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

#: Field metadata keys of column mapping.
COLUMN_MAPPING_ID = "delta.columnMapping.id"
COLUMN_MAPPING_PHYSICAL_NAME = "delta.columnMapping.physicalName"


def column_mapping_problems(schema: Mapping[str, Any], max_column_id: int) -> list[str]:
    """What makes `schema` unfit for a column-mapped table: a field without an id or physical
    name, an id or physical name used twice, an id above `max_column_id`.

    >>> column_mapping_problems({"type": "struct", "fields": [
    ...     {"name": "a", "type": "long", "nullable": True, "metadata": {}}]}, 0)
    ["field 'a' has no delta.columnMapping.id", "field 'a' has no delta.columnMapping.physicalName"]
    """
    problems: list[str] = []
    ids: set[int] = set()
    names: set[tuple[str, ...]] = set()

    def visit(data_type: Any, parent: tuple[str, ...]) -> None:
        if not isinstance(data_type, Mapping):
            return
        kind = data_type.get("type")
        if kind == "struct":
            for f in data_type["fields"]:
                visit_field(f, parent)
        elif kind == "array":
            visit(data_type["elementType"], parent)
        elif kind == "map":
            visit(data_type["keyType"], parent)
            visit(data_type["valueType"], parent)

    def visit_field(f: Mapping[str, Any], parent: tuple[str, ...]) -> None:
        path = ".".join((*parent, f["name"]))
        metadata = f.get("metadata") or {}
        column_id = metadata.get(COLUMN_MAPPING_ID)
        physical = metadata.get(COLUMN_MAPPING_PHYSICAL_NAME)
        if not isinstance(column_id, int):
            problems.append(f"field {path!r} has no {COLUMN_MAPPING_ID}")
        elif column_id in ids:
            problems.append(f"field {path!r} reuses {COLUMN_MAPPING_ID} {column_id}")
        elif column_id > max_column_id:
            problems.append(
                f"field {path!r} has {COLUMN_MAPPING_ID} {column_id}, above "
                f"delta.columnMapping.maxColumnId {max_column_id}"
            )
        else:
            ids.add(column_id)
        if not isinstance(physical, str) or not physical:
            problems.append(f"field {path!r} has no {COLUMN_MAPPING_PHYSICAL_NAME}")
        elif (*parent, physical) in names:
            problems.append(f"field {path!r} reuses the physical name {physical!r}")
        else:
            names.add((*parent, physical))
        visit(f["type"], (*parent, f["name"]))

    visit(schema, ())
    return problems


def assign_column_mapping(
    schema: Mapping[str, Any], max_column_id: int
) -> tuple[dict[str, Any], int]:
    """`schema` (a schemaString object) with a column mapping id and physical name on every
    struct field that has none yet (nested ones too, inside arrays and maps), ids counting up
    from `max_column_id`; the new schema and the new maximum id (`delta.columnMapping.maxColumnId`).

    >>> s, top = assign_column_mapping({"type": "struct", "fields": [
    ...     {"name": "a", "type": "long", "nullable": True, "metadata": {}}]}, 0)
    >>> top, s["fields"][0]["metadata"]["delta.columnMapping.id"]
    (1, 1)
    """
    counter = [max_column_id]

    def visit(data_type: Any) -> Any:
        if not isinstance(data_type, Mapping):
            return data_type
        kind = data_type.get("type")
        if kind == "struct":
            return {**data_type, "fields": [visit_field(f) for f in data_type["fields"]]}
        if kind == "array":
            return {**data_type, "elementType": visit(data_type["elementType"])}
        if kind == "map":
            return {
                **data_type,
                "keyType": visit(data_type["keyType"]),
                "valueType": visit(data_type["valueType"]),
            }
        return data_type

    def visit_field(f: Mapping[str, Any]) -> dict[str, Any]:
        metadata = dict(f.get("metadata") or {})
        if COLUMN_MAPPING_ID not in metadata:
            counter[0] += 1
            metadata[COLUMN_MAPPING_ID] = counter[0]
        metadata.setdefault(COLUMN_MAPPING_PHYSICAL_NAME, f"col-{uuid.uuid4()}")
        return {**f, "type": visit(f["type"]), "metadata": metadata}

    result = visit(dict(schema))
    return result, counter[0]
