"""DAGs of the real-Airflow test (tests/airflow/real/test_real_airflow.py), copied into its DAGs
folder beside the example pipeline: a deferrable sensor on the orders table, and a DAG
scheduled on the table's asset."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, task

from airflow_delta.assets import delta_table_asset
from airflow_delta.sensors.version import DeltaTableVersionSensor

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
ORDERS = f"{ROOT}/tables/orders"
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

with DAG("rt_watch", schedule=None, start_date=START, catchup=False) as rt_watch:
    wait = DeltaTableVersionSensor(
        task_id="wait", table_uri=ORDERS, deferrable=True, poke_interval=1, timeout=600
    )

    @task
    def seen(version: int) -> int:
        print(f"WATCH SAW DELTA VERSION {version}")
        return version

    seen(wait.output)

with DAG(
    "rt_consumer", schedule=[delta_table_asset(ORDERS)], start_date=START, catchup=False
) as rt_consumer:

    @task
    def report_version(triggering_asset_events: Any = None) -> int:
        events = triggering_asset_events[delta_table_asset(ORDERS)]
        version = events[-1].extra["version"]
        print(f"TRIGGERED BY DELTA VERSION {version}")
        return version

    report_version()
