"""Commit files decoded in bulk into columnar LogBatches.

A log segment's commits are read by pyarrow's JSON reader, with an explicit schema, in one call
per run of commits: the `add` and `remove` actions become ADD_TYPE / REMOVE_TYPE columns
directly (stats stay strings), with no Python object per action. Only the few other actions
(commitInfo, protocol, metaData, txn, domainMetadata, ...) are parsed line by line.

The schema is shaped by the metadata and protocol in effect (`_Shape`), because the reader's
cost grows with every field it fills for every row:

* `partitionValues` is a map in the protocol, which the JSON reader cannot build; it is read as
  a struct of the table's partition columns and turned into the map vectorised (a partition
  column a writer left out of a file's map reads as null, an entry with a null value);
* `baseRowId`, `defaultRowCommitVersion` and `clusteringProvider` are read only when the
  protocol supports their feature (rowTracking, clustering): the protocol allows them only then;
* `deletionVector` (unless the protocol supports deletionVectors) and `tags` are read as
  presence markers only: a file action that holds one is decoded by the per-line parser.

A commit holding a `metaData` or `protocol` action is decoded by the exact per-line parser
(`replay.parse_log_batch`), and when it changes the shape, the commits after it are read again
with the new one. So is every commit whose shape the fast path does not cover: a `\\r` line
break, a line that does not start with `{`, is not an object or does not fit the schema, a file
action without a path, a file without a known action. The result is the same as the per-line
parser's (a test holds both to that); errors come from the per-line parser, with their line
numbers.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_delta.engine.log.replay import SMALL_ACTIONS, LogBatch, parse_log_batch
from airflow_delta.engine.protocol.action_types import ADD_TYPE, REMOVE_TYPE
from airflow_delta.engine.protocol.actions import Metadata, Protocol, action_from_json
from airflow_delta.engine.protocol.columnar import (
    array_from_pylist,
    bool_mask,
    bool_values,
    int_array,
)
from airflow_delta.engine.protocol.features import reader_features, writer_features
from airflow_delta.engine.protocol.log_json import parse_json

#: Actions decoded line by line (few per commit); the JSON reader only notes where they are.
_OTHER_ACTIONS = tuple(SMALL_ACTIONS)
#: Actions after which the schema of the commits that follow may change.
_SHAPING_ACTIONS = ("metaData", "protocol")
#: File action fields read only when the protocol supports the feature that defines them.
_FEATURE_FIELDS = {
    "baseRowId": "rowTracking",
    "defaultRowCommitVersion": "rowTracking",
    "clusteringProvider": "clustering",
}
#: File action fields read as presence markers (a row holding one goes to the per-line parser),
#: unless the protocol supports the feature named (None: always a marker).
_MARKED_FIELDS = {"deletionVector": "deletionVectors", "tags": None}
_MARKER = pa.struct([])
_NEWLINE = ord("\n")


@dataclass(frozen=True)
class _Shape:
    """What the file actions of commits can hold under a metadata and protocol."""

    columns: tuple[str, ...]  # keys of partitionValues (physical names)
    features: frozenset[str]  # supported features that add fields to file actions

    @classmethod
    def of(cls, metadata: Metadata | None, protocol: Protocol | None) -> _Shape | None:
        if metadata is None or protocol is None:
            return None
        named = set(_FEATURE_FIELDS.values()) | {f for f in _MARKED_FIELDS.values() if f}
        supported = (writer_features(protocol) | reader_features(protocol)) & named
        return cls(tuple(metadata.physical_partition_columns), frozenset(supported))

    def read_type(self, type_: pa.StructType) -> pa.StructType:
        """`type_` as the JSON reader reads it under this shape."""
        fields = []
        for f in type_:
            if f.name == "partitionValues":
                f = f.with_type(pa.struct([(c, pa.string()) for c in self.columns]))
            elif f.name in _MARKED_FIELDS and _MARKED_FIELDS[f.name] not in self.features:
                f = f.with_type(_MARKER)
            elif f.name in _FEATURE_FIELDS and _FEATURE_FIELDS[f.name] not in self.features:
                continue
            fields.append(f)
        return pa.struct(fields)

    def schema(self) -> pa.Schema:
        return pa.schema(
            [("add", self.read_type(ADD_TYPE)), ("remove", self.read_type(REMOVE_TYPE))]
            + [(name, _MARKER) for name in _OTHER_ACTIONS]
        )


def decode_commits(
    commits: Sequence[tuple[bytes, str]],
    metadata: Metadata | None,
    protocol: Protocol | None,
) -> list[LogBatch]:
    """The LogBatch of each commit `(data, source)`, in order.

    `metadata` and `protocol` are those in effect before the first commit; None when unknown
    (the commits then start with the table's first ones).
    """
    out: list[LogBatch | None] = [None] * len(commits)
    plain = [b"\r" not in data for data, _ in commits]
    state = _State(metadata, protocol)
    i = 0
    while i < len(commits):
        shape = state.shape()
        end = i
        while end < len(commits) and plain[end]:
            end += 1
        if shape is None or end == i:
            out[i] = state.parse(commits[i])
            i += 1
        else:
            i = _decode_run(commits, range(i, end), shape, state, out)
    return [b for b in out if b is not None]


class _State:
    """The metadata and protocol in effect as commits are decoded in order."""

    def __init__(self, metadata: Metadata | None, protocol: Protocol | None) -> None:
        self.metadata, self.protocol = metadata, protocol

    def shape(self) -> _Shape | None:
        return _Shape.of(self.metadata, self.protocol)

    def parse(self, commit: tuple[bytes, str]) -> LogBatch:
        """The commit decoded by the per-line parser, its metadata and protocol taken in."""
        batch = parse_log_batch(*commit)
        self.metadata = batch.metadata or self.metadata
        self.protocol = batch.protocol or self.protocol
        return batch


def _decode_run(
    commits: Sequence[tuple[bytes, str]],
    run: range,
    shape: _Shape,
    state: _State,
    out: list[LogBatch | None],
) -> int:
    """Decode the commits `run` (indexes) together under `shape`; any the fast path does not
    take are decoded by the per-line parser. Returns where decoding goes on: after a commit
    that changed the shape (what follows it is read again), else the run's end."""
    datas = [commits[i][0] if commits[i][0].endswith(b"\n") else commits[i][0] + b"\n" for i in run]
    counts = [_row_count(d) for d in datas]
    table = _read(datas, shape.schema())
    if table is None or table.num_rows != sum(counts):
        for i in run:
            out[i] = state.parse(commits[i])
        return run.stop
    adds = _file_actions(table.column("add").combine_chunks(), ADD_TYPE, shape.columns)
    removes = _file_actions(table.column("remove").combine_chunks(), REMOVE_TYPE, shape.columns)
    others = _present(table, _OTHER_ACTIONS)
    shaping = _present(table, _SHAPING_ACTIONS)
    lo = 0
    for i, data, count in zip(run, datas, counts, strict=True):
        hi = lo + count
        if shaping[lo:hi].any():
            out[i] = state.parse(commits[i])
            if state.shape() != shape:
                return i + 1
        else:
            batch = _batch(commits[i][1], data, lo, hi, adds, removes, others)
            out[i] = batch if batch is not None else parse_log_batch(*commits[i])
        lo = hi
    return run.stop


def _row_count(data: bytes) -> int:
    """The lines of `data` (which ends with a newline), counted at memchr speed. When they are
    not exactly the JSON reader's rows (a blank line, a line that is not one object), the
    total differs or the reader refuses, and the run goes to the per-line parser."""
    return int(np.count_nonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE))


