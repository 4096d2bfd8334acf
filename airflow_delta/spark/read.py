"""Snapshot -> DataFrame: a Delta table's files read with Spark's own parquet reader.

`scan_files` turns a set of active files (rows of `Snapshot.files()`) into a DataFrame with the
table's logical schema:

1. Everything the data plane cannot honour is refused with `DeltaProtocolError` before any file
   is opened: unknown reader features, column mapping modes, type changes the parquet reader
   cannot widen, file names Spark would silently skip, storage Spark is not configured for.
2. The data columns are read by one `spark.read.schema(...).parquet(*files)` over the files'
   absolute locations, with an explicit schema: no footer is inferred, only the named files are
   looked up (see `_read_parquet`), no partition is discovered from directory names. Missing
   columns read as nulls; widened types (typeWidening) are widened by the parquet reader.
   Column-mapped tables are read by physical names, nested fields included, and renamed to the
   logical names afterwards (a struct cast). In `id` mode the files are matched by physical
   name too (Delta writers store both; Spark's field-id matching is a session-wide setting).
3. Partition values, the file's log path and deleted rows come from the log, not from the files.
   They are per-file facts: a small DataFrame built on the driver (one row per file: Spark's
   `_metadata.file_path` of the file, a file id, the typed partition values, the log path) is
   broadcast-joined to the rows on `_metadata.file_path`. One read plus one broadcast hash join
   keeps a single scan for any number of partitions, where a read per partition unioned together
   would grow the plan with the partition count. A row whose file does not match fails the query
   (never a silent drop). The join is skipped when there is nothing per-file to add.
4. Deletion vectors are decoded on the driver (`deletion_vectors`) into (file id, row index)
   pairs and removed with an anti-join on `_metadata.row_index` (broadcast while the pairs fit
   Spark's broadcast threshold, a shuffle join beyond).

`read_delta` loads a snapshot (latest, or by version or timestamp), prunes files with a
partition predicate and, for a row filter over any column, with the engine's data skipping
(file statistics), scans the rest and applies the row filter.

Storage: local tables are read through `file:` URIs. Spark here has no `s3a`; another scheme is
read only when the session configures a Hadoop filesystem for it (`spark.hadoop.fs.<scheme>.impl`,
for example `spark.hadoop.fs.s3.impl=org.apache.hadoop.fs.s3a.S3AFileSystem` for `s3://` tables),
else `UnsupportedStorageError` is raised. The log itself is always read by the engine (fsspec).
A file's log path resolves through `engine.protocol.paths.resolve_path`, as every engine reader does
(relative and URL-encoded, `/abs` absolute-path references on the root's scheme and authority,
URIs); a `file:` URI of another host, and an object key with an empty segment (which Hadoop's
`Path` collapses), are refused with `UnsupportedStorageError` too.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from airflow_delta.engine.delta_log import DeltaLog, Timestamp
from airflow_delta.engine.errors import (
    CorruptLogError,
    DeltaProtocolError,
    InvalidArgumentError,
    InvalidPredicateError,
    UnsupportedStorageError,
)
from airflow_delta.engine.expressions.predicates import parse_predicates
from airflow_delta.engine.expressions.skipping import parse_file_predicates
from airflow_delta.engine.expressions.tokens import quote_identifier
from airflow_delta.engine.log.snapshot import Snapshot
from airflow_delta.engine.protocol.features import LOG_READER_FEATURES, reader_features
from airflow_delta.engine.protocol.paths import FileLocation, resolve_path
from airflow_delta.engine.protocol.schema import partition_values_to_arrow, schema_from_json
from airflow_delta.spark import deletion_vectors as dvs
from airflow_delta.spark.session import is_connect
from airflow_delta.spark.time_zones import zone_unsafe_filter

#: Reader features this data plane honours: every one the engine replays (variant shredding
#: needs Spark 4.1's reader).
SPARK_READER_FEATURES = LOG_READER_FEATURES
_SHREDDING_FEATURES = frozenset({"variantShredding-preview"})
_SHREDDING_MIN_SPARK = (4, 1)

#: URI schemes Spark reads without configuration.
NATIVE_SCHEMES = frozenset({"file", "hdfs"})

_PHYSICAL_NAME = "delta.columnMapping.physicalName"
_TYPE_CHANGES = "delta.typeChanges"
_INTERNAL = "__airflow_delta_"
_KEY = _INTERNAL + "file_key"
_FILE_ID = _INTERNAL + "file_id"
_ROW_INDEX = _INTERNAL + "row_index"
_LOG_PATH = _INTERNAL + "log_path"
_BASE_ROW_ID = _INTERNAL + "base_row_id"
_DEFAULT_VERSION = _INTERNAL + "default_row_commit_version"
_LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"

# Characters java.net.URI leaves unquoted in a path (unreserved, punctuation, ";/").
_URI_SAFE = re.compile(r"[A-Za-z0-9\-_.!~*'();:@&=+$,/]*")
_URI_UNSAFE_CHAR = re.compile(r"[^A-Za-z0-9\-_.!~*'();:@&=+$,/]")
_GLOB_CHARS = re.compile(r"([\\{}\[\]*?])")
_EMPTY_SEGMENTS = re.compile(r"//+")
_INTEGER_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 20}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def read_delta(
    spark: SparkSession,
    uri: str,
    version: int | None = None,
    timestamp: Timestamp | None = None,
    storage_options: Mapping[str, str] | None = None,
    *,
    partition_filter: str | Sequence[str] | None = None,
    filter: str | Sequence[str] | None = None,
) -> DataFrame:
    """The table at `uri` as a DataFrame: the latest version, or `version`, or the latest
    version committed at or before `timestamp`.

    `partition_filter` (a SQL boolean expression over partition columns, or a list of them,
    ANDed) prunes files through the engine before Spark sees any: only the surviving files are
    handed to Spark. Pruning is exact, since every row of a file shares its partition values.

    `filter` (Spark SQL over any columns, or a list of them, ANDed) selects rows: Spark applies
    it to the rows, and the engine's data skipping first drops the files whose statistics prove
    that no row matches (`engine.expressions.skipping`). A condition the engine's predicate
    language does not cover (a function call, say) is left to Spark alone.

    >>> read_delta(spark, "/data/events", filter="event_id = 42")  # doctest: +SKIP
    """
    snapshot = DeltaLog.for_table(uri, storage_options).snapshot_at(version, timestamp)
    conditions = [filter] if isinstance(filter, str) else list(filter or [])
    files = snapshot.files(stats=bool(conditions))  # stats only to skip files by them
    if partition_filter is not None:
        predicate = parse_predicates(partition_filter, _partition_types(snapshot))
        if not predicate.matches_all():
            files = files.filter(predicate.evaluate(files))
    for condition in conditions:
        try:
            skipping = parse_file_predicates(
                condition, _partition_types(snapshot), _data_types(snapshot)
            )
        except InvalidPredicateError:
            continue  # Spark alone applies it (and reports what is wrong with it)
        if not (skipping.matches_all() or zone_unsafe_filter(spark, snapshot, condition, skipping)):
            files = files.filter(skipping.evaluate(files))
    rows = scan_files(spark, snapshot, files)
    for condition in conditions:
        rows = rows.where(F.expr(condition))
    return rows


def scan_files(
    spark: SparkSession,
    snapshot: Snapshot,
    files: pa.StructArray,
    *,
    file_column: str | None = None,
    file_id_column: str | None = None,
    row_index_column: str | None = None,
    row_tracking: Sequence[str] | None = None,
) -> DataFrame:
    """The rows of `files` (a subset of `snapshot.files()`) with the table's logical schema.

    `file_column` adds a string column holding each row's file path as the log writes it;
    `file_id_column` an int column holding its file's position in `files` (cheaper to shuffle
    and group by); `row_index_column` adds the row's position (long) in its parquet file.
    `row_tracking` (the materialized row-id and row-commit-version columns of a table with row
    tracking enabled) adds each row's id and commit version under those names: the file's
    stored value, else its `baseRowId` + row index and its `defaultRowCommitVersion`. Raises
    DeltaProtocolError (or UnsupportedStorageError) before reading when the table or a file
    cannot be read correctly.
    """
    table = TableLayout.of(spark, snapshot)
    asked = {  # the extra columns asked for: name -> (type, the internal column it shows)
        name: (kind, internal)
        for name, kind, internal in (
            (file_column, T.StringType(), _LOG_PATH),
            (file_id_column, T.IntegerType(), _FILE_ID),
            (row_index_column, T.LongType(), _ROW_INDEX),
        )
        if name is not None
    }
    for name in (*asked, *(row_tracking or ())):
        if name.lower() in table.lower_names or name.startswith(_INTERNAL):
            raise InvalidArgumentError(
                f"column name {name!r} is taken by table {snapshot.table_uri}"
            )
    paths = pc.struct_field(files, "path").to_pylist()
    locations = [table.resolve(path) for path in paths]
    _check_locations(spark, snapshot, paths, locations)
    extra = [T.StructField(name, kind) for name, (kind, _) in asked.items()]
    extra += [T.StructField(name, T.LongType()) for name in row_tracking or ()]
    if not len(files):  # an empty relation with the schema, built without Python workers
        empty = spark.range(0)
        return empty.select(
            *(F.lit(None).cast(f.dataType).alias(f.name) for f in table.output_fields() + extra)
        )
    deleted = _deleted_rows(snapshot, table, files)
    needs_row_index = deleted is not None or row_index_column is not None or bool(row_tracking)
    per_file = bool(table.partition_fields) or bool(asked) or needs_row_index
    schema = table.read_schema
    for name in row_tracking or ():
        schema = schema.add(T.StructField(name, T.LongType(), True))
    data = _read_files(spark, snapshot, schema, paths, locations)
    columns = [data[quote_identifier(f.name)] for f in schema.fields]
    if per_file:
        metadata = data.metadataColumn("_metadata")
        columns.append(metadata.getField("file_path").alias(_KEY))
        if needs_row_index:
            columns.append(metadata.getField("row_index").alias(_ROW_INDEX))
    rows = data.select(*columns)
    if per_file:
        per_file_facts = _files_frame(spark, table, files, locations, bool(row_tracking))
        rows = rows.join(F.broadcast(per_file_facts), _KEY, "left")
        unmatched = F.concat(F.lit("rows of an unexpected data file: "), F.col(_KEY))
        rows = rows.where(
            F.when(F.col(_FILE_ID).isNull(), F.raise_error(unmatched)).otherwise(F.lit(True))
        )
    if deleted is not None:
        deleted_schema = [
            T.StructField(_FILE_ID, T.IntegerType()),
            T.StructField(_ROW_INDEX, T.LongType()),
        ]
        deleted_frame = spark.createDataFrame(deleted, T.StructType(deleted_schema))
        rows = rows.join(deleted_frame, [_FILE_ID, _ROW_INDEX], "left_anti")
    output = table.output_columns()
    output += [F.col(internal).alias(name) for name, (_, internal) in asked.items()]
    if row_tracking:
        output.extend(_row_tracking_columns(*row_tracking))
    return rows.select(*output)


def _read_files(
    spark: SparkSession,
    snapshot: Snapshot,
    schema: T.StructType,
    paths: Sequence[str],
    locations: Sequence[FileLocation],
) -> DataFrame:
    """The files at `locations` (logged as `paths`) read with `schema`; a missing one is
    named by `snapshot.missing_data_file`."""
    try:
        return _read_parquet(spark, schema, [spark_path(loc) for loc in locations])
    except AnalysisException as exc:
        if exc.getCondition() != "PATH_NOT_FOUND":
            raise
        message = str(exc)
        missing = (p for p, loc in zip(paths, locations, strict=True) if spark_path(loc) in message)
        path = next(missing, None)
        if path is None:
            raise
        raise snapshot.missing_data_file(path) from None


def _row_tracking_columns(row_id: str, commit_version: str) -> list[Column]:
    """Each row's id and commit version: as its file stores them, else from the log."""
    fresh_id = F.col(_BASE_ROW_ID) + F.col(_ROW_INDEX)
    return [
        F.coalesce(F.col(quote_identifier(row_id)), fresh_id).alias(row_id),
        F.coalesce(F.col(quote_identifier(commit_version)), F.col(_DEFAULT_VERSION)).alias(
            commit_version
        ),
    ]


