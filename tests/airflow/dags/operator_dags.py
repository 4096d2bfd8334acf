"""Test DAGs of the operator tests (tests/airflow/operators/).

Tables live under $AIRFLOW_DELTA_TEST_ROOT (a directory of the pytest worker); each DAG has
its own table, which the test deletes before running it.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, task

from airflow_delta.assets import delta_table_asset
from airflow_delta.operators.checkpoint import DeltaCheckpointOperator
from airflow_delta.operators.merge import DeltaMergeOperator
from airflow_delta.operators.write import DeltaWriteOperator

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ROWS = "SELECT id, CAST(id % 2 AS STRING) AS p, id * 10 AS v FROM range(10)"


def table(name: str) -> str:
    return str(ROOT / name)


# -- write + merge + checkpoint ------------------------------------------------------------------

with DAG("t_write_merge", schedule=None, start_date=START, catchup=False) as t_write_merge:
    write = DeltaWriteOperator(
        task_id="write",
        table_uri=table("events"),
        source=ROWS,
        partition_by=["p"],
        post_commit_hooks=["checkpoint", "symlink_manifest"],
    )
    merge = DeltaMergeOperator(
        task_id="merge",
        table_uri=table("events"),
        source="SELECT id, CAST(id % 2 AS STRING) AS p, id * 100 AS v FROM range(8, 12)",
        condition="t.id = s.id AND t.p = s.p",
        clauses=[
            {"when": "matched", "then": "update", "set": {"v": "s.v"}},
            {"when": "not_matched", "then": "insert_all"},
        ],
    )
    checkpoint = DeltaCheckpointOperator(
        task_id="checkpoint", table_uri=table("events"), generate_symlink_manifest=True
    )
    write >> merge >> checkpoint


# -- sources returning Arrow data --------------------------------------------------------------


def _arrow_orders(ids: range, factor: int) -> Any:
    import pyarrow as pa

    return pa.table({"id": ids, "p": [str(i % 2) for i in ids], "v": [i * factor for i in ids]})


def arrow_rows(spark: Any, context: Any) -> Any:
    """Ten rows as a pyarrow Table (written in process by the engine: no JVM for the write)."""
    return _arrow_orders(range(10), 10)


def arrow_updates(spark: Any, context: Any) -> Any:
    """Updates for ids 8-11 as a pyarrow Table; `spark` is never used (no JVM for the merge)."""
    return _arrow_orders(range(8, 12), 100)


with DAG("t_arrow_merge", schedule=None, start_date=START, catchup=False) as t_arrow_merge:
    arrow_write = DeltaWriteOperator(
        task_id="write", table_uri=table("arrow_events"), source=arrow_rows, partition_by=["p"]
    )
    arrow_merge = DeltaMergeOperator(
        task_id="merge",
        table_uri=table("arrow_events"),
        source=arrow_updates,
        condition="t.id = s.id AND t.p = s.p",
        clauses=[
            {"when": "matched", "then": "update", "set": {"v": "s.v"}},
            {"when": "not_matched", "then": "insert_all"},
        ],
    )
    arrow_write >> arrow_merge


# -- a write whose task fails after its commit landed, then retries ---------------------------


class FailAfterCommitOperator(DeltaWriteOperator):
    """Commits, then fails on the first try: what a worker lost after the commit looks like."""

    def execute(self, context: Any) -> dict[str, Any]:
        result = super().execute(context)
        if context["ti"].try_number == 1:
            raise RuntimeError(f"worker lost after committing version {result['version']}")
        return result


def counted_rows(spark: Any, context: Any) -> Any:
    """The rows of ROWS; each call leaves a line in `calls.log` next to the table."""
    with open(ROOT / "retried.calls.log", "a") as calls:
        calls.write(f"try {context['ti'].try_number}\n")
    return spark.sql(ROWS)


with DAG("t_retry", schedule=None, start_date=START, catchup=False) as t_retry:
    FailAfterCommitOperator(
        task_id="write",
        table_uri=table("retried"),
        source=counted_rows,
        retries=2,
        retry_delay=dt.timedelta(0),
    )


# -- concurrent DAG runs (run in two processes at once by the test) ----------------------------


def _wait_for_all(sync: Path, name: str, me: str, parties: int = 2) -> None:
    """Leave a marker `name.me` and wait until every party left one (only the first time)."""
    marker = sync / f"{name}.{me}"
    if marker.exists():
        return
    marker.touch()
    # Generous: the other process may still be starting its Spark on a loaded machine. A
    # party that gave up would run alone and the test would fail on what it checks.
    deadline = time.monotonic() + 600
    while len(list(sync.glob(f"{name}.*"))) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name!r}: the other party never came (600 s)")
        time.sleep(0.02)


def barrier(name: str) -> Any:
    """A source whose processes meet twice: before the task reads the table (so both start
    together), and while Spark computes the rows, when both transactions have read their
    snapshot (so neither can commit before the other read the table). Re-runs do not wait."""

    def source(spark: Any, context: Any) -> Any:
        sync = Path(os.environ["AIRFLOW_DELTA_TEST_BARRIER"])
        me = os.environ["AIRFLOW_DELTA_TEST_PARTY"]
        _wait_for_all(sync, name, me)

        def rows_after_meeting(batches: Any) -> Any:
            _wait_for_all(sync, f"{name}-rows", me)
            yield from batches

        rows = spark.sql(f"SELECT id, '0' AS p, {me} AS v FROM range(5)").coalesce(1)
        return rows.mapInArrow(rows_after_meeting, rows.schema)

    return source


with DAG("t_concurrent", schedule=None, start_date=START, catchup=False) as t_concurrent:
    append = DeltaWriteOperator(
        task_id="append", table_uri=table("shared"), source=barrier("append"), partition_by=["p"]
    )
    overwrite_once = DeltaWriteOperator(
        task_id="overwrite_once",
        table_uri=table("shared"),
        source=barrier("overwrite_once"),
        mode="overwrite",
        replace_where="p = '0'",
        max_commit_attempts=1,
    )
    overwrite_retried = DeltaWriteOperator(
        task_id="overwrite_retried",
        table_uri=table("shared"),
        source=barrier("overwrite_retried"),
        mode="overwrite",
        replace_where="p = '0'",
        max_commit_attempts=3,
        trigger_rule="all_done",
    )
    append >> overwrite_once >> overwrite_retried


# -- mapped tasks writing disjoint partitions --------------------------------------------------

with DAG("t_mapped", schedule=None, start_date=START, catchup=False) as t_mapped:
    DeltaWriteOperator.partial(
        task_id="write_partition", table_uri=table("mapped"), partition_by=["p"]
    ).expand(
        source=[f"SELECT id, '{p}' AS p FROM range({p * 10}, {p * 10 + 10})" for p in range(3)]
    )


# -- a DAG scheduled on the table's asset ------------------------------------------------------

with DAG(
    "t_asset_consumer",
    schedule=[delta_table_asset(table("events"))],
    start_date=START,
    catchup=False,
) as t_asset_consumer:

    @task
    def report_version(triggering_asset_events: Any = None) -> int:
        """The version carried by the asset event that triggered this run."""
        events = triggering_asset_events[delta_table_asset(table("events"))]
        version = events[-1].extra["version"]
        print(f"TRIGGERED BY DELTA VERSION {version}")
        return version

    report_version()


# -- a write to S3 (moto) through a `delta` connection ------------------------------------------

with DAG("t_s3_write", schedule=None, start_date=START, catchup=False) as t_s3_write:
    DeltaWriteOperator(
        task_id="write",
        table_uri=f"s3://{os.environ.get('AIRFLOW_DELTA_TEST_BUCKET', 'unset')}/events",
        source="SELECT id, CAST(id % 3 AS STRING) AS p FROM range(30)",
        partition_by=["p"],
        delta_conn_id="delta_moto",
        post_commit_hooks=["checkpoint"],
    )
