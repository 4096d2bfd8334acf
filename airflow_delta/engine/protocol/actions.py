"""Delta log actions and their codecs.

Each action of PROTOCOL.md is a dataclass with a JSON codec (one action per line of a commit
file). Fields this engine does not know are kept in `extra` and written back unchanged, and
unknown actions become `UnknownAction`, as the spec requires of readers and writers. Stats stay
the JSON string found in the log and are parsed only on demand.

The arrow struct types at the end are the columnar codec: the shape in which log replay and
checkpoints hold file actions, so that no Python object is built per file on the load path.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import pyarrow as pa

from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.protocol.dv_descriptor import (  # re-exported: their former home
    DeletionVectorDescriptor as DeletionVectorDescriptor,
)
from airflow_delta.engine.protocol.dv_descriptor import JsonDict as JsonDict
from airflow_delta.engine.protocol.dv_descriptor import drop_none as _drop_none
from airflow_delta.engine.protocol.dv_descriptor import dv_unique_id as dv_unique_id
from airflow_delta.engine.protocol.log_json import json_string as _json_string
from airflow_delta.engine.protocol.log_json import json_string_map as _json_string_map
from airflow_delta.engine.protocol.log_json import parse_json


def _pop_known(data: JsonDict, names: tuple[str, ...]) -> tuple[list[Any], JsonDict]:
    """Split `data` into the values of `names` (None when absent) and the remaining fields."""
    rest = dict(data)
    return [rest.pop(n, None) for n in names], rest


#: One encoder for every commit line (json.dumps with separators builds one per call); actions
#: are trees of plain values, so the check for reference cycles is skipped.
_COMPACT = json.JSONEncoder(separators=(",", ":"), check_circular=False)


class Action:
    """Base class of every action; `key` is the action's name in the log."""

    key: ClassVar[str]
    extra: JsonDict

    def to_json_dict(self) -> JsonDict:
        raise NotImplementedError

    def json(self) -> str:
        """This action as one line of a commit file."""
        return _COMPACT.encode({self.key: self.to_json_dict()})


@dataclass
class Protocol(Action):
    """The protocol versions and table features a reader or writer must support."""

    key: ClassVar[str] = "protocol"
    min_reader_version: int = 1
    min_writer_version: int = 2
    reader_features: list[str] | None = None
    writer_features: list[str] | None = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    _FIELDS: ClassVar = ("minReaderVersion", "minWriterVersion", "readerFeatures", "writerFeatures")

    def to_json_dict(self) -> JsonDict:
        return {
            "minReaderVersion": self.min_reader_version,
            "minWriterVersion": self.min_writer_version,
            **_drop_none(
                {"readerFeatures": self.reader_features, "writerFeatures": self.writer_features}
            ),
            **self.extra,
        }

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> Protocol:
        (reader, writer, rf, wf), rest = _pop_known(d, cls._FIELDS)
        if reader is None or writer is None:
            raise CorruptLogError(f"protocol action without minReaderVersion/minWriterVersion: {d}")
        return cls(int(reader), int(writer), rf, wf, rest)


@dataclass
class Format:
    """The data file format of a table (always parquet)."""

    provider: str = "parquet"
    options: dict[str, str] = field(default_factory=dict)


