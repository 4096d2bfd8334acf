"""DeltaTableVersionTrigger and the poll it runs (`triggers.version`) on real local tables (no
Spark, no DAG run): serialize(), the events it yields, retries of transient storage errors and
the end of a deferral on permanent ones, and the poll's probes of the log (`poll_table_version`,
`latest_version_since`, `current_version`). The sensor that defers to it is tested in
tests/airflow/sensors/test_version.py.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.log import log_segment
from airflow_delta.sensors.version import DeltaTableVersionSensor
from airflow_delta.triggers.version import (
    MAX_RETRY_DELAY,
    DeltaTableRecreatedError,
    DeltaTableVersionTrigger,
    DeltaTableWaitError,
    current_version,
    latest_version_since,
    poll_table_version,
    retry_delay,
    version_event,
)
from tests.airflow.conftest import Flaky
from tests.airflow.sensors.test_version import recreate
from tests.conftest import s3_client
from tests.txn_helpers import append, new_table
from tests.waiting import GENEROUS

# -- helpers ---------------------------------------------------------------------------------


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
        "baseline": 0,
    }
    sensor = DeltaTableVersionSensor(task_id="wait", table_uri=uri)
    with pytest.raises(
        DeltaTableWaitError, match=r"\(baseline: 0\) failed: PermissionError: .* Check the "
    ) as raised:
        sensor.execute_complete({}, payload)  # type: ignore[arg-type]
    assert (raised.value.table, raised.value.baseline) == (uri, 0)


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
    assert no_credentials["error_type"] == "StorageAccessError"
    assert "NoCredentialsError" in no_credentials["message"]
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


# -- one triggerer, many triggers; a triggerer restart --------------------------------------------


def test_a_hung_storage_call_holds_up_no_other_trigger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triggers share the triggerer's event loop: a poll whose storage call hangs (an
    unreachable store) must leave the loop to the others. The hang is a stand-in for the poll's
    storage call of one table (a hanging endpoint cannot be summoned on demand)."""
    from airflow_delta.triggers import version as trigger_module

    slow, fast = tmp_path / "slow", tmp_path / "fast"
    new_table(slow)
    append(new_table(fast))
    entered, release, returned = threading.Event(), threading.Event(), threading.Event()
    real = trigger_module.latest_version_since

    def stand_in(delta_log: DeltaLog, baseline: int) -> int:
        if delta_log.table_uri == str(slow):
            entered.set()
            release.wait(GENEROUS)
            returned.set()
        return real(delta_log, baseline)

    monkeypatch.setattr(trigger_module, "latest_version_since", stand_in)

    async def main() -> tuple[dict[str, Any], bool]:
        hung = asyncio.ensure_future(anext(DeltaTableVersionTrigger(str(slow), 0).run()))
        assert await asyncio.to_thread(entered.wait, GENEROUS)
        other = DeltaTableVersionTrigger(str(fast), 0, poll_interval=0.01)
        event = await asyncio.wait_for(anext(other.run()), GENEROUS)
        slow_call_returned = returned.is_set()  # False: the other fired during the hang
        release.set()
        hung.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hung
        return event.payload, slow_call_returned

    payload, slow_call_returned = asyncio.run(main())
    assert payload["status"] == "success" and payload["event"]["version"] == 1
    assert not slow_call_returned


def test_a_trigger_rebuilt_after_a_restart_reports_the_commit_made_meanwhile(
    tmp_path: Path,
) -> None:
    """The triggerer stops (its trigger is cancelled mid-wait), a commit lands while no trigger
    runs, and the trigger rebuilt from `serialize()` reports that version: none missed, and the
    first trigger reported nothing."""
    uri = str(tmp_path / "t")
    log = new_table(Path(uri))

    async def cancelled_after_polls() -> tuple[str, dict[str, Any]]:
        trigger = DeltaTableVersionTrigger(uri, 0, target_version=1, poll_interval=0.01)
        waiting = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return trigger.serialize()

    classpath, kwargs = asyncio.run(cancelled_after_polls())
    append(log)  # version 1, while no trigger runs
    rebuilt = import_string(classpath)(**json.loads(json.dumps(kwargs)))
    payload = first_event(rebuilt)
    assert payload["status"] == "success"
    assert (payload["event"]["version"], payload["event"]["baseline"]) == (1, 0)


def test_a_saturated_default_executor_holds_up_no_delta_trigger(tmp_path: Path) -> None:
    """Other triggers in the triggerer run their blocking calls on the loop's default executor
    (`asyncio.to_thread`); with every one of its threads busy, a Delta trigger still polls and
    fires, on threads of its own."""
    from concurrent.futures import ThreadPoolExecutor

    append(new_table(tmp_path / "t"))
    release = threading.Event()
    polled_on: list[str] = []
    from airflow_delta.triggers import version as trigger_module

    real = trigger_module.poll_table_version

    def recorded(*args: Any) -> Any:
        polled_on.append(threading.current_thread().name)
        return real(*args)

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        default = ThreadPoolExecutor(2)
        loop.set_default_executor(default)
        busy = [asyncio.to_thread(release.wait, GENEROUS) for _ in range(2)]
        waiting = asyncio.gather(*busy)
        try:
            trigger = DeltaTableVersionTrigger(str(tmp_path / "t"), 0, poll_interval=0.01)
            event = await asyncio.wait_for(anext(trigger.run()), GENEROUS / 2)
        finally:
            release.set()
            await waiting
        return event.payload

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trigger_module, "poll_table_version", recorded)
        payload = asyncio.run(main())
    assert payload["status"] == "success" and payload["event"]["version"] == 1
    assert polled_on and all(name.startswith("delta-trigger") for name in polled_on)
