"""A downstream report on the orders table written by `delta_orders_pipeline`, read in a plain
`@task` with the engine's Spark-free reader: no Spark session, no operator.

The DAG is scheduled on the table's asset: each commit of the pipeline (its outlet asset event
carries the committed version) starts a run, which reads exactly that version
(`read_table(..., version=...)`), so two runs never report on a table moving under them. Only
the columns the report needs are read, and the filter prunes files by partition (`order_date`)
and statistics before any row is read; deletion vectors and column mapping are honoured.

Configuration: `AIRFLOW_DELTA_DEMO_ROOT` and `AIRFLOW_DELTA_CONN_ID` as for
`delta_orders_pipeline`; the param `days` (default 7) is the report's window.

Run it once with `airflow dags test delta_orders_report` after the pipeline has written.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_delta.assets import delta_table_asset

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
ORDERS = f"{ROOT}/tables/orders"
DELTA_CONN_ID = os.environ.get("AIRFLOW_DELTA_CONN_ID") or None

with DAG(
    "delta_orders_report",
    description="Revenue per status of the last days of orders, read without Spark",
    schedule=[delta_table_asset(ORDERS)],
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    params={"days": Param(7, type="integer", minimum=1)},
    tags=["delta", "example"],
) as dag:

    @task
    def revenue_by_status(
        params: dict[str, Any] | None = None,
        ds: str | None = None,
        triggering_asset_events: Any = None,
    ) -> dict[str, Any]:
        """Orders and revenue per status over the last `days` days, at the version whose
        commit triggered the run (the latest when run by hand)."""
        # Imported here: parsing the DAG file loads neither the engine nor pyarrow.
        from airflow_delta.engine import read_table
        from airflow_delta.hooks.delta import DeltaHook

        events = (triggering_asset_events or {}).get(delta_table_asset(ORDERS)) or []
        version = events[-1].extra.get("version") if events else None
        today = dt.date.fromisoformat(ds) if ds else dt.datetime.now(dt.UTC).date()
        since = today - dt.timedelta(days=int((params or {}).get("days", 7)))
        orders = read_table(
            ORDERS,
            ["status", "amount"],
            f"order_date > DATE '{since.isoformat()}' AND amount IS NOT NULL",
            version=version,
            storage_options=DeltaHook(DELTA_CONN_ID).storage_options,
        )
        totals = orders.group_by("status").aggregate([("amount", "count"), ("amount", "sum")])
        report = {
            "version": version,
            "since": since.isoformat(),
            "statuses": {
                row["status"]: {"orders": row["amount_count"], "revenue": row["amount_sum"]}
                for row in totals.to_pylist()
            },
        }
        print(f"Orders of table {ORDERS} since {since} (version {version}): {report['statuses']}")
        return report

    revenue_by_status()
