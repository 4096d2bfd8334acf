"""Deletion vectors for the Spark data plane.

- The engine's codec (`airflow_delta.engine.protocol.deletion_vectors`), re-exported under its
  former home: `read.py` decodes DVs on the driver with numpy through these names.
- The DVs the Spark DELETE, UPDATE and MERGE write on a table with deletion vectors enabled
  (`deletion_vectors_enabled`), as the in-process commands do. A Spark job finds the rows each
  touched file loses (deleted, or updated: written elsewhere) as their physical positions in the
  file (`scan_files(..., row_index_column=...)` gives `_metadata.row_index`, which counts the
  rows an old DV deletes), aggregated per file (`changed_row_indexes`) and brought to the
  driver as Arrow lists (`index_lists`). `DeletionVectorChanges.of` then removes a file whose
  every live row changes and gives each other one a new DV through the engine
  (`with_rows_deleted`: its old DV's rows and the changed ones; `DeletionVectorWriter`: inline
  when small, else one `deletion_vector_<uuid>.bin` per command, written before the data files).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column
from pyspark.sql import functions as F

from airflow_delta.engine.commands.deletion_vector_files import (
    DeletionVectorReader,
    DeletionVectorWriter,
    with_rows_deleted,
)
from airflow_delta.engine.protocol.action_types import add_files_from_arrow, stats_num_records
from airflow_delta.engine.protocol.actions import Action, AddFile
from airflow_delta.engine.protocol.deletion_vectors import (
    FILE_FORMAT_VERSION,
    MAGIC_NUMBER,
    NATIVE_MAGIC_NUMBER,
    Z85_ALPHABET,
    deleted_row_indexes,
    dv_bytes_from_file,
    inline_dv_bytes,
    relative_dv_path,
    z85_decode,
)

if TYPE_CHECKING:
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

__all__ = [
    "FILE_FORMAT_VERSION",
    "MAGIC_NUMBER",
    "NATIVE_MAGIC_NUMBER",
    "Z85_ALPHABET",
    "DeletionVectorChanges",
    "changed_row_indexes",
    "deleted_row_indexes",
    "deletion_vector_metrics",
    "dv_bytes_from_file",
    "index_lists",
    "inline_dv_bytes",
    "live_row_counts",
    "relative_dv_path",
    "z85_decode",
]

RowIndexes = npt.NDArray[np.uint64]
T = TypeVar("T")


def changed_row_indexes(changed: Column, row_index: str) -> Column:
    """Aggregate of a file's rows: the sorted row indexes (column `row_index`) of those where
    `changed` holds."""
    return F.sort_array(F.collect_list(F.when(changed, F.col(row_index))))


def index_lists(column: pa.ChunkedArray | pa.Array) -> list[RowIndexes | None]:
    """Per value of a list<long> column (collected with `toArrow()`), its row indexes as
    uint64 (None for a NULL list)."""
    lists = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not len(lists):
        return []
    values = np.asarray(lists.flatten().to_numpy(zero_copy_only=False), dtype=np.uint64)
    lengths = np.asarray(pc.fill_null(pc.list_value_length(lists), 0).to_numpy(), dtype=np.int64)
    parts = np.split(values, np.cumsum(lengths)[:-1])
    valid = lists.is_valid().to_numpy(zero_copy_only=False)
    return [part if ok else None for part, ok in zip(parts, valid, strict=True)]


def live_row_counts(files: pa.StructArray) -> dict[str, int | None]:
    """Per file (by log path), the rows its deletion vector keeps, from its stats' numRecords
    (None without them)."""
    records = stats_num_records(files.field("stats")).to_pylist()
    deleted = pc.struct_field(files.field("deletionVector"), "cardinality").to_pylist()
    paths = files.field("path").to_pylist()
    return {
        path: None if n is None else n - (d or 0)
        for path, n, d in zip(paths, records, deleted, strict=True)
    }


@dataclass
class DeletionVectorChanges:
    """What a command on Spark does to its touched files on a table with deletion vectors:
    those removed whole, and (old, re-added with a new DV) for the others."""

    writer: DeletionVectorWriter
    removed: list[AddFile] = field(default_factory=list)
    with_dv: list[tuple[AddFile, AddFile]] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        txn: OptimisticTransaction,
        files: pa.StructArray,
        changed: Mapping[str, RowIndexes | None],
    ) -> DeletionVectorChanges:
        """The changes of the touched `files`: `changed[path]` the indexes in the file of the
        rows it loses; None, or a path left out, when every live row goes (removed whole)."""
        changes = cls(DeletionVectorWriter(txn.location))
        reader = DeletionVectorReader(txn.location, txn.read_version)
        for file in add_files_from_arrow(files):
            rows = changed.get(file.path)
            if rows is None:
                changes.removed.append(file)
            else:
                new = with_rows_deleted(file, rows, reader, changes.writer)
                changes.with_dv.append((file, new))
        return changes

    def write(self, write: Callable[[], T]) -> T:
        """Write the DV file (when a DV went to it), then `write()` the data files; the DV file
        is removed when that fails."""
        self.writer.finish()
        try:
            return write()
        except BaseException:
            self.writer.abort()
            raise

    def actions(self, now: int) -> list[Action]:
        """The files re-added with their new DVs, then the removes of every touched file."""
        readded: list[Action] = [new for _, new in self.with_dv]
        return [
            *readded,
            *(f.remove(now) for f in self.removed),
            *(old.remove(now) for old, _ in self.with_dv),
        ]

    def metrics(self, prefix: str = "num") -> dict[str, int]:
        """numDeletionVectorsAdded, ...Removed (the old DVs of every touched file) and
        ...Updated (those of the files re-added); MERGE's names take `prefix="numTarget"`."""
        return deletion_vector_metrics(self.removed, self.with_dv, prefix)


def deletion_vector_metrics(
    removed: Sequence[AddFile], with_dv: Sequence[tuple[AddFile, AddFile]], prefix: str = "num"
) -> dict[str, int]:
    """The DV metrics of a command that removed `removed` whole and re-added `with_dv`."""
    updated = sum(1 for old, _ in with_dv if old.deletion_vector is not None)
    dropped = sum(1 for f in removed if f.deletion_vector is not None)
    return {
        f"{prefix}DeletionVectorsAdded": len(with_dv),
        f"{prefix}DeletionVectorsRemoved": dropped + updated,
        f"{prefix}DeletionVectorsUpdated": updated,
    }
