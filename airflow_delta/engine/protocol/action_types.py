"""Actions in Arrow form: the struct types of the actions a checkpoint holds (ADD_TYPE,
REMOVE_TYPE, ...), AddFile objects from ADD_TYPE rows (only for callers that ask), and the
numRecords of stats strings in one columnar pass."""

from __future__ import annotations

import pyarrow as pa

from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.protocol.actions import AddFile, DeletionVectorDescriptor, JsonDict
from airflow_delta.engine.protocol.columnar import array_from_pylist, scalar
from airflow_delta.engine.protocol.log_json import parse_json

STRING_MAP = pa.map_(pa.string(), pa.string())

DV_TYPE = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
        ("maxRowIndex", pa.int64()),
    ]
)

ADD_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("modificationTime", pa.int64()),
        ("dataChange", pa.bool_()),
        ("stats", pa.string()),
        ("tags", STRING_MAP),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
        ("clusteringProvider", pa.string()),
    ]
)

REMOVE_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("deletionTimestamp", pa.int64()),
        ("dataChange", pa.bool_()),
        ("extendedFileMetadata", pa.bool_()),
        ("partitionValues", STRING_MAP),
        ("size", pa.int64()),
        ("deletionVector", DV_TYPE),
        ("baseRowId", pa.int64()),
        ("defaultRowCommitVersion", pa.int64()),
    ]
)

PROTOCOL_TYPE = pa.struct(
    [
        ("minReaderVersion", pa.int32()),
        ("minWriterVersion", pa.int32()),
        ("readerFeatures", pa.list_(pa.string())),
        ("writerFeatures", pa.list_(pa.string())),
    ]
)

METADATA_TYPE = pa.struct(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("description", pa.string()),
        ("format", pa.struct([("provider", pa.string()), ("options", STRING_MAP)])),
        ("schemaString", pa.string()),
        ("partitionColumns", pa.list_(pa.string())),
        ("configuration", STRING_MAP),
        ("createdTime", pa.int64()),
    ]
)

TXN_TYPE = pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])

DOMAIN_METADATA_TYPE = pa.struct(
    [("domain", pa.string()), ("configuration", pa.string()), ("removed", pa.bool_())]
)

SIDECAR_TYPE = pa.struct(
    [
        ("path", pa.string()),
        ("sizeInBytes", pa.int64()),
        ("modificationTime", pa.int64()),
        ("tags", STRING_MAP),
    ]
)

#: The columns of a checkpoint this engine reads and writes, by action key.
CHECKPOINT_COLUMNS: dict[str, pa.StructType] = {
    "protocol": PROTOCOL_TYPE,
    "metaData": METADATA_TYPE,
    "txn": TXN_TYPE,
    "domainMetadata": DOMAIN_METADATA_TYPE,
    "add": ADD_TYPE,
    "remove": REMOVE_TYPE,
}


def _dv_from_row(row: JsonDict | None) -> DeletionVectorDescriptor | None:
    return DeletionVectorDescriptor.from_json_dict(row) if row else None


def _map_from_row(pairs: list[tuple[str, str | None]] | None) -> dict[str, str | None] | None:
    return None if pairs is None else dict(pairs)


def add_files_from_arrow(adds: pa.StructArray) -> list[AddFile]:
    """AddFile objects for rows of the ADD_TYPE columnar form (only for callers that ask)."""
    rows = adds.to_pylist()
    return [
        AddFile(
            path=r["path"],
            partition_values=_map_from_row(r["partitionValues"]) or {},
            size=r["size"] or 0,
            modification_time=r["modificationTime"] or 0,
            data_change=bool(r["dataChange"]),
            stats=r["stats"],
            tags=_map_from_row(r["tags"]),  # type: ignore[arg-type]
            deletion_vector=_dv_from_row(r["deletionVector"]),
            base_row_id=r["baseRowId"],
            default_row_commit_version=r["defaultRowCommitVersion"],
            clustering_provider=r.get("clusteringProvider"),
        )
        for r in rows
    ]


_NUM_RECORDS_SCHEMA = pa.schema([("numRecords", pa.int64())])


def stats_num_records(stats: pa.Array) -> pa.Array:
    """`numRecords` of each stats JSON string, as int64; null where a file has no stats, the
    stats are not a JSON object, or numRecords is missing or not an integer.

    The stats are parsed as JSON (a column named `numRecords` inside `minValues` is not the
    row count), in one columnar pass; only when some string is not valid JSON are the rows
    parsed one by one to find which.
    """
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if not len(stats):
        return pa.array([], pa.int64())
    empty, newline = scalar("{}", pa.string()), scalar("\n", pa.string())
    # JSON strings cannot hold a raw line break, so line breaks are whitespace between tokens.
    text = pc.replace_substring_regex(pc.fill_null(stats, empty), r"[\r\n]", " ")
    blank = pc.equal(pc.utf8_trim_whitespace(text), scalar("", pa.string()))
    text = pc.if_else(blank, empty, text)
    lines = pc.binary_join_element_wise(text, scalar("", pa.string()), newline)  # + line break
    bounds = pa.Array.from_buffers(pa.int32(), len(lines) + 1, [None, lines.buffers()[1]])
    start, end = bounds[lines.offset].as_py(), bounds[lines.offset + len(lines)].as_py()
    data = lines.buffers()[2][start:end]
    options = pj.ParseOptions(
        explicit_schema=_NUM_RECORDS_SCHEMA, unexpected_field_behavior="ignore"
    )
    try:
        table = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(block_size=max(len(data) + 1, 1 << 20)),
            parse_options=options,
        )
        counts = table.column(0).combine_chunks()
        if len(counts) == len(stats):
            return pc.if_else(pc.is_null(stats), pa.nulls(len(stats), pa.int64()), counts)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    out: list[int | None] = []
    for value in stats.to_pylist():
        try:
            parsed = parse_json(value, "stats") if value else None
        except CorruptLogError:
            parsed = None
        n = parsed.get("numRecords") if isinstance(parsed, dict) else None
        out.append(n if isinstance(n, int) and not isinstance(n, bool) else None)
    return array_from_pylist(out, pa.int64())


def live_num_records(files: pa.StructArray) -> pa.Array:
    """The rows each file of `files` (as `Snapshot.files()` gives them) holds besides those its
    deletion vector deletes: `stats_num_records` minus the vector's cardinality, as int64; null
    where the stats have no numRecords."""
    import pyarrow.compute as pc

    deleted = pc.struct_field(files.field("deletionVector"), "cardinality")
    records = stats_num_records(files.field("stats"))
    return pc.subtract(records, pc.fill_null(deleted, scalar(0, pa.int64())))
