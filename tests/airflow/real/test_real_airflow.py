"""A real Airflow on this machine: `airflow scheduler`, `dag-processor`, `triggerer` and
`api-server` as separate processes (SQLite and LocalExecutor, as `airflow standalone` runs
them; a temp AIRFLOW_HOME; free ports on 127.0.0.1). Through the REST API (/api/v2, a token
from the simple auth manager with `simple_auth_manager_all_admins`): the deferrable sensor DAG
is deferred, the example pipeline is triggered and succeeds, the triggerer resumes the sensor
when the commit lands, the scheduler runs the asset-scheduled DAG with the committed version,
and the task logs hold our commit lines. Every wait polls the API with a deadline; every
process is stopped by its process group in a finally."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.real_airflow, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
DEADLINE = 240  # seconds for the whole scenario once the servers are up


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], deadline: float, logs: Path) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` at the deadline."""
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # the server not up yet, a transient SQLite lock, ...
            last = exc
        else:
            if last:
                return last
        time.sleep(0.5)
    tails = "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logs.glob("*.log"))
    )
    pytest.fail(f"timed out waiting for {what}; last: {last!r}\n{tails}")


@pytest.fixture
def airflow_env(tmp_path: Path) -> Iterator[tuple[dict[str, str], Path]]:
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
    port = free_port()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        "AIRFLOW_DELTA_DEMO_ROOT": str(tmp_path / "demo"),
        "AIRFLOW_CONN_SPARK_LOCAL": '{"conn_type": "spark", "host": "local[1]", "extra": '
        '{"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "512m"}}',
        "AIRFLOW_DELTA_SPARK_CONN_ID": "spark_local",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO),
    }
    yield env, tmp_path


@pytest.fixture
def airflow_processes(airflow_env: tuple[dict[str, str], Path]) -> Iterator[dict[str, Any]]:
    env, tmp_path = airflow_env
    logs = tmp_path / "logs"
    logs.mkdir()
    airflow = str(BIN / "airflow")
    migrated = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for component in ("api-server", "scheduler", "dag-processor", "triggerer"):
            out = open(logs / f"{component}.log", "wb")  # noqa: SIM115  (closed with the process)
            procs.append(
                subprocess.Popen(
                    [airflow, component],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped whole below
                    cwd=tmp_path,
                )
            )
        yield {"env": env, "logs": logs, "port": env["AIRFLOW__API__PORT"], "procs": procs}
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        stop_by = time.monotonic() + 30
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, stop_by - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def test_pipeline_sensor_and_asset_dag_under_a_running_airflow(
    airflow_processes: dict[str, Any],
) -> None:
    import httpx

    logs: Path = airflow_processes["logs"]
    base = f"http://127.0.0.1:{airflow_processes['port']}"
    deadline = time.monotonic() + DEADLINE + 60  # + the servers' start
    client = httpx.Client(base_url=base, timeout=30)

    def token() -> str | None:
        response = client.get("/auth/token")
        return response.json()["access_token"] if response.status_code in (200, 201) else None

    access = wait_for("the api-server's /auth/token", token, deadline, logs)
    client.headers["Authorization"] = f"Bearer {access}"

    def api(method: str, path: str, **kwargs: Any) -> Any:
        response = client.request(method, f"/api/v2{path}", **kwargs)
        response.raise_for_status()
        return response.json()

    for dag_id in ("delta_orders_pipeline", "rt_watch", "rt_consumer"):
        wait_for(f"DAG {dag_id} parsed", lambda d=dag_id: api("GET", f"/dags/{d}"), deadline, logs)

    def trigger(dag_id: str) -> str:
        return api("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None})["dag_run_id"]

    def task_state(dag_id: str, run_id: str, task_id: str) -> str | None:
        return api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")["state"]

    def run_state(dag_id: str, run_id: str) -> str | None:
        state = api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
        if state == "failed":
            pytest.fail(f"{dag_id} run {run_id} failed: {task_logs(dag_id, run_id)}")
        return state if state == "success" else None

    def task_log(dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        response = api(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            headers={"Accept": "application/json"},
        )
        content = response["content"]
        if isinstance(content, list):
            return "\n".join(
                str(c.get("event", c)) if isinstance(c, dict) else str(c) for c in content
            )
        return str(content)

    def task_logs(dag_id: str, run_id: str) -> str:
        tis = api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        out = []
        for ti in tis:
            try:
                log = task_log(dag_id, run_id, ti["task_id"], max(ti["try_number"], 1))
            except Exception as exc:
                log = repr(exc)
            out.append(f"--- {ti['task_id']} {ti['state']}\n{log[-3000:]}")
        return "\n".join(out)

    # 1. The watch DAG's sensor defers (the table does not exist yet: it waits for version 0).
    watch_run = trigger("rt_watch")
    wait_for(
        "the sensor deferred",
        lambda: task_state("rt_watch", watch_run, "wait") == "deferred",
        deadline,
        logs,
    )

    # 2. The example pipeline, triggered through the API, succeeds.
    pipeline_run = trigger("delta_orders_pipeline")
    wait_for(
        "the pipeline run's success",
        lambda: run_state("delta_orders_pipeline", pipeline_run),
        deadline,
        logs,
    )
    write_log = task_log("delta_orders_pipeline", pipeline_run, "write_new_orders")
    assert re.search(r"Committed version 0 of table \S+/tables/orders \(operation WRITE", write_log)
    merge_log = task_log("delta_orders_pipeline", pipeline_run, "merge_status_updates")
    assert "of table" in merge_log and (
        "Committed version 1" in merge_log or "Skipped" in merge_log
    )

    # 3. The triggerer resumed the sensor when the commit landed.
    wait_for("the watch run's success", lambda: run_state("rt_watch", watch_run), deadline, logs)
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

    runs = wait_for("an asset-triggered rt_consumer run", consumer_runs, deadline, logs)
    assert all(r["run_type"] == "asset_triggered" for r in runs)
    versions = set()
    for r in runs:
        log = task_log("rt_consumer", r["dag_run_id"], "report_version")
        versions |= {int(v) for v in re.findall(r"TRIGGERED BY DELTA VERSION (\d+)", log)}
    assert versions and versions <= {0, 1}, versions