def _read_parquet(spark: SparkSession, schema: T.StructType, paths: list[str]) -> DataFrame:
    """`spark.read.schema(schema).parquet(*paths)`, listing the files with one task per core.

    Spark stats explicitly named files in a listing job of up to
    `spark.sql.sources.parallelPartitionDiscovery.parallelism` (10000) tasks: a 1000-file table
    costs seconds of task overhead on a small cluster. A classic session lists eagerly while the
    DataFrame is created, so the setting is lowered to the cluster's default parallelism for
    that call only and restored. Spark Connect resolves plans on the server, later: unchanged.
    """
    reader = spark.read.schema(schema)
    if is_connect(reader):
        return reader.parquet(*paths)
    previous = str(spark.conf.get(_LISTING_PARALLELISM))
    cores = spark.sparkContext.defaultParallelism
    spark.conf.set(_LISTING_PARALLELISM, str(max(1, min(int(previous), cores))))
    try:
        return reader.parquet(*paths)
    finally:
        spark.conf.set(_LISTING_PARALLELISM, previous)


# --------------------------------------------------------------------------- table layout


def spark_path(location: FileLocation) -> str:
    """The path of `location` for `spark.read` (Hadoop takes it literally: glob characters are
    escaped)."""
    return _GLOB_CHARS.sub(r"\\\1", _hadoop_uri(location, location.path))


