"""DeltaTableVersionTrigger, and the version poll it shares with DeltaTableVersionSensor.

A poll answers "does the table have a version after the baseline?" at a cost that does not grow
with the table's history: it probes commit file names from the baseline on (`N.json` exists?)
instead of listing `_delta_log`, because only S3 can list from a name; local and most fsspec
filesystems read the whole directory. Only when the baseline's own commit is gone (log cleanup,
a deleted or recreated table) does it list, from the baseline first, then the whole log.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowFailException
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_delta.engine.delta_log import DeltaLog
from airflow_delta.engine.log.checkpoints import read_last_checkpoint
from airflow_delta.engine.protocol import filenames
from airflow_delta.hooks.delta import DeltaHook

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

#: Seconds between two polls of the trigger (the sensor passes its `poke_interval`).
DEFAULT_POLL_INTERVAL = 60.0


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
        """A version after the baseline (and at least the target), or a recreated table."""
        if self.recreated:
            return True
        return self.version > self.baseline and (
            self.target_version is None or self.version >= self.target_version
        )


def _commit_exists(delta_log: DeltaLog) -> Callable[[int], bool]:
    store = delta_log.store
    # Some fsspec filesystems (gcsfs, adlfs) answer exists() from a cached directory listing.
    store.fs.invalidate_cache(delta_log.log_path)
    return lambda v: store.exists(store.join(delta_log.log_path, filenames.delta_file(v)))


def _last_contiguous(exists: Callable[[int], bool], first: int) -> int:
    """The last of the contiguous versions from `first` (which exists): gallop, then bisect."""
    low, step = first, 1
    while exists(low + step):
        low += step
        step *= 2
    high = low + step  # missing
    while high - low > 1:
        mid = (low + high) // 2
        if exists(mid):
            low = mid
        else:
            high = mid
    return low


def latest_version_since(delta_log: DeltaLog, baseline: int) -> int:
    """The table's latest version, looking only after `baseline` while its commit exists.

    Commits are contiguous, so probing `baseline + 1`, `+ 2`, `+ 4`, ... (then bisecting) finds
    the latest in O(log new versions) existence checks and never reads older log files. When the
    baseline commit is gone, lists from the baseline, then (nothing there) the whole log.
    -1 means no table.

    >>> latest_version_since(DeltaLog.for_table("/data/events"), 9)  # doctest: +SKIP
    12
    """
    exists = _commit_exists(delta_log)
    if exists(baseline + 1):
        return _last_contiguous(exists, baseline + 1)
    if baseline >= 0 and exists(baseline):
        return baseline
    latest = delta_log.latest_version(start=max(baseline, 0))
    if latest < baseline and baseline > 0:
        latest = delta_log.latest_version(start=0)
    return latest


def current_version(delta_log: DeltaLog) -> int:
    """The table's latest version (-1: no table), probing from its `_last_checkpoint` hint.

    >>> current_version(DeltaLog.for_table("/data/events"))  # doctest: +SKIP
    12
    """
    hint = read_last_checkpoint(delta_log.store, delta_log.log_path)
    return latest_version_since(delta_log, hint["version"] if hint else -1)


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
    info = delta_log.commit_info(check.version)
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


class DeltaTableVersionTrigger(BaseTrigger):
    """Fires once the Delta table has a version after `baseline_version` (deferrable sensor).

    Each poll runs `poll_table_version` in a thread (the storage calls block); the one event is
    `{"status": "success", "event": <version_event dict>}`, or `{"status": "error",
    "error_type": ..., "message": ...}` when a poll fails (a recreation that is not allowed too).

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
        """Poll every `poll_interval` seconds; yield one event when done or failed."""
        try:
            hook = DeltaHook(self.delta_conn_id)
            delta_log = await asyncio.to_thread(hook.get_delta_log, self.table_uri)
            while True:
                check = await asyncio.to_thread(
                    poll_table_version,
                    delta_log,
                    self.baseline_version,
                    self.target_version,
                    self.allow_recreation,
                )
                if check.done:
                    event = await asyncio.to_thread(version_event, delta_log, check)
                    yield TriggerEvent({"status": "success", "event": event})
                    return
                log_waiting(self.log, check)
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:
            yield TriggerEvent(
                {"status": "error", "error_type": type(exc).__name__, "message": str(exc)}
            )