@dataclass
class Metadata(Action):
    """The table's id, schema, partition columns and configuration."""

    key: ClassVar[str] = "metaData"
    id: str = ""
    schema_string: str | None = None
    partition_columns: list[str] = field(default_factory=list)
    configuration: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    description: str | None = None
    format: Format = field(default_factory=Format)
    created_time: int | None = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    _FIELDS: ClassVar = (
        "id",
        "schemaString",
        "partitionColumns",
        "configuration",
        "name",
        "description",
        "format",
        "createdTime",
    )

    def to_json_dict(self) -> JsonDict:
        return {
            "id": self.id,
            **_drop_none({"name": self.name, "description": self.description}),
            "format": {"provider": self.format.provider, "options": self.format.options},
            "schemaString": self.schema_string,
            "partitionColumns": self.partition_columns,
            "configuration": self.configuration,
            **_drop_none({"createdTime": self.created_time}),
            **self.extra,
        }

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> Metadata:
        (mid, schema, parts, conf, name, desc, fmt, created), rest = _pop_known(d, cls._FIELDS)
        fmt = fmt or {}
        return cls(
            id=mid or "",
            schema_string=schema,
            partition_columns=list(parts or []),
            configuration=dict(conf or {}),
            name=name,
            description=desc,
            format=Format(fmt.get("provider") or "parquet", dict(fmt.get("options") or {})),
            created_time=created,
            extra=rest,
        )

    @property
    def column_mapping_mode(self) -> str:
        """`delta.columnMapping.mode`: "none", "name" or "id"."""
        return self.configuration.get("delta.columnMapping.mode", "none").lower()

    @classmethod
    def for_new_table(
        cls,
        schema: Mapping[str, Any],
        partition_columns: Sequence[str] = (),
        configuration: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        description: str | None = None,
    ) -> Metadata:
        """The metadata of a table being created: a fresh id, the creation time, `schema` (a
        schemaString object, mapped under column mapping) and the rest as given."""
        created = cls(
            id=str(uuid.uuid4()),
            partition_columns=list(partition_columns),
            configuration=dict(configuration or {}),
            name=name,
            description=description,
            created_time=int(time.time() * 1000),
        )
        return created.with_schema(schema)

    def with_schema(self, schema: Mapping[str, Any]) -> Metadata:
        """This metadata with `schema` (a schemaString object). Under column mapping, fields
        without an id and a physical name get new ones and `delta.columnMapping.maxColumnId`
        follows (existing fields keep theirs)."""
        from airflow_delta.engine.protocol.column_mapping import assign_column_mapping

        configuration = self.configuration
        if self.column_mapping_mode != "none":
            key = "delta.columnMapping.maxColumnId"
            schema, max_id = assign_column_mapping(schema, int(configuration.get(key, 0)))
            configuration = {**configuration, key: str(max_id)}
        text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
        return dataclasses.replace(self, schema_string=text, configuration=configuration)

    @cached_property
    def physical_partition_columns(self) -> list[str]:
        """The keys of the files' `partitionValues`: the partition columns, by their physical
        names when the table uses column mapping."""
        if self.column_mapping_mode == "none":
            return list(self.partition_columns)
        fields = {f["name"]: f for f in json.loads(self.schema_string or "{}").get("fields", [])}
        return [
            fields[c].get("metadata", {}).get("delta.columnMapping.physicalName", c)
            if c in fields
            else c
            for c in self.partition_columns
        ]

    @cached_property
    def schema(self) -> pa.Schema:
        """The table schema as a pyarrow schema."""
        from airflow_delta.engine.protocol.schema import schema_from_json

        if self.schema_string is None:
            raise CorruptLogError(f"Metadata of table id {self.id!r} has no schemaString")
        return schema_from_json(self.schema_string)


_ADD_FIELDS = (
    "path",
    "partitionValues",
    "size",
    "modificationTime",
    "dataChange",
    "stats",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
)