def spark_uri(location: FileLocation) -> str:
    """`location` as Spark shows the file in `_metadata.file_path` and `input_file_name()`
    (Hadoop's `Path.toUri()`: empty segments collapsed, quoted as java.net.URI quotes)."""
    return _hadoop_uri(location, _java_uri_path(_EMPTY_SEGMENTS.sub("/", location.path)))


def _hadoop_uri(location: FileLocation, path: str) -> str:
    authority = f"//{location.authority}" if location.authority or location.scheme != "file" else ""
    return f"{location.scheme}:{authority}{path}"


@dataclass(frozen=True)
class TableLayout:
    """How the table's logical schema maps to the parquet files and the log."""

    table: str
    root: FileLocation  # the table root (`paths.table_root`)
    schema_fields: list[dict[str, Any]]  # the Delta schema's top-level fields (JSON)
    spark_schema: T.StructType  # the same as Spark types, Delta metadata kept
    column_mapping: bool
    partition_fields: dict[str, str]  # logical field name -> partitionValues key

    @classmethod
    def of(cls, spark: SparkSession, snapshot: Snapshot) -> TableLayout:
        """The layout of `snapshot`'s table; DeltaProtocolError if Spark cannot read it."""
        table = snapshot.table_uri
        _check_reader_features(spark, snapshot)
        schema_string = snapshot.metadata.schema_string or "null"
        schema_from_json(schema_string)  # CorruptLogError, or DeltaProtocolError for odd types
        schema_json = json.loads(schema_string)
        mode = snapshot.metadata.configuration.get("delta.columnMapping.mode", "none")
        if "columnMapping" not in reader_features(snapshot.protocol):
            mode = "none"
        if mode not in ("none", "name", "id"):
            raise DeltaProtocolError(f"Table {table} has unknown column mapping mode {mode!r}")
        fields = schema_json["fields"]
        by_lower = {f["name"].lower(): f for f in fields}
        partition_fields = {}
        for column in snapshot.metadata.partition_columns:
            field = by_lower.get(column.lower())
            if field is None:
                raise CorruptLogError(f"Table {table}: partition column {column!r} not in schema")
            key = column
            if mode != "none":
                key = physical_name(field["name"], field.get("metadata") or {}, table)
            partition_fields[field["name"]] = key
        for field in fields:
            _check_type_changes(field, table)
        return cls(
            table=table,
            root=snapshot.location.root,
            schema_fields=fields,
            spark_schema=T.StructType.fromJson(schema_json),
            column_mapping=mode != "none",
            partition_fields=partition_fields,
        )

    @property
    def lower_names(self) -> set[str]:
        return {f["name"].lower() for f in self.schema_fields}

    @property
    def fields(self) -> list[tuple[dict[str, Any], T.StructField]]:
        """Each top-level field as Delta JSON and as a Spark field."""
        return list(zip(self.schema_fields, self.spark_schema.fields, strict=True))

    @property
    def _data_fields(self) -> list[tuple[dict[str, Any], T.StructField]]:
        """Data (non-partition, non-void) fields: the Delta JSON and the Spark field."""
        return [
            (js, sf)
            for js, sf in self.fields
            if js["name"] not in self.partition_fields and not isinstance(sf.dataType, T.NullType)
        ]

    @property
    def read_schema(self) -> T.StructType:
        """The data columns as the parquet files hold them: physical names, no metadata."""
        return T.StructType(
            [
                T.StructField(self._name_in_file(js), self._physical(sf.dataType), True)
                for js, sf in self._data_fields
            ]
        )

    def _name_in_file(self, field: dict[str, Any]) -> str:
        if not self.column_mapping:
            return field["name"]
        return physical_name(field["name"], field.get("metadata") or {}, self.table)

    def _physical(self, data_type: T.DataType) -> T.DataType:
        """`data_type` as the files hold it: physical nested names, no metadata, nullable."""
        if not self.column_mapping:
            return plain_type(data_type)
        return plain_type(data_type, lambda f: physical_name(f.name, f.metadata, self.table))

    def output_fields(self) -> list[T.StructField]:
        """The logical columns, in schema order (void columns dropped), all nullable."""
        return [
            T.StructField(sf.name, plain_type(sf.dataType), True)
            for sf in self.spark_schema.fields
            if not isinstance(sf.dataType, T.NullType)
        ]

    def output_columns(self) -> list[Column]:
        """Expressions producing `output_fields` from the read (and joined) columns."""
        partition_ids = {name: i for i, name in enumerate(self.partition_fields)}
        data = {js["name"]: (js, sf) for js, sf in self._data_fields}
        columns = []
        for out in self.output_fields():
            if out.name in partition_ids:
                column = F.col(_partition_column(partition_ids[out.name]))
            else:
                js, sf = data[out.name]
                column = F.col(quote_identifier(self._name_in_file(js)))
                if self._physical(sf.dataType) != out.dataType:
                    column = column.cast(out.dataType)
            columns.append(column.alias(out.name))
        return columns

    def resolve(self, log_path: str) -> FileLocation:
        """The location of a file the log names: `paths.resolve_path` against the root (a
        relative URL-encoded path, an absolute-path reference, or a URI)."""
        return resolve_path(self.root, log_path)


