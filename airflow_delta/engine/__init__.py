"""The Delta transaction engine: log replay, checkpoints, optimistic transactions and commands.

Pure Python on pyarrow and fsspec; it never imports Spark or Airflow.
"""

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
]
