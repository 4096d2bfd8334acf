"""Test DAG of tests/airflow/operators/test_deltalake_tables.py: every operator, in turn, on a
deletion-vector table that deltalake created beforehand (deltalake 1.6 gives such a table the
`variantType` writer feature), with the columns of tests/engine/commands/dml_tables.py (id, k,
s, p; partitioned by p).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_delta.operators.checkpoint import DeltaCheckpointOperator
from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaUpdateOperator
from airflow_delta.operators.merge import DeltaMergeOperator
from airflow_delta.operators.optimize import DeltaOptimizeOperator
from airflow_delta.operators.restore import DeltaRestoreOperator
from airflow_delta.operators.write import DeltaWriteOperator

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TABLE = str(ROOT / "deltalake_dv")
#: Rows of the dml_tables schema as Spark SQL: k = id % 5, s = 's<id % 3>', p by parity.
ROWS_SQL = (
    "SELECT id, CAST(id % 5 AS INT) AS k, concat('s', CAST(id % 3 AS STRING)) AS s, "
    "IF(id % 2 = 1, 'a', 'b') AS p FROM range({low}, {high})"
)
UPSERT = [
    {"when": "matched", "then": "update", "set": {"s": "s.s"}},
    {"when": "not_matched", "then": "insert_all"},
]


def arrow_upserts(spark: Any, context: Any) -> Any:
    """Rows 4-5 and 200-201 with s = 'merged', as Arrow (the MERGE runs in process)."""
    import pyarrow as pa

    ids = [4, 5, 200, 201]
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([i % 5 for i in ids], pa.int32()),
            "s": ["merged"] * 4,
            "p": ["a" if i % 2 else "b" for i in ids],
        }
    )


with DAG("t_deltalake_dv_table", schedule=None, start_date=START, catchup=False) as t_dv_table:
    write = DeltaWriteOperator(
        task_id="write", table_uri=TABLE, source=ROWS_SQL.format(low=100, high=106)
    )
    merge_in_process = DeltaMergeOperator(
        task_id="merge_in_process",
        table_uri=TABLE,
        source=arrow_upserts,
        condition="t.id = s.id",
        clauses=UPSERT,
    )
    delete = DeltaDeleteOperator(task_id="delete", table_uri=TABLE, predicate="id < 3")
    update = DeltaUpdateOperator(
        task_id="update", table_uri=TABLE, set={"s": "'updated'"}, predicate="id = 7"
    )
    merge_into_dvs = DeltaMergeOperator(
        task_id="merge_into_dvs",
        table_uri=TABLE,
        source=arrow_upserts,
        condition="t.id = s.id",
        clauses=[{"when": "matched", "then": "delete"}],
    )
    merge_on_spark = DeltaMergeOperator(
        task_id="merge_on_spark",
        table_uri=TABLE,
        source="SELECT id, k, 'spark' AS s, p FROM (" + ROWS_SQL.format(low=8, high=12) + ")",
        condition="t.id = s.id",
        clauses=UPSERT,
    )
    optimize = DeltaOptimizeOperator(task_id="optimize", table_uri=TABLE)
    restore = DeltaRestoreOperator(task_id="restore", table_uri=TABLE, version=1)
    checkpoint = DeltaCheckpointOperator(
        task_id="checkpoint", table_uri=TABLE, vacuum_retention_hours=168
    )
    (
        write
        >> merge_in_process
        >> delete
        >> update
        >> merge_into_dvs
        >> merge_on_spark
        >> optimize
        >> restore
        >> checkpoint
    )