def physical_name(name: str, metadata: Mapping[str, Any], table: str) -> str:
    physical = metadata.get(_PHYSICAL_NAME)
    if not isinstance(physical, str) or not physical:
        raise CorruptLogError(
            f"Table {table} uses column mapping but column {name!r} has no {_PHYSICAL_NAME}"
        )
    return physical


def plain_type(data_type: T.DataType, rename: Callable[[T.StructField], str] | None = None) -> Any:
    """`data_type` without metadata and all nullable (as Spark's file sources return data),
    struct fields at any depth renamed by `rename` when given."""
    if isinstance(data_type, T.StructType):
        return T.StructType(
            [
                T.StructField(rename(f) if rename else f.name, plain_type(f.dataType, rename), True)
                for f in data_type.fields
            ]
        )
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(plain_type(data_type.elementType, rename), True)
    if isinstance(data_type, T.MapType):
        key, value = plain_type(data_type.keyType, rename), plain_type(data_type.valueType, rename)
        return T.MapType(key, value, True)
    return data_type


def _partition_column(index: int) -> str:
    return f"{_INTERNAL}p{index}"


def _partition_types(snapshot: Snapshot) -> dict[str, Any]:
    """Partition column -> its schema field (the engine's predicates need the whole field)."""
    fields = json.loads(snapshot.metadata.schema_string or '{"fields": []}')["fields"]
    by_name = {f["name"].lower(): f for f in fields}
    return {c: by_name.get(c.lower(), "string") for c in snapshot.metadata.partition_columns}


