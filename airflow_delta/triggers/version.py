"""DeltaTableVersionTrigger, and the version poll it shares with DeltaTableVersionSensor.

A poll asks the engine for the table's latest version (`log_segment.latest_version_since`, whose
cost does not grow with the table's history) and compares it with the baseline; it reads no log
file and touches no filesystem itself.

A poll that fails with a transient storage error (`storage_errors.is_transient_storage_error`:
a dropped connection, a timeout, throttling, an HTTP 5xx) is retried, the trigger's retries
spaced by `retry_delay` (doubling, bounded), until the sensor's timeout ends the wait. Any other
error ends the wait at once, with a DeltaTableWaitError (`wait_error`) naming the table, the
baseline and the fix.

DAG files import this module through the sensor, so it loads no engine (pyarrow, fsspec) at
import: each function imports the engine modules it calls, the first poll of the sensor or of
`DeltaTableVersionTrigger.run()` (in the triggerer) loads them.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_delta.hooks.delta import DeltaHook

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

    from airflow_delta.engine.delta_log import DeltaLog

#: Seconds between two polls of the trigger (the sensor passes its `poke_interval`).
DEFAULT_POLL_INTERVAL = 60.0
#: Longest wait (seconds) between two retries after transient errors, unless polls are rarer.
MAX_RETRY_DELAY = 300.0
#: Threads the triggers' blocking storage calls run on (as many as asyncio's default executor
#: has), apart from that executor, which every other trigger's `asyncio.to_thread` shares.
POLL_THREADS = min(32, (os.cpu_count() or 1) + 4)

_T = TypeVar("_T")
_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


async def _in_poll_thread(call: Callable[..., _T], *args: Any) -> _T:
    """`call(*args)` on one of the POLL_THREADS threads (with the caller's context variables,
    as `asyncio.to_thread` keeps them): storage calls that hang then hold up only Delta
    triggers, and other providers' triggers saturating the default executor hold up none."""
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(POLL_THREADS, thread_name_prefix="delta-trigger")
    context = contextvars.copy_context()
    task = functools.partial(context.run, call, *args)
    return await asyncio.get_running_loop().run_in_executor(_executor, task)


class DeltaTableRecreatedError(AirflowFailException):
    """The table's latest version is below the baseline: it was deleted and created again.

    The task fails without retrying: a retry would find the same versions.
    """


@dataclass(frozen=True)
class VersionCheck:
    """What one poll of a table saw.

    :param table: the table URI.
    :param baseline: the version the poll compares with (-1: no table at the baseline).
    :param version: the latest version found (-1: the table does not exist).
    :param target_version: the version the wait needs at least, if any.

    >>> VersionCheck("/data/t", baseline=9, version=12).done
    True
    """

    table: str
    baseline: int
    version: int
    target_version: int | None = None

    @property
    def exists(self) -> bool:
        """Whether the table exists."""
        return self.version >= 0

    @property
    def recreated(self) -> bool:
        """Whether the table is back at a version below the baseline (deleted and created)."""
        return 0 <= self.version < self.baseline

    @property
    def done(self) -> bool:
        """The target version reached (when there is one: a table already past it needs no
        newer version), else a version after the baseline; or a recreated table."""
        if self.recreated:
            return True
        if self.target_version is not None:
            return self.version >= self.target_version
        return self.version > self.baseline


def latest_version_since(delta_log: DeltaLog, baseline: int) -> int:
    """The table's latest version (-1: no table), looking only after `baseline` while it can.

    The engine's `log_segment.latest_version_since`: commit names are probed from the
    baseline on, and the log is listed only when the baseline's own commit is gone.

    >>> latest_version_since(DeltaLog.for_table("/data/events"), 9)  # doctest: +SKIP
    12
    """
    from airflow_delta.engine.log import log_segment

    return log_segment.latest_version_since(delta_log.location, baseline)


def current_version(delta_log: DeltaLog) -> int:
    """The table's latest version (-1: no table), probing from its `_last_checkpoint` hint.

    >>> current_version(DeltaLog.for_table("/data/events"))  # doctest: +SKIP
    12
    """
    from airflow_delta.engine.log import log_segment

    return log_segment.current_version(delta_log.location)


def poll_table_version(
    delta_log: DeltaLog,
    baseline: int,
    target_version: int | None = None,
    allow_recreation: bool = False,
) -> VersionCheck:
    """One poll: the table's latest version compared with `baseline`.

    Raises DeltaTableRecreatedError when the table is back below the baseline and
    `allow_recreation` is False. A table that does not exist is not an error (`exists` False).

    >>> check = poll_table_version(DeltaLog.for_table("/data/events"), 9)  # doctest: +SKIP
    >>> check.done, check.version  # doctest: +SKIP
    (True, 12)
    """
    check = VersionCheck(
        delta_log.table_uri, baseline, latest_version_since(delta_log, baseline), target_version
    )
    if check.recreated and not allow_recreation:
        raise DeltaTableRecreatedError(
            f"Delta table '{check.table}' is at version {check.version}, below the baseline "
            f"version {baseline}: it was deleted and created again. Pass allow_recreation=True to "
            "count a recreation as a change, or set baseline_version to a version of the new "
            "table."
        )
    return check


