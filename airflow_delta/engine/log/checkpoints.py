"""Checkpoints: reading classic, multi-part and v2 checkpoints, and writing classic ones.

A checkpoint holds one action per row, each action in its own struct column (`add`, `remove`,
`metaData`, `protocol`, `txn`, `domainMetadata`, and in v2 checkpoints `checkpointMetadata` and
`sidecar`). Only the struct fields this engine uses are read (never `stats_parsed` or
`partitionValues_parsed`), straight into the columnar form log replay works on.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.log.log_store import FileStatus, LogStore
from airflow_delta.engine.log.replay import FileActions, LogBatch, parse_log_batch
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.action_types import (
    ADD_TYPE,
    CHECKPOINT_COLUMNS,
    DOMAIN_METADATA_TYPE,
    METADATA_TYPE,
    PROTOCOL_TYPE,
    REMOVE_TYPE,
    SIDECAR_TYPE,
    STRING_MAP,
    TXN_TYPE,
)
from airflow_delta.engine.protocol.actions import (
    CheckpointMetadata,
    DomainMetadata,
    Metadata,
    Protocol,
    SetTransaction,
    Sidecar,
)
from airflow_delta.engine.protocol.columnar import (
    array_from_pylist,
    bool_mask,
    concat,
    contiguous,
    lazy_nulls,
)
from airflow_delta.engine.protocol.log_json import parse_json, parsed_stats_json

log = logging.getLogger(__name__)

#: `_last_checkpoint` is a small hint (version, size, parts, perhaps a schema and a checksum);
#: a larger file is not read: it is ignored and the log listed instead.
LAST_CHECKPOINT_MAX_BYTES = 16 * 2**20
#: Above this many actions a checkpoint is split into a multi-part checkpoint.
DEFAULT_CHECKPOINT_PART_SIZE = 5_000_000

_READ_COLUMNS: dict[str, pa.StructType] = {
    **CHECKPOINT_COLUMNS,
    "checkpointMetadata": pa.struct([("version", pa.int64())]),
    "sidecar": SIDECAR_TYPE,
}


def conform(arr: pa.Array, target: pa.StructType) -> pa.StructArray:
    """Reshape a struct array read from any writer into `target`: fields picked, cast, or null."""
    children = []
    for f in target:
        idx = arr.type.get_field_index(f.name)
        if idx < 0:
            children.append(lazy_nulls(len(arr), f.type))
            continue
        child = arr.field(idx)
        if pa.types.is_struct(f.type):
            child = conform(child, f.type)
        elif child.type != f.type:
            child = child.cast(f.type)
        children.append(child)
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)


_FILE_COLUMNS = ("add", "remove")


def _projection(schema: pa.Schema, file_actions: bool, stats: bool = True) -> list[str]:
    """Dotted paths of the checkpoint fields this engine reads that the file has: those of the
    file actions (with or without the AddFiles' stats), or those of every other action."""
    columns = []
    for name, wanted in _READ_COLUMNS.items():
        if (name in _FILE_COLUMNS) != file_actions:
            continue
        idx = schema.get_field_index(name)
        if idx < 0:
            continue
        have = schema.field(idx).type
        if not pa.types.is_struct(have):
            continue
        fields = [f.name for f in wanted if have.get_field_index(f.name) >= 0]
        if name == "add":
            fields = [n for n in fields if n != "stats"] + _stats_fields(have)[: int(stats)]
        columns += [f"{name}.{n}" for n in fields]
    return columns


def _stats_fields(add: pa.StructType) -> list[str]:
    """The field that holds an AddFile's stats: `stats` (JSON), else `stats_parsed`."""
    for name in ("stats", "stats_parsed"):
        if add.get_field_index(name) >= 0:
            return [name]
    return []


def _stats_from_parsed(adds: pa.StructArray) -> pa.StructArray:
    """Fill missing JSON stats from `stats_parsed` (checkpoints written without JSON stats).

    Only such checkpoints pay this per-file conversion.
    """
    parsed = adds.field("stats_parsed")
    rows = parsed.to_pylist()
    stats = array_from_pylist(
        [None if r is None else parsed_stats_json(r) for r in rows], pa.string()
    )
    names = [f.name for f in adds.type if f.name != "stats_parsed"]
    children = [adds.field(n) for n in names]
    return pa.StructArray.from_arrays(
        [*children, stats], names=[*names, "stats"], mask=adds.is_null()
    )


def _read_parquet_actions(
    store: LogStore, path: str, pf: pq.ParquetFile, columns: list[str]
) -> pa.Table:
    try:
        threads = pf.metadata.num_rows > THREADED_ROWS
        return pf.read(columns=columns, use_threads=threads)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise CorruptLogError(f"checkpoint file {path} cannot be read: {exc}") from None


def _small_actions(path: str, pf: pq.ParquetFile) -> dict[str, pa.Array]:
    """The non-null rows of each non-file action column (protocol, metaData, txn...): read a
    batch at a time, keeping only the few non-null rows, so memory does not grow with the
    number of files."""
    columns = _projection(pf.schema_arrow, file_actions=False)
    pieces: dict[str, list[pa.Array]] = {}
    if columns:
        for t in _read_in_batches(path, pf, columns):
            for name in t.column_names:
                col = contiguous(t.column(name))
                if col.null_count < len(col):
                    pieces.setdefault(name, []).append(_valid_rows(col))
    return {name: pa.concat_arrays(parts) for name, parts in pieces.items()}


def _rows(actions: dict[str, pa.Array], name: str, type_: pa.StructType) -> list[dict[str, Any]]:
    """The rows of a small action column as JSON-shaped dicts."""
    if name not in actions:
        return []
    return [_json_shape(r) for r in conform(actions[name], type_).to_pylist()]


def _json_shape(value: Any) -> Any:
    """Arrow's Python form of a row turned into the log's JSON shape (maps become dicts)."""
    if isinstance(value, dict):
        return {k: _json_shape(v) for k, v in value.items() if v is not None}
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return dict(value)
    return value


def _valid_rows(col: pa.Array) -> pa.Array:
    """The non-null rows; a zero-copy slice when they are contiguous (the usual layout)."""
    if not col.null_count:
        return col
    where = pc.indices_nonzero(col.is_valid())
    if not len(where):
        return col.slice(0, 0)
    first, last = where[0].as_py(), where[-1].as_py()
    if last - first + 1 == len(where):
        return col.slice(first, len(where))
    return col.filter(col.is_valid())


def _file_actions(tables: Sequence[pa.Table], name: str, type_: pa.StructType) -> pa.StructArray:
    parts = []
    for t in tables:
        if name in t.column_names:
            col = contiguous(t.column(name))
            if col.null_count < len(col):
                col = _valid_rows(col)
                if col.type.get_field_index("stats_parsed") >= 0:
                    col = _stats_from_parsed(col)
                parts.append(conform(col, type_))
    return concat(parts, type_)


def read_checkpoint(store: LogStore, log_path: str, files: Sequence[FileStatus]) -> LogBatch:
    """Read the files of one checkpoint (all parts, or a v2 top-level file and its sidecars).

    Protocol, metadata, transactions and domains are read now; the file actions (the bulk)
    when replay first needs them, so that a commit that does not read files never pays for them.
    """
    batch = LogBatch(is_checkpoint=True, source=", ".join(f.path for f in files))
    file_tables: list[pa.Table] = []
    parquet_parts: list[tuple[str, pq.ParquetFile]] = []
    for f in files:
        if f.name.endswith(".json"):
            part = parse_log_batch(store.read(f.path), f.path)
            batch.protocol = part.protocol or batch.protocol
            batch.metadata = part.metadata or batch.metadata
            batch.txns += part.txns
            batch.domains += part.domains
            batch.sidecars += part.sidecars
            batch.checkpoint_metadata = part.checkpoint_metadata
            file_tables.append(pa.table({"add": part.add_array(), "remove": part.remove_array()}))
            continue
        try:
            pf = store.open_parquet(f.path)
        except (OSError, pa.ArrowException) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise CorruptLogError(f"checkpoint file {f.path} cannot be read: {exc}") from None
        parquet_parts.append((f.path, pf))
        t = _small_actions(f.path, pf)
        for r in _rows(t, "protocol", PROTOCOL_TYPE):
            batch.protocol = Protocol.from_json_dict(r)
        for r in _rows(t, "metaData", METADATA_TYPE):
            batch.metadata = Metadata.from_json_dict(r)
        batch.txns += [SetTransaction.from_json_dict(r) for r in _rows(t, "txn", TXN_TYPE)]
        domains = _rows(t, "domainMetadata", DOMAIN_METADATA_TYPE)
        batch.domains += [DomainMetadata.from_json_dict(r) for r in domains]
        batch.sidecars += [Sidecar.from_json_dict(r) for r in _rows(t, "sidecar", SIDECAR_TYPE)]
        for r in _rows(t, "checkpointMetadata", _READ_COLUMNS["checkpointMetadata"]):
            batch.checkpoint_metadata = CheckpointMetadata.from_json_dict(r)
    sidecar_dir = store.join(log_path, filenames.SIDECAR_DIR)
    sidecars = [
        sc.path if "/" in sc.path else store.join(sidecar_dir, sc.path) for sc in batch.sidecars
    ]
    batch.unread_files = _CheckpointFileActions(
        store, file_tables, [*parquet_parts, *((path, None) for path in sidecars)]
    )
    return batch


#: Rows per piece when a checkpoint's file actions are streamed (see `read_in_batches`).
READ_BATCH_ROWS = 8192
#: Checkpoint files of more rows are decoded on pyarrow's threads; smaller ones on the calling
#: thread, which is cheaper for them (RESTORE of a 1,000-file table reads two: 1 ms less).
THREADED_ROWS = 5_000


@dataclass
class _CheckpointFileActions:
    """The file actions of a checkpoint: those of its JSON parts (already parsed), then those of
    its parquet parts and sidecars (`None`: a sidecar, opened when first read)."""

    store: LogStore
    json_tables: list[pa.Table]
    parquet: list[tuple[str, pq.ParquetFile | None]]

    def _parquet_files(self) -> Iterator[tuple[str, pq.ParquetFile]]:
        for i, (path, pf) in enumerate(self.parquet):
            if pf is None:
                try:
                    pf = self.store.open_parquet(path)
                except FileNotFoundError:
                    raise CorruptLogError(f"checkpoint sidecar {path} is missing") from None
                except (OSError, pa.ArrowException) as exc:
                    raise CorruptLogError(f"checkpoint file {path} cannot be read: {exc}") from None
                self.parquet[i] = (path, pf)
            yield path, pf

    def read(self, stats: bool = True) -> FileActions:
        """Every file action, read whole; without `stats` the AddFiles' stats are left null
        (unread: `read_stats` reads them)."""
        tables = list(self.json_tables)
        for path, pf in self._parquet_files():
            columns = _projection(pf.schema_arrow, file_actions=True, stats=stats)
            tables.append(_read_parquet_actions(self.store, path, pf, columns))
        return _file_actions(tables, "add", ADD_TYPE), _file_actions(tables, "remove", REMOVE_TYPE)

    def _tables(self) -> Iterator[pa.Table]:
        """The JSON parts' tables, then the parquet files' batches of file actions."""
        yield from self.json_tables
        for path, pf in self._parquet_files():
            columns = _projection(pf.schema_arrow, file_actions=True)
            if columns:
                yield from _read_in_batches(path, pf, columns)

    def read_stats(self) -> pa.StringArray:
        """The stats of every AddFile, in the order `read` returns them."""
        tables = [t.select(["add"]) for t in self.json_tables]
        for path, pf in self._parquet_files():
            add = pf.schema_arrow.field("add").type if "add" in pf.schema_arrow.names else None
            columns = [f"add.{name}" for name in _stats_fields(add)] if add else []
            if columns:
                tables.append(_read_parquet_actions(self.store, path, pf, columns))
            elif add is not None:  # no stats at all: read a small column for the row count
                tables.append(_read_parquet_actions(self.store, path, pf, ["add.size"]))
        stats_only = pa.struct([("stats", pa.string())])
        return _file_actions(tables, "add", stats_only).field("stats")

    def read_in_batches(self) -> Iterator[FileActions]:
        """The same actions, `READ_BATCH_ROWS` rows of the parquet files at a time."""
        for t in self._tables():
            yield _file_actions([t], "add", ADD_TYPE), _file_actions([t], "remove", REMOVE_TYPE)

    def max_rows(self) -> int:
        """Rows of the JSON parts and of the parquet files (every row may be a file action)."""
        rows = sum(int(t.num_rows) for t in self.json_tables)
        return rows + sum(int(pf.metadata.num_rows) for _, pf in self._parquet_files())


def _read_in_batches(path: str, pf: pq.ParquetFile, columns: list[str]) -> Iterator[pa.Table]:
    threads = pf.metadata.num_rows > THREADED_ROWS
    batches = pf.iter_batches(batch_size=READ_BATCH_ROWS, columns=columns, use_threads=threads)
    while True:
        try:
            batch = next(batches, None)
        except (OSError, pa.ArrowException) as exc:
            raise CorruptLogError(f"checkpoint file {path} cannot be read: {exc}") from None
        if batch is None:
            return
        yield pa.Table.from_batches([batch])


# -- writing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointResult:
    """What a checkpoint write produced; `num_actions` is the `size` of `_last_checkpoint`."""

    version: int
    parts: int
    num_actions: int
    size_in_bytes: int
    num_of_add_files: int


def _protocol_row(p: Protocol) -> dict[str, Any]:
    return {
        "minReaderVersion": p.min_reader_version,
        "minWriterVersion": p.min_writer_version,
        "readerFeatures": (p.reader_features or []) if p.min_reader_version >= 3 else None,
        "writerFeatures": (p.writer_features or []) if p.min_writer_version >= 7 else None,
    }


def _metadata_row(m: Metadata) -> dict[str, Any]:
    return {
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "format": {"provider": m.format.provider, "options": m.format.options},
        "schemaString": m.schema_string,
        "partitionColumns": m.partition_columns,
        "configuration": m.configuration,
        "createdTime": m.created_time,
    }


def _column_table(columns: dict[str, pa.Array]) -> pa.Table:
    """A table of all checkpoint columns where only `columns` carry values."""
    n = len(next(iter(columns.values())))
    return pa.table(
        {name: columns.get(name, pa.nulls(n, type_)) for name, type_ in CHECKPOINT_COLUMNS.items()}
    )


#: The columns of a classic checkpoint as this engine writes them.
CHECKPOINT_SCHEMA = pa.schema(list(CHECKPOINT_COLUMNS.items()))

_PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "snappy",
    "use_dictionary": False,  # paths and stats are unique: dictionaries only cost time
    "write_statistics": False,  # no reader prunes checkpoint row groups by them
}


