"""The Delta transaction engine: log replay, checkpoints, optimistic transactions and commands.

Pure Python on pyarrow and fsspec; it never imports Spark or Airflow. The public names below
are imported on first use (PEP 562), so importing a light module such as
`airflow_delta.engine.errors` does not load pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_delta.engine.commands.change_data import read_changes
    from airflow_delta.engine.commands.dml import delete, update
    from airflow_delta.engine.commands.optimize import optimize
    from airflow_delta.engine.commands.restore import restore
    from airflow_delta.engine.commands.table_reader import (
        read_table,
        to_pandas,
        to_pyarrow_dataset,
    )
    from airflow_delta.engine.commands.write import write_table
    from airflow_delta.engine.delta_log import DeltaLog
    from airflow_delta.engine.log.checkpoints import CheckpointResult
    from airflow_delta.engine.log.log_segment import LogSegment
    from airflow_delta.engine.log.snapshot import Snapshot
    from airflow_delta.engine.log.table_location import TableLocation
    from airflow_delta.engine.protocol.actions import (
        AddCDCFile,
        AddFile,
        CommitInfo,
        DeletionVectorDescriptor,
        DomainMetadata,
        Metadata,
        Operation,
        Protocol,
        RemoveFile,
        SetTransaction,
    )
    from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
    from airflow_delta.engine.txn.conflicts import IsolationLevel
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

#: Where each public name lives, below `airflow_delta.engine`.
_HOMES = {
    "AddCDCFile": "protocol.actions",
    "AddFile": "protocol.actions",
    "CheckpointResult": "log.checkpoints",
    "CommitInfo": "protocol.actions",
    "CommitProperties": "txn.commit_types",
    "CommitResult": "txn.commit_types",
    "DeletionVectorDescriptor": "protocol.actions",
    "DeltaLog": "delta_log",
    "DomainMetadata": "protocol.actions",
    "IsolationLevel": "txn.conflicts",
    "LogSegment": "log.log_segment",
    "Metadata": "protocol.actions",
    "Operation": "protocol.actions",
    "OptimisticTransaction": "txn.transaction",
    "Protocol": "protocol.actions",
    "RemoveFile": "protocol.actions",
    "SetTransaction": "protocol.actions",
    "Snapshot": "log.snapshot",
    "TableLocation": "log.table_location",
    "delete": "commands.dml",
    "optimize": "commands.optimize",
    "read_changes": "commands.change_data",
    "read_table": "commands.table_reader",
    "restore": "commands.restore",
    "to_pandas": "commands.table_reader",
    "to_pyarrow_dataset": "commands.table_reader",
    "update": "commands.dml",
    "write_table": "commands.write",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "AddCDCFile",
    "AddFile",
    "CheckpointResult",
    "CommitInfo",
    "CommitProperties",
    "CommitResult",
    "DeletionVectorDescriptor",
    "DeltaLog",
    "DomainMetadata",
    "IsolationLevel",
    "LogSegment",
    "Metadata",
    "Operation",
    "OptimisticTransaction",
    "Protocol",
    "RemoveFile",
    "SetTransaction",
    "Snapshot",
    "TableLocation",
    "delete",
    "optimize",
    "read_changes",
    "read_table",
    "restore",
    "to_pandas",
    "to_pyarrow_dataset",
    "update",
    "write_table",
]
