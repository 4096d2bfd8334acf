"""Test DAGs of rendered template fields (tests/airflow/operators/test_rendering.py): the SQL
arguments whose None means the whole table (a DELETE / UPDATE predicate, a write's
replace_where, an OPTIMIZE partition filter, a MERGE clause condition) templated from a value
that is missing, rendered natively (`render_template_as_native_obj=True`: None) and as text
("None", blank); and text arguments rendered natively to other objects (user_metadata from an
int param). The table `rendered` (tests/engine/commands/dml_tables.py's columns) is written by
the test beforehand.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaUpdateOperator
from airflow_delta.operators.merge import DeltaMergeOperator
from airflow_delta.operators.optimize import DeltaOptimizeOperator
from airflow_delta.operators.write import DeltaWriteOperator

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
TABLE = str(ROOT / "rendered")


def one_row(spark: Any, context: Any) -> Any:
    """One row of the table's schema, as a pyarrow Table (written in process)."""
    import pyarrow as pa

    schema = pa.schema(
        [("id", pa.int64()), ("k", pa.int32()), ("s", pa.string()), ("p", pa.string())]
    )
    return pa.table({"id": [100], "k": [1], "s": ["new"], "p": ["a"]}, schema)


def whole_table_tasks(missing: str) -> None:
    """One task per SQL argument whose None means the whole table, each templated `missing`."""
    DeltaDeleteOperator(task_id="delete", table_uri=TABLE, predicate=missing)
    DeltaUpdateOperator(task_id="update", table_uri=TABLE, set={"s": "'x'"}, predicate=missing)
    DeltaWriteOperator(
        task_id="overwrite",
        table_uri=TABLE,
        source=one_row,
        mode="overwrite",
        replace_where=missing,
    )
    DeltaOptimizeOperator(task_id="optimize", table_uri=TABLE, partition_filter=missing)
    DeltaWriteOperator(  # an exactly-once marker under an app id that other tasks share
        task_id="marker", table_uri=TABLE, source=one_row, txn_app_id=missing, txn_version="1"
    )
    DeltaMergeOperator(  # the delete clause without its condition: every unmatched row
        task_id="merge",
        table_uri=TABLE,
        source=one_row,
        condition="t.id = s.id",
        clauses=[
            {"when": "matched", "then": "update_all"},
            {"when": "not_matched_by_source", "then": "delete", "condition": missing},
        ],
    )


for dag_id, native, missing in [
    ("t_rendered_none_native", True, "{{ params.missing }}"),
    ("t_rendered_none_text", False, "{{ params.missing }}"),
    ("t_rendered_blank_text", False, "{{ params.missing or '' }}"),
]:
    with DAG(
        dag_id,
        schedule=None,
        start_date=START,
        catchup=False,
        render_template_as_native_obj=native,
        params={"missing": None},
    ):
        whole_table_tasks(missing)


with DAG(
    "t_rendered_native_text",
    schedule=None,
    start_date=START,
    catchup=False,
    render_template_as_native_obj=True,
    params={"note": 123, "app": 42, "where": "p = 'a'"},
):
    DeltaWriteOperator(
        task_id="write",
        table_uri=TABLE,
        source=one_row,
        mode="overwrite",
        replace_where="{{ params.where }}",
        user_metadata="{{ params.note }}",
        txn_app_id="{{ params.app }}",
        txn_version="{{ 7 }}",
    )