def checkpoint_pieces(
    protocol: Protocol,
    metadata: Metadata,
    txns: Sequence[SetTransaction],
    domains: Sequence[DomainMetadata],
    file_actions: Iterable[FileActions],
) -> Iterator[pa.Table]:
    """The rows of a checkpoint in Delta's order: protocol, metadata, txns, domains, files.

    One table per piece of `file_actions` (AddFiles, tombstones); the first also holds the other
    actions. Files are written with dataChange=false, as InMemoryLogReplay keeps them.
    """
    small = [
        _column_table({"protocol": array_from_pylist([_protocol_row(protocol)], PROTOCOL_TYPE)}),
        _column_table({"metaData": array_from_pylist([_metadata_row(metadata)], METADATA_TYPE)}),
    ]
    if txns:
        small.append(
            _column_table({"txn": array_from_pylist([t.to_json_dict() for t in txns], TXN_TYPE)})
        )
    if domains:
        rows = [d.to_json_dict() for d in domains]
        domain_rows = array_from_pylist(rows, DOMAIN_METADATA_TYPE)
        small.append(_column_table({"domainMetadata": domain_rows}))
    for adds, tombstones in file_actions:
        files = [
            _column_table({name: _without_data_change(arr)})
            for name, arr in (("add", adds), ("remove", tombstones))
            if len(arr)
        ]
        if files:
            yield pa.concat_tables([*small, *files])
            small = []
    if small:
        yield pa.concat_tables(small)