def version_event(delta_log: DeltaLog, check: VersionCheck) -> dict[str, Any]:
    """The provenance of the version a poll found (XCom value and asset event extra).

    `timestamp` is the commit's inCommitTimestamp, else its commitInfo timestamp (ms since the
    epoch; None when the commit has no commitInfo).

    >>> version_event(log, VersionCheck("/data/t", 9, 12))  # doctest: +SKIP
    {'table': '/data/t', 'version': 12, 'baseline': 9, 'timestamp': 1718000000000,
     'operation': 'WRITE', 'recreated': False}
    """
    from airflow_delta.engine.log import log_segment

    info = log_segment.read_commit_info(delta_log.location, check.version)
    return {
        "table": check.table,
        "version": check.version,
        "baseline": check.baseline,
        "timestamp": (info.in_commit_timestamp or info.timestamp) if info else None,
        "operation": info.operation if info else None,
        "recreated": check.recreated,
    }


def log_waiting(log: Logger, check: VersionCheck) -> None:
    """Log why a poll keeps waiting: the table, its version, the baseline and the target.

    >>> log_waiting(self.log, check)  # doctest: +SKIP
    Delta table '/data/t' is at version 9 (baseline: 9); waiting for a newer version
    """
    if check.target_version is None:
        wanted = "a newer version"
    else:
        wanted = f"version >= {check.target_version}"
    if not check.exists:
        log.info(
            "Delta table '%s' does not exist; waiting for it (baseline: %s)",
            check.table,
            check.baseline,
        )
    else:
        log.info(
            "Delta table '%s' is at version %s (baseline: %s); waiting for %s",
            check.table,
            check.version,
            check.baseline,
            wanted,
        )


def retry_delay(poll_interval: float, attempt: int) -> float:
    """Seconds before retry `attempt` (1, 2, ...) of a poll that failed with a transient error.

    Doubles from min(`poll_interval`, 1 s) and stops growing at max(`poll_interval`,
    MAX_RETRY_DELAY): a short outage costs little waiting, a long one few requests.

    >>> [retry_delay(60.0, attempt) for attempt in (1, 2, 3, 20)]
    [1.0, 2.0, 4.0, 300.0]
    """
    first = max(min(poll_interval, 1.0), 0.01)
    return min(first * 2.0 ** min(attempt - 1, 64), max(poll_interval, MAX_RETRY_DELAY))


def log_transient_error(
    log: Logger, table: str, attempt: int, exc: BaseException, retry: str
) -> None:
    """Log a poll that failed with a transient error: the table, the attempt, when it retries.

    >>> log_transient_error(self.log, "/data/t", 2, TimeoutError("x"), "in 2 s")  # doctest: +SKIP
    Transient storage error polling Delta table '/data/t' (attempt 2): TimeoutError: x;
    retrying in 2 s
    """
    log.warning(
        "Transient storage error polling Delta table '%s' (attempt %s): %s: %s; retrying %s",
        table,
        attempt,
        type(exc).__name__,
        exc,
        retry,
    )


def how_to_fix(exc: BaseException, delta_conn_id: str | None) -> str:
    """What to do about a poll's permanent error ("" when its own message says it already).

    >>> how_to_fix(PermissionError(13, "Permission denied"), "delta_s3")[:50]
    "Check the credentials of the connection 'delta_s3'"
    """
    from airflow_delta.engine.errors import DeltaError
    from airflow_delta.engine.log.storage_errors import is_access_error

    source = f"the connection '{delta_conn_id}'" if delta_conn_id else "the environment"
    if is_access_error(exc):  # also the engine's StorageAccessError: name the connection
        return (
            f"Check the credentials of {source}: they must be allowed to list and read the "
            "table's _delta_log."
        )
    if isinstance(exc, DeltaError | DeltaTableRecreatedError):
        return ""  # the engine's errors and the recreation name the table and the fix
    return (
        f"Check table_uri and the storage options of {source} (and that the filesystem's fsspec "
        "package is installed), then clear the task."
    )


def failure_message(
    table: str, error_type: str, message: str, fix: str = "", baseline: int | None = None
) -> str:
    """The error of a task whose wait for a new version failed.

    >>> failure_message("/data/t", "TimeoutError", "read", "Retry.")
    "Waiting for a new version of Delta table '/data/t' failed: TimeoutError: read. Retry."
    >>> failure_message("/data/t", "CorruptLogError", "bad", baseline=9)
    "Waiting for a new version of Delta table '/data/t' (baseline: 9) failed: CorruptLogError: bad"
    """
    since = "" if baseline is None else f" (baseline: {baseline})"
    text = (
        f"Waiting for a new version of Delta table '{table}'{since} failed: {error_type}: {message}"
    )
    if not fix:
        return text
    return f"{text} {fix}" if text.endswith(".") else f"{text}. {fix}"


