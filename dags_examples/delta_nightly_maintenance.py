"""Nightly maintenance of the orders table written by `delta_orders_pipeline`: OPTIMIZE the
recent partitions Z-ordered by customer, checkpoint the log, then VACUUM the files no retained
version needs any more.

Every step runs in the worker's process on the engine (pyarrow): no Spark is started.

- `optimize` compacts the small files each daily batch and MERGE leave, Z-ordered by
  `customer_id` so that reads filtering on a customer skip most files. Only the partitions of
  the last `lookback_days` days are rewritten: older ones were optimized on earlier nights. A
  compaction does not fail concurrent appends; if the pipeline's MERGE rewrites a file the
  compaction also rewrote, one of them fails with a conflict and the operator re-runs it.
  A retry of a run whose commit landed commits nothing (the task's exactly-once marker).
- `checkpoint` writes a checkpoint of the new version (readers then skip the JSON commits) and
  deletes expired log files.
- `vacuum` deletes the data files removed more than the retention ago (by default the table's
  `delta.deletedFileRetentionDuration`, 7 days): the files OPTIMIZE replaced, once no reader of
  a recent version can need them.

Configuration: `AIRFLOW_DELTA_DEMO_ROOT` and `AIRFLOW_DELTA_CONN_ID` as for
`delta_orders_pipeline`; the params `lookback_days` (default 7) and `vacuum_retention_hours`
(default: the table's) can be overridden in a run's conf.

Run it once with `airflow dags test delta_nightly_maintenance`.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_delta.operators.checkpoint import DeltaCheckpointOperator
from airflow_delta.operators.optimize import DeltaOptimizeOperator

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
ORDERS = f"{ROOT}/tables/orders"
DELTA_CONN_ID = os.environ.get("AIRFLOW_DELTA_CONN_ID") or None

with DAG(
    "delta_nightly_maintenance",
    description="OPTIMIZE (Z-order) the recent partitions of the orders table, checkpoint, VACUUM",
    schedule="0 3 * * *",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=5)},
    params={
        "lookback_days": Param(7, type="integer", minimum=0),
        "vacuum_retention_hours": Param(None, type=["null", "number"], minimum=0),
    },
    tags=["delta", "example", "maintenance"],
) as dag:
    optimize = DeltaOptimizeOperator(
        task_id="optimize",
        table_uri=ORDERS,
        partition_filter="order_date >= DATE '{{ macros.ds_add(ds, -params.lookback_days) }}'",
        zorder_by=["customer_id"],
        delta_conn_id=DELTA_CONN_ID,
        max_commit_attempts=3,
    )

    checkpoint = DeltaCheckpointOperator(
        task_id="checkpoint", table_uri=ORDERS, delta_conn_id=DELTA_CONN_ID
    )

    @task
    def vacuum(params: dict[str, Any] | None = None) -> dict[str, Any]:
        """VACUUM the table; a retention below the table's own fails the task (nothing is
        deleted) rather than break readers of recent versions."""
        from airflow_delta.hooks.delta import DeltaHook

        hours = (params or {}).get("vacuum_retention_hours")
        result = DeltaHook(DELTA_CONN_ID).get_delta_log(ORDERS).vacuum(retention_hours=hours)
        print(
            f"Vacuumed table {ORDERS}: {len(result.files_deleted)} file(s), "
            f"{result.bytes_deleted} bytes deleted (retention {result.retention_hours} hours)"
        )
        return {
            "files_deleted": len(result.files_deleted),
            "bytes_deleted": result.bytes_deleted,
            "retention_hours": result.retention_hours,
        }

    optimize >> checkpoint >> vacuum()