def _read(datas: list[bytes], schema: pa.Schema) -> pa.Table | None:
    """The actions of the commits `datas` as columns; None when the JSON reader refuses them.
    Blocks of 4 MiB (or the largest commit) are parsed in parallel."""
    block = max(1 << 22, max(len(d) for d in datas) + 1)
    try:
        return pj.read_json(
            io.BufferedReader(_Chain(datas), block),
            read_options=pj.ReadOptions(block_size=block),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


class _Chain(io.RawIOBase):
    """The commits `parts` as one stream, read without joining them into one copy first."""

    def __init__(self, parts: list[bytes]) -> None:
        self._parts = [memoryview(p) for p in parts]
        self._part, self._offset = 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        out, filled = memoryview(buffer).cast("B"), 0
        while filled < len(out) and self._part < len(self._parts):
            part = self._parts[self._part]
            size = min(len(out) - filled, len(part) - self._offset)
            out[filled : filled + size] = part[self._offset : self._offset + size]
            filled, self._offset = filled + size, self._offset + size
            if self._offset == len(part):
                self._part, self._offset = self._part + 1, 0
        return filled


class _FileActions:
    """One kind of file action of a run: the rows holding one, and them as ADD/REMOVE_TYPE."""

    def __init__(self, rows: np.ndarray, actions: pa.StructArray, bad_rows: np.ndarray) -> None:
        self.rows = rows
        self.actions = actions
        self.bad_rows = bad_rows  # rows the per-line parser must decode (no path, tags)


def _file_actions(
    column: pa.StructArray, type_: pa.StructType, columns: Sequence[str]
) -> _FileActions:
    """The rows of `column` (read under a `_Shape`) holding an action, as `type_` structs; a
    field the shape did not read is null, and a row with a marker set is bad."""
    present = bool_values(column.is_valid())
    rows = np.flatnonzero(present)
    found = column.filter(bool_mask(present))
    read: pa.StructType = found.type
    bad = bool_values(found.field("path").is_null())
    children = []
    for f in type_:
        if f.name == "partitionValues":
            children.append(_struct_to_map(found.field(f.name), columns))
        elif read.get_field_index(f.name) < 0:
            children.append(pa.nulls(len(found), f.type))
        elif read.field(f.name).type == _MARKER:
            bad |= bool_values(found.field(f.name).is_valid())
            children.append(pa.nulls(len(found), f.type))
        else:
            children.append(found.field(f.name))
    actions = pa.StructArray.from_arrays(children, fields=list(type_))
    return _FileActions(rows, actions, rows[bad])


def _struct_to_map(values: pa.StructArray, columns: Sequence[str]) -> pa.MapArray:
    """Each valid struct row as a map with an entry per partition column; null rows stay null."""
    valid = bool_values(values.is_valid())
    k, rows = len(columns), int(valid.sum())
    offsets = np.concatenate(([0], np.cumsum(valid * k))).astype(np.int32)
    names = array_from_pylist(columns, pa.string())
    keys = pc.take(names, int_array(np.tile(np.arange(k, dtype=np.int32), rows)))
    if k:
        fields = [values.field(c).filter(bool_mask(valid)) for c in columns]
        interleave = np.arange(rows * k, dtype=np.int64).reshape(k, rows).T.ravel()
        items = pc.take(pa.concat_arrays(fields), int_array(interleave))
    else:
        items = pa.nulls(0, pa.string())
    mask = bool_mask(~valid) if not valid.all() else None
    return pa.MapArray.from_arrays(int_array(offsets), keys, items, mask=mask)


def _present(table: pa.Table, names: Sequence[str]) -> np.ndarray:
    """Rows holding any of the actions `names`."""
    hit = np.zeros(table.num_rows, dtype=bool)
    for name in names:
        hit |= bool_values(table.column(name).combine_chunks().is_valid())
    return hit


def _batch(
    source: str,
    data: bytes,
    lo: int,
    hi: int,
    adds: _FileActions,
    removes: _FileActions,
    others: np.ndarray,
) -> LogBatch | None:
    """The batch of the commit `data` whose rows are [lo, hi); None when the per-line parser
    must decode it."""
    add_rows, add_actions, add_bad = _slice(adds, lo, hi)
    remove_rows, remove_actions, remove_bad = _slice(removes, lo, hi)
    if add_bad or remove_bad:
        return None
    other_rows = np.flatnonzero(others[lo:hi])
    if not len(other_rows) + len(add_rows) + len(remove_rows):
        return None  # no known action: the per-line parser decides (unknown ones, or none)
    batch = LogBatch(source=source, adds=add_actions, removes=remove_actions)
    batch.add_lines, batch.remove_lines = add_rows - lo, remove_rows - lo
    for row, line in _lines_at(data, other_rows.tolist()):
        _add_other_actions(batch, line, source, row)
    return batch


def _lines_at(data: bytes, rows: list[int]) -> Iterator[tuple[int, bytes]]:
    """(row, line) of the non-empty lines `rows` (ascending) of `data`, scanning only as far
    as the last of them (the other actions of a commit are few, commitInfo usually first)."""
    start, row = 0, -1
    for wanted in rows:
        while True:
            end = data.index(b"\n", start)
            if end > start:
                row += 1
            if row == wanted and end > start:
                yield row, data[start:end]
                start = end + 1
                break
            start = end + 1


def _slice(actions: _FileActions, lo: int, hi: int) -> tuple[np.ndarray, pa.StructArray, bool]:
    first, last = np.searchsorted(actions.rows, [lo, hi])
    bad = bool(len(actions.bad_rows)) and bool(
        np.any((actions.bad_rows >= lo) & (actions.bad_rows < hi))
    )
    return actions.rows[first:last], actions.actions.slice(first, last - first), bad


def _add_other_actions(batch: LogBatch, line: bytes, source: str, row: int) -> None:
    where = f"{source}: action {row + 1}"
    wrapper: Any = parse_json(line, where)
    for name, body in wrapper.items():
        if name in SMALL_ACTIONS:
            SMALL_ACTIONS[name](batch, action_from_json(name, body, where))
