"""DeltaTableVersionSensor (`sensors.version`) on real local tables (no Spark). The trigger it
defers to, and the poll both run, are tested in tests/airflow/triggers/test_version.py.

The DAG runs (`dag.test()`, DAGs in dags/sensor_dags.py) wait for versions that a writer thread
commits while the sensor waits: the writer watches the metadata database for the moment the
sensor has taken its baseline (running, rescheduled twice, or deferred) before committing, so
a sensor that re-took its baseline later would miss the commit and time out. In poke mode the
writer waits for a poke that found nothing new (`sensor_misses`): "running" alone does not mean
the baseline was taken yet.

Every wait is on a condition, with a generous deadline (the suite runs on loaded machines).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

import airflow_delta.sensors.version as sensor_module
from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.sensors.version import (
    BASELINE_STATE_KEY,
    XCOM_KEY,
    DeltaTableVersionSensor,
    version_at,
)
from airflow_delta.triggers.version import (
    DeltaTableRecreatedError,
    DeltaTableWaitError,
    error_event,
)
from tests.airflow.conftest import TABLES_ROOT, Flaky, load_dag
from tests.airflow.dags.sensor_dags import SENSOR_TIMEOUT
from tests.airflow.metadata import asset_events, xcoms
from tests.txn_helpers import append, new_table
from tests.waiting import GENEROUS, wait_until

# -- helpers ---------------------------------------------------------------------------------


def fresh_table(name: str, versions: int = 1) -> tuple[str, DeltaLog]:
    """A new table under the worker's tables root with versions 0 .. versions - 1."""
    path = TABLES_ROOT / name
    shutil.rmtree(path, ignore_errors=True)
    log = new_table(path)
    for _ in range(versions - 1):
        append(log)
    return str(path), log


def recreate(uri: str) -> DeltaLog:
    """Delete the table and create it again (version 0)."""
    shutil.rmtree(uri)
    return new_table(Path(uri))


def run_dag(dag_id: str, table: str, baseline: int | None = None, target: int | None = None):
    """One `dag.test()` run of a sensor DAG on `table`; the DagRun."""
    conf = {"table": table, "baseline": baseline, "target": target}
    return load_dag(dag_id).test(run_conf=conf)


def running_ti(dag_id: str) -> Any:
    """The `wait` task instance of the running DagRun of `dag_id` (None when there is none)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return session.scalars(
            select(TaskInstance)
            .join(
                DagRun,
                (DagRun.dag_id == TaskInstance.dag_id) & (DagRun.run_id == TaskInstance.run_id),
            )
            .where(TaskInstance.dag_id == dag_id, DagRun.state == "running")
            .order_by(DagRun.id.desc())  # the run under test, not one an earlier test left
        ).first()


def reschedules(ti_id: Any) -> int:
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(select(func.count()).where(TaskReschedule.ti_id == ti_id)) or 0


class Writer(threading.Thread):
    """Commits `action()` once `ready()` holds (checked every 50 ms, for as long as the sensor
    itself waits).

    `ready()` reads the metadata database from this thread: an OperationalError there is
    recorded (with the open file descriptors) and tried again; the third fails. When `ready()`
    fails or never holds, the action runs every second until `check()` (at most the sensor's
    timeout), so that the sensor it feeds ends: `dag.test()` runs a trigger inline without the
    sensor's timeout, and a deferred sensor no commit reaches would hang the test. `check()`
    reports the failure."""

    def __init__(self, ready: Callable[[], bool], action: Callable[[], Any]):
        super().__init__(daemon=True)
        self.ready, self.action = ready, action
        self.error: BaseException | None = None
        self.done_at: float | None = None
        self.stopped = threading.Event()
        self.db_errors: list[str] = []

    def start(self) -> None:
        # Configure the ORM (it imports every model) here, not in two threads at once.
        from sqlalchemy.orm import configure_mappers

        configure_mappers()
        self.ready()
        super().start()

    def _ready(self) -> bool:
        from sqlalchemy.exc import OperationalError

        try:
            return self.ready()
        except OperationalError as exc:
            fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1
            self.db_errors.append(f"{exc.orig!r} ({fds} open file descriptors)")
            if len(self.db_errors) > 2:
                raise AssertionError(f"the metadata database failed: {self.db_errors}") from exc
            return False

    def run(self) -> None:
        try:
            wait_until(
                self._ready,
                timeout=SENSOR_TIMEOUT,
                message="the sensor never reached the state the writer waits for",
            )
            self.action()
            self.done_at = time.monotonic()
            return
        except BaseException as exc:  # reported by the test through `check()`
            self.error = exc
        deadline = time.monotonic() + SENSOR_TIMEOUT
        while not self.stopped.wait(1.0) and time.monotonic() < deadline:
            with contextlib.suppress(Exception):  # let the sensor end (see the docstring)
                self.action()

    def check(self) -> None:
        self.stopped.set()
        self.join(GENEROUS)
        assert self.error is None, self.error
        assert self.done_at is not None, "the writer never committed"


@pytest.fixture
def sensor_misses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Versions seen by the sensor's pokes that did not find what it waits for, in order.

    A poke runs after the baseline is resolved: a commit made once this is not empty is one
    the sensor must see (the task runs in this process under `dag.test()`).
    """
    misses: list[int] = []
    poll = sensor_module.poll_table_version

    def recording_poll(*args: Any, **kwargs: Any) -> Any:
        check = poll(*args, **kwargs)
        if not check.done:
            misses.append(check.version)
        return check

    monkeypatch.setattr(sensor_module, "poll_table_version", recording_poll)
    return misses