def _data_types(snapshot: Snapshot) -> dict[str, Any]:
    """Column that is not a partition column -> its schema field (for data skipping)."""
    fields = json.loads(snapshot.metadata.schema_string or '{"fields": []}')["fields"]
    partitions = {c.lower() for c in snapshot.metadata.partition_columns}
    return {f["name"]: f for f in fields if f["name"].lower() not in partitions}


# --------------------------------------------------------------------------- refusals


def _check_reader_features(spark: SparkSession, snapshot: Snapshot) -> None:
    features = reader_features(snapshot.protocol)
    unsupported = sorted(features - SPARK_READER_FEATURES)
    if features & _SHREDDING_FEATURES and _spark_version(spark) < _SHREDDING_MIN_SPARK:
        unsupported += sorted(features & _SHREDDING_FEATURES)
    if unsupported:
        raise DeltaProtocolError(
            f"Table {snapshot.table_uri} requires reader features the Spark data plane cannot "
            f"honour: {', '.join(unsupported)} (Spark {spark.version})."
        )


def _spark_version(spark: SparkSession) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", spark.version).groups()  # type: ignore[union-attr]
    return int(major), int(minor)


def _check_type_changes(field: dict[str, Any], table: str) -> None:
    """Refuse a widened column whose older files Spark's parquet reader cannot widen."""
    changes = (field.get("metadata") or {}).get(_TYPE_CHANGES) or []
    for change in changes:
        target = _type_at(field["type"], change.get("fieldPath"))
        source = change.get("fromType")
        if not isinstance(target, str) or not _widens(source, target):
            raise DeltaProtocolError(
                f"Table {table}: column {field['name']!r} was widened from {source!r} to "
                f"{change.get('toType')!r}; Spark's parquet reader cannot read its older files "
                f"as {target!r}."
            )
    for child in _child_fields(field["type"]):
        _check_type_changes(child, table)


