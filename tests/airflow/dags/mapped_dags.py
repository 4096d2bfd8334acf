"""Test DAGs of mapped committing tasks (tests/airflow/operators/test_mapped_outlets.py): each
mapped instance emits one asset event of its table, whether `table_uri` is given to `partial`
(the table's asset is the outlet) or mapped by `expand` (an AssetAlias resolved at run time).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from airflow.sdk import DAG

from airflow_delta.operators.dml import DeltaDeleteOperator
from airflow_delta.operators.write import DeltaWriteOperator

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

with DAG("t_mapped_outlets", schedule=None, start_date=START, catchup=False) as t_mapped_outlets:
    DeltaWriteOperator.partial(
        task_id="write", table_uri=str(ROOT / "mapped_outlets"), partition_by=["p"]
    ).expand(
        source=[f"SELECT id, '{p}' AS p FROM range({p * 10}, {p * 10 + 10})" for p in range(3)]
    )

with DAG("t_mapped_tables", schedule=None, start_date=START, catchup=False) as t_mapped_tables:
    DeltaDeleteOperator.partial(task_id="delete", predicate="id = 0").expand(
        table_uri=[str(ROOT / f"mapped_table_{n}") for n in range(3)]
    )
