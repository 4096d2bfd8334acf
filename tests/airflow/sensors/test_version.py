"""DeltaTableVersionSensor and DeltaTableVersionTrigger on real local tables (no Spark).

The DAG runs (`dag.test()`, DAGs in dags/sensor_dags.py) wait for versions that a writer thread
commits while the sensor waits: the writer watches the metadata database for the moment the
sensor has taken its baseline (running, rescheduled twice, or deferred) before committing, so
a sensor that re-took its baseline later would miss the commit and time out. In poke mode the
writer waits for a poke that found nothing new (`sensor_misses`): "running" alone does not mean
the baseline was taken yet.

Every wait is on a condition, with a generous deadline (the suite runs on loaded machines).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string

import airflow_delta.sensors.version as sensor_module
from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.log import log_segment
from airflow_delta.sensors.version import (
    BASELINE_STATE_KEY,
    XCOM_KEY,
    DeltaTableVersionSensor,
    version_at,
)
from airflow_delta.triggers.version import (
    MAX_RETRY_DELAY,
    DeltaTableRecreatedError,
    DeltaTableVersionTrigger,
    current_version,
    latest_version_since,
    poll_table_version,
    retry_delay,
    version_event,
)
from tests.airflow.conftest import TABLES_ROOT, load_dag
from tests.airflow.dags.sensor_dags import SENSOR_TIMEOUT
from tests.airflow.metadata import asset_events, xcoms
from tests.conftest import s3_client
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
        ).first()


def reschedules(ti_id: Any) -> int:
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(select(func.count()).where(TaskReschedule.ti_id == ti_id)) or 0


class Writer(threading.Thread):
    """Commits `action()` once `ready()` holds (checked every 50 ms, for as long as the sensor
    itself waits)."""

    def __init__(self, ready: Callable[[], bool], action: Callable[[], Any]):
        super().__init__(daemon=True)
        self.ready, self.action = ready, action
        self.error: BaseException | None = None
        self.done_at: float | None = None

    def start(self) -> None:
        # Configure the ORM (it imports every model) here, not in two threads at once.
        from sqlalchemy.orm import configure_mappers

        configure_mappers()
        self.ready()
        super().start()

    def run(self) -> None:
        try:
            wait_until(
                self.ready,
                timeout=SENSOR_TIMEOUT,
                message="the sensor never reached the state the writer waits for",
            )
            self.action()
            self.done_at = time.monotonic()
        except BaseException as exc:  # reported by the test through `check()`
            self.error = exc

    def check(self) -> None:
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


def closed_port() -> int:
    """A local TCP port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unreachable_s3_connection(monkeypatch: pytest.MonkeyPatch, name: str, **extra: Any) -> None:
    """The `delta` connection `name`: S3 at a closed local port, botocore retrying nothing."""
    options = {
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}",
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 5},
        **extra,
    }
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{name.upper()}", json.dumps({"conn_type": "delta", "extra": options})
    )


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
            f"Waiting for a new version of Delta table '{uri}' failed: PermissionError: "
            "[Errno 13] Permission denied. Check the credentials of the environment" in out
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
            f"Waiting for a new version of Delta table '{uri}' failed: PermissionError: "
            "[Errno 13] Permission denied. Check the credentials" in capfd.readouterr().out
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


# -- the trigger ---------------------------------------------------------------------------------