def _child_fields(delta_type: Any) -> list[dict[str, Any]]:
    """The struct fields nested anywhere inside `delta_type` (not below other structs)."""
    if not isinstance(delta_type, dict):
        return []
    if delta_type["type"] == "struct":
        return list(delta_type["fields"])
    if delta_type["type"] == "array":
        return _child_fields(delta_type["elementType"])
    return _child_fields(delta_type["keyType"]) + _child_fields(delta_type["valueType"])


def _type_at(delta_type: Any, field_path: str | None) -> Any:
    """The type reached from `delta_type` through `element`/`key`/`value` steps."""
    members = {"element": "elementType", "key": "keyType", "value": "valueType"}
    for step in field_path.split(".") if field_path else []:
        if not isinstance(delta_type, dict) or members.get(step) not in delta_type:
            return None
        delta_type = delta_type[members[step]]
    return delta_type


def _widens(source: Any, target: str) -> bool:
    """Whether Spark's parquet reader reads a `source` column as `target` (checked on 4.x)."""
    if not isinstance(source, str):
        return False
    if source == target:
        return True
    digits = _INTEGER_DIGITS
    if source in digits and target in digits:
        return digits[source] <= digits[target]
    if target == "double":
        return source in ("byte", "short", "integer", "float")
    if source == "date":
        return target == "timestamp_ntz"
    wide = _DECIMAL.fullmatch(target)
    if wide is None:
        return False
    precision, scale = int(wide[1]), int(wide[2])
    if source in digits:
        return precision - scale >= digits[source]
    narrow = _DECIMAL.fullmatch(source)
    return narrow is not None and (
        scale >= int(narrow[2]) and precision - scale >= int(narrow[1]) - int(narrow[2])
    )


