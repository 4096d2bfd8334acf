"""Small builders for transaction tests: tables, AddFiles, RemoveFiles."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pyarrow as pa

from airflow_delta.engine import AddFile, DeltaLog, Operation

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string()), ("part", pa.string())])
APPEND = Operation("WRITE", {"mode": "Append"})


def new_table(path: Path, partitioned: bool = True, **configuration: str) -> DeltaLog:
    return DeltaLog.create_table(
        str(path), SCHEMA, ["part"] if partitioned else [], configuration or None
    )


def add(part: str | None = "a", name: str | None = None, rows: int = 1) -> AddFile:
    name = name or f"part-{uuid.uuid4()}.parquet"
    prefix = f"part={part}/" if part is not None else ""
    return AddFile(
        path=prefix + name,
        partition_values={"part": part} if part is not None else {},
        size=100,
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=f'{{"numRecords":{rows}}}',
    )


def append(log: DeltaLog, part: str | None = "a", **kw) -> int:
    return log.start_transaction().commit([add(part, **kw)], APPEND)
