"""Airflow for the tests of one pytest worker: its own AIRFLOW_HOME and SQLite database.

The environment is set when this module loads, before any test module imports Airflow (which
reads its configuration on import); `airflow_db` migrates the database once per worker.

`dag.test()` in Airflow 3 only runs DAGs it finds in the DAGs folder, so the test DAGs live in
`tests/airflow/dags/`; they put their tables under `$AIRFLOW_DELTA_TEST_ROOT`, a directory of
this worker, and `load_dag(dag_id)` gives the DAG object to run.

`flaky` injects storage failures into the polls of the sensor and trigger tests; `no_spark`
fails any task that would start a Spark session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.engine.log import log_segment  # imports no Airflow module

AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="airflow-delta-tests-"))
os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "False"
DAGS_FOLDER = Path(__file__).resolve().parent / "dags"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS_FOLDER)
TABLES_ROOT = AIRFLOW_HOME / "tables"
os.environ["AIRFLOW_DELTA_TEST_ROOT"] = str(TABLES_ROOT)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def airflow_command(*args: str, env: dict[str, str] | None = None, timeout: float = 600):
    """Run the `airflow` CLI of this virtualenv; the completed process (output captured)."""
    airflow = str(Path(sys.executable).with_name("airflow"))
    return subprocess.run(
        [airflow, *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load_dag(dag_id: str) -> Any:
    """The DAG `dag_id` of the test DAGs folder (parsed the way Airflow parses it)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS_FOLDER))
    assert not bag.import_errors, bag.import_errors
    return bag.get_dag(dag_id)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """A migrated Airflow metadata database (SQLite) in this worker's AIRFLOW_HOME."""
    result = airflow_command("db", "migrate")
    assert result.returncode == 0, result.stdout + result.stderr
    yield AIRFLOW_HOME


class Flaky:
    """Stands in for the engine's `log_segment.latest_version_since`, the one storage call of a
    poll: failure injection, since a real transient storage error cannot be summoned on demand
    (and a local `_delta_log` cannot be made unreadable: the tests run as root).

    Call number n (from 1) raises `error` when `fails(n)`, else runs the real function. The
    monotonic time of every call is recorded.
    """

    def __init__(self, error: BaseException, fails: Callable[[int], bool]) -> None:
        self.error, self.fails = error, fails
        self.times: list[float] = []
        self.real = log_segment.latest_version_since

    def __call__(self, location: Any, known_version: int) -> int:
        self.times.append(time.monotonic())
        if self.fails(len(self.times)):
            raise self.error
        return self.real(location, known_version)

    @property
    def calls(self) -> int:
        return len(self.times)


@pytest.fixture
def flaky(
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[BaseException, Callable[[int], bool]], Flaky]:
    """`flaky(error, fails)` puts a Flaky in place of the engine's latest_version_since."""

    def install(error: BaseException, fails: Callable[[int], bool]) -> Flaky:
        stand_in = Flaky(error, fails)
        monkeypatch.setattr(log_segment, "latest_version_since", stand_in)
        return stand_in

    return install


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to start a Spark session fails the task (`dag.test()` runs tasks in this
    process): for the operators that run the engine's commands in process."""
    from airflow_delta.hooks.delta import DeltaHook

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an in-process table command started a Spark session")

    monkeypatch.setattr(DeltaHook, "get_spark_session", refuse)