@dataclass
class AddFile(Action):
    """A data file added to the table."""

    key: ClassVar[str] = "add"
    path: str = ""
    partition_values: dict[str, str | None] = field(default_factory=dict)
    size: int = 0
    modification_time: int = 0
    data_change: bool = True
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    clustering_provider: str | None = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    def to_json_dict(self) -> JsonDict:
        return {
            "path": self.path,
            "partitionValues": self.partition_values,
            "size": self.size,
            "modificationTime": self.modification_time,
            "dataChange": self.data_change,
            **_drop_none(
                {
                    "stats": self.stats,
                    "tags": self.tags,
                    "deletionVector": self.deletion_vector and self.deletion_vector.to_json_dict(),
                    "baseRowId": self.base_row_id,
                    "defaultRowCommitVersion": self.default_row_commit_version,
                    "clusteringProvider": self.clustering_provider,
                }
            ),
            **self.extra,
        }

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> AddFile:
        (path, pv, size, mtime, dc, stats, tags, dv, brid, drcv, cp), rest = _pop_known(
            d, _ADD_FIELDS
        )
        if path is None:
            raise CorruptLogError(f"add action without a path: {d}")
        return cls(
            path=path,
            partition_values=dict(pv or {}),
            size=size or 0,
            modification_time=mtime or 0,
            data_change=True if dc is None else bool(dc),
            stats=stats,
            tags=tags,
            deletion_vector=DeletionVectorDescriptor.from_json_dict(dv),
            base_row_id=brid,
            default_row_commit_version=drcv,
            clustering_provider=cp,
            extra=rest,
        )

    @property
    def parsed_stats(self) -> JsonDict:
        """The stats JSON parsed (empty when the file has no stats)."""
        return parse_json(self.stats, f"stats of {self.path}") if self.stats else {}

    @property
    def num_records(self) -> int | None:
        return self.parsed_stats.get("numRecords")

    def remove(self, deletion_timestamp: int, data_change: bool = True) -> RemoveFile:
        """The RemoveFile that logically deletes this file."""
        return RemoveFile(
            path=self.path,
            deletion_timestamp=deletion_timestamp,
            data_change=data_change,
            extended_file_metadata=True,
            partition_values=self.partition_values,
            size=self.size,
            stats=self.stats,
            tags=self.tags,
            deletion_vector=self.deletion_vector,
            base_row_id=self.base_row_id,
            default_row_commit_version=self.default_row_commit_version,
        )


_REMOVE_FIELDS = (
    "path",
    "deletionTimestamp",
    "dataChange",
    "extendedFileMetadata",
    "partitionValues",
    "size",
    "stats",
    "tags",
    "deletionVector",
    "baseRowId",
    "defaultRowCommitVersion",
)


@dataclass
class RemoveFile(Action):
    """A data file logically removed from the table (a tombstone until vacuumed)."""

    key: ClassVar[str] = "remove"
    path: str = ""
    deletion_timestamp: int | None = None
    data_change: bool = True
    extended_file_metadata: bool | None = None
    partition_values: dict[str, str | None] | None = None
    size: int | None = None
    stats: str | None = None
    tags: dict[str, str] | None = None
    deletion_vector: DeletionVectorDescriptor | None = None
    base_row_id: int | None = None
    default_row_commit_version: int | None = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    def to_json_dict(self) -> JsonDict:
        return {
            "path": self.path,
            **_drop_none({"deletionTimestamp": self.deletion_timestamp}),
            "dataChange": self.data_change,
            **_drop_none(
                {
                    "extendedFileMetadata": self.extended_file_metadata,
                    "partitionValues": self.partition_values,
                    "size": self.size,
                    "stats": self.stats,
                    "tags": self.tags,
                    "deletionVector": self.deletion_vector and self.deletion_vector.to_json_dict(),
                    "baseRowId": self.base_row_id,
                    "defaultRowCommitVersion": self.default_row_commit_version,
                }
            ),
            **self.extra,
        }

    def json(self) -> str:
        """This action as one line of a commit file: written field by field for the common
        shape (what a command's removes hold), the generic encoding otherwise; both give the
        same text (a test holds them to it)."""
        ts, size, ext, values = (
            self.deletion_timestamp,
            self.size,
            self.extended_file_metadata,
            self.partition_values,
        )
        if (
            type(self.data_change) is not bool
            or (ts is not None and type(ts) is not int)
            or (size is not None and type(size) is not int)
            or (ext is not None and type(ext) is not bool)
            or self.tags is not None
            or self.deletion_vector is not None
            or self.base_row_id is not None
            or self.default_row_commit_version is not None
            or self.extra
        ):
            return super().json()
        try:
            mapped = "" if values is None else f',"partitionValues":{_json_string_map(values)}'
        except TypeError:  # a key or value that is not a string
            return super().json()
        return "".join(
            (
                '{"remove":{"path":',
                _json_string(self.path),
                "" if ts is None else f',"deletionTimestamp":{ts}',
                ',"dataChange":true' if self.data_change else ',"dataChange":false',
                "" if ext is None else f',"extendedFileMetadata":{"true" if ext else "false"}',
                mapped,
                "" if size is None else f',"size":{size}',
                "" if self.stats is None else f',"stats":{_json_string(self.stats)}',
                "}}",
            )
        )

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> RemoveFile:
        (path, ts, dc, ext, pv, size, stats, tags, dv, brid, drcv), rest = _pop_known(
            d, _REMOVE_FIELDS
        )
        if path is None:
            raise CorruptLogError(f"remove action without a path: {d}")
        return cls(
            path=path,
            deletion_timestamp=ts,
            data_change=True if dc is None else bool(dc),
            extended_file_metadata=ext,
            partition_values=pv,
            size=size,
            stats=stats,
            tags=tags,
            deletion_vector=DeletionVectorDescriptor.from_json_dict(dv),
            base_row_id=brid,
            default_row_commit_version=drcv,
            extra=rest,
        )


