"""The RemoveFile actions of active files given columnar (ADD_TYPE), for commands that remove
many files whole (OPTIMIZE, RESTORE): built column by column, the same actions as
`AddFile.remove` of `add_files_from_arrow`'s AddFiles, at half the cost (2,000 files: 4 ms).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.protocol.actions import DeletionVectorDescriptor, RemoveFile


def _column(files: pa.StructArray, name: str) -> list[Any]:
    """A field of `files` as Python values (all None without converting a null column)."""
    column = pc.struct_field(files, name)
    return [None] * len(files) if column.null_count == len(column) else column.to_pylist()


def _maps(files: pa.StructArray, name: str) -> list[dict[str, Any] | None]:
    return [None if pairs is None else dict(pairs) for pairs in _column(files, name)]


def remove_files(
    files: pa.StructArray, deletion_timestamp: int, data_change: bool = True
) -> list[RemoveFile]:
    """The RemoveFile of each of `files` (ADD_TYPE), deleted at `deletion_timestamp` (ms)."""
    dvs = [DeletionVectorDescriptor.from_json_dict(d) for d in _column(files, "deletionVector")]
    columns = zip(
        _column(files, "path"),
        _maps(files, "partitionValues"),
        _column(files, "size"),
        _column(files, "stats"),
        _maps(files, "tags"),
        dvs,
        _column(files, "baseRowId"),
        _column(files, "defaultRowCommitVersion"),
        strict=True,
    )
    return [
        RemoveFile(
            path=path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=values or {},
            size=size or 0,
            stats=stats,
            tags=tags,
            deletion_vector=dv,
            base_row_id=base_row_id,
            default_row_commit_version=commit_version,
        )
        for path, values, size, stats, tags, dv, base_row_id, commit_version in columns
    ]
