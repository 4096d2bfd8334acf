"""Test DAGs of DELETE and UPDATE run on Spark (tests/airflow/operators/test_dml_spark.py): a
predicate or an assignment beyond the engine's evaluator (arithmetic, function calls) sends the
command to a local Spark session; one the engine evaluates stays in process. Tables under
$AIRFLOW_DELTA_TEST_ROOT, with the columns of tests/engine/commands/dml_tables.py (id, k, s, p;
partitioned by p = 'a' / 'b').
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaUpdateOperator

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def table(name: str) -> str:
    return str(ROOT / name)


with DAG(
    "t_dml_spark",
    schedule=None,
    start_date=START,
    catchup=False,
    params={"limit": 20, "part": "a"},
) as t_dml_spark:
    spark_delete = DeltaDeleteOperator(
        task_id="delete_on_spark",
        table_uri=table("dml_spark"),
        predicate="shiftleft(id, 1) > {{ params.limit }}",  # a Spark-only function: on Spark
        spark_conf={"spark.sql.shuffle.partitions": "4"},  # as the test session
    )
    spark_update = DeltaUpdateOperator(
        task_id="update_on_spark",
        table_uri=table("dml_spark"),
        set={"k": "k * 10", "s": "initcap(s)"},  # a function the engine lacks: on Spark
        predicate="p = '{{ params.part }}'",
    )
    local_delete = DeltaDeleteOperator(
        task_id="delete_in_process", table_uri=table("dml_spark"), predicate="id = 0"
    )
    spark_delete >> spark_update >> local_delete


def fail_after_commit(cls: type) -> type:
    """`cls` whose first try commits, then fails: what a worker lost after the commit looks
    like."""

    class FailAfterCommit(cls):  # type: ignore[valid-type, misc]
        def execute(self, context: Any) -> dict[str, Any]:
            result: dict[str, Any] = super().execute(context)
            if context["ti"].try_number == 1:
                raise RuntimeError(f"worker lost after committing version {result['version']}")
            return result

    FailAfterCommit.__name__ = f"FailAfterCommit{cls.__name__}"
    return FailAfterCommit


RETRY = {"retries": 1, "retry_delay": dt.timedelta(0)}

with DAG("t_dml_spark_retry", schedule=None, start_date=START, catchup=False) as t_retry:
    retried_delete = fail_after_commit(DeltaDeleteOperator)(
        task_id="delete", table_uri=table("retried_dml_spark"), predicate="id + 1 = 2", **RETRY
    )
    retried_update = fail_after_commit(DeltaUpdateOperator)(
        task_id="update",
        table_uri=table("retried_dml_spark"),
        set={"s": "concat(s, '!')"},
        predicate="id = 2",
        **RETRY,
    )
    retried_delete >> retried_update