@dataclass
class AddCDCFile(Action):
    """A change data file of a version (ignored by snapshot replay)."""

    key: ClassVar[str] = "cdc"
    path: str = ""
    partition_values: dict[str, str | None] = field(default_factory=dict)
    size: int = 0
    data_change: bool = False
    tags: dict[str, str] | None = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    def to_json_dict(self) -> JsonDict:
        return {
            "path": self.path,
            "partitionValues": self.partition_values,
            "size": self.size,
            "dataChange": self.data_change,
            **_drop_none({"tags": self.tags}),
            **self.extra,
        }

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> AddCDCFile:
        (path, pv, size, dc, tags), rest = _pop_known(
            d, ("path", "partitionValues", "size", "dataChange", "tags")
        )
        return cls(path or "", dict(pv or {}), size or 0, bool(dc), tags, rest)


@dataclass
class SetTransaction(Action):
    """The latest version an application committed, for idempotent writes."""

    key: ClassVar[str] = "txn"
    app_id: str = ""
    version: int = 0
    last_updated: int | None = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    def to_json_dict(self) -> JsonDict:
        return {
            "appId": self.app_id,
            "version": self.version,
            **_drop_none({"lastUpdated": self.last_updated}),
            **self.extra,
        }

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> SetTransaction:
        (app_id, version, last), rest = _pop_known(d, ("appId", "version", "lastUpdated"))
        if app_id is None or version is None:
            raise CorruptLogError(f"txn action without appId/version: {d}")
        return cls(app_id, int(version), last, rest)


@dataclass
class DomainMetadata(Action):
    """Configuration of a named metadata domain; `removed` makes it a tombstone."""

    key: ClassVar[str] = "domainMetadata"
    domain: str = ""
    configuration: str = ""
    removed: bool = False
    extra: JsonDict = field(default_factory=dict, repr=False)

    def to_json_dict(self) -> JsonDict:
        return {
            "domain": self.domain,
            "configuration": self.configuration,
            "removed": self.removed,
            **self.extra,
        }

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> DomainMetadata:
        (domain, conf, removed), rest = _pop_known(d, ("domain", "configuration", "removed"))
        if domain is None:
            raise CorruptLogError(f"domainMetadata action without a domain: {d}")
        return cls(domain, conf or "", bool(removed), rest)


@dataclass
class CommitInfo(Action):
    """Provenance of a commit. Free-form in the spec: every field is kept as found."""

    key: ClassVar[str] = "commitInfo"
    info: JsonDict = field(default_factory=dict)
    extra: JsonDict = field(default_factory=dict, repr=False)

    def to_json_dict(self) -> JsonDict:
        return dict(self.info)

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> CommitInfo:
        return cls(dict(d))

    @property
    def timestamp(self) -> int | None:
        return self.info.get("timestamp")

    @property
    def in_commit_timestamp(self) -> int | None:
        return self.info.get("inCommitTimestamp")

    @property
    def operation(self) -> str | None:
        return self.info.get("operation")


