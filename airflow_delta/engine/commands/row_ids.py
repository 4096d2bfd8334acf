"""Row ids and row commit versions kept through rewrites (PROTOCOL.md, "Row Tracking").

On a table with row tracking enabled every row has a stable id: the value of its file's
materialized row-id column where that is not null, else the file's `baseRowId` plus the row's
index in the file; and a commit version: the materialized row-commit-version column, else the
file's `defaultRowCommitVersion`. A command that rewrites rows (DELETE or UPDATE without
deletion vectors, the in-process MERGE, OPTIMIZE) reads both for the rows it moves and hands
them to the writer, which stores them in the new files' materialized columns
(`WritePlan.row_tracking_columns`): moved rows keep both, updated rows keep their id and take
the new commit's version (null: the new file's default), inserted rows get fresh ids (null).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.commands.data_reader import FileReader
from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.protocol.actions import Metadata
from airflow_delta.engine.protocol.columnar import bool_mask
from airflow_delta.engine.protocol.config import TableConfig


@dataclass(frozen=True)
class RowTracking:
    """The materialized row-id and row-commit-version columns of a table (physical names)."""

    row_id: str
    commit_version: str

    @classmethod
    def of(cls, metadata: Metadata) -> RowTracking | None:
        """The table's columns when it has row tracking enabled with both named, else None
        (a rewrite is then refused by the commit's row-tracking check, or needs none)."""
        names = TableConfig(metadata.configuration).materialized_row_tracking_columns
        return cls(names[0], names[1]) if names else None

    @property
    def names(self) -> list[str]:
        return [self.row_id, self.commit_version]

    def schema(self, table: pa.Schema) -> pa.Schema:
        """`table` followed by the two columns."""
        return pa.schema([*table, *(pa.field(n, pa.int64()) for n in self.names)])

    def of_file(self, reader: FileReader, file: Any) -> pa.Table:
        """Both columns for the rows of data file `file` (an AddFile, or a dict of ADD_TYPE
        fields) that its deletion vector keeps, in file order."""
        path, base, default, dv = _file_fields(file)
        if base is None:
            raise CorruptLogError(
                f"Table {reader.table_uri} version {reader.version}: data file {path} has no "
                "baseRowId although the table has row tracking enabled; the log is invalid."
            )
        rows, stored = self._stored(reader, path)
        ids: pa.Array = pa.array(np.arange(base, base + rows, dtype=np.int64))
        versions: pa.Array = pa.nulls(rows, pa.int64())
        if default is not None:
            versions = pa.array(np.full(rows, default, dtype=np.int64))
        if stored[0] is not None:
            ids = pc.coalesce(stored[0], ids)
        if stored[1] is not None:
            versions = pc.coalesce(stored[1], versions)
        tracked = pa.table([ids, versions], names=self.names)
        return tracked if dv is None else tracked.filter(bool_mask(reader.kept(dv, rows)))

    def of_files(self, reader: FileReader, files: pa.StructArray) -> pa.Table:
        """Both columns for the rows `reader.read(files, ...)` gives, in its order (rows
        deleted by a file's deletion vector left out)."""
        parts = [self.of_file(reader, file) for file in files.to_pylist()]
        empty = pa.schema([pa.field(n, pa.int64()) for n in self.names]).empty_table()
        return pa.concat_tables(parts) if parts else empty

    def attach(self, data: pa.Table, tracked: pa.Table) -> pa.Table:
        """`data` with the two columns of `tracked` (the same rows) appended."""
        for name in self.names:
            data = data.append_column(name, tracked.column(name))
        return data

    def updated(
        self, output: pa.Table, before: pa.Table, mask: npt.NDArray[np.bool_] | None = None
    ) -> pa.Table:
        """`output`, rows of `before` (which carries the two columns) with some updated: each
        row keeps its id; the updated ones (`mask`, None: all) take the new commit's version."""
        versions = before.column(self.commit_version)
        if mask is None:
            versions = pa.nulls(len(before), pa.int64())
        else:
            versions = pc.if_else(bool_mask(mask), pa.scalar(None, pa.int64()), versions)
        output = output.append_column(self.row_id, before.column(self.row_id))
        return output.append_column(self.commit_version, versions)

    def without(self, data: pa.Table) -> pa.Table:
        """`data` without the two columns (change data files do not carry them)."""
        return data.drop_columns([n for n in self.names if n in data.column_names])

    def _stored(self, reader: FileReader, path: str) -> tuple[int, list[pa.Array | None]]:
        """The file's rows, and the two materialized columns as it stores them (None:
        absent)."""
        location = reader.store.file_path(
            reader.root, path, table=reader.table_uri, version=reader.version
        )
        try:
            with reader.store.open_input(location) as f:
                file = pq.ParquetFile(f, memory_map=reader.store.is_local)
                present = [n for n in self.names if n in file.schema_arrow.names]
                rows = int(file.metadata.num_rows)
                table = file.read(columns=present, use_threads=False) if present else None
        except FileNotFoundError:
            raise reader.snapshot.missing_data_file(path) from None
        return rows, [
            table.column(n).combine_chunks().cast(pa.int64())
            if table is not None and n in present
            else None
            for n in self.names
        ]


def _file_fields(file: Any) -> tuple[str, int | None, int | None, Any]:
    """(path, baseRowId, defaultRowCommitVersion, deletion vector) of an AddFile or a dict."""
    if isinstance(file, dict):
        dv = file.get("deletionVector")
        return file["path"], file["baseRowId"], file["defaultRowCommitVersion"], dv
    dv = file.deletion_vector.to_json_dict() if file.deletion_vector is not None else None
    return file.path, file.base_row_id, file.default_row_commit_version, dv
