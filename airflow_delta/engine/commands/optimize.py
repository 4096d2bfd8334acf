"""OPTIMIZE: bin-packing compaction and Z-order, run in this process on pyarrow (delta-spark's
OptimizeTableCommand / OptimizeExecutor).

The plan:

1. a transaction (on the latest snapshot, or one the caller started) lists the active files of
   the partitions `partition_filter` selects (SQL over partition columns only, as delta-spark);
2. the *candidates* are the files smaller than `min_file_size` and the files with a deletion
   vector (their deleted rows are purged); with `zorder_by` every file of a selected partition
   is a candidate (delta-spark rewrites whole partitions when it clusters). Files a clustering
   implementation clustered (on a clustered table) are never candidates, and a clustered
   table is not Z-ordered;
3. per partition, candidates sorted by size are packed into bins of at most `target_size`
   bytes (one bin per partition when Z-ordering). A bin is rewritten when it holds two or more
   files, or one file with a deletion vector, or when Z-ordering;
4. each bin is read (`FileReader`, deletion vectors applied), Z-ordered rows sorted by their
   z-value, and written by the engine's writer (`write_tasks`): one file per bin when
   compacting, files of about `target_size` when Z-ordering;
5. the commit (operation OPTIMIZE) removes the bins' files and adds the new ones, every action
   with dataChange=false. Such a commit is checked as SnapshotIsolation
   (`get_isolation_level`): concurrent appends never fail it, but a concurrent commit that
   removed one of the files it rewrote does (ConcurrentDeleteReadException, or
   ConcurrentDeleteDeleteException). Only the rewritten files are recorded as read
   (delta-spark's trackFilesRead), so a concurrent DELETE of other files does not fail it.

Z-order keys: each column's values become unsigned 64-bit keys in the values' order (integers,
dates, timestamps and times by value with the sign bit flipped; floats and decimals by their
IEEE-754 bits, negatives inverted; booleans 0/1; strings and binaries by their first 8 bytes;
NULL lowest). Per partition each column's keys are shifted to start at 0 and scaled to use the
full width (so a column of small integers weighs as much as one of large floats); the top
64 // n bits of each of the n columns are interleaved, most significant first, into one
64-bit z-value, and rows sorted by it (stable).

When nothing needs rewriting nothing is committed: the result is skipped (version None) with
the metrics.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.commands.command_transaction import (
    check_writable,
    command_transaction,
)
from airflow_delta.engine.commands.data_files import write_tasks
from airflow_delta.engine.commands.data_reader import FileReader
from airflow_delta.engine.commands.file_removes import remove_files
from airflow_delta.engine.commands.row_ids import RowTracking
from airflow_delta.engine.errors import InvalidArgumentError, UnsupportedCommandError, naming_table
from airflow_delta.engine.expressions.predicates import parse_predicates
from airflow_delta.engine.protocol.actions import Action, AddFile, Operation
from airflow_delta.engine.protocol.columnar import bool_values, int_array, int_values
from airflow_delta.engine.txn.commit_checks import CLUSTERING_DOMAIN
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.transaction import OptimisticTransaction

log = logging.getLogger(__name__)

#: target_size when neither the caller nor delta.targetFileSize sets one.
DEFAULT_TARGET_SIZE = 256 * 1024**2
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


@dataclass
class _Bin:
    """Files of one partition rewritten together (indexes into the considered files)."""

    partition: tuple[tuple[str, str | None], ...]
    files: list[int] = field(default_factory=list)
    size: int = 0


@dataclass
class _Plan:
    txn: OptimisticTransaction
    operation: Operation
    schema: pa.Schema
    files: pa.StructArray  # the files of the selected partitions (considered)
    target_size: int
    min_file_size: int
    zorder_by: list[str]
    started: float


def optimize(
    table: str | OptimisticTransaction,
    partition_filter: str | None = None,
    *,
    target_size: int | None = None,
    min_file_size: int | None = None,
    zorder_by: Sequence[str] | None = None,
    max_concurrent_tasks: int | None = None,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> CommitResult:
    """Compact the small files of the Delta table `table` (a URI, or a transaction started on
    it), in this process; with `zorder_by`, rewrite the selected partitions Z-ordered by those
    data columns.

    :param partition_filter: SQL over partition columns: only those partitions are optimized.
    :param target_size: bytes a compacted file aims at (default: the table's
        `delta.targetFileSize`, else 256 MiB).
    :param min_file_size: files smaller than this are compacted (default: `target_size`;
        delta-spark's `minFileSize` defaults to 1 GiB).
    :param zorder_by: data columns to cluster by (not partition columns).
    :param max_concurrent_tasks: bins written at once (default: one per core).

    Returns the commit's CommitResult with delta-spark's metrics in `result.metrics`
    (numFilesAdded, numFilesRemoved, filesAdded/filesRemoved {min, max, avg, totalFiles,
    totalSize}, partitionsOptimized, zOrderStats, numBatches, totalConsideredFiles,
    totalFilesSkipped, ... and the commitInfo names numAddedFiles, numRemovedBytes, ...);
    skipped (version None) when nothing needed rewriting.

    Example: `optimize("s3://bucket/events", "day >= '2024-06-01'", zorder_by=["user_id"])`.
    """
    plan = _plan(
        table, partition_filter, target_size, min_file_size, zorder_by, storage_options,
        commit_properties,
    )  # fmt: skip
    if isinstance(plan, CommitResult):
        return plan
    bins = _bins(plan)
    chosen = sorted(i for b in bins for i in b.files)
    chosen_files = plan.files.take(int_array(np.asarray(chosen, dtype=np.int64)))
    plan.txn.track_files_read(chosen_files)
    reader = FileReader(plan.txn, plan.schema)
    tracking = RowTracking.of(plan.txn.metadata)
    plan.txn.row_ids_preserved = tracking is not None  # the rows keep their row ids
    tasks = [functools.partial(_bin_rows, plan, reader, b, tracking) for b in bins]
    not_null = [f.name for f in plan.txn.metadata.schema if not f.nullable]
    roll = plan.target_size if plan.zorder_by else max(2 * plan.target_size, 1)
    added = write_tasks(
        plan.txn,
        tasks,
        not_null,
        "OPTIMIZE",
        target_file_size=roll,
        max_threads=max_concurrent_tasks,
    )
    added = [replace(a, data_change=False) for a in added]
    metrics = _metrics(plan, bins, chosen_files, added)
    operation = Operation(plan.operation.name, plan.operation.parameters, metrics)
    txn = plan.txn
    if not len(chosen_files) and not txn.properties.app_transactions:
        log.info(
            "OPTIMIZE of %s: nothing to compact (%s files considered)", txn.table, len(plan.files)
        )
        return txn.result(None, operation)
    now = int(time.time() * 1000)
    actions: list[Action] = [*added, *remove_files(chosen_files, now, data_change=False)]
    result = txn.commit(actions, operation)
    log.info(
        "OPTIMIZE of %s committed version %s: %s files removed, %s added, %s partitions",
        txn.table,
        result.version,
        len(chosen_files),
        len(added),
        metrics["partitionsOptimized"],
    )
    return result


# -- the plan ---------------------------------------------------------------------------------


def _plan(
    table: str | OptimisticTransaction,
    partition_filter: str | None,
    target_size: int | None,
    min_file_size: int | None,
    zorder_by: Sequence[str] | None,
    storage_options: Mapping[str, str] | None,
    commit_properties: CommitProperties | None,
) -> _Plan | CommitResult:
    started = time.monotonic()
    txn = command_transaction("OPTIMIZE", table, storage_options, commit_properties)
    zorder = list(zorder_by or [])
    operation = Operation(
        "OPTIMIZE",
        {
            "predicate": json.dumps([partition_filter] if partition_filter else []),
            "zOrderBy": json.dumps(zorder),
            "auto": False,
        },
    )
    if txn.already_committed():
        return txn.result(None, operation)
    check_writable("OPTIMIZE", txn)
    metadata = txn.metadata
    schema = pa.schema([pa.field(f.name, f.type) for f in metadata.schema])
    _check_zorder(txn.table, zorder, schema, metadata.partition_columns)
    clustering = txn.snapshot.domain_metadata.get(CLUSTERING_DOMAIN)
    if zorder and clustering is not None and not clustering.removed:
        raise UnsupportedCommandError(
            f"OPTIMIZE of {txn.table}: the table is clustered (liquid clustering), and Z-order "
            "would undo its clustering; run OPTIMIZE without zorder_by (it compacts only files "
            "no clustering implementation clustered)."
        )
    target = _target_size(txn, target_size)
    minimum = target if min_file_size is None else int(min_file_size)
    if minimum < 0:
        raise InvalidArgumentError(
            f"OPTIMIZE of {txn.table}: min_file_size must be >= 0, got {minimum}"
        )
    return _Plan(
        txn, operation, schema, _considered(txn, partition_filter), target, minimum, zorder, started
    )


def _target_size(txn: OptimisticTransaction, given: int | None) -> int:
    """`given`, else the table's delta.targetFileSize (bytes, or with a k/m/g/t unit), else
    DEFAULT_TARGET_SIZE."""
    if given is not None:
        if int(given) <= 0:
            raise InvalidArgumentError(
                f"OPTIMIZE of {txn.table}: target_size must be > 0, got {given}"
            )
        return int(given)
    text = txn.metadata.configuration.get("delta.targetFileSize")
    if text is None:
        return DEFAULT_TARGET_SIZE
    match = _SIZE.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise InvalidArgumentError(
            f"OPTIMIZE of {txn.table}: delta.targetFileSize={text!r} is not a size in bytes "
            "(e.g. 268435456 or 256mb); fix the table property or pass target_size."
        )
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _check_zorder(table: str, columns: list[str], schema: pa.Schema, partitions: list[str]) -> None:
    """InvalidArgumentError for a Z-order column that is unknown, a partition column, repeated
    or of a type without an order key."""
    if len(set(columns)) != len(columns):
        raise InvalidArgumentError(f"OPTIMIZE of {table}: zorder_by repeats a column: {columns}")
    for name in columns:
        if name in partitions:
            raise InvalidArgumentError(
                f"OPTIMIZE of {table}: {name} is a partition column; Z-order by data columns "
                "only (partitions are already clustered)"
            )
        if name not in schema.names:
            raise InvalidArgumentError(
                f"OPTIMIZE of {table}: zorder_by column {name!r} is not a column of the table "
                f"(columns: {', '.join(schema.names)})"
            )
        if _key_kind(schema.field(name).type) is None:
            raise InvalidArgumentError(
                f"OPTIMIZE of {table}: cannot Z-order by {name} ({schema.field(name).type}); "
                "use numeric, string, binary, boolean, date or timestamp columns"
            )


def _considered(txn: OptimisticTransaction, partition_filter: str | None) -> pa.StructArray:
    """The active files of the partitions `partition_filter` selects, but those a clustering
    implementation clustered (`clusteringProvider` set: PROTOCOL.md lets only it recluster
    them). Not recorded as read: the compaction records only the files it rewrites."""
    fields = json.loads(txn.metadata.schema_string or '{"fields": []}')["fields"]
    by_name = {f["name"]: f for f in fields}
    partitions = {c: by_name.get(c, "string") for c in txn.metadata.partition_columns}
    files = txn.snapshot.files()
    clustered = pc.struct_field(files, "clusteringProvider")
    if clustered.null_count != len(files):
        files = files.filter(pc.is_null(clustered))
    with naming_table(txn.table, txn.read_version):
        predicate = parse_predicates(partition_filter, partitions)
        return files if predicate.matches_all() else files.filter(predicate.evaluate(files))


def _bins(plan: _Plan) -> list[_Bin]:
    """The bins to rewrite, per partition (delta-spark's groupFilesIntoBins)."""
    files = plan.files
    # numpy views, not to_numpy(): that would import pandas (0.3 s) through pyarrow's shim
    size_values = int_values(pc.struct_field(files, "size"))
    has_dv = bool_values(pc.is_valid(pc.struct_field(files, "deletionVector")))
    chosen = has_dv | (size_values < plan.min_file_size) | bool(plan.zorder_by)
    values = pc.struct_field(files, "partitionValues").to_pylist()
    sizes: list[int] = size_values.tolist()  # Python ints: the loops below are per file
    by_partition: dict[tuple[tuple[str, str | None], ...], list[int]] = {}
    for i in np.flatnonzero(chosen).tolist():
        by_partition.setdefault(tuple(sorted(values[i] or [])), []).append(i)
    bins: list[_Bin] = []
    for partition, members in by_partition.items():
        if plan.zorder_by:
            bins.append(_Bin(partition, members, sum(sizes[i] for i in members)))
            continue
        current = _Bin(partition)
        for i in sorted(members, key=lambda i: (sizes[i], i)):
            if current.files and current.size + sizes[i] > plan.target_size:
                bins.append(current)
                current = _Bin(partition)
            current.files.append(i)
            current.size += sizes[i]
        bins.append(current)
    return [b for b in bins if plan.zorder_by or len(b.files) > 1 or has_dv[b.files[0]]]


def _bin_rows(plan: _Plan, reader: FileReader, b: _Bin, tracking: RowTracking | None) -> pa.Table:
    """The live rows of a bin's files (with their row ids and commit versions on a table
    with row tracking), in file order, or sorted by z-value when Z-ordering."""
    chosen = plan.files.take(int_array(np.asarray(b.files, dtype=np.int64)))
    rows = reader.read(chosen, plan.schema.names)
    if tracking is not None:
        rows = tracking.attach(rows, tracking.of_files(reader, chosen))
    if plan.zorder_by and rows.num_rows > 1:
        z = z_values([rows.column(c) for c in plan.zorder_by])
        rows = rows.take(int_array(np.argsort(z, kind="stable").astype(np.int64)))
    return rows


# -- Z-order ---------------------------------------------------------------------------------


def _key_kind(t: pa.DataType) -> str | None:
    if pa.types.is_dictionary(t):
        return _key_kind(t.value_type)
    if pa.types.is_unsigned_integer(t):
        return "unsigned"
    if (
        pa.types.is_signed_integer(t)
        or pa.types.is_temporal(t)  # dates, timestamps, times, durations
    ):
        return "signed"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_boolean(t):
        return "unsigned"
    if (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or t in (pa.string_view(), pa.binary_view())
    ):
        return "bytes"
    return None


def order_keys(column: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.uint64]:
    """One unsigned 64-bit key per value, ordered as the values (NULL lowest, key 0)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    kind = _key_kind(array.type)
    valid = pc.is_valid(array).to_numpy(zero_copy_only=False)
    sign = np.uint64(1 << 63)
    if kind == "unsigned":
        keys = pc.fill_null(pc.cast(array, pa.uint64()), 0).to_numpy(zero_copy_only=False)
        keys = keys.astype(np.uint64)
    elif kind == "signed":
        if pa.types.is_temporal(array.type):
            array = array.view(pa.int64() if array.type.bit_width == 64 else pa.int32())
        ints = pc.fill_null(pc.cast(array, pa.int64()), 0).to_numpy(zero_copy_only=False)
        keys = ints.astype(np.int64).view(np.uint64) ^ sign
    elif kind == "float":
        floats = pc.fill_null(pc.cast(array, pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        bits = np.ascontiguousarray(floats, dtype=np.float64).view(np.uint64)
        keys = np.where(bits & sign, ~bits, bits | sign)
    elif kind == "bytes":
        keys = _prefix_keys(array)
    else:
        raise ValueError(f"no Z-order key for values of type {array.type}")
    return np.where(valid, keys, np.uint64(0)).astype(np.uint64)


def _prefix_keys(array: pa.Array) -> npt.NDArray[np.uint64]:
    """The first 8 bytes of each value, big-endian, zero-padded (byte order = string order)."""
    binary = pc.cast(array, pa.large_binary())
    binary = pc.fill_null(binary, b"")
    offsets = np.frombuffer(binary.buffers()[1], dtype=np.int64)[
        binary.offset : binary.offset + len(binary) + 1
    ]
    data_buffer = binary.buffers()[2]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer else np.zeros(1, np.uint8)
    if not len(data):
        data = np.zeros(1, np.uint8)
    starts, lengths = offsets[:-1], np.diff(offsets)
    keys = np.zeros(len(binary), dtype=np.uint64)
    for j in range(8):
        index = np.minimum(starts + j, len(data) - 1)
        byte = np.where(j < lengths, data[index], 0).astype(np.uint64)
        keys |= byte << np.uint64(56 - 8 * j)
    return keys


def z_values(columns: Sequence[pa.ChunkedArray | pa.Array]) -> npt.NDArray[np.uint64]:
    """The z-value of each row: the interleaved bits of the columns' order keys, each shifted
    to start at 0 and scaled to the full width first; the top 64 // n bits of each of the n
    columns, most significant first."""
    width = 64 // len(columns)
    scaled = []
    for column in columns:
        keys = order_keys(column)
        keys = keys - keys.min() if len(keys) else keys
        top = int(keys.max()).bit_length() if len(keys) else 0
        keys = keys << np.uint64(64 - top) if 0 < top < 64 else keys
        scaled.append(keys >> np.uint64(64 - width))
    z = np.zeros(len(scaled[0]), dtype=np.uint64)
    one = np.uint64(1)
    for bit in range(width - 1, -1, -1):
        for keys in scaled:
            z = (z << one) | ((keys >> np.uint64(bit)) & one)
    return z


# -- metrics ---------------------------------------------------------------------------------


def _size_metrics(sizes: Sequence[int]) -> dict[str, Any]:
    """delta-spark's FileSizeMetrics."""
    return {
        "min": min(sizes) if sizes else None,
        "max": max(sizes) if sizes else None,
        "avg": sum(sizes) / len(sizes) if sizes else 0.0,
        "totalFiles": len(sizes),
        "totalSize": sum(sizes),
    }


def _metrics(
    plan: _Plan, bins: list[_Bin], removed: pa.StructArray, added: list[AddFile]
) -> dict[str, Any]:
    """delta-spark's OptimizeMetrics, plus the flat names its commitInfo carries; `removed`
    are the rewritten files (ADD_TYPE)."""
    added_sizes = sorted(a.size for a in added)
    removed_sizes = [int(n or 0) for n in pc.struct_field(removed, "size").to_pylist()]
    dvs = pc.struct_field(removed, "deletionVector")
    with_dv = len(dvs) - dvs.null_count
    dv_rows = pc.sum(pc.struct_field(dvs, "cardinality")).as_py() if with_dv else 0
    metrics: dict[str, Any] = {
        "numFilesAdded": len(added),
        "numFilesRemoved": len(removed),
        "filesAdded": _size_metrics(added_sizes),
        "filesRemoved": _size_metrics(removed_sizes),
        "partitionsOptimized": len({b.partition for b in bins}),
        "numBatches": 1 if bins else 0,
        "totalConsideredFiles": len(plan.files),
        "totalFilesSkipped": len(plan.files) - len(removed),
        "preserveInsertionOrder": False,
        "numAddedFiles": len(added),
        "numRemovedFiles": len(removed),
        "numAddedBytes": sum(added_sizes),
        "numRemovedBytes": sum(removed_sizes),
        "numDeletionVectorsRemoved": with_dv,
        "deletionVectorStats": {
            "numDeletionVectorsRemoved": with_dv,
            "numDeletionVectorRowsRemoved": int(dv_rows or 0),
        },
    }
    for name, q in (("minFileSize", 0), ("p25FileSize", 25), ("p50FileSize", 50)):
        metrics[name] = _percentile(added_sizes, q)
    for name, q in (("p75FileSize", 75), ("maxFileSize", 100)):
        metrics[name] = _percentile(added_sizes, q)
    if plan.zorder_by:
        metrics["zOrderStats"] = {
            "strategyName": "all",
            "inputCubeFiles": {"num": 0, "size": 0},
            "inputOtherFiles": {"num": len(removed), "size": sum(removed_sizes)},
            "inputNumCubes": 0,
            "mergedFiles": {"num": len(removed), "size": sum(removed_sizes)},
            "numOutputCubes": len(bins),
        }
    metrics["executionTimeMs"] = int((time.monotonic() - plan.started) * 1000)
    return metrics


def _percentile(sorted_sizes: list[int], q: int) -> int:
    if not sorted_sizes:
        return 0
    return sorted_sizes[min(len(sorted_sizes) - 1, (len(sorted_sizes) - 1) * q // 100)]