@dataclass
class Sidecar(Action):
    """A v2 checkpoint's pointer to a parquet file of file actions in `_delta_log/_sidecars`."""

    key: ClassVar[str] = "sidecar"
    path: str = ""
    size_in_bytes: int = 0
    modification_time: int = 0
    tags: dict[str, str] | None = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    def to_json_dict(self) -> JsonDict:
        return {
            "path": self.path,
            "sizeInBytes": self.size_in_bytes,
            "modificationTime": self.modification_time,
            **_drop_none({"tags": self.tags}),
            **self.extra,
        }

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> Sidecar:
        (path, size, mtime, tags), rest = _pop_known(
            d, ("path", "sizeInBytes", "modificationTime", "tags")
        )
        if path is None:
            raise CorruptLogError(f"sidecar action without a path: {d}")
        return cls(path, size or 0, mtime or 0, tags, rest)


@dataclass
class CheckpointMetadata(Action):
    """The version a v2 checkpoint describes."""

    key: ClassVar[str] = "checkpointMetadata"
    version: int = 0
    tags: dict[str, str] | None = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    def to_json_dict(self) -> JsonDict:
        return {"version": self.version, **_drop_none({"tags": self.tags}), **self.extra}

    @classmethod
    def from_json_dict(cls, d: JsonDict) -> CheckpointMetadata:
        (version, tags), rest = _pop_known(d, ("version", "tags"))
        return cls(int(version or 0), tags, rest)


@dataclass
class UnknownAction(Action):
    """An action this engine does not know; kept so it can be written back unchanged."""

    name: str = ""
    body: Any = None
    extra: JsonDict = field(default_factory=dict, repr=False)

    def json(self) -> str:
        return json.dumps({self.name: self.body}, separators=(",", ":"))


ACTION_TYPES: dict[str, type[Action]] = {
    cls.key: cls
    for cls in (
        Protocol,
        Metadata,
        AddFile,
        RemoveFile,
        AddCDCFile,
        SetTransaction,
        DomainMetadata,
        CommitInfo,
        Sidecar,
        CheckpointMetadata,
    )
}


def iter_log_lines(data: bytes, source: str) -> Iterator[tuple[int, str, Any]]:
    """(line number, action name, action body) of each action in a newline-delimited JSON file.

    Blank lines are skipped; a line that is not a JSON object raises CorruptLogError naming
    `source` and the line. A line holding several actions yields each of them.
    """
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        wrapper = parse_json(line, f"{source}: line {lineno}")
        if not isinstance(wrapper, dict):
            raise CorruptLogError(f"{source}: line {lineno} is not a JSON object")
        for name, body in wrapper.items():
            yield lineno, name, body


def action_from_json(name: str, body: Any, source: str = "log") -> Action:
    """Decode one action; unknown action names become UnknownAction."""
    cls = ACTION_TYPES.get(name)
    if cls is None:
        return UnknownAction(name=name, body=body)
    if not isinstance(body, dict):
        raise CorruptLogError(f"{source}: action {name!r} is not a JSON object: {body!r}")
    try:
        action: Action = cls.from_json_dict(body)  # type: ignore[attr-defined]
        return action
    except CorruptLogError as exc:
        raise CorruptLogError(f"{source}: {exc}") from None
    except (TypeError, ValueError, KeyError) as exc:
        raise CorruptLogError(f"{source}: malformed {name!r} action ({exc!r})") from None


def parse_actions(data: bytes, source: str) -> list[Action]:
    """Decode a newline-delimited JSON log file into actions; `source` names it in errors."""
    return [action_from_json(name, body, source) for _, name, body in iter_log_lines(data, source)]


def serialize_actions(actions: list[Action]) -> bytes:
    """Encode actions as the bytes of a commit file."""
    return ("\n".join(a.json() for a in actions) + "\n").encode()


@dataclass(frozen=True)
class Operation:
    """The operation a commit records in commitInfo (`WRITE`, `MERGE`, ...)."""

    name: str
    parameters: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
