"""Writes small Delta logs by hand, for tests that need exact control of every action."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "x", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
)


def protocol(reader: int = 1, writer: int = 2, **features: list[str]) -> dict[str, Any]:
    return {"protocol": {"minReaderVersion": reader, "minWriterVersion": writer, **features}}


def metadata(configuration: dict[str, str] | None = None, partition_columns=()) -> dict[str, Any]:
    return {
        "metaData": {
            "id": "test-table",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": SCHEMA,
            "partitionColumns": list(partition_columns),
            "configuration": configuration or {},
            "createdTime": 0,
        }
    }


def add(path: str, records: int = 1, **fields: Any) -> dict[str, Any]:
    return {
        "add": {
            "path": path,
            "partitionValues": {},
            "size": 10,
            "modificationTime": 0,
            "dataChange": True,
            "stats": json.dumps({"numRecords": records}),
            **fields,
        }
    }


def remove(path: str, deletion_timestamp: int = 0, **fields: Any) -> dict[str, Any]:
    return {
        "remove": {
            "path": path,
            "deletionTimestamp": deletion_timestamp,
            "dataChange": True,
            **fields,
        }
    }


def commit_info(operation: str = "WRITE") -> dict[str, Any]:
    return {"commitInfo": {"timestamp": 0, "operation": operation}}


def write_commit(table: Path, version: int, actions: list[dict[str, Any]]) -> Path:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    path = log / f"{version:020d}.json"
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return path


def make_table(table: Path, versions: int, configuration: dict[str, str] | None = None) -> Path:
    """Version 0 creates the table with file f0; each later version v appends file fv."""
    write_commit(table, 0, [commit_info("CREATE"), protocol(), metadata(configuration), add("f0")])
    for v in range(1, versions):
        write_commit(table, v, [commit_info(), add(f"f{v}")])
    return table
