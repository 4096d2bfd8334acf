"""Reading a table's change data feed as Arrow: `read_changes` (delta-spark's CDCReader).

For each commit from the starting version to the ending version (both included):

1. the commit's `cdc` actions, when it has any: their change data files hold the changed rows
   with `_change_type` (`insert`, `delete`, `update_preimage`, `update_postimage`), partition
   values taken from the action;
2. otherwise its add and remove actions with dataChange=true: the rows of an added file (its
   deletion vector applied) as `insert`, the rows of a removed file (the removed file's
   deletion vector applied) as `delete`; a file removed and added again in the commit with a
   new deletion vector (a DELETE with deletion vectors by delta-spark) yields only the rows the
   new vector deletes (and inserts any row it restores), as delta-spark does.

Every row gets `_commit_version` and `_commit_timestamp` (the commit's in-commit timestamp, or
its log file's modification time, made increasing as for time travel). The columns are the
table's at the ending version (a column a file lacks reads as NULL). Every commit in the range
must have the change data feed enabled (`delta.enableChangeDataFeed=true` in the metadata in
effect at that version), else ChangeDataFeedError names the first version without it; and every
schema of the range must read as the ending version's (columns only added: `change_schemas`),
else ChangeDataFeedError names the version to split the range at.

>>> read_changes("/data/orders", 12).filter(pc.field("_change_type") != "update_preimage")
... # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_delta.engine.commands.change_schemas import check_read_compatible
from airflow_delta.engine.commands.data_files import CHANGE_TYPE_COLUMN, with_change_type
from airflow_delta.engine.commands.data_reader import FileReader, repeat_scalar, spelt_as
from airflow_delta.engine.errors import (
    ChangeDataFeedError,
    InvalidArgumentError,
    VersionNotFoundError,
)
from airflow_delta.engine.log.history import Timestamp, commit_timestamps, to_epoch_ms
from airflow_delta.engine.log.log_segment import commit_files, list_log
from airflow_delta.engine.log.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.actions import (
    AddCDCFile,
    AddFile,
    DeletionVectorDescriptor,
    Metadata,
    RemoveFile,
    parse_actions,
)

__all__ = ["COMMIT_TIMESTAMP_COLUMN", "COMMIT_VERSION_COLUMN", "read_changes"]

COMMIT_VERSION_COLUMN = "_commit_version"
COMMIT_TIMESTAMP_COLUMN = "_commit_timestamp"
_CHANGE_TYPES = ("insert", "delete", "update_preimage", "update_postimage")


@dataclass(frozen=True)
class _Read:
    """One file to read for the feed: its rows (kept by `keep`, None: all) as `change_type`
    (None: the file's own `_change_type` column)."""

    version: int
    path: str
    partition_values: Mapping[str, str | None]
    change_type: str | None
    keep: tuple[DeletionVectorDescriptor | None, DeletionVectorDescriptor | None] | None = None


def read_changes(
    table: str,
    starting_version: int | None = None,
    ending_version: int | None = None,
    *,
    starting_timestamp: Timestamp | None = None,
    ending_timestamp: Timestamp | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The row-level changes of the Delta table at `table` from `starting_version` (or the
    first commit at or after `starting_timestamp`) to `ending_version` (or the last commit at
    or before `ending_timestamp`; default the latest), both included, as Arrow: the table's
    columns (`columns`, default all) plus `_change_type`, `_commit_version` and
    `_commit_timestamp`, ordered by version.

    Raises ChangeDataFeedError when a commit of the range does not record change data or a
    column was dropped, renamed or retyped within it,
    VersionNotFoundError for a starting point after the latest commit or before the oldest
    one the log keeps, InvalidArgumentError for an ending point before the starting one.

    >>> read_changes("s3://lake/orders", 12, 15, columns=["id", "status"])  # doctest: +SKIP
    """
    location = TableLocation.of(table, storage_options)
    stamps = dict(commit_timestamps(location))
    start, end = _range(location, stamps, starting_version, ending_version,
                        starting_timestamp, ending_timestamp)  # fmt: skip
    snapshot = load_snapshot(location, end)
    schema = pa.schema([pa.field(f.name, f.type) for f in snapshot.metadata.schema])
    names = _columns(schema, columns, location.uri)
    reads = _plan(location, start, end)
    reader = FileReader(snapshot, schema.append(pa.field(CHANGE_TYPE_COLUMN, pa.string())))

    def one(read: _Read) -> pa.Table:
        return _read(reader, read, names, stamps[read.version])

    with ThreadPoolExecutor(min(len(reads), os.cpu_count() or 1) or 1) as pool:
        tables = list(pool.map(one, reads))
    if not tables:
        return _stamped(with_change_type(schema.empty_table().select(names), "insert"), 0, 0)
    return pa.concat_tables(tables)


def _range(
    location: TableLocation,
    stamps: Mapping[int, int],
    starting_version: int | None,
    ending_version: int | None,
    starting_timestamp: Timestamp | None,
    ending_timestamp: Timestamp | None,
) -> tuple[int, int]:
    """The first and last version of the range asked."""
    table, latest, oldest = location.uri, max(stamps), min(stamps)
    if (starting_version is None) == (starting_timestamp is None):
        raise InvalidArgumentError(
            f"read_changes of {table}: pass starting_version or starting_timestamp"
        )
    if ending_version is not None and ending_timestamp is not None:
        raise InvalidArgumentError(
            f"read_changes of {table}: pass ending_version or ending_timestamp"
        )
    if starting_timestamp is not None:
        ms = to_epoch_ms(starting_timestamp, table)
        after = [v for v, t in sorted(stamps.items()) if t >= ms]
        if not after:
            raise VersionNotFoundError(
                f"read_changes of {table}: no commit at or after {starting_timestamp} (the "
                f"latest, version {latest}, is older)"
            )
        starting_version = after[0]
    assert starting_version is not None
    end = latest if ending_version is None else min(ending_version, latest)
    if ending_timestamp is not None:
        ms = to_epoch_ms(ending_timestamp, table)
        end = max((v for v, t in stamps.items() if t <= ms), default=-1)
        if end < 0:
            raise VersionNotFoundError(
                f"read_changes of {table}: no commit at or before {ending_timestamp} (the "
                f"oldest kept, version {oldest}, is later); end at a later timestamp"
            )
    if starting_version > latest:
        raise VersionNotFoundError(
            f"read_changes of {table}: starting version {starting_version} is after the "
            f"latest version {latest}"
        )
    if starting_version < oldest:
        raise VersionNotFoundError(
            f"read_changes of {table}: version {starting_version} is no longer in the log "
            f"(the oldest commit kept is {oldest}); start at {oldest} or later"
        )
    if end < starting_version:
        raise InvalidArgumentError(
            f"read_changes of {table}: the ending version {end} is before the starting "
            f"version {starting_version}"
        )
    return starting_version, end


def _columns(schema: pa.Schema, columns: Sequence[str] | None, table: str) -> list[str]:
    if columns is None:
        return list(schema.names)
    names, unknown = spelt_as(schema.names, columns)
    if unknown:
        raise InvalidArgumentError(
            f"read_changes of {table}: no column {', '.join(unknown)} (columns: "
            f"{', '.join(schema.names)})"
        )
    return names


def _plan(location: TableLocation, start: int, end: int) -> list[_Read]:
    """The files to read for the commits `start`..`end`, checking that each records changes."""
    files = {v: f for v, f in commit_files(list_log(location)) if start <= v <= end}
    missing = [v for v in range(start, end + 1) if v not in files]
    if missing:
        raise VersionNotFoundError(
            f"read_changes of {location.uri}: commit {missing[0]} is missing from the log"
        )
    metadata: Metadata = _metadata_before(location, start)
    reads: list[_Read] = []
    schemas: list[tuple[int, Metadata]] = []  # (in effect from version, metadata)
    for version in range(start, end + 1):
        actions = parse_actions(location.store.read(files[version].path), files[version].path)
        changed = next((a for a in actions if isinstance(a, Metadata)), None)
        metadata = changed or metadata
        if version == start or changed is not None:
            schemas.append((version, metadata))
        config = metadata.configuration.get("delta.enableChangeDataFeed", "false")
        if config.lower() != "true":
            raise ChangeDataFeedError(
                f"Cannot read the changes of table {location.uri} from version {start} to "
                f"{end}: change data was not recorded for version {version} (the change data "
                "feed was not enabled then). Read from a version after it was enabled (see the "
                "table's history); to record changes from now on, set the table property "
                "delta.enableChangeDataFeed=true."
            )
        reads += _commit_reads(version, actions)
    check_read_compatible(location.uri, start, end, schemas)
    return reads


def _metadata_before(location: TableLocation, version: int) -> Metadata:
    """The metadata in effect before `version` (an empty one before version 0), or, when the
    log no longer rebuilds `version - 1` (the oldest commit kept after cleanup), the metadata
    as of `version`: the same unless commit `version` replaces it, and then the commit's own
    metaData takes over at once."""
    if version == 0:
        return Metadata()
    try:
        snapshot: Snapshot = load_snapshot(location, version - 1)
    except VersionNotFoundError:
        snapshot = load_snapshot(location, version)
    return snapshot.metadata


def _commit_reads(version: int, actions: Sequence[Any]) -> list[_Read]:
    """What to read for one commit: its cdc files, else its data-changing adds and removes."""
    cdc = [a for a in actions if isinstance(a, AddCDCFile)]
    if cdc:
        return [_Read(version, a.path, a.partition_values, None) for a in cdc]
    adds = {a.path: a for a in actions if isinstance(a, AddFile) and a.data_change}
    removes = {a.path: a for a in actions if isinstance(a, RemoveFile) and a.data_change}
    reads = []
    for path, remove in removes.items():
        add = adds.get(path)
        if add is not None:  # the same file with another deletion vector: the difference
            old, new = remove.deletion_vector, add.deletion_vector
            if new is not None:  # rows the new vector deletes and the old one kept
                reads.append(_Read(version, path, add.partition_values, "delete", (old, new)))
            if old is not None:  # rows the old vector deleted and the new one keeps
                reads.append(_Read(version, path, add.partition_values, "insert", (new, old)))
        else:
            values = remove.partition_values or {}
            reads.append(_Read(version, path, values, "delete", (remove.deletion_vector, None)))
    for path, add in adds.items():
        if path not in removes:
            keep = (add.deletion_vector, None)
            reads.append(_Read(version, path, add.partition_values, "insert", keep))
    return reads


def _read(reader: FileReader, read: _Read, names: list[str], timestamp: int) -> pa.Table:
    """The changed rows of one file, stamped with the commit."""
    columns = names if read.change_type else [*names, CHANGE_TYPE_COLUMN]
    data = reader.read_file(read.path, list(read.partition_values.items()), columns)
    if read.keep is not None:
        data = data.filter(pa.array(_kept(reader, read.keep, data.num_rows)))
    if read.change_type is not None:
        data = with_change_type(data, read.change_type)
    return _stamped(data, read.version, timestamp)


def _kept(
    reader: FileReader,
    dvs: tuple[DeletionVectorDescriptor | None, DeletionVectorDescriptor | None],
    rows: int,
) -> np.ndarray:
    """Rows the first deletion vector keeps and the second (when given) deletes."""
    live, gone = dvs  # read by `kept`: a vector deleting a row past the file's end is corrupt
    keep = reader.kept(_dv_row(live), rows)
    if gone is not None:
        keep &= ~reader.kept(_dv_row(gone), rows)
    return keep


def _dv_row(dv: DeletionVectorDescriptor | None) -> dict[str, Any] | None:
    """A deletion vector descriptor as the log's row (the form `FileReader.kept` takes)."""
    return None if dv is None else dv.to_json_dict()


def _stamped(data: pa.Table, version: int, timestamp: int) -> pa.Table:
    rows = data.num_rows
    data = data.append_column(COMMIT_VERSION_COLUMN, repeat_scalar(pa.scalar(version), rows))
    ts = pa.scalar(timestamp * 1000, pa.timestamp("us", tz="UTC"))
    return data.append_column(COMMIT_TIMESTAMP_COLUMN, repeat_scalar(ts, rows))
