"""Whether the change data feed of a range of versions can be read under one schema.

`read_changes` reads every change of a range with the table's schema at the ending version.
That is sound when each schema the range went through is read-compatible with it: every column
is still there, under the same name, with the same type or one type widening made wider (and,
on a column-mapped table, the same physical column), and the same partition columns, so only
columns added later read as NULL. A column dropped, renamed or retyped otherwise, or the table
partitioned anew, in between would silently drop or convert the earlier rows' values, so
delta-spark refuses such a batch read (DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE) and
so does this engine, naming the version to split the range at.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from airflow_delta.engine.errors import ChangeDataFeedError
from airflow_delta.engine.protocol.actions import Metadata
from airflow_delta.engine.protocol.column_mapping import COLUMN_MAPPING_PHYSICAL_NAME


def check_read_compatible(
    table: str, start: int, end: int, schemas: Sequence[tuple[int, Metadata]]
) -> None:
    """Raise ChangeDataFeedError unless every schema of `schemas` ((the version from which it
    is in effect, its metadata), oldest first; the last one is the ending version's) reads as
    the last one."""
    if not schemas or schemas[-1][1].schema_string is None:
        return
    read = json.loads(schemas[-1][1].schema_string)
    for i in range(len(schemas) - 2, -1, -1):  # the newest incompatible schema decides
        version, metadata = schemas[i]
        if metadata.schema_string is None:
            continue
        problem = _incompatibility(json.loads(metadata.schema_string), read, "")
        problem = problem or _repartitioning(metadata, schemas[-1][1])
        if problem is None:
            continue
        split = schemas[i + 1][0]
        raise ChangeDataFeedError(
            f"Cannot read the changes of table {table} from version {start} to {end} in one "
            f"read: the schema changed at version {split} in a way the schema of version {end} "
            f"cannot read back (as of version {version}, {problem}), so the earlier rows would "
            f"lose or change values. Read the changes up to version {split - 1} and from "
            f"version {split} on separately."
        )


def _repartitioning(old: Metadata, new: Metadata) -> str | None:
    """How the partition columns changed (None: they did not): the files of before hold no
    values for a column partitioned later, nor did the reader take them from their paths."""
    if [c.lower() for c in old.partition_columns] == [c.lower() for c in new.partition_columns]:
        return None
    return f"partitioned by {old.partition_columns}, read as by {new.partition_columns}"


def _incompatibility(old: Any, new: Any, where: str) -> str | None:
    """Why a value of Delta type `old` does not read as Delta type `new` (None: it does)."""
    if isinstance(old, dict) and isinstance(new, dict) and old.get("type") == new.get("type"):
        kind = old.get("type")
        if kind == "struct":
            return _struct_incompatibility(old, new, where)
        if kind == "array":
            return _incompatibility(old.get("elementType"), new.get("elementType"), where + "[]")
        if kind == "map":
            return _incompatibility(
                old.get("keyType"), new.get("keyType"), where + ".key"
            ) or _incompatibility(old.get("valueType"), new.get("valueType"), where + ".value")
    if old == new or (isinstance(old, str) and isinstance(new, str) and _widens(old, new)):
        return None
    return f"column {where or '(root)'} has type {_shown(old)}, read as {_shown(new)}"


#: The type changes of Delta's type widening (PROTOCOL.md, typeWidening): values read back as
#: the wider type unchanged.
_WIDER = {
    "byte": {"short", "integer", "long", "double"},
    "short": {"integer", "long", "double"},
    "integer": {"long", "double"},
    "float": {"double"},
    "date": {"timestamp_ntz"},
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def _widens(old: str, new: str) -> bool:
    """Whether Delta type widening turns primitive type `old` into `new`."""
    if new in _WIDER.get(old, ()):
        return True
    wide = _DECIMAL.fullmatch(new)
    if wide is None:
        return False
    precision, scale = int(wide[1]), int(wide[2])
    narrow = _DECIMAL.fullmatch(old)
    if narrow is not None:  # as many integer digits or more, as many fraction digits or more
        return scale >= int(narrow[2]) and precision - scale >= int(narrow[1]) - int(narrow[2])
    digits = {"byte": 3, "short": 5, "integer": 10, "long": 20}.get(old)
    return digits is not None and precision - scale >= digits


def _struct_incompatibility(old: dict[str, Any], new: dict[str, Any], where: str) -> str | None:
    by_name = {f.get("name"): f for f in new.get("fields", [])}
    by_lower = {str(name).lower(): f for name, f in by_name.items()}
    for field in old.get("fields", []):
        name = field.get("name")
        path = f"{where}.{name}" if where else str(name)
        match = by_name.get(name) or by_lower.get(str(name).lower())
        if match is None:
            return f"column {path} is gone (dropped or renamed)"
        old_physical = (field.get("metadata") or {}).get(COLUMN_MAPPING_PHYSICAL_NAME)
        new_physical = (match.get("metadata") or {}).get(COLUMN_MAPPING_PHYSICAL_NAME)
        if old_physical is not None and new_physical is not None and old_physical != new_physical:
            return f"column {path} was dropped and added again"
        problem = _incompatibility(field.get("type"), match.get("type"), path)
        if problem is not None:
            return problem
    return None


def _shown(delta_type: Any) -> str:
    return delta_type if isinstance(delta_type, str) else json.dumps(delta_type)[:200]
