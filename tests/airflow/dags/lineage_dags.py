"""Test DAG of the operators' OpenLineage facets (tests/airflow/operators/test_lineage.py): a
nested, partitioned table written in process, a retry of that write that finds its commit
already landed (it commits nothing), a DELETE of no row (it commits its exactly-once
marker), and a sensor that sees version 1 over its baseline 0 (the table as its input). The table
goes under $AIRFLOW_DELTA_TEST_ROOT.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_delta.operators.dml import DeltaDeleteOperator
from airflow_delta.operators.write import DeltaWriteOperator
from airflow_delta.sensors.version import DeltaTableVersionSensor

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TABLE = str(ROOT / "lineage")


def nested_rows(spark: Any, context: Any) -> Any:
    """Rows with a struct, a list and a map column, as a pyarrow Table (written in process)."""
    import pyarrow as pa

    return pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "p": ["a", "b"],
            "s": pa.array([{"x": 1, "y": "u"}, {"x": 2, "y": "v"}]),
            "tags": pa.array([["t"], []], pa.list_(pa.string())),
            "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int32())),
        }
    )


with DAG("t_lineage", schedule=None, start_date=START, catchup=False):
    once = {"txn_app_id": "lineage-test", "txn_version": "1"}  # the second write finds the first
    write = DeltaWriteOperator(
        task_id="write", table_uri=TABLE, source=nested_rows, partition_by=["p"], **once
    )
    again = DeltaWriteOperator(task_id="again", table_uri=TABLE, source=nested_rows, **once)
    nothing = DeltaDeleteOperator(task_id="delete_nothing", table_uri=TABLE, predicate="id > 99")
    watch = DeltaTableVersionSensor(
        task_id="watch", table_uri=TABLE, baseline_version=0, poke_interval=0.2, timeout=60
    )
    write >> again >> nothing >> watch
