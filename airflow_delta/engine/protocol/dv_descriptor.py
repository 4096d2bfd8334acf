"""The descriptor of a deletion vector in a file action (PROTOCOL.md, Deletion Vectors), and
`drop_none`, the JSON-object helper every action's encoding shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JsonDict = dict[str, Any]


def drop_none(data: JsonDict) -> JsonDict:
    """`data` without its None values (absent fields are left out of the log's JSON)."""
    return {k: v for k, v in data.items() if v is not None}


@dataclass
class DeletionVectorDescriptor:
    """Where the deleted rows of a data file are recorded (PROTOCOL.md, Deletion Vectors)."""

    storage_type: str
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None
    max_row_index: int | None = None

    @property
    def unique_id(self) -> str:
        """`storageType + pathOrInlineDv` plus `@offset` when an offset is set."""
        return dv_unique_id(self.storage_type, self.path_or_inline_dv, self.offset)

    def to_json_dict(self) -> JsonDict:
        return drop_none(
            {
                "storageType": self.storage_type,
                "pathOrInlineDv": self.path_or_inline_dv,
                "offset": self.offset,
                "sizeInBytes": self.size_in_bytes,
                "cardinality": self.cardinality,
                "maxRowIndex": self.max_row_index,
            }
        )

    @classmethod
    def from_json_dict(cls, d: JsonDict | None) -> DeletionVectorDescriptor | None:
        if d is None:
            return None
        return cls(
            storage_type=d["storageType"],
            path_or_inline_dv=d["pathOrInlineDv"],
            size_in_bytes=d.get("sizeInBytes") or 0,
            cardinality=d.get("cardinality") or 0,
            offset=d.get("offset"),
            max_row_index=d.get("maxRowIndex"),
        )


def dv_unique_id(storage_type: str, path_or_inline_dv: str, offset: int | None) -> str:
    """The unique id of a deletion vector, part of a logical file's key."""
    base = f"{storage_type}{path_or_inline_dv}"
    return base if offset is None else f"{base}@{offset}"
