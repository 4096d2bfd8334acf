"""Test DAGs of the in-process table commands (tests/airflow/operators/test_dml.py,
test_optimize.py, test_restore.py): DELETE, UPDATE, OPTIMIZE and RESTORE on tables the tests
write beforehand under $AIRFLOW_DELTA_TEST_ROOT (see operator_dags.py), with the columns of
tests/engine/commands/dml_tables.py (id, k, s, p; partitioned by p = 'a' / 'b').
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaUpdateOperator
from airflow_delta.operators.optimize import DeltaOptimizeOperator
from airflow_delta.operators.restore import DeltaRestoreOperator

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def table(name: str) -> str:
    return str(ROOT / name)


# -- DELETE then UPDATE, with templated predicates and assignments --------------------------------

with DAG(
    "t_delete_update",
    schedule=None,
    start_date=START,
    catchup=False,
    params={"below": 3, "label": "late", "part": "a"},
) as t_delete_update:
    delete = DeltaDeleteOperator(
        task_id="delete",
        table_uri=table("dml"),
        predicate="id < {{ params.below }}",
    )
    update = DeltaUpdateOperator(
        task_id="update",
        table_uri=table("dml"),
        set={"s": "'{{ params.label }}'"},
        predicate="p = '{{ params.part }}' AND id >= 5",
        post_commit_hooks=["checkpoint"],
    )
    nothing = DeltaDeleteOperator(
        task_id="delete_nothing",
        table_uri=table("dml"),
        predicate="id > 1000",
        exactly_once=False,
    )
    delete >> update >> nothing


# -- tasks that fail after their commit landed, then retry -------------------------------------


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

with DAG("t_command_retry", schedule=None, start_date=START, catchup=False) as t_command_retry:
    retried_delete = fail_after_commit(DeltaDeleteOperator)(
        task_id="delete", table_uri=table("retried_dml"), predicate="id = 1", **RETRY
    )
    retried_update = fail_after_commit(DeltaUpdateOperator)(
        task_id="update",
        table_uri=table("retried_dml"),
        set={"s": "'again'"},
        predicate="id = 2",
        **RETRY,
    )
    retried_delete >> retried_update


# -- OPTIMIZE and RESTORE ------------------------------------------------------------------------

with DAG(
    "t_optimize", schedule=None, start_date=START, catchup=False, params={"part": "a"}
) as t_optimize:
    compact = DeltaOptimizeOperator(
        task_id="compact",
        table_uri=table("small_files"),
        partition_filter="p = '{{ params.part }}'",
    )
    zorder = fail_after_commit(DeltaOptimizeOperator)(
        task_id="zorder", table_uri=table("small_files"), zorder_by="id, k", **RETRY
    )
    compact >> zorder

with DAG(
    "t_restore",
    schedule=None,
    start_date=START,
    catchup=False,
    params={"version": 1, "timestamp": ""},
) as t_restore:
    restore = fail_after_commit(DeltaRestoreOperator)(
        task_id="restore",
        table_uri=table("restored"),
        version="{{ params.version }}",
        **RETRY,
    )
    restore_by_time = DeltaRestoreOperator(
        task_id="restore_by_time",
        table_uri=table("restored"),
        timestamp="{{ params.timestamp }}",
    )
    restore >> restore_by_time


# -- a DELETE whose first run meets a concurrent append in the partition it read ------------------


class DeleteMeetingAnAppend(DeltaDeleteOperator):
    """On its first run, another writer appends a row to partition p = 'a' after the DELETE's
    transaction read the table and before it commits: under Serializable the DELETE conflicts
    (ConcurrentAppendException) and the operator runs it again on the new snapshot."""

    appended = False

    def run_command(self, txn: Any, context: Any) -> Any:
        if not self.appended:
            import pyarrow as pa

            from airflow_delta.engine import DeltaLog, Operation
            from airflow_delta.engine.commands.data_files import write_tasks

            type(self).appended = True
            row = pa.table(
                {"id": [100], "k": [0], "s": ["s1"], "p": ["a"]},
                pa.schema(
                    [("id", pa.int64()), ("k", pa.int32()), ("s", pa.string()), ("p", pa.string())]
                ),
            )
            other = DeltaLog.for_table(self.table_uri).start_transaction()
            adds = write_tasks(other, [lambda: row], [], "WRITE")
            other.commit(adds, Operation("WRITE", {"mode": "Append"}))
        return super().run_command(txn, context)


with DAG("t_command_conflict", schedule=None, start_date=START, catchup=False) as t_conflict:
    DeleteMeetingAnAppend(
        task_id="delete",
        table_uri=table("contended"),
        predicate="p = 'a' AND k = 0",
        isolation_level="Serializable",
    )
