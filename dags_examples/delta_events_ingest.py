"""A daily ingest with no Spark: a Python callable pulls one day of events (here generated, as
an API or a database would return them) as a pyarrow Table, and `DeltaWriteOperator` writes it
in the worker's process with the engine's writer (`engine.write_table`).

The write replaces exactly the run's partition (`replace_where="event_date = DATE '{{ ds }}'"`,
mode "overwrite"): re-running a day, or backfilling it after a fix upstream, leaves that day's
rows once, and never touches the other days. The first run creates the table, partitioned by
`event_date`. Rows outside the run's day fail the task before anything is committed (the
replaceWhere check), and a retry of a run whose commit landed commits nothing (the task's
exactly-once marker). Downstream DAGs scheduled on the table's asset run after each commit.

Configuration: `AIRFLOW_DELTA_DEMO_ROOT` (default /tmp/airflow-delta-demo) for the table's
location, `AIRFLOW_DELTA_CONN_ID` for storage credentials (S3, GCS, Azure).

Run it with `airflow dags test delta_events_ingest 2026-01-05`.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG

from airflow_delta.operators.write import DeltaWriteOperator

ROOT = os.environ.get("AIRFLOW_DELTA_DEMO_ROOT", "/tmp/airflow-delta-demo").rstrip("/")
EVENTS = f"{ROOT}/tables/events"
DELTA_CONN_ID = os.environ.get("AIRFLOW_DELTA_CONN_ID") or None
EVENTS_PER_DAY = 500


def events_of_the_day(spark: Any, context: Any) -> Any:
    """The run's day of events as a pyarrow Table (`spark` is never touched: no JVM starts).
    Deterministic per day, as a paged API or an incremental query would be."""
    import pyarrow as pa  # imported in the task: parsing the DAG file stays light

    day = dt.date.fromisoformat(context["ds"])
    first = (day - dt.date(2026, 1, 1)).days * EVENTS_PER_DAY
    ids = range(first, first + EVENTS_PER_DAY)
    return pa.table(
        {
            "event_id": pa.array(ids, pa.int64()),
            "user_id": pa.array([(i * 7919) % 1000 for i in ids], pa.int32()),
            "kind": pa.array([("view", "click", "buy")[i % 3] for i in ids]),
            "value": pa.array([round((i % 97) * 1.5, 2) for i in ids], pa.float64()),
            "event_date": pa.array([day] * EVENTS_PER_DAY, pa.date32()),
        }
    )


with DAG(
    "delta_events_ingest",
    description="One day of events written in process (no Spark), the run's partition replaced",
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    tags=["delta", "example"],
) as dag:
    DeltaWriteOperator(
        task_id="ingest",
        table_uri=EVENTS,
        delta_conn_id=DELTA_CONN_ID,
        source=events_of_the_day,
        mode="overwrite",
        replace_where="event_date = DATE '{{ ds }}'",
        partition_by=["event_date"],
        post_commit_hooks=["checkpoint"],
    )