def _check_locations(
    spark: SparkSession,
    snapshot: Snapshot,
    paths: Sequence[str],
    locations: Sequence[FileLocation],
) -> None:
    """Refuse files Spark cannot reach or name exactly, or would silently skip (hidden names).

    `paths` are the files as the log names them, `locations` what they resolve to."""
    where = f"Table {snapshot.table_uri} version {snapshot.version}"
    configured: dict[str, bool] = {}
    for path, loc in zip(paths, locations, strict=True):
        scheme = loc.scheme
        if scheme not in NATIVE_SCHEMES and scheme not in configured:
            configured[scheme] = bool(spark.conf.get(f"spark.hadoop.fs.{scheme}.impl", None))
        if not configured.get(scheme, True):
            raise UnsupportedStorageError(
                f"{where}: the data file {path} is on {scheme}://, and Spark has no filesystem "
                f"for {scheme}:// data files. Configure one on the session "
                f"(spark.hadoop.fs.{scheme}.impl, e.g. org.apache.hadoop.fs.s3a.S3AFileSystem "
                "with hadoop-aws on the classpath)."
            )
        if scheme == "file" and loc.authority:
            raise UnsupportedStorageError(
                f"{where}: the data file {path} names {loc.uri}, a file on host "
                f"{loc.authority!r}; Spark reads local files of this host only."
            )
        if scheme != "file" and _EMPTY_SEGMENTS.search(loc.path):
            raise UnsupportedStorageError(
                f"{where}: the data file {path} names the key {loc.fs_path!r}, which has an "
                "empty path segment; Hadoop's Path collapses it, so Spark would read another "
                "object."
            )
    for loc in locations:
        name = loc.path.rsplit("/", 1)[-1]
        if name.startswith((".", "_")) or name.endswith("._COPYING_"):
            raise DeltaProtocolError(
                f"Table {snapshot.table_uri}: data file {loc.path!r} has a name Spark's file "
                "reader treats as hidden and would skip; it cannot be read through Spark."
            )


def _java_uri_path(path: str) -> str:
    """`path` quoted as java.net.URI quotes a path: unsafe ASCII, and non-ASCII space and
    control characters, as %XX of their UTF-8 bytes; other non-ASCII characters kept."""
    if _URI_SAFE.fullmatch(path):
        return path
    return _URI_UNSAFE_CHAR.sub(_java_quote_char, path)


def _java_quote_char(match: re.Match[str]) -> str:
    char = match[0]
    if ord(char) >= 0x80 and not (
        unicodedata.category(char) in ("Zs", "Zl", "Zp") or ord(char) <= 0x9F
    ):
        return char
    return "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))


# --------------------------------------------------------------------------- per-file facts


