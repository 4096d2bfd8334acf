"""The Spark data plane: writes data files and collects their AddFiles, reads snapshots, MERGE,
DELETE and UPDATE.

It calls the engine (`airflow_delta.engine`) for every commit; the engine never imports Spark.
"""

from airflow_delta.spark.changes import read_changes
from airflow_delta.spark.dml import delete, update
from airflow_delta.spark.merge import DeltaMergeBuilder, merge_delta
from airflow_delta.spark.read import read_delta, scan_files
from airflow_delta.spark.session import get_spark
from airflow_delta.spark.write import write_delta, write_files

__all__ = [
    "DeltaMergeBuilder",
    "delete",
    "get_spark",
    "merge_delta",
    "read_changes",
    "read_delta",
    "scan_files",
    "update",
    "write_delta",
    "write_files",
]
