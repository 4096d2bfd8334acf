"""Typed access to the `delta.*` table properties this engine acts on (Delta's DeltaConfigs)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from airflow_delta.engine.errors import CorruptLogError

DEFAULT_CHECKPOINT_INTERVAL = 10
DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
DEFAULT_LOG_RETENTION = "interval 30 days"

_UNIT_MS = {
    "microsecond": 0.001,
    "millisecond": 1,
    "second": 1_000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}
_INTERVAL_PART = re.compile(r"(-?\d+)\s*([a-z]+?)s?\b")


def parse_interval_ms(text: str) -> int:
    """Milliseconds of a Delta interval such as `interval 1 week` or `interval 2 days 3 hours`."""
    body = text.strip().lower()
    body = body.removeprefix("interval").strip()
    parts = _INTERVAL_PART.findall(body)
    if not parts or any(unit not in _UNIT_MS for _, unit in parts):
        raise CorruptLogError(
            f"cannot parse the interval {text!r} (expected e.g. 'interval 7 days')"
        )
    return int(sum(int(n) * _UNIT_MS[unit] for n, unit in parts))


def _bool(conf: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = conf.get(key)
    return default if value is None else str(value).strip().lower() == "true"


class TableConfig:
    """The table properties of a Metadata action, parsed."""

    def __init__(self, configuration: Mapping[str, str]) -> None:
        self.configuration = dict(configuration)

    @property
    def checkpoint_interval(self) -> int:
        """`delta.checkpointInterval`: commits between automatic checkpoints (default 10)."""
        value = int(self.configuration.get("delta.checkpointInterval", DEFAULT_CHECKPOINT_INTERVAL))
        return max(value, 1)

    @property
    def deleted_file_retention_ms(self) -> int:
        """`delta.deletedFileRetentionDuration`: how long tombstones are kept (default 1 week)."""
        return parse_interval_ms(
            self.configuration.get(
                "delta.deletedFileRetentionDuration", DEFAULT_DELETED_FILE_RETENTION
            )
        )

    @property
    def set_transaction_retention_ms(self) -> int | None:
        """`delta.setTransactionRetentionDuration`: how long app transactions (`txn`) are kept
        after their `lastUpdated`; None (the default) keeps them forever."""
        value = self.configuration.get("delta.setTransactionRetentionDuration")
        return parse_interval_ms(value) if value else None

    @property
    def log_retention_ms(self) -> int:
        """`delta.logRetentionDuration`: how long commit files are kept (default 30 days)."""
        return parse_interval_ms(
            self.configuration.get("delta.logRetentionDuration", DEFAULT_LOG_RETENTION)
        )

    @property
    def enable_expired_log_cleanup(self) -> bool:
        return _bool(self.configuration, "delta.enableExpiredLogCleanup", True)

    @property
    def append_only(self) -> bool:
        return _bool(self.configuration, "delta.appendOnly")

    @property
    def in_commit_timestamps_enabled(self) -> bool:
        return _bool(self.configuration, "delta.enableInCommitTimestamps")

    @property
    def in_commit_timestamp_enablement_version(self) -> int | None:
        value = self.configuration.get("delta.inCommitTimestampEnablementVersion")
        return None if value is None else int(value)

    @property
    def symlink_manifest_enabled(self) -> bool:
        return _bool(self.configuration, "delta.compatibility.symlinkFormatManifest.enabled")

    @property
    def isolation_level(self) -> str | None:
        return self.configuration.get("delta.isolationLevel")