def error_event(
    exc: BaseException, delta_conn_id: str | None, baseline: int | None = None
) -> dict[str, Any]:
    """The payload of the trigger's error event for `exc` (`wait_error` reads it back).

    >>> error_event(PermissionError("denied"), None, 9)["error_type"]
    'PermissionError'
    """
    return {
        "status": "error",
        "error_type": type(exc).__name__,
        "message": str(exc),
        "fix": how_to_fix(exc, delta_conn_id),
        "baseline": baseline,
    }


class DeltaTableWaitError(AirflowException):
    """Waiting for a new version of a Delta table failed with an error that is not transient.

    The message names the table, the baseline, the error and the fix; the attributes hold them
    for callbacks: `table`, `baseline` (None when unknown), `error_type` (the class name of the
    storage or engine error, such as "CorruptLogError" or "PermissionError").
    """

    table: str = ""
    baseline: int | None = None
    error_type: str = ""


def wait_error(table: str, event: Mapping[str, Any]) -> DeltaTableWaitError:
    """The DeltaTableWaitError of an error event (the trigger's, or a poke's `error_event`).

    >>> wait_error("/t", {"error_type": "CorruptLogError", "message": "bad"}).error_type
    'CorruptLogError'
    """
    baseline = event.get("baseline")
    baseline = baseline if isinstance(baseline, int) else None
    error_type = str(event.get("error_type"))
    error = DeltaTableWaitError(
        failure_message(
            table, error_type, str(event.get("message")), event.get("fix") or "", baseline
        )
    )
    error.table, error.baseline, error.error_type = table, baseline, error_type
    return error


class DeltaTableVersionTrigger(BaseTrigger):
    """Fires once the Delta table has a version after `baseline_version` (deferrable sensor).

    Each poll runs `poll_table_version` in a thread (the storage calls block); the one event is
    `{"status": "success", "event": <version_event dict>}`, or `{"status": "error",
    "error_type": ..., "message": ..., "fix": ...}` when a poll fails with an error that is not
    a transient storage error (a recreation that is not allowed too). Transient errors are
    retried, with exponential backoff, until the sensor's timeout.

    :param table_uri: the table (local path, file://, s3://, ...).
    :param baseline_version: the version to compare with (-1: the table did not exist).
    :param target_version: fire only once the version is at least this.
    :param delta_conn_id: the `delta` connection with the storage options; None for none.
    :param poll_interval: seconds between two polls.
    :param allow_recreation: a version below the baseline is a change (else an error event).

    Example::

        self.defer(
            trigger=DeltaTableVersionTrigger("s3://lake/events", baseline_version=9),
            method_name="execute_complete",
        )
    """

    def __init__(
        self,
        table_uri: str,
        baseline_version: int,
        target_version: int | None = None,
        delta_conn_id: str | None = None,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        allow_recreation: bool = False,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.baseline_version = baseline_version
        self.target_version = target_version
        self.delta_conn_id = delta_conn_id
        self.poll_interval = poll_interval
        self.allow_recreation = allow_recreation

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The class path and the keyword arguments that rebuild this trigger."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "baseline_version": self.baseline_version,
                "target_version": self.target_version,
                "delta_conn_id": self.delta_conn_id,
                "poll_interval": self.poll_interval,
                "allow_recreation": self.allow_recreation,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll every `poll_interval` seconds; yield one event when done or failed.

        A transient storage error is retried after `retry_delay` (logged with the table and the
        attempt); the wait then goes on until the sensor's timeout cancels the trigger.
        """
        from airflow_delta.engine.log.storage_errors import is_transient_storage_error

        delta_log: DeltaLog | None = None
        attempt = 0  # consecutive polls failed with a transient error
        while True:
            try:
                if delta_log is None:
                    hook = DeltaHook(self.delta_conn_id)
                    delta_log = await _in_poll_thread(hook.get_delta_log, self.table_uri)
                check = await _in_poll_thread(
                    poll_table_version,
                    delta_log,
                    self.baseline_version,
                    self.target_version,
                    self.allow_recreation,
                )
                found = (
                    await _in_poll_thread(version_event, delta_log, check) if check.done else None
                )
            except Exception as exc:
                if not is_transient_storage_error(exc):
                    yield TriggerEvent(error_event(exc, self.delta_conn_id, self.baseline_version))
                    return
                attempt += 1
                delay = retry_delay(self.poll_interval, attempt)
                log_transient_error(self.log, self.table_uri, attempt, exc, f"in {delay:g} s")
                await asyncio.sleep(delay)
                continue
            if found is not None:
                yield TriggerEvent({"status": "success", "event": found})
                return
            if attempt:
                self.log.info(
                    "Polling Delta table '%s' works again after %s failed attempt(s)",
                    self.table_uri,
                    attempt,
                )
                attempt = 0
            log_waiting(self.log, check)
            await asyncio.sleep(self.poll_interval)
