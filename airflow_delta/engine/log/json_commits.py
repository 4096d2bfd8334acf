"""Commit files decoded in bulk into columnar LogBatches.

A log segment's commits are read by pyarrow's JSON reader, with an explicit schema, in one call
per run of commits: the `add` and `remove` actions become ADD_TYPE / REMOVE_TYPE columns
directly (stats stay strings), with no Python object per action. Only the few other actions
(commitInfo, protocol, metaData, txn, domainMetadata, ...) are parsed line by line.

`partitionValues` is a map in the protocol, which the JSON reader cannot build; it is read as a
struct of the table's partition columns and turned into the map vectorised (a partition column
a writer left out of a file's map reads as null, an entry with a null value). The partition
columns come from the metadata in effect, so a commit that carries a `metaData` action is
decoded by the exact per-line parser (`replay.parse_log_batch`), and so is every commit whose
shape the fast path does not cover: `tags` on a file action, a `\\r` line break, a line that
does not start with `{`, is not an object or does not fit the schema, a file action without a
path, a file without a known action. The result is the same as the per-line parser's (a test
holds both to that); errors come from the per-line parser, with their line numbers.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from airflow_delta.engine.log.replay import SMALL_ACTIONS, LogBatch, parse_log_batch
from airflow_delta.engine.protocol.action_types import ADD_TYPE, REMOVE_TYPE
from airflow_delta.engine.protocol.actions import action_from_json
from airflow_delta.engine.protocol.columnar import (
    array_from_pylist,
    bool_mask,
    bool_values,
    int_array,
)
from airflow_delta.engine.protocol.log_json import parse_json

#: Actions decoded line by line (few per commit); the JSON reader only notes where they are.
_OTHER_ACTIONS = tuple(SMALL_ACTIONS)


def decode_commits(
    commits: Sequence[tuple[bytes, str]], partition_columns: Sequence[str] | None
) -> list[LogBatch]:
    """The LogBatch of each commit `(data, source)`, in order.

    `partition_columns` are the keys of the files' `partitionValues` under the metadata in effect
    before the first commit (`Metadata.physical_partition_columns`: physical names with column
    mapping); None when unknown (the commits then start with the table's first metadata).
    """
    batches: list[LogBatch | None] = [None] * len(commits)
    run: list[int] = []
    columns = list(partition_columns) if partition_columns is not None else None
    for i, (data, source) in enumerate(commits):
        if columns is None or b'"metaData"' in data or b"\r" in data:
            _decode_run(commits, run, columns, batches)
            run = []
            batch = parse_log_batch(data, source)
            batches[i] = batch
            if batch.metadata is not None:
                columns = batch.metadata.physical_partition_columns
        else:
            run.append(i)
    _decode_run(commits, run, columns, batches)
    return [b for b in batches if b is not None]


def _decode_run(
    commits: Sequence[tuple[bytes, str]],
    run: list[int],
    columns: list[str] | None,
    out: list[LogBatch | None],
) -> None:
    """Decode the commits `run` (indexes) together; any the fast path does not take are
    decoded by the per-line parser."""
    if not run:
        return
    assert columns is not None  # a run starts after the metadata is known
    datas = [commits[i][0] if commits[i][0].endswith(b"\n") else commits[i][0] + b"\n" for i in run]
    counts = [_row_count(d) for d in datas]
    table = _read(datas, columns)
    if table is None or table.num_rows != sum(counts):
        for i in run:
            out[i] = parse_log_batch(*commits[i])
        return
    adds = _file_actions(table.column("add").combine_chunks(), ADD_TYPE, columns)
    removes = _file_actions(table.column("remove").combine_chunks(), REMOVE_TYPE, columns)
    others = _present(table, _OTHER_ACTIONS)
    lo = 0
    for i, data, count in zip(run, datas, counts, strict=True):
        hi = lo + count
        batch = _batch(commits[i][1], data, lo, hi, adds, removes, others)
        out[i] = batch if batch is not None else parse_log_batch(*commits[i])
        lo = hi


def _row_count(data: bytes) -> int:
    """The lines of `data` (which ends with a newline), counted at memchr speed. When they are
    not exactly the JSON reader's rows (a blank line, a line that is not one object), the
    total differs or the reader refuses, and the run goes to the per-line parser."""
    return data.count(b"\n")


def _read(datas: list[bytes], columns: list[str]) -> pa.Table | None:
    """The actions of the commits `datas` as columns; None when the JSON reader refuses them.
    Blocks of 4 MiB (or the largest commit) are parsed in parallel."""
    block = max(1 << 22, max(len(d) for d in datas) + 1)
    try:
        return pj.read_json(
            io.BytesIO(b"".join(datas)),
            read_options=pj.ReadOptions(block_size=block),
            parse_options=pj.ParseOptions(
                explicit_schema=_schema(columns), unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _schema(columns: list[str]) -> pa.Schema:
    def as_read(type_: pa.StructType) -> pa.StructType:
        fields = []
        for f in type_:
            if f.name == "partitionValues":
                f = f.with_type(pa.struct([(c, pa.string()) for c in columns]))
            elif f.name == "tags":
                f = f.with_type(pa.struct([]))  # present or not: present means per-line
            fields.append(f)
        return pa.struct(fields)

    return pa.schema(
        [("add", as_read(ADD_TYPE)), ("remove", as_read(REMOVE_TYPE))]
        + [(name, pa.struct([])) for name in _OTHER_ACTIONS]
    )


class _FileActions:
    """One kind of file action of a run: the rows holding one, and them as ADD/REMOVE_TYPE."""

    def __init__(self, rows: np.ndarray, actions: pa.StructArray, bad_rows: np.ndarray) -> None:
        self.rows = rows
        self.actions = actions
        self.bad_rows = bad_rows  # rows the per-line parser must decode (no path, tags)


def _file_actions(column: pa.StructArray, type_: pa.StructType, columns: list[str]) -> _FileActions:
    present = bool_values(column.is_valid())
    rows = np.flatnonzero(present)
    found = column.filter(bool_mask(present))
    bad = bool_values(found.field("path").is_null())
    if type_.get_field_index("tags") >= 0:
        bad |= bool_values(found.field("tags").is_valid())
    children = []
    for f in type_:
        child = found.field(f.name)
        if f.name == "partitionValues":
            child = _struct_to_map(child, columns)
        elif f.name == "tags":
            child = pa.nulls(len(found), f.type)
        children.append(child)
    actions = pa.StructArray.from_arrays(children, fields=list(type_))
    return _FileActions(rows, actions, rows[bad])


def _struct_to_map(values: pa.StructArray, columns: list[str]) -> pa.MapArray:
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
