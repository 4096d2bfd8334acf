"""A real Airflow on this machine: `airflow scheduler`, `dag-processor`, `triggerer` and
`api-server` as separate processes (SQLite and LocalExecutor, as `airflow standalone` runs
them; a temp AIRFLOW_HOME; free ports on 127.0.0.1). Through the REST API (/api/v2, a token
from the simple auth manager with `simple_auth_manager_all_admins`): the deferrable sensor DAG
is deferred, the example pipeline is triggered and succeeds, the triggerer resumes the sensor
when the commit lands, the scheduler runs the asset-scheduled DAG with the committed version,
and the task logs hold our commit lines. Every wait polls the API with a deadline; every
process is stopped by its process group in a finally."""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.airflow.real.harness import REPO, Api, airflow_env, free_port, running_airflow

pytestmark = [pytest.mark.real_airflow, pytest.mark.timeout(420)]

DEADLINE = 240  # seconds for the whole scenario once the servers are up


@pytest.fixture
def airflow_processes(tmp_path: Path) -> Iterator[dict[str, Any]]:
    home = tmp_path / "home"
    dags = tmp_path / "dags"
    home.mkdir()
    dags.mkdir()
    # The example pipeline, triggered through the API only (its @daily schedule off here).
    pipeline = (REPO / "dags_examples" / "delta_orders_pipeline.py").read_text()
    (dags / "delta_orders_pipeline.py").write_text(
        pipeline.replace('schedule="@daily"', "schedule=None")
    )
    shutil.copy(Path(__file__).with_name("rt_dags.py"), dags / "rt_dags.py")
    env = airflow_env(
        home,
        dags,
        free_port(),
        AIRFLOW_DELTA_DEMO_ROOT=str(tmp_path / "demo"),
        AIRFLOW_CONN_SPARK_LOCAL='{"conn_type": "spark", "host": "local[1]", "extra": '
        '{"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "512m"}}',
        AIRFLOW_DELTA_SPARK_CONN_ID="spark_local",
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    components = ("api-server", "scheduler", "dag-processor", "triggerer")
    with running_airflow(env, tmp_path, components) as running:
        yield running


def test_pipeline_sensor_and_asset_dag_under_a_running_airflow(
    airflow_processes: dict[str, Any],
) -> None:
    deadline = time.monotonic() + DEADLINE + 60  # + the servers' start
    api = Api(airflow_processes["port"], deadline, airflow_processes["logs"])
    api.wait_for_dags("delta_orders_pipeline", "rt_watch", "rt_consumer")
    trigger, task_state, run_state = api.trigger, api.task_state, api.run_state
    task_log, wait_for = api.task_log, api.wait_for

    # 1. The watch DAG's sensor defers (the table does not exist yet: it waits for version 0).
    watch_run = trigger("rt_watch")
    wait_for(
        "the sensor deferred",
        lambda: task_state("rt_watch", watch_run, "wait") == "deferred",
    )

    # 2. The example pipeline, triggered through the API, succeeds.
    pipeline_run = trigger("delta_orders_pipeline")
    wait_for(
        "the pipeline run's success",
        lambda: run_state("delta_orders_pipeline", pipeline_run),
    )
    write_log = task_log("delta_orders_pipeline", pipeline_run, "write_new_orders")
    assert re.search(r"Committed version 0 of table \S+/tables/orders \(operation WRITE", write_log)
    merge_log = task_log("delta_orders_pipeline", pipeline_run, "merge_status_updates")
    assert "of table" in merge_log and (
        "Committed version 1" in merge_log or "Skipped" in merge_log
    )

    # 3. The triggerer resumed the sensor when the commit landed.
    wait_for("the watch run's success", lambda: run_state("rt_watch", watch_run))
    wait_log = task_log("rt_watch", watch_run, "wait", 1)
    assert re.search(r"Observed new Delta version \d+", wait_log), wait_log[-3000:]
    seen = api(
        "GET", f"/dags/rt_watch/dagRuns/{watch_run}/taskInstances/seen/xcomEntries/return_value"
    )
    assert int(seen["value"]) >= 0

    # 4. The scheduler ran the asset-scheduled DAG on our asset event, with the version.
    def consumer_runs() -> list[dict[str, Any]]:
        runs = api("GET", "/dags/rt_consumer/dagRuns")["dag_runs"]
        return [r for r in runs if r["state"] == "success"]

    runs = wait_for("an asset-triggered rt_consumer run", consumer_runs)
    assert all(r["run_type"] == "asset_triggered" for r in runs)
    versions = set()
    for r in runs:
        log = task_log("rt_consumer", r["dag_run_id"], "report_version")
        versions |= {int(v) for v in re.findall(r"TRIGGERED BY DELTA VERSION (\d+)", log)}
    assert versions and versions <= {0, 1}, versions
