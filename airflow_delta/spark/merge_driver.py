"""findTouchedFiles of the Spark MERGE (`spark/merge.py`) on the driver, when that is cheaper
than a Spark job: the candidate files' join columns read by the engine's `FileReader` and
hash-joined with the source's join columns, which `SourceFacts` already collected.

It applies to the common upsert: a condition of equalities between target and source columns
only, unconditional MATCHED clauses (the first one modifies every matched row), no NOT MATCHED
BY SOURCE clause, a source whose non-NULL key tuples are unique (no target row matches twice),
and candidate files whose stats count at most `DRIVER_SEARCH_ROWS` rows (a Spark conf). The
driver then reads a few columns of those rows, once, where a Spark job would scan and join them
across a stage boundary. Spark still reads and rewrites the touched files. Knowing which source
keys matched, it also tells the inserted rows apart (`unmatched_rows`): by a filter on a few
ranges of an integer key (new keys tend to follow the old ones), else by an anti join with the
matched keys.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from airflow_delta.engine.commands.data_reader import FileReader
from airflow_delta.engine.commands.deletion_vector_files import live_row_indexes
from airflow_delta.engine.commands.merge_values import match_keys
from airflow_delta.engine.protocol.action_types import stats_num_records
from airflow_delta.engine.protocol.schema import delta_field_metadata
from airflow_delta.engine.txn.transaction import OptimisticTransaction
from airflow_delta.spark.deletion_vectors import RowIndexes
from airflow_delta.spark.merge_matches import RESERVED, Found

__all__ = [
    "DEFAULT_DRIVER_SEARCH_ROWS",
    "DRIVER_SEARCH_ROWS",
    "KEY_PREFIX",
    "driver_search_rows",
    "search_on_driver",
    "unmatched_ranges",
    "unmatched_rows",
]

log = logging.getLogger(__name__)

#: Spark conf: the most candidate rows (by their files' stats) whose join columns the MERGE
#: reads on the driver to find the touched files; 0 always searches with a Spark job.
DRIVER_SEARCH_ROWS = "spark.airflow_delta.merge.driverSearchRows"
DEFAULT_DRIVER_SEARCH_ROWS = 10_000_000
#: The names of the matched keys' columns (then 0, 1, ...).
KEY_PREFIX = f"{RESERVED}key"
#: The most runs of unmatched integer keys the inserts are filtered by (more: an anti join).
MAX_INSERT_RANGES = 32


def search_on_driver(
    txn: OptimisticTransaction,
    files: pa.StructArray,
    keys: Sequence[tuple[str, str]],
    source: pa.Table,
    clauses: int,
    indexes: bool,
    limit: int,
) -> tuple[Found, pa.Table, np.ndarray] | None:
    """What findTouchedFiles finds for the candidate `files`, from their rows' join columns and
    the `source` join columns (named as the source sides of `keys`, (target column, source
    column) pairs; non-NULL key tuples unique), when every matched row is modified by the first
    of the `clauses` modifying clauses; with `indexes`, the modified rows' indexes in their
    files (deletion vectors); also the source's keys as the target's types and which of them
    matched. None when the candidate files' rows are not counted in their stats or outnumber
    `limit`, or a key column is not of one Arrow type on both sides."""
    records = stats_num_records(files.field("stats"))
    if limit <= 0 or records.null_count or (pc.sum(records).as_py() or 0) > limit:
        return None
    fields = {f.name.lower(): f for f in txn.metadata.schema}
    target_fields = [fields.get(t.lower()) for t, _ in keys]
    if len({t.lower() for t, _ in keys}) != len(keys) or any(
        f is None or "delta.typeChanges" in delta_field_metadata(f) for f in target_fields
    ):
        return None
    schema = pa.schema([pa.field(f.name, f.type) for f in target_fields if f is not None])
    columns = []
    for field, (_, name) in zip(schema, keys, strict=True):
        column = source.column(name)
        if column.type != field.type:
            if not _same_values(column.type, field.type):
                return None
            column = column.cast(field.type)
        columns.append(column)
    source = pa.Table.from_arrays(columns, schema=schema)
    reader = FileReader(txn, schema)
    target = reader.read(files, schema.names)
    names = [(n, n) for n in schema.names]
    pairs = match_keys(target, source, names, np.ones(target.num_rows, dtype=bool))
    rows = np.sort(pairs.column("row").to_numpy())
    if len(rows) > 1 and bool((rows[1:] == rows[:-1]).any()):
        return None  # a target row matched twice: the Spark search reports it
    matched = np.zeros(source.num_rows, dtype=bool)
    matched[pairs.column("srow").to_numpy()] = True
    starts = np.cumsum(reader.lengths) - reader.lengths
    # rows[edges[i]:edges[i + 1]] are the matched rows of file i
    edges = np.searchsorted(rows, np.append(starts, target.num_rows))
    paths = files.field("path").to_pylist()
    modified: dict[str, tuple[int, RowIndexes | None]] = {}
    for i in np.flatnonzero(np.diff(edges)):
        live = rows[edges[i] : edges[i + 1]] - starts[i]
        kept = _row_indexes(reader, files, records, int(i), live) if indexes else None
        modified[paths[i]] = (len(live), kept)
    log.info(
        "MERGE into %s: the driver found %d touched files among %d candidates (%d rows read)",
        txn.table,
        len(modified),
        len(files),
        target.num_rows,
    )
    found = Found(
        paths=list(modified),
        per_clause=[len(rows)] + [0] * (clauses - 1),
        modified=modified,
        pairs=len(rows),
    )
    return found, source, matched


def unmatched_rows(
    source: DataFrame, keys: pa.Table, matched: np.ndarray, columns: list[Column]
) -> tuple[Column | None, DataFrame | None]:
    """How the inserts (the source rows whose `keys` matched nothing: `~matched`) are told
    apart: by a filter over the source's key `columns`, when there is one integer key whose
    unmatched values make at most MAX_INSERT_RANGES runs in key order (no join: new keys
    often follow the old ones); else by an anti join with the matched keys, as a DataFrame (of
    `source`'s session) of columns KEY_PREFIX + 0, 1, ..."""
    if len(columns) == 1 and pa.types.is_integer(keys.schema.field(0).type):
        key, column = keys.column(0), columns[0]
        valid = key.is_valid().to_numpy(zero_copy_only=False)
        ranges = unmatched_ranges(key.filter(valid).to_numpy(), matched[valid])
        if ranges is not None:
            unmatched = column.isNull() if key.null_count else F.lit(False)
            for low, high in ranges:
                unmatched = unmatched | column.between(F.lit(low), F.lit(high))
            return unmatched, None
    names = [f"{KEY_PREFIX}{i}" for i in range(len(columns))]
    matched_keys = keys.filter(pa.array(matched)).rename_columns(names)
    return None, source.sparkSession.createDataFrame(matched_keys)


def unmatched_ranges(values: np.ndarray, matched: np.ndarray) -> list[tuple[int, int]] | None:
    """The runs of unmatched values (`~matched`) in the order of the distinct `values`
    (integers), as (least, greatest) pairs; None when they are more than MAX_INSERT_RANGES."""
    order = np.argsort(values, kind="stable")
    ordered, unmatched = values[order], ~matched[order]
    starts = unmatched & np.concatenate([[True], ~unmatched[:-1]])
    ends = unmatched & np.concatenate([~unmatched[1:], [True]])
    if np.count_nonzero(starts) > MAX_INSERT_RANGES:
        return None
    return [(int(a), int(b)) for a, b in zip(ordered[starts], ordered[ends], strict=True)]


def driver_search_rows(conf: Any) -> int:
    """The session's DRIVER_SEARCH_ROWS (`conf`: `spark.conf`)."""
    default = str(DEFAULT_DRIVER_SEARCH_ROWS)
    return int(conf.get(DRIVER_SEARCH_ROWS, default) or default)


def _same_values(given: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a column of type `given` holds values of type `wanted` in another layout
    (string and large string, binary and large binary)."""
    for kinds in (
        (pa.types.is_string, pa.types.is_large_string),
        (pa.types.is_binary, pa.types.is_large_binary),
    ):
        if any(k(given) for k in kinds) and any(k(wanted) for k in kinds):
            return True
    return False


def _row_indexes(
    reader: FileReader, files: pa.StructArray, records: pa.Array, i: int, live: np.ndarray
) -> RowIndexes:
    """The indexes in file `i` of its live rows at positions `live` (rows its deletion vector
    keeps, in order); `records`: the files' numRecords."""
    chosen = np.zeros(int(reader.lengths[i]), dtype=bool)
    chosen[live] = True
    dv = files.field("deletionVector")[i]
    empty = np.zeros(0, dtype=np.uint64)
    deleted = reader.deletion_vectors.read(dv.as_py()) if dv.is_valid else empty
    return live_row_indexes(chosen, deleted, records[i].as_py())
