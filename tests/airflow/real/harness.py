"""What the real-Airflow tests share: an Airflow home on a free port of 127.0.0.1 (SQLite,
LocalExecutor, the simple auth manager with every user an admin), its components started as
processes (each in its own process group, stopped whole in a finally), polling with deadlines,
and a small client of the REST API (/api/v2) with a token from /auth/token."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tails(logs: Path) -> str:
    """The end of every component's log, for a failure message."""
    return "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(logs.glob("*.log"))
    )


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
    pytest.fail(f"timed out waiting for {what}; last: {last!r}\n{log_tails(logs)}")


def airflow_env(home: Path, dags: Path, port: int, **extra: str) -> dict[str, str]:
    """The environment of every component: `home` and `dags` folders, the api-server on
    `port`, plus `extra` variables."""
    return {
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
        "PYTHONPATH": str(REPO),
        **extra,
    }


@contextmanager
def running_airflow(
    env: dict[str, str], workdir: Path, components: Sequence[str]
) -> Iterator[dict[str, Any]]:
    """Migrate the database, start each of `components` (`api-server`, `scheduler`, ...) as a
    process in its own process group with its output in `workdir/logs/<component>.log`, and stop
    every group (SIGTERM, then SIGKILL after 30 s) on the way out, whatever happened."""
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    airflow = str(BIN / "airflow")
    migrated = subprocess.run(
        [airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for component in components:
            with open(logs / f"{component}.log", "wb") as out:  # the child keeps its own copy
                procs.append(
                    subprocess.Popen(
                        [airflow, component],
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # its own process group: stopped whole below
                        cwd=workdir,
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


class Api:
    """The api-server's REST API with a bearer token, failing a test with the components' logs
    when a wait passes `deadline` or a DAG run fails."""

    def __init__(self, port: int | str, deadline: float, logs: Path) -> None:
        import httpx

        self.base = f"http://127.0.0.1:{port}"
        self.deadline = deadline
        self.logs = logs
        self.client = httpx.Client(base_url=self.base, timeout=30)
        access = self.wait_for("the api-server's /auth/token", self._token)
        self.client.headers["Authorization"] = f"Bearer {access}"

    def _token(self) -> str | None:
        response = self.client.get("/auth/token")
        return response.json()["access_token"] if response.status_code in (200, 201) else None

    def wait_for(self, what: str, check: Callable[[], Any]) -> Any:
        return wait_for(what, check, self.deadline, self.logs)

    def __call__(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.client.request(method, f"/api/v2{path}", **kwargs)
        response.raise_for_status()
        return response.json()

    def wait_for_dags(self, *dag_ids: str) -> None:
        for dag_id in dag_ids:

            def parsed(dag_id: str = dag_id) -> Any:
                return self("GET", f"/dags/{dag_id}")

            self.wait_for(f"DAG {dag_id} parsed", parsed)

    def trigger(self, dag_id: str) -> str:
        run = self("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None})
        return str(run["dag_run_id"])

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
        return self("GET", path)["state"]

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        """The run's state when it succeeded, else None; fails the test with the task logs when
        the run failed."""
        state = self("GET", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}")["state"]
        if state == "failed":
            pytest.fail(f"{dag_id} run {run_id} failed: {self.task_logs(dag_id, run_id)}")
        return state if state == "success" else None

    def wait_for_success(self, dag_id: str, run_id: str) -> None:
        self.wait_for(f"{dag_id} run {run_id}'s success", lambda: self.run_state(dag_id, run_id))

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        response = self(
            "GET",
            f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
            f"/logs/{try_number}",
            headers={"Accept": "application/json"},
        )
        content = response["content"]
        if isinstance(content, list):
            return "\n".join(
                str(c.get("event", c)) if isinstance(c, dict) else str(c) for c in content
            )
        return str(content)

    def task_logs(self, dag_id: str, run_id: str) -> str:
        path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances"
        out = []
        for ti in self("GET", path)["task_instances"]:
            try:
                log = self.task_log(dag_id, run_id, ti["task_id"], max(ti["try_number"], 1))
            except Exception as exc:
                log = repr(exc)
            out.append(f"--- {ti['task_id']} {ti['state']}\n{log[-3000:]}")
        return "\n".join(out)