def _without_data_change(arr: pa.StructArray) -> pa.StructArray:
    children = [arr.field(i) for i in range(arr.type.num_fields)]
    children[arr.type.get_field_index("dataChange")] = bool_mask(np.zeros(len(arr), dtype=bool))
    return pa.StructArray.from_arrays(children, fields=list(arr.type))


_END = object()


def _read_ahead(items: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """`items`, the next one computed on a worker thread while the caller handles the current
    one (reading the old checkpoint overlaps with encoding the new one)."""
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(next, items, _END)
        while (item := pending.result()) is not _END:
            pending = pool.submit(next, items, _END)
            yield item


@dataclass
class _Tally:
    """Rows and AddFiles of the tables that went through `count`."""

    rows: int = 0
    adds: int = 0

    def count(self, tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
        for t in tables:
            self.rows += t.num_rows
            self.adds += t.num_rows - t.column("add").null_count
            yield t


def write_checkpoint(
    store: LogStore,
    log_path: str,
    version: int,
    pieces: Iterable[pa.Table],
    max_rows: int,
    part_size: int = DEFAULT_CHECKPOINT_PART_SIZE,
    v2: bool = False,
) -> CheckpointResult:
    """Write the tables of `pieces` (at most `max_rows` rows) as the checkpoint of `version`.

    When `max_rows` fits in one part, the pieces stream into a single file, a row group each, so
    memory holds one piece at a time. Above `part_size` actions they are gathered and split
    into a multi-part checkpoint. Parts are written whole-file atomically (rewriting a checkpoint
    of the same version is harmless: its content is the same). `_last_checkpoint` is written
    last, and only moves forward. With `v2` (tables with the v2Checkpoint feature) a v2
    checkpoint is written instead (`write_v2_checkpoint`).
    """
    if v2:
        return write_v2_checkpoint(store, log_path, version, pieces, max_rows)
    tally = _Tally()
    tables = tally.count(pieces)
    if max_rows <= part_size:
        names, contents = [filenames.checkpoint_file_single(version)], [_read_ahead(tables)]
    else:
        table = pa.concat_tables(list(tables))
        parts = max(1, -(-table.num_rows // part_size))
        names = (
            [filenames.checkpoint_file_single(version)]
            if parts == 1
            else filenames.checkpoint_file_parts(version, parts)
        )
        per_part = -(-table.num_rows // parts)
        contents = [iter([table.slice(i * per_part, per_part)]) for i in range(parts)]
    size_in_bytes = 0
    for name, content in zip(names, contents, strict=True):
        path = store.join(log_path, name)
        size_in_bytes += store.write_parquet(path, content, CHECKPOINT_SCHEMA, **_PARQUET_OPTIONS)
    result = CheckpointResult(version, len(names), tally.rows, size_in_bytes, tally.adds)
    _update_last_checkpoint(store, log_path, result)
    return result


def _update_last_checkpoint(store: LogStore, log_path: str, result: CheckpointResult) -> None:
    """Point `_last_checkpoint` at the checkpoint written, unless it names a newer one."""
    hint = read_last_checkpoint(store, log_path)
    if hint is not None and hint.get("version", -1) > result.version:
        return
    body = {
        "version": result.version,
        "size": result.num_actions,
        **({"parts": result.parts} if result.parts > 1 else {}),
        "sizeInBytes": result.size_in_bytes,
        "numOfAddFiles": result.num_of_add_files,
    }
    data = json.dumps(body, separators=(",", ":")).encode()
    store.write(store.join(log_path, filenames.LAST_CHECKPOINT), data, overwrite=True)


# -- v2 checkpoints -------------------------------------------------------------------------

#: The columns of a v2 checkpoint's top-level file: a classic checkpoint's, plus
#: `checkpointMetadata` and `sidecar`.
V2_CHECKPOINT_SCHEMA = pa.schema(
    [
        *CHECKPOINT_COLUMNS.items(),
        ("checkpointMetadata", pa.struct([("version", pa.int64()), ("tags", STRING_MAP)])),
        ("sidecar", SIDECAR_TYPE),
    ]
)
#: The columns of a sidecar file: the file actions.
SIDECAR_SCHEMA = pa.schema([("add", ADD_TYPE), ("remove", REMOVE_TYPE)])
#: Above this many file actions, a v2 checkpoint moves them to a sidecar file.
SIDECAR_MIN_ACTIONS = 100_000


def write_v2_checkpoint(
    store: LogStore,
    log_path: str,
    version: int,
    pieces: Iterable[pa.Table],
    max_rows: int,
    sidecar_min_actions: int | None = None,
) -> CheckpointResult:
    """Write a v2 checkpoint of `version`: a UUID-named parquet file holding a
    `checkpointMetadata` action and the other actions, with the file actions in it when they
    are few, else streamed into one sidecar file (`_sidecars/<uuid>.parquet`) that a `sidecar`
    action names. `_last_checkpoint` is updated as for a classic checkpoint."""
    tally = _Tally()
    tables = tally.count(pieces)
    metadata_type = V2_CHECKPOINT_SCHEMA.field("checkpointMetadata").type
    metadata = array_from_pylist([{"version": version, "tags": None}], metadata_type)
    head = [_v2_table({"checkpointMetadata": metadata})]
    size = 0
    if max_rows > (SIDECAR_MIN_ACTIONS if sidecar_min_actions is None else sidecar_min_actions):
        small: list[pa.Table] = []
        name = f"{uuid.uuid4()}.parquet"
        path = store.join(log_path, filenames.SIDECAR_DIR, name)
        sidecar_size = store.write_parquet(
            path, _file_rows(tables, small), SIDECAR_SCHEMA, **_PARQUET_OPTIONS
        )
        row = {"path": name, "sizeInBytes": sidecar_size, "modificationTime": _now_ms()}
        sidecar = array_from_pylist([row], SIDECAR_TYPE)
        head += [_v2_table({"sidecar": sidecar}), *map(_v2_table, small)]
        tables, size = iter(()), sidecar_size
    name = f"{version:020d}.checkpoint.{uuid.uuid4()}.parquet"
    content = itertools.chain(head, map(_v2_table, tables))
    size += store.write_parquet(
        store.join(log_path, name), content, V2_CHECKPOINT_SCHEMA, **_PARQUET_OPTIONS
    )
    result = CheckpointResult(version, 1, tally.rows + 1, size, tally.adds)
    _update_last_checkpoint(store, log_path, result)
    return result


def _file_rows(tables: Iterable[pa.Table], small: list[pa.Table]) -> Iterator[pa.Table]:
    """The file actions of `tables` (as SIDECAR_SCHEMA), the other rows put in `small`."""
    for t in tables:
        files = pc.or_(t.column("add").is_valid(), t.column("remove").is_valid())
        if not pc.all(files).as_py():
            small.append(t.filter(pc.invert(files)))
        yield t.filter(files).select(["add", "remove"])


def _v2_table(table: pa.Table | dict[str, pa.Array]) -> pa.Table:
    """`table`'s columns with the others of a v2 top-level checkpoint as nulls."""
    if isinstance(table, pa.Table):
        columns = {name: table.column(name) for name in table.column_names}
    else:
        columns = table
    n = len(next(iter(columns.values())))
    return pa.table(
        {f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in V2_CHECKPOINT_SCHEMA},
        schema=V2_CHECKPOINT_SCHEMA,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_last_checkpoint(store: LogStore, log_path: str) -> dict[str, Any] | None:
    """The `_last_checkpoint` hint, or None when it is missing or not sound JSON."""
    path = store.join(log_path, filenames.LAST_CHECKPOINT)
    try:
        hint = parse_json(store.read(path, max_size=LAST_CHECKPOINT_MAX_BYTES), path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, CorruptLogError) as exc:
        if isinstance(exc, CorruptLogError):
            log.warning("Ignoring _last_checkpoint of %s: %s", log_path, exc)
        return None
    if not isinstance(hint, dict) or not isinstance(hint.get("version"), int):
        return None
    return hint