def asset_extras(dag_run: Any) -> list[dict[str, Any]]:
    """The `extra` of the asset events `dag_run` emitted for the sensed asset."""
    from tests.airflow.dags.sensor_dags import SENSED

    return asset_events(SENSED.uri, dag_run.run_id)


def ti_of(dag_run: Any) -> Any:
    return dag_run.get_task_instance("wait")


def assert_found(dag_run: Any, table: str, version: int, baseline: int, recreated=False) -> None:
    """The run succeeded and reported `version` over `baseline` the same way everywhere."""
    assert ti_of(dag_run).state == "success", ti_of(dag_run).state
    found = xcoms(dag_run, "wait")
    event = found[XCOM_KEY]
    commit = DeltaLog.for_table(table).commit_info(version)
    assert commit is not None
    assert event == {
        "table": table,
        "version": version,
        "baseline": baseline,
        "timestamp": commit.in_commit_timestamp or commit.timestamp,
        "operation": commit.operation,
        "recreated": recreated,
    }
    assert isinstance(event["timestamp"], int) and event["operation"]
    assert found["return_value"] == version
    assert asset_extras(dag_run) == [event]


# -- the sensor in DAG runs ----------------------------------------------------------------------


@pytest.mark.usefixtures("airflow_db")
class TestSensorRuns:
    def test_poke_mode_sees_a_concurrent_commit(self, sensor_misses: list[int]) -> None:
        uri, log = fresh_table("poke")
        writer = Writer(lambda: bool(sensor_misses), lambda: append(log))
        writer.start()
        dag_run = run_dag("s_poke", uri)
        writer.check()
        assert_found(dag_run, uri, version=1, baseline=0)

    def test_reschedule_mode_keeps_its_baseline_across_reschedules(
        self, capfd: pytest.CaptureFixture[str]
    ) -> None:
        uri, log = fresh_table("reschedule", versions=3)
        seen: dict[str, Any] = {}

        def kept_baseline() -> Any:
            from airflow.models.task_state_store import TaskStateStoreModel
            from airflow.utils.session import create_session
            from sqlalchemy import select

            with create_session() as session:
                return session.scalars(
                    select(TaskStateStoreModel).where(
                        TaskStateStoreModel.dag_id == "s_reschedule",
                        TaskStateStoreModel.key == BASELINE_STATE_KEY,
                    )
                ).first()

        def ready() -> bool:
            """Two pokes read the kept baseline back, then it is lost (say, cleaned up after
            its retention), then one more poke goes without it."""
            ti = running_ti("s_reschedule")
            if ti is None:
                return False
            count = reschedules(ti.id)
            if "lost_at" not in seen and count >= 3:
                row = kept_baseline()
                seen["kept"] = json.loads(row.value)
                from airflow.utils.session import create_session

                with create_session() as session:
                    session.delete(session.merge(row))
                seen["lost_at"] = count
            return "lost_at" in seen and count >= seen["lost_at"] + 1

        writer = Writer(ready, lambda: append(log))
        writer.start()
        dag_run = run_dag("s_reschedule", uri)
        writer.check()
        assert_found(dag_run, uri, version=3, baseline=2)
        assert seen["kept"] == {
            "table": uri,
            "baseline": 2,
            "origin": "the table's current version",
        }
        out = capfd.readouterr().out
        table = f"Baseline version 2 for Delta table '{uri}'"
        assert out.count(f"{table}: the table's current version, kept since the first poke") >= 2
        assert f"{table}: the table's version at " in out  # the fallback once the row was lost

    def test_deferrable_mode_sees_a_commit_made_while_deferred(self) -> None:
        uri, log = fresh_table("deferrable", versions=2)

        def deferred() -> bool:
            ti = running_ti("s_deferrable")
            return ti is not None and ti.next_method == "execute_complete"

        writer = Writer(deferred, lambda: append(log))
        writer.start()
        dag_run = run_dag("s_deferrable", uri)
        writer.check()
        assert_found(dag_run, uri, version=2, baseline=1)

    def test_deferrable_sensor_waits_for_a_table_to_be_created(self) -> None:
        uri = str(TABLES_ROOT / "created_later")
        shutil.rmtree(uri, ignore_errors=True)

        def deferred() -> bool:
            ti = running_ti("s_deferrable")
            return ti is not None and ti.next_method == "execute_complete"

        writer = Writer(deferred, lambda: new_table(Path(uri)))
        writer.start()
        dag_run = run_dag("s_deferrable", uri)
        writer.check()
        assert_found(dag_run, uri, version=0, baseline=-1)

    def test_target_version_waits_past_newer_versions(self, sensor_misses: list[int]) -> None:
        uri, log = fresh_table("target", versions=3)  # at 2: newer than the baseline, not target
        writer = Writer(lambda: bool(sensor_misses), lambda: append(log))
        writer.start()
        dag_run = run_dag("s_poke", uri, baseline=0, target=3)
        writer.check()
        assert_found(dag_run, uri, version=3, baseline=0)

    def test_target_version_already_reached_succeeds_at_once(self) -> None:
        """The table is at 3 and the target is 2: nothing to wait for (it used to wait for a
        version after 3, logging "waiting for version >= 2", until its timeout)."""
        uri, _ = fresh_table("target_reached", versions=4)
        dag_run = run_dag("s_poke", uri, target=2)
        assert_found(dag_run, uri, version=3, baseline=3)

    def test_baseline_is_the_version_the_previous_successful_run_saw(
        self, sensor_misses: list[int]
    ) -> None:
        uri, log = fresh_table("previous")
        writer = Writer(lambda: bool(sensor_misses), lambda: append(log))
        writer.start()
        first = run_dag("s_poke", uri)
        writer.check()
        assert_found(first, uri, version=1, baseline=0)

        append(log)
        append(log)  # at 3: the second run must see the change since the first run's version 1
        second = run_dag("s_poke", uri)
        assert_found(second, uri, version=3, baseline=1)

    def test_recreated_table_fails_the_task_without_allow_recreation(
        self, capfd: pytest.CaptureFixture[str]
    ) -> None:
        uri, _ = fresh_table("recreated_error", versions=3)
        recreate(uri)
        dag_run = run_dag("s_poke", uri, baseline=2)
        assert (
            f"DeltaTableRecreatedError: Delta table '{uri}' is at version 0, below the baseline "
            "version 2" in capfd.readouterr().out
        )
        ti = ti_of(dag_run)
        assert ti.state == "failed"
        assert ti.try_number == 1  # DeltaTableRecreatedError does not retry (retries=1)
        assert XCOM_KEY not in xcoms(dag_run, "wait")
        assert asset_extras(dag_run) == []

    def test_soft_fail_skips_a_deferrable_sensor_whose_first_check_fails(self) -> None:
        """The check before deferring bypassed BaseSensorOperator's soft_fail: failed, where
        poke and reschedule modes (and the trigger's own failure) end skipped."""
        uri, _ = fresh_table("recreated_soft", versions=2)
        dag_run = run_dag("s_soft_fail", uri, baseline=5)
        assert ti_of(dag_run).state == "skipped"
        assert asset_extras(dag_run) == []

    def test_a_retry_keeps_the_baseline_of_the_failed_try(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Version 1 lands while the first try waits, then the try fails (a lost worker, as
        dag.test() can stage it in process); the retry must report version 1, not take it as
        its new baseline and wait past it until the timeout."""
        uri, log = fresh_table("retried")
        poll = sensor_module.poll_table_version
        failed: list[int] = []

        def failing_once(*args: Any, **kwargs: Any) -> Any:
            check = poll(*args, **kwargs)
            if not failed:
                failed.append(check.version)
                append(log)
                raise RuntimeError("the worker went away")
            return check

        monkeypatch.setattr(sensor_module, "poll_table_version", failing_once)
        dag_run = run_dag("s_poke", uri)
        assert failed == [0]
        assert ti_of(dag_run).try_number == 2
        assert_found(dag_run, uri, version=1, baseline=0)

    def test_recreated_table_is_a_change_with_allow_recreation(self) -> None:
        uri, _ = fresh_table("recreated_ok", versions=3)
        recreate(uri)
        dag_run = run_dag("s_recreation", uri, baseline=2)
        assert_found(dag_run, uri, version=0, baseline=2, recreated=True)

    def test_poke_mode_retries_a_transient_storage_error_at_the_next_poke(
        self, flaky: Callable[..., Flaky], capfd: pytest.CaptureFixture[str]
    ) -> None:
        uri, _ = fresh_table("transient_poke", versions=2)
        engine = flaky(ConnectionResetError(errno.ECONNRESET, "reset by peer"), lambda n: n <= 2)
        dag_run = run_dag("s_poke", uri, baseline=0)
        assert_found(dag_run, uri, version=1, baseline=0)
        assert engine.calls == 3 and ti_of(dag_run).try_number == 1
        out = capfd.readouterr().out
        for attempt in (1, 2):
            assert (
                f"Transient storage error polling Delta table '{uri}' (attempt {attempt}): "
                "ConnectionResetError" in out
            )

    def test_poke_mode_fails_at_once_on_a_permanent_storage_error(
        self, flaky: Callable[..., Flaky], capfd: pytest.CaptureFixture[str]
    ) -> None:
        uri, _ = fresh_table("permanent_poke")
        engine = flaky(PermissionError(errno.EACCES, "Permission denied"), lambda n: True)
        dag_run = run_dag("s_poke", uri, baseline=0)
        ti = ti_of(dag_run)
        assert ti.state == "failed"
        assert (engine.calls, ti.try_number) == (2, 2)  # each try fails at its first poke
        out = capfd.readouterr().out
        assert (
            f"DeltaTableWaitError: Waiting for a new version of Delta table '{uri}' (baseline: 0) "
            "failed: PermissionError: [Errno 13] Permission denied. Check the credentials of the "
            "environment" in out
        )
        assert XCOM_KEY not in xcoms(dag_run, "wait")

    def test_deferred_sensor_fails_at_once_on_a_permanent_storage_error(
        self, flaky: Callable[..., Flaky], capfd: pytest.CaptureFixture[str]
    ) -> None:
        uri, _ = fresh_table("permanent_deferred")
        # the first poke (in execute) works and finds nothing new; then the storage refuses
        engine = flaky(PermissionError(errno.EACCES, "Permission denied"), lambda n: n > 1)
        dag_run = run_dag("s_deferrable", uri, baseline=0)
        assert ti_of(dag_run).state == "failed"
        assert engine.calls <= 4  # two tries: a poke and a trigger poll, or a failing poke
        assert (
            f"DeltaTableWaitError: Waiting for a new version of Delta table '{uri}' (baseline: 0) "
            "failed: PermissionError: [Errno 13] Permission denied. Check the credentials"
            in capfd.readouterr().out
        )


# -- the sensor's arguments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"baseline_version": -1}, "baseline_version must be a non-negative integer"),
        ({"target_version": -3}, "target_version must be a non-negative integer"),
        ({"target_version": "latest"}, "target_version must be a non-negative integer"),
        ({"baseline_version": True}, "baseline_version must be a non-negative integer"),
        ({"baseline_version": 9, "target_version": 5}, "target_version 5 must be above"),
        ({"baseline_version": "9", "target_version": 9}, "target_version 9 must be above"),
        ({"table_uri": ""}, "table_uri must not be empty"),
    ],
)
def test_invalid_arguments_fail_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    kwargs = {"table_uri": "/tmp/t", **kwargs}
    with pytest.raises(ValueError, match=message):
        DeltaTableVersionSensor(task_id="wait", **kwargs)


def test_templates_are_checked_once_rendered() -> None:
    sensor = DeltaTableVersionSensor(
        task_id="wait",
        table_uri="{{ params.table }}",
        baseline_version="{{ params.baseline }}",
        target_version=3,
    )
    assert sensor.template_fields == ("table_uri", "target_version", "baseline_version")
    assert sensor.deferrable is False  # [operators] default_deferrable


def test_execute_complete_raises_the_trigger_errors() -> None:
    sensor = DeltaTableVersionSensor(task_id="wait", table_uri="/tmp/t")
    with pytest.raises(DeltaTableRecreatedError, match="below the baseline"):
        sensor.execute_complete(
            {},  # type: ignore[arg-type]
            {
                "status": "error",
                "error_type": "DeltaTableRecreatedError",
                "message": "Delta table '/tmp/t' is at version 0, below the baseline version 4",
            },
        )
    with pytest.raises(Exception, match="CorruptLogError: bad commit") as raised:
        sensor.execute_complete(
            {},  # type: ignore[arg-type]
            {"status": "error", "error_type": "CorruptLogError", "message": "bad commit"},
        )
    assert "/tmp/t" in str(raised.value)
    with pytest.raises(Exception) as raised:
        sensor.execute_complete(
            {},  # type: ignore[arg-type]
            {
                "status": "error",
                "error_type": "NoCredentialsError",
                "message": "Unable to locate credentials",
                "fix": "Check the credentials of the connection 'delta_s3'.",
            },
        )
    assert str(raised.value) == (
        "Waiting for a new version of Delta table '/tmp/t' failed: NoCredentialsError: Unable to "
        "locate credentials. Check the credentials of the connection 'delta_s3'."
    )


def test_a_failed_wait_raises_a_typed_error_naming_the_table_and_the_baseline() -> None:
    """The trigger's error event and a poke's error were a bare AirflowException, without the
    baseline: callbacks could not tell a failed wait from any other failure."""
    sensor = DeltaTableVersionSensor(task_id="wait", table_uri="/tmp/t")
    event = error_event(CorruptLogError("bad commit 12"), None, 9)
    assert json.loads(json.dumps(event)) == event  # a TriggerEvent payload
    with pytest.raises(DeltaTableWaitError) as raised:
        sensor.execute_complete({}, event)  # type: ignore[arg-type]
    error = raised.value
    assert (error.table, error.baseline, error.error_type) == ("/tmp/t", 9, "CorruptLogError")
    assert str(error).startswith(
        "Waiting for a new version of Delta table '/tmp/t' (baseline: 9) failed: "
        "CorruptLogError: bad commit 12"
    )
    assert isinstance(error, AirflowException) and not isinstance(error, AirflowFailException)


# -- the baseline at a moment ---------------------------------------------------------------------


def test_version_at_a_time(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    before = datetime.now(UTC)
    assert version_at(DeltaLog.for_table(uri), before) == -1
    time.sleep(0.02)
    log = new_table(Path(uri))
    append(log)
    time.sleep(0.02)
    between = datetime.now(UTC)
    time.sleep(0.02)
    append(log)
    assert version_at(log, before) == -1
    assert version_at(log, between) == 1
    assert version_at(log, datetime.now(UTC)) == 2


@pytest.fixture(autouse=True)
def _no_leaked_writers() -> Iterator[None]:
    yield
    leaked = [t for t in threading.enumerate() if isinstance(t, Writer) and t.is_alive()]
    for writer in leaked:  # a failed test's writer: stopped, so the next tests are not blamed
        writer.stopped.set()
        writer.join(GENEROUS)
    assert not leaked


def test_a_deferred_relative_table_is_the_same_table_in_the_triggerer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triggerer is another process, started in another directory: the trigger got the
    relative path as given and watched a table of that directory, which nobody writes (the
    wait ran until the sensor's timeout). The other directory is a chdir here."""
    import asyncio

    from airflow.sdk.exceptions import TaskDeferred
    from airflow.sdk.module_loading import import_string

    worker, triggerer = tmp_path / "worker", tmp_path / "triggerer"
    worker.mkdir()
    triggerer.mkdir()
    monkeypatch.chdir(worker)
    log = new_table(worker / "t")
    sensor = DeltaTableVersionSensor(
        task_id="wait", table_uri="t", baseline_version=0, deferrable=True, poke_interval=0.05
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})  # type: ignore[arg-type]  # an explicit baseline reads no context
    classpath, kwargs = deferred.value.trigger.serialize()
    monkeypatch.chdir(triggerer)
    append(log)
    trigger = import_string(classpath)(**json.loads(json.dumps(kwargs)))

    async def first_event() -> dict[str, Any]:
        return (await asyncio.wait_for(anext(trigger.run()), 30)).payload

    payload = asyncio.run(first_event())
    assert payload["status"] == "success" and payload["event"]["version"] == 1
