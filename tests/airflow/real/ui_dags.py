"""The DAG of the browser test (tests/airflow/real/test_browser_ui.py), copied into its DAGs
folder: a plain task creates a Delta table, then DeltaMergeOperator merges an Arrow source into
it in process, so the run commits (and logs "Committed version 1 ...") without starting Spark."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, task

from airflow_delta.operators.merge import DeltaMergeOperator

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
CUSTOMERS = f"{ROOT}/tables/customers"
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def new_customers(spark: Any, context: Any) -> Any:
    import pyarrow as pa

    return pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["Ada", "Grace", "Edsger"]})


with DAG("ui_customers", schedule=None, start_date=START, catchup=False) as ui_customers:

    @task
    def create_table() -> int:
        import pyarrow as pa

        from airflow_delta.engine import DeltaLog

        schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
        return DeltaLog.create_table(CUSTOMERS, schema).update().version

    merge = DeltaMergeOperator(
        task_id="merge_customers",
        table_uri=CUSTOMERS,
        source=new_customers,
        condition="t.id = s.id",
        clauses=[
            {"when": "matched", "then": "update_all"},
            {"when": "not_matched", "then": "insert_all"},
        ],
    )
    create_table() >> merge
