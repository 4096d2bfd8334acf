"""The JSON codec of every action in PROTOCOL.md: round trips, unknown fields and actions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.protocol.actions import (
    AddCDCFile,
    AddFile,
    CheckpointMetadata,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    SetTransaction,
    Sidecar,
    UnknownAction,
    parse_actions,
    serialize_actions,
)

LINES = [
    {
        "commitInfo": {
            "timestamp": 1,
            "operation": "WRITE",
            "operationParameters": {"mode": "Append"},
            "readVersion": 3,
            "isBlindAppend": True,
            "inCommitTimestamp": 5,
        }
    },
    {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["deletionVectors"],
            "writerFeatures": ["deletionVectors"],
        }
    },
    {
        "metaData": {
            "id": "id-1",
            "name": "t",
            "description": "d",
            "format": {"provider": "parquet", "options": {"k": "v"}},
            "schemaString": '{"type":"struct","fields":[]}',
            "partitionColumns": ["p"],
            "configuration": {"delta.appendOnly": "true"},
            "createdTime": 7,
        }
    },
    {
        "add": {
            "path": "p=1/a.parquet",
            "partitionValues": {"p": "1"},
            "size": 10,
            "modificationTime": 11,
            "dataChange": True,
            "stats": '{"numRecords":3}',
            "tags": {"t": "v"},
            "deletionVector": {
                "storageType": "u",
                "pathOrInlineDv": "ab",
                "offset": 1,
                "sizeInBytes": 36,
                "cardinality": 2,
            },
            "baseRowId": 4,
            "defaultRowCommitVersion": 2,
            "clusteringProvider": "liquid",
        }
    },
    {
        "remove": {
            "path": "b.parquet",
            "deletionTimestamp": 12,
            "dataChange": False,
            "extendedFileMetadata": True,
            "partitionValues": {"p": None},
            "size": 3,
        }
    },
    {
        "cdc": {
            "path": "_change_data/c.parquet",
            "partitionValues": {},
            "size": 5,
            "dataChange": False,
        }
    },
    {"txn": {"appId": "app", "version": 9, "lastUpdated": 13}},
    {"domainMetadata": {"domain": "delta.rowTracking", "configuration": "{}", "removed": False}},
    {"sidecar": {"path": "s.parquet", "sizeInBytes": 14, "modificationTime": 15}},
    {"checkpointMetadata": {"version": 16}},
]
TYPES = [
    CommitInfo,
    Protocol,
    Metadata,
    AddFile,
    RemoveFile,
    AddCDCFile,
    SetTransaction,
    DomainMetadata,
    Sidecar,
    CheckpointMetadata,
]


def test_every_action_round_trips() -> None:
    data = "\n".join(json.dumps(line) for line in LINES).encode()
    actions = parse_actions(data, "test.json")
    assert [type(a) for a in actions] == TYPES
    again = [json.loads(line) for line in serialize_actions(actions).decode().splitlines()]
    assert again == LINES


def test_unknown_fields_and_actions_are_kept() -> None:
    lines = [
        {"add": {**LINES[3]["add"], "futureField": [1, {"x": None}]}},
        {"futureAction": {"anything": True}},
    ]
    actions = parse_actions("\n".join(json.dumps(x) for x in lines).encode(), "t")
    assert isinstance(actions[1], UnknownAction)
    assert actions[0].extra == {"futureField": [1, {"x": None}]}
    assert [json.loads(x) for x in serialize_actions(actions).decode().splitlines()] == lines


def test_stats_stay_a_string_until_asked() -> None:
    (add,) = parse_actions(json.dumps(LINES[3]).encode(), "t")
    assert add.stats == '{"numRecords":3}'
    assert add.num_records == 3
    assert add.deletion_vector.unique_id == "uab@1"


def test_add_remove_helper_carries_the_file_identity() -> None:
    (add,) = parse_actions(json.dumps(LINES[3]).encode(), "t")
    remove = add.remove(deletion_timestamp=99)
    assert (remove.path, remove.deletion_timestamp, remove.size) == (add.path, 99, 10)
    assert remove.deletion_vector == add.deletion_vector


@pytest.mark.parametrize(
    "line",
    [
        b'{"protocol": {"minReaderVersion": "x", "minWriterVersion": 2}}',
        b'{"txn": {"appId": "a"}}',
        b'{"add": 5}',
        b"[1]",
        b"{truncated",
    ],
)
def test_malformed_actions_are_typed_errors(line: bytes) -> None:
    with pytest.raises(CorruptLogError, match=r"bad\.json"):
        parse_actions(line, "bad.json")


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_NUMBER = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    path=_TEXT,
    deletion_timestamp=st.one_of(_NUMBER, st.floats(allow_nan=False, allow_infinity=False)),
    data_change=st.one_of(st.booleans(), st.just(1)),
    extended=st.one_of(st.none(), st.booleans()),
    partition_values=st.one_of(st.none(), st.dictionaries(_TEXT, st.one_of(st.none(), _TEXT))),
    size=_NUMBER,
    stats=st.one_of(st.none(), _TEXT, st.just('{"numRecords":3,"minValues":{"a":"\\u00e9"}}')),
    tags=st.one_of(st.none(), st.dictionaries(_TEXT, _TEXT, max_size=2)),
    base_row_id=_NUMBER,
    default_row_commit_version=_NUMBER,
)
def test_a_remove_line_is_the_generic_encoding(
    path: str,
    deletion_timestamp: Any,
    data_change: Any,
    extended: bool | None,
    partition_values: dict[str, str | None] | None,
    size: int | None,
    stats: str | None,
    tags: dict[str, str] | None,
    base_row_id: int | None,
    default_row_commit_version: int | None,
) -> None:
    """RemoveFile.json writes its common shape field by field: the same text as encoding
    `to_json_dict()`, which every other action uses (and it parses back to the same action)."""
    remove = RemoveFile(
        path=path,
        deletion_timestamp=deletion_timestamp,
        data_change=data_change,
        extended_file_metadata=extended,
        partition_values=partition_values,
        size=size,
        stats=stats,
        tags=tags,
        base_row_id=base_row_id,
        default_row_commit_version=default_row_commit_version,
    )
    generic = json.dumps({"remove": remove.to_json_dict()}, separators=(",", ":"))
    assert remove.json() == generic
    if type(data_change) is bool and not isinstance(deletion_timestamp, float):
        assert RemoveFile.from_json_dict(json.loads(remove.json())["remove"]) == remove
