"""Test DAGs of the sensor tests (tests/airflow/sensors/test_version.py), one per way of waiting.

The table, the baseline and the target come from the run's params (`dag.test(run_conf=...)`),
rendered as native objects, so each test points a DAG at its own table. Every sensor emits an
asset event of `SENSED` (`delta_table_asset` of a fixed path) carrying what it found.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_delta.assets import delta_table_asset
from airflow_delta.sensors.version import DeltaTableVersionSensor

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SENSED = delta_table_asset(str(ROOT / "sensed"))
#: Seconds a sensor waits for its version: generous, as the tests run on loaded machines (a
#: test whose writer commits as it should never waits for it); below pytest's 300 s per test.
SENSOR_TIMEOUT = 180


def sensor_dag(dag_id: str, **sensor_kwargs: Any) -> DAG:
    """A DAG whose one task `wait` is a DeltaTableVersionSensor on `params.table`."""
    with DAG(
        dag_id,
        schedule=None,
        start_date=START,
        catchup=False,
        params={"table": "", "baseline": None, "target": None},
        render_template_as_native_obj=True,
    ) as dag:
        DeltaTableVersionSensor(
            task_id="wait",
            table_uri="{{ params.table }}",
            baseline_version="{{ params.baseline }}",
            target_version="{{ params.target }}",
            timeout=SENSOR_TIMEOUT,
            retries=1,
            retry_delay=dt.timedelta(0),
            outlets=[SENSED],
            **sensor_kwargs,
        )
    return dag


s_poke = sensor_dag("s_poke", mode="poke", poke_interval=0.2, deferrable=False)
s_reschedule = sensor_dag("s_reschedule", mode="reschedule", poke_interval=0.2, deferrable=False)
s_deferrable = sensor_dag("s_deferrable", poke_interval=0.2, deferrable=True)
s_recreation = sensor_dag("s_recreation", poke_interval=0.2, allow_recreation=True)
s_soft_fail = sensor_dag("s_soft_fail", poke_interval=0.2, deferrable=True, soft_fail=True)
