"""The second example: wait, without holding a worker slot, for a new version of the orders
table written by `delta_orders_pipeline`, then report what changed.

The sensor is deferrable: the triggerer polls `_delta_log` from the last version this DAG saw,
so a poll costs the same on a table with 10 or 10,000 versions.
"""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG, task

from airflow_delta.sensors.version import DeltaTableVersionSensor

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
ORDERS = f"{ROOT}/tables/orders"
DELTA_CONN_ID = os.environ.get("AIRFLOW_DELTA_CONN_ID") or None

with DAG(
    "delta_orders_watch",
    description="Wait for a new version of the orders table, then report it",
    schedule="@hourly",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["delta", "example"],
) as dag:
    wait = DeltaTableVersionSensor(
        task_id="wait_for_new_version",
        table_uri=ORDERS,
        delta_conn_id=DELTA_CONN_ID,
        deferrable=True,
        poke_interval=30,
        timeout=6 * 3600,
    )

    @task
    def report(version: int) -> dict[str, object]:
        """The new version's commit: operation and metrics."""
        from airflow_delta.hooks.delta import DeltaHook

        info = DeltaHook(DELTA_CONN_ID).get_delta_log(ORDERS).commit_info(version)
        summary = {
            "version": version,
            "operation": info.info.get("operation") if info else None,
            "metrics": info.info.get("operationMetrics") if info else None,
        }
        print(f"Orders table at version {version}: {summary}")
        return summary

    report(wait.output)