def test_trigger_serialize_round_trips() -> None:
    trigger = DeltaTableVersionTrigger(
        "s3://lake/events",
        baseline_version=9,
        target_version=12,
        delta_conn_id="delta_s3",
        poll_interval=5.0,
        allow_recreation=True,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_delta.triggers.version.DeltaTableVersionTrigger"
    rebuilt = import_string(classpath)(**json.loads(json.dumps(kwargs)))
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs == {
        "table_uri": "s3://lake/events",
        "baseline_version": 9,
        "target_version": 12,
        "delta_conn_id": "delta_s3",
        "poll_interval": 5.0,
        "allow_recreation": True,
    }


def first_event(trigger: DeltaTableVersionTrigger, timeout: float = GENEROUS) -> dict[str, Any]:
    """Run the trigger's async `run()` until its first event; the payload."""

    async def main() -> dict[str, Any]:
        event = await asyncio.wait_for(anext(trigger.run()), timeout)
        return event.payload

    return asyncio.run(main())


def test_trigger_run_fires_on_a_commit_made_while_it_polls(tmp_path: Path) -> None:
    log = new_table(tmp_path / "t")
    append(log)
    timer = threading.Timer(0.3, lambda: append(log))
    timer.start()
    started = time.monotonic()
    payload = first_event(DeltaTableVersionTrigger(str(tmp_path / "t"), 1, poll_interval=0.05))
    timer.join()
    assert time.monotonic() - started >= 0.3
    assert payload["status"] == "success"
    assert payload["event"] == version_event(log, poll_table_version(log, 1))
    assert payload["event"]["version"] == 2 and payload["event"]["baseline"] == 1


def test_trigger_run_keeps_polling_below_the_target_and_while_there_is_no_table(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "t")

    async def main() -> dict[str, Any]:
        trigger = DeltaTableVersionTrigger(uri, -1, target_version=2, poll_interval=0.02)
        waiting = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # no table yet
        log = await asyncio.to_thread(new_table, Path(uri))
        await asyncio.to_thread(append, log)
        await asyncio.sleep(0.2)
        assert not waiting.done()  # at 1, below the target
        await asyncio.to_thread(append, log)
        return (await asyncio.wait_for(waiting, GENEROUS)).payload

    payload = asyncio.run(main())
    assert payload["status"] == "success"
    assert payload["event"]["version"] == 2 and payload["event"]["baseline"] == -1


def test_trigger_run_reports_a_recreated_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = new_table(Path(uri))
    append(log)
    append(log)
    recreate(uri)
    refused = first_event(DeltaTableVersionTrigger(uri, 2, poll_interval=0.02))
    assert refused["status"] == "error"
    assert refused["error_type"] == "DeltaTableRecreatedError"
    assert uri in refused["message"] and "version 0" in refused["message"]
    assert "baseline version 2" in refused["message"]
    allowed = first_event(DeltaTableVersionTrigger(uri, 2, allow_recreation=True))
    assert allowed["status"] == "success"
    assert allowed["event"]["recreated"] is True and allowed["event"]["version"] == 0
    assert allowed["event"]["operation"] == "CREATE TABLE"


def test_trigger_run_reports_a_failing_poll_as_an_error_event(tmp_path: Path) -> None:
    log = new_table(tmp_path / "t")
    (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").write_text("{not json\n")
    payload = first_event(DeltaTableVersionTrigger(str(tmp_path / "t"), 0))
    assert payload["status"] == "error"
    assert payload["error_type"] == CorruptLogError.__name__
    assert log.latest_version() == 1


def test_trigger_reads_the_storage_options_of_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = new_table(tmp_path / "t")
    append(log)
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_LOCAL", json.dumps({"conn_type": "delta", "extra": {}}))
    found = first_event(
        DeltaTableVersionTrigger(str(tmp_path / "t"), 0, delta_conn_id="delta_local")
    )
    assert found["status"] == "success" and found["event"]["version"] == 1
    missing = first_event(DeltaTableVersionTrigger(str(tmp_path / "t"), 0, delta_conn_id="nope"))
    assert missing["status"] == "error" and "nope" in missing["message"]


def test_retry_delay_doubles_and_is_bounded() -> None:
    assert [retry_delay(60.0, a) for a in range(1, 11)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]
    assert [retry_delay(0.05, a) for a in (1, 2, 3)] == [0.05, 0.1, 0.2]
    assert retry_delay(60.0, 10_000) == MAX_RETRY_DELAY
    assert retry_delay(3600.0, 10_000) == 3600.0  # never capped below the poll interval
    assert retry_delay(0.0, 1) > 0  # no busy loop


def run_until(
    trigger: DeltaTableVersionTrigger, condition: Callable[[], bool], timeout: float = GENEROUS
) -> None:
    """Run the trigger until `condition` holds (checked between its awaits), then cancel it.

    Fails if the trigger yields an event first, or if the condition does not hold in time.
    """

    async def main() -> None:
        waiting = asyncio.ensure_future(anext(trigger.run()))
        deadline = time.monotonic() + timeout
        while not condition():
            assert not waiting.done(), waiting.result().payload
            assert time.monotonic() < deadline, "the condition never held"
            await asyncio.sleep(0.01)
        assert not waiting.done(), waiting.result().payload
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting

    asyncio.run(main())


def test_trigger_retries_a_transient_error_then_fires(
    tmp_path: Path, flaky: Callable[..., Flaky], capfd: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    append(new_table(Path(uri)))
    engine = flaky(TimeoutError("The read operation timed out"), lambda n: n <= 2)
    payload = first_event(DeltaTableVersionTrigger(uri, 0, poll_interval=0.02))
    assert payload["status"] == "success" and payload["event"]["version"] == 1
    assert engine.calls == 3
    out = capfd.readouterr().out
    for attempt in (1, 2):
        assert (
            f"Transient storage error polling Delta table '{uri}' (attempt {attempt}): "
            "TimeoutError: The read operation timed out; retrying in" in out
        )


def test_trigger_keeps_retrying_transient_errors_with_growing_delays(
    tmp_path: Path, flaky: Callable[..., Flaky], capfd: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    new_table(Path(uri))
    engine = flaky(OSError(errno.EBUSY, "SlowDown"), lambda n: True)
    run_until(DeltaTableVersionTrigger(uri, 0, poll_interval=0.02), lambda: engine.calls >= 6)
    gaps = [b - a for a, b in zip(engine.times, engine.times[1:], strict=False)]
    for attempt, gap in enumerate(gaps[:5], start=1):  # at least the backoff (load adds more)
        assert gap >= retry_delay(0.02, attempt) * 0.95, (attempt, gaps)
    out = capfd.readouterr().out
    assert f"Delta table '{uri}' (attempt 5): OSError: [Errno 16] SlowDown" in out


def test_trigger_after_transient_errors_polls_at_its_interval_again(
    tmp_path: Path, flaky: Callable[..., Flaky], capfd: pytest.CaptureFixture[str]
) -> None:
    uri = str(tmp_path / "t")
    new_table(Path(uri))
    engine = flaky(ConnectionResetError(errno.ECONNRESET, "reset"), lambda n: n == 1)
    run_until(DeltaTableVersionTrigger(uri, 0, poll_interval=0.02), lambda: engine.calls >= 3)
    out = capfd.readouterr().out
    assert f"Polling Delta table '{uri}' works again after 1 failed attempt(s)" in out
    assert f"Delta table '{uri}' is at version 0 (baseline: 0); waiting for" in out


def test_trigger_ends_at_once_on_a_permanent_error(
    tmp_path: Path, flaky: Callable[..., Flaky], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "t")
    new_table(Path(uri))
    monkeypatch.setenv("AIRFLOW_CONN_DELTA_LOCAL", json.dumps({"conn_type": "delta", "extra": {}}))
    engine = flaky(PermissionError(errno.EACCES, "Permission denied"), lambda n: True)
    payload = first_event(DeltaTableVersionTrigger(uri, 0, delta_conn_id="delta_local"))
    assert engine.calls == 1
    assert payload == {
        "status": "error",
        "error_type": "PermissionError",
        "message": "[Errno 13] Permission denied",
        "fix": "Check the credentials of the connection 'delta_local': they must be allowed to "
        "list and read the table's _delta_log.",
    }
    sensor = DeltaTableVersionSensor(task_id="wait", table_uri=uri)
    with pytest.raises(Exception, match="Check the credentials of the connection 'delta_local'"):
        sensor.execute_complete({}, payload)  # type: ignore[arg-type]


def test_trigger_ends_at_once_on_real_permanent_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad_uri = first_event(DeltaTableVersionTrigger("nosuchproto://bucket/t", 0))
    assert (bad_uri["status"], bad_uri["error_type"]) == ("error", "ValueError")
    assert "nosuchproto" in bad_uri["message"] and "Check table_uri" in bad_uri["fix"]

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    unreachable_s3_connection(monkeypatch, "delta_nocreds")
    no_credentials = first_event(
        DeltaTableVersionTrigger("s3://bucket/t", 0, delta_conn_id="delta_nocreds")
    )
    assert no_credentials["error_type"] == "NoCredentialsError"
    assert no_credentials["fix"].startswith(
        "Check the credentials of the connection 'delta_nocreds'"
    )


def test_trigger_retries_a_real_unreachable_endpoint(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The engine function is only watched here (calls counted, then run): the errors are real."""
    unreachable_s3_connection(
        monkeypatch,
        "delta_down",
        AWS_ACCESS_KEY_ID="test-access-key-id",
        AWS_SECRET_ACCESS_KEY="test-secret-access-key",
    )
    engine = Flaky(RuntimeError("never raised"), lambda n: False)
    monkeypatch.setattr(log_segment, "latest_version_since", engine)
    trigger = DeltaTableVersionTrigger(
        "s3://bucket/t", 3, delta_conn_id="delta_down", poll_interval=0.01
    )
    run_until(trigger, lambda: engine.calls >= 3)
    out = capfd.readouterr().out
    assert (
        "Transient storage error polling Delta table 's3://bucket/t' (attempt 2): "
        "EndpointConnectionError: Could not connect to the endpoint URL" in out
    )


@pytest.mark.s3
def test_poll_and_trigger_on_s3_see_commits_of_other_writers(
    tmp_path: Path, s3_bucket: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:

    from airflow_delta.engine.log.log_store import get_log_store
    from tests.delta_log_builder import commit_info, make_table

    bucket, options = s3_bucket
    uri = f"s3://{bucket}/t"
    store, root = get_log_store(uri, options)
    for path in sorted(make_table(tmp_path / "t", 5).rglob("*.json")):  # versions 0 .. 4
        store.write(store.join(root, str(path.relative_to(tmp_path / "t"))), path.read_bytes())
    log = DeltaLog.for_table(uri, options)
    assert current_version(log) == 4
    s3 = s3_client(options)
    for version in (5, 6, 7):  # another writer, not through this s3fs instance
        body = json.dumps(commit_info("OPTIMIZE")) + "\n"
        s3.put_object(Bucket=bucket, Key=f"t/_delta_log/{version:020d}.json", Body=body.encode())
    check = poll_table_version(log, 4)
    assert (check.done, check.version) == (True, 7)
    assert version_event(log, check)["operation"] == "OPTIMIZE"

    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTA_S3", json.dumps({"conn_type": "delta", "extra": options})
    )
    found = first_event(DeltaTableVersionTrigger(uri, 6, delta_conn_id="delta_s3"))
    assert found["status"] == "success", found
    assert (found["event"]["version"], found["event"]["baseline"]) == (7, 6)


# -- the poll ------------------------------------------------------------------------------------


def test_poll_reads_no_log_file_below_the_baseline(tmp_path: Path) -> None:
    log = new_table(tmp_path / "t")
    for _ in range(5):
        append(log)
    log.checkpoint()
    log_dir = tmp_path / "t" / "_delta_log"
    # Older history unreadable or gone: a poll from 5 must not look at any of it.
    for v in range(5):
        (log_dir / f"{v:020d}.json").write_text("garbage, not a commit\n")
    (log_dir / "00000000000000000000.json").unlink()
    (log_dir / "_last_checkpoint").write_text("{broken")
    (log_dir / "00000000000000000005.checkpoint.parquet").write_bytes(b"not parquet")
    assert poll_table_version(log, 5).done is False
    fresh = DeltaLog.for_table(str(tmp_path / "t"))
    with pytest.raises(CorruptLogError):
        fresh.update()  # a snapshot of the table really is out of reach now
    (log_dir / "00000000000000000006.json").write_text(
        json.dumps({"commitInfo": {"timestamp": 1718000000000, "operation": "DELETE"}}) + "\n"
    )
    check = poll_table_version(fresh, 5)
    assert (check.done, check.version, check.recreated) == (True, 6, False)
    assert version_event(fresh, check) == {
        "table": str(tmp_path / "t"),
        "version": 6,
        "baseline": 5,
        "timestamp": 1718000000000,
        "operation": "DELETE",
        "recreated": False,
    }


def test_latest_version_since_any_baseline(tmp_path: Path) -> None:
    log_dir = tmp_path / "t" / "_delta_log"
    log_dir.mkdir(parents=True)
    log = DeltaLog.for_table(str(tmp_path / "t"))
    assert latest_version_since(log, -1) == -1
    for latest in range(40):
        (log_dir / f"{latest:020d}.json").write_text("{}\n")  # probes never read commits
        for baseline in range(-1, latest + 1):
            assert latest_version_since(log, baseline) == latest, (baseline, latest)


def test_poll_after_log_cleanup_and_deletion(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    log = new_table(Path(uri))
    for _ in range(6):
        append(log)
    log_dir = Path(uri) / "_delta_log"
    for v in range(4):  # log cleanup removed the baseline's commit and the next one
        (log_dir / f"{v:020d}.json").unlink()
    assert latest_version_since(log, 2) == 6
    assert poll_table_version(log, 2).version == 6
    shutil.rmtree(uri)
    check = poll_table_version(log, 6)
    assert (check.exists, check.done, check.version) == (False, False, -1)
    new_table(Path(uri))
    with pytest.raises(
        DeltaTableRecreatedError, match=r"at version 0, below the baseline version 6"
    ):
        poll_table_version(log, 6)
    assert poll_table_version(log, 6, allow_recreation=True).recreated


def test_current_version_from_the_checkpoint_hint(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    assert current_version(DeltaLog.for_table(uri)) == -1
    log = new_table(Path(uri))
    for _ in range(12):
        append(log)  # checkpoints at 10 (delta.checkpointInterval)
    assert current_version(log) == 12
    (Path(uri) / "_delta_log" / "_last_checkpoint").write_text("not json")
    assert current_version(log) == 12


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
    assert not [t for t in threading.enumerate() if isinstance(t, Writer) and t.is_alive()]