def _files_frame(
    spark: SparkSession,
    table: TableLayout,
    files: pa.StructArray,
    locations: Sequence[FileLocation],
    row_tracking: bool = False,
) -> DataFrame:
    """One row per file: Spark's URI of it, a file id, typed partition values, its log path
    (and with `row_tracking` its baseRowId and defaultRowCommitVersion)."""
    columns: dict[str, pa.Array] = {
        _KEY: pa.array([spark_uri(loc) for loc in locations], pa.string()),
        _FILE_ID: pa.array(np.arange(len(files), dtype=np.int32)),
        _LOG_PATH: pc.struct_field(files, "path"),
    }
    fields = [
        T.StructField(_KEY, T.StringType()),
        T.StructField(_FILE_ID, T.IntegerType()),
        T.StructField(_LOG_PATH, T.StringType()),
    ]
    if row_tracking:
        for name, field in (
            (_BASE_ROW_ID, "baseRowId"),
            (_DEFAULT_VERSION, "defaultRowCommitVersion"),
        ):
            values = pc.struct_field(files, field)
            if name == _BASE_ROW_ID and values.null_count:
                raise CorruptLogError(
                    f"Table {table.table}: a data file has no baseRowId although the table has "
                    "row tracking enabled; the log is invalid."
                )
            columns[name] = values
            fields.append(T.StructField(name, T.LongType()))
    values = pc.struct_field(files, "partitionValues")
    by_name = {js["name"]: (js, sf) for js, sf in table.fields}
    for i, (name, key) in enumerate(table.partition_fields.items()):
        js, sf = by_name[name]
        raw = pc.map_lookup(values, pa.scalar(key, pa.string()), "first")
        columns[_partition_column(i)] = partition_values_to_arrow(raw, js["type"])
        fields.append(T.StructField(_partition_column(i), sf.dataType))
    return spark.createDataFrame(pa.table(columns), T.StructType(fields))


def _deleted_rows(snapshot: Snapshot, table: TableLayout, files: pa.StructArray) -> pa.Table | None:
    """(file id, row index) of every row the files' deletion vectors delete; None if none."""
    descriptors = pc.struct_field(files, "deletionVector")
    if descriptors.null_count == len(descriptors):
        return None
    store = snapshot.location.store
    contents: dict[str, bytes] = {}
    ids, rows = [], []
    for file_id, dv in enumerate(descriptors.to_pylist()):
        if dv is None:
            continue
        storage, where, size = dv["storageType"], dv["pathOrInlineDv"], dv["sizeInBytes"]
        if storage == "i":
            data = dvs.inline_dv_bytes(where, size)
        elif storage in ("u", "p"):
            if storage == "u":
                path = table.root.child(dvs.relative_dv_path(where)).fs_path
            else:
                path = store.file_path(
                    table.root,
                    where,
                    table=snapshot.table_uri,
                    version=snapshot.version,
                    what="deletion vector file",
                )
            if path not in contents:
                try:
                    contents[path] = store.read(path)
                except FileNotFoundError:
                    raise CorruptLogError(
                        f"Table {snapshot.table_uri} version {snapshot.version}: the deletion "
                        f"vector file {path} is missing (deleted by a VACUUM with too short a "
                        "retention, or copied without it). Restore it, or read an older version."
                    ) from None
            data = dvs.dv_bytes_from_file(contents[path], dv["offset"] or 1, size, path)
        else:
            raise DeltaProtocolError(
                f"Table {snapshot.table_uri}: unknown deletion vector storage type {storage!r}"
            )
        deleted = dvs.deleted_row_indexes(data)
        if len(deleted) != dv["cardinality"]:
            raise CorruptLogError(
                f"Table {snapshot.table_uri}: deletion vector {storage}{where} deletes "
                f"{len(deleted)} rows, the log says {dv['cardinality']}"
            )
        ids.append(np.full(len(deleted), file_id, dtype=np.int32))
        rows.append(deleted.astype(np.int64))
    return pa.table({_FILE_ID: np.concatenate(ids), _ROW_INDEX: np.concatenate(rows)})
