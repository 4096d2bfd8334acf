"""The main example pipeline: ingest a batch of orders, append the new ones to a Delta table,
MERGE the status updates into it, then checkpoint it with symlink manifests for Trino.

Configuration (environment variables, read when the DAG file is parsed):

- `AIRFLOW_DELTA_DEMO_ROOT`: where the landing files and the table live (a local path or an
  `s3://bucket/prefix` URI); default `/tmp/airflow-delta-demo`.
- `AIRFLOW_DELTA_CONN_ID`: a `delta` connection with storage options (S3 keys, endpoint);
  default none.
- `AIRFLOW_DELTA_SPARK_CONN_ID`: a `spark` (master URL) or `spark_connect` (`sc://`)
  connection; default none, which means local Spark (`local[*]`).

Run it once with `airflow dags test delta_orders_pipeline` (what `make demo` does).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random

from airflow.sdk import DAG, task

from airflow_delta.operators.checkpoint import DeltaCheckpointOperator
from airflow_delta.operators.merge import DeltaMergeOperator
from airflow_delta.operators.write import DeltaWriteOperator

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
ORDERS = f"{ROOT}/tables/orders"
LANDING = f"{ROOT}/landing"
CONNECTIONS = {
    "delta_conn_id": os.environ.get("AIRFLOW_DELTA_CONN_ID") or None,
    "spark_conn_id": os.environ.get("AIRFLOW_DELTA_SPARK_CONN_ID") or None,
}
BATCH = "{{ ti.xcom_pull(task_ids='ingest') }}"

with DAG(
    "delta_orders_pipeline",
    description="Ingest orders, append them to a Delta table, merge status updates, checkpoint",
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
    tags=["delta", "example"],
) as dag:

    @task
    def ingest(run_id: str | None = None, ds: str | None = None) -> str:
        """Land one batch of orders as JSON lines: 1,000 new orders of the day and status
        updates for 100 orders of the previous batches. Returns the batch file's URI."""
        import fsspec

        from airflow_delta.hooks.delta import DeltaHook

        rng = random.Random(run_id)
        day = dt.date.fromisoformat(ds or dt.date.today().isoformat())
        first_id = (day - dt.date(2026, 1, 1)).days * 1000
        rows = [
            {
                "order_id": first_id + i,
                "customer_id": rng.randrange(500),
                "amount": round(rng.uniform(5, 500), 2),
                "status": "new",
                "order_date": day.isoformat(),
            }
            for i in range(1000)
        ]
        for order_id in rng.sample(range(max(first_id, 1)), min(100, first_id)):
            rows.append(
                {
                    "order_id": order_id,
                    "customer_id": None,
                    "amount": None,
                    "status": rng.choice(["shipped", "cancelled"]),
                    "order_date": None,
                }
            )
        uri = f"{LANDING}/orders-{day.isoformat()}.json"
        options = DeltaHook(CONNECTIONS["delta_conn_id"]).storage_options
        with fsspec.open(uri, "w", auto_mkdir=True, **options) as f:
            f.write("\n".join(json.dumps(row) for row in rows) + "\n")
        return uri

    write_new_orders = DeltaWriteOperator(
        task_id="write_new_orders",
        table_uri=ORDERS,
        source=(
            "SELECT CAST(order_id AS BIGINT) AS order_id, CAST(customer_id AS INT) AS "
            "customer_id, CAST(amount AS DECIMAL(10, 2)) AS amount, status, "
            f"CAST(order_date AS DATE) AS order_date FROM json.`{BATCH}` WHERE status = 'new'"
        ),
        partition_by=["order_date"],
        table_properties={"delta.checkpointInterval": "10"},
        **CONNECTIONS,
    )

    merge_status_updates = DeltaMergeOperator(
        task_id="merge_status_updates",
        table_uri=ORDERS,
        source=(
            "SELECT CAST(order_id AS BIGINT) AS order_id, status "
            f"FROM json.`{BATCH}` WHERE status <> 'new'"
        ),
        condition="t.order_id = s.order_id",
        clauses=[
            {
                "when": "matched",
                "then": "update",
                "set": {"status": "s.status"},
                "condition": "t.status = 'new'",
            }
        ],
        **CONNECTIONS,
    )

    checkpoint = DeltaCheckpointOperator(
        task_id="checkpoint",
        table_uri=ORDERS,
        generate_symlink_manifest=True,
        delta_conn_id=CONNECTIONS["delta_conn_id"],
    )

    ingest() >> write_new_orders >> merge_status_updates >> checkpoint
