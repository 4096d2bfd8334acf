"""Typed access to the `delta.*` table properties this engine acts on (Delta's DeltaConfigs).

Every property is parsed strictly: a value Delta would refuse (an interval with months or
garbage, a negative retention, a checkpoint interval that is not a positive integer, a boolean
that is neither true nor false) raises `InvalidTablePropertyError` naming the property, the
value and the accepted form. `TableConfig.validate()` checks them all at once; a transaction
calls it before it writes a commit file, so a bad value never fails a commit after it landed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from airflow_delta.engine.errors import InvalidTablePropertyError

DEFAULT_CHECKPOINT_INTERVAL = 10
#: Leaf columns whose stats writers collect by default (delta.dataSkippingNumIndexedCols).
DEFAULT_NUM_INDEXED_COLS = 32
#: Row tracking's properties: enabled, and the names of its materialized columns.
ENABLE_ROW_TRACKING = "delta.enableRowTracking"
MATERIALIZED_ROW_ID = "delta.rowTracking.materializedRowIdColumnName"
MATERIALIZED_ROW_COMMIT_VERSION = "delta.rowTracking.materializedRowCommitVersionColumnName"
DEFAULT_DELETED_FILE_RETENTION = "interval 1 week"
DEFAULT_LOG_RETENTION = "interval 30 days"
ISOLATION_LEVELS = ("Serializable", "WriteSerializable", "SnapshotIsolation")
#: Boolean table properties that turn a table feature on when (and only when) true.
FEATURE_FLAGS = (
    "delta.appendOnly",
    "delta.enableDeletionVectors",
    "delta.enableInCommitTimestamps",
    "delta.enableChangeDataFeed",
    ENABLE_ROW_TRACKING,
    "delta.enableTypeWidening",
)
CHECKPOINT_POLICIES = ("classic", "v2")
#: Properties `delta.feature.<name>=supported` ask for a table feature; they are not kept.
FEATURE_REQUEST_PREFIX = "delta.feature."
COLUMN_MAPPING_MODES = ("none", "name", "id")

_UNIT_MS = {
    "microsecond": 0.001,
    "millisecond": 1,
    "second": 1_000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 7 * 86_400_000,
}
_INTERVAL = re.compile(r"(?:interval\s+)?((?:[+-]?\d+\s+[a-z]+\s*)+)")
_INTERVAL_PART = re.compile(r"([+-]?\d+)\s+([a-z]+)")
_INTERVAL_FORM = "an interval such as 'interval 7 days' or 'interval 2 days 3 hours'"


def parse_interval_ms(text: str, key: str = "interval") -> int:
    """Milliseconds of a Delta interval such as `interval 1 week` or `interval 2 days 3 hours`.

    >>> parse_interval_ms("interval 2 days 3 hours")
    183600000
    """
    body = str(text).strip().lower()
    match = _INTERVAL.fullmatch(body)
    total = 0.0
    if match:
        for number, unit in _INTERVAL_PART.findall(match[1]):
            unit = unit.removesuffix("s")
            if unit not in _UNIT_MS:
                match = None
                break
            total += int(number) * _UNIT_MS[unit]
    if not match:
        raise InvalidTablePropertyError(
            f"Table property {key}={text!r} cannot be parsed: expected {_INTERVAL_FORM} "
            f"(units: {', '.join(_UNIT_MS)}; months and years are not accepted)."
        )
    return int(total)


def _non_negative_interval(conf: Mapping[str, str], key: str, default: str) -> int:
    value = conf.get(key, default)
    ms = parse_interval_ms(value, key)
    if ms < 0:
        raise InvalidTablePropertyError(
            f"Table property {key}={value!r} is negative: it must be at least 0 "
            f"({_INTERVAL_FORM}). Set it with ALTER TABLE ... SET TBLPROPERTIES."
        )
    return ms


def _bool(conf: Mapping[str, str], key: str, default: bool = False) -> bool:
    value = conf.get(key)
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise InvalidTablePropertyError(
            f"Table property {key}={value!r} is not a boolean: use 'true' or 'false'."
        )
    return text == "true"


def _choice(conf: Mapping[str, str], key: str, choices: tuple[str, ...]) -> str:
    """The value of `key` (lower case; the first of `choices` when unset), one of `choices`."""
    value = conf.get(key)
    text = choices[0] if value is None else str(value).lower()  # as readers compare it
    if text not in choices:
        raise InvalidTablePropertyError(
            f"Table property {key}={value!r} is not one of {', '.join(choices)}."
        )
    return text


def _named(prop: Callable[[TableConfig], Any]) -> Any:
    """A property whose InvalidTablePropertyError names the table."""

    def get(self: TableConfig) -> Any:
        try:
            return prop(self)
        except InvalidTablePropertyError as exc:
            if not self.table or self.table in str(exc):
                raise
            raise InvalidTablePropertyError(f"Table {self.table}: {exc}") from None

    get.__doc__ = prop.__doc__
    return property(get)


class TableConfig:
    """The table properties of a Metadata action, parsed."""

    def __init__(self, configuration: Mapping[str, str], table: str = "") -> None:
        self.configuration = dict(configuration)
        self.table = table

    def validate(self) -> TableConfig:
        """Parse every property this engine uses; InvalidTablePropertyError on the first bad
        one, naming the table. Returns self."""
        getters: list[Callable[[], Any]] = [
            lambda: self.checkpoint_interval,
            lambda: self.deleted_file_retention_ms,
            lambda: self.log_retention_ms,
            lambda: self.set_transaction_retention_ms,
            lambda: self.enable_expired_log_cleanup,
            lambda: self.append_only,
            lambda: self.in_commit_timestamps_enabled,
            lambda: self.in_commit_timestamp_enablement_version,
            lambda: self.symlink_manifest_enabled,
            lambda: self.isolation_level,
            lambda: self.num_indexed_cols,
            lambda: self.optimize_write,
            lambda: self.feature_flags,
            lambda: self.checkpoint_policy,
            lambda: self.column_mapping_mode,
            lambda: self.requested_features,
        ]
        for get in getters:
            get()
        return self

    @_named
    def checkpoint_interval(self) -> int:
        """`delta.checkpointInterval`: commits between automatic checkpoints (default 10)."""
        key = "delta.checkpointInterval"
        value = self.configuration.get(key, str(DEFAULT_CHECKPOINT_INTERVAL))
        text = str(value).strip()
        if not text.isdigit() or int(text) <= 0:
            raise InvalidTablePropertyError(
                f"Table property {key}={value!r} must be a positive integer, such as '10'."
            )
        return int(text)

    @property
    def materialized_row_tracking_columns(self) -> tuple[str, ...]:
        """The materialized row-id and row-commit-version column names when row tracking is
        enabled and both are named (`delta.enableRowTracking`, `...materialized*ColumnName`),
        else (): the columns in which rewritten rows keep their row ids and commit versions."""
        conf = self.configuration
        names = (conf.get(MATERIALIZED_ROW_ID), conf.get(MATERIALIZED_ROW_COMMIT_VERSION))
        enabled = str(conf.get(ENABLE_ROW_TRACKING, "false")).lower() == "true"
        return tuple(n for n in names if n) if enabled and all(names) else ()

    @_named
    def num_indexed_cols(self) -> int:
        """`delta.dataSkippingNumIndexedCols`: how many leaf columns, in schema order, get
        stats (default 32; -1: all)."""
        key = "delta.dataSkippingNumIndexedCols"
        value = self.configuration.get(key, str(DEFAULT_NUM_INDEXED_COLS))
        text = str(value).strip()
        if not (text.isdigit() or text == "-1"):
            raise InvalidTablePropertyError(
                f"Table property {key}={value!r} must be -1 (all columns) or an integer >= 0, "
                "such as '32'."
            )
        return int(text)

    @_named
    def deleted_file_retention_ms(self) -> int:
        """`delta.deletedFileRetentionDuration`: how long tombstones are kept (default 1 week)."""
        return _non_negative_interval(
            self.configuration, "delta.deletedFileRetentionDuration", DEFAULT_DELETED_FILE_RETENTION
        )

    @_named
    def set_transaction_retention_ms(self) -> int | None:
        """`delta.setTransactionRetentionDuration`: how long app transactions (`txn`) are kept
        after their `lastUpdated`; None (the default) keeps them forever."""
        key = "delta.setTransactionRetentionDuration"
        if not self.configuration.get(key):
            return None
        return _non_negative_interval(self.configuration, key, "")

    @_named
    def log_retention_ms(self) -> int:
        """`delta.logRetentionDuration`: how long commit files are kept (default 30 days)."""
        return _non_negative_interval(
            self.configuration, "delta.logRetentionDuration", DEFAULT_LOG_RETENTION
        )

    @_named
    def enable_expired_log_cleanup(self) -> bool:
        return _bool(self.configuration, "delta.enableExpiredLogCleanup", True)

    @_named
    def optimize_write(self) -> bool:
        """`delta.autoOptimize.optimizeWrite`: Spark writes shuffle rows by partition value
        first (fewer, larger files; the session conf OPTIMIZE_WRITE_CONF overrides it)."""
        return _bool(self.configuration, "delta.autoOptimize.optimizeWrite")

    @_named
    def feature_flags(self) -> dict[str, bool]:
        """The boolean properties that turn a table feature on (FEATURE_FLAGS), parsed: only
        'true' (any case) enables one ('false', '0' or 'no' must not add a feature to the
        protocol), and no blank around it: readers compare the value as it is."""
        flags = {}
        for key in FEATURE_FLAGS:
            value = self.configuration.get(key)
            if value is not None and str(value) != str(value).strip():
                raise InvalidTablePropertyError(
                    f"Table property {key}={value!r} is not a boolean: use 'true' or 'false'."
                )
            flags[key] = _bool(self.configuration, key)
        return flags

    @_named
    def requested_features(self) -> set[str]:
        """The table features named by `delta.feature.<name>` properties: set to 'supported'
        (or 'enabled'), they add the feature to the protocol, as delta-spark's ALTER TABLE does;
        a commit does not keep them (FEATURE_REQUEST_PREFIX)."""
        names = set()
        for key, value in self.configuration.items():
            if not key.startswith(FEATURE_REQUEST_PREFIX):
                continue
            if str(value).lower() not in ("supported", "enabled") or key == FEATURE_REQUEST_PREFIX:
                raise InvalidTablePropertyError(
                    f"Table property {key}={value!r}: a delta.feature.<name> property takes "
                    "'supported', to add the table feature <name> to the protocol."
                )
            names.add(key.removeprefix(FEATURE_REQUEST_PREFIX))
        return names

    @_named
    def checkpoint_policy(self) -> str:
        """`delta.checkpointPolicy`: 'classic' (the default) or 'v2' (v2 checkpoints, which
        need the v2Checkpoint reader-writer feature)."""
        return _choice(self.configuration, "delta.checkpointPolicy", CHECKPOINT_POLICIES)

    @_named
    def column_mapping_mode(self) -> str:
        """`delta.columnMapping.mode`: 'none' (the default), 'name' or 'id', any case."""
        return _choice(self.configuration, "delta.columnMapping.mode", COLUMN_MAPPING_MODES)

    @_named
    def append_only(self) -> bool:
        return _bool(self.configuration, "delta.appendOnly")

    @_named
    def in_commit_timestamps_enabled(self) -> bool:
        return _bool(self.configuration, "delta.enableInCommitTimestamps")

    @_named
    def in_commit_timestamp_enablement_version(self) -> int | None:
        key = "delta.inCommitTimestampEnablementVersion"
        value = self.configuration.get(key)
        if value is None:
            return None
        if not str(value).strip().isdigit():
            raise InvalidTablePropertyError(
                f"Table property {key}={value!r} must be a version number (an integer >= 0)."
            )
        return int(str(value).strip())

    @_named
    def symlink_manifest_enabled(self) -> bool:
        return _bool(self.configuration, "delta.compatibility.symlinkFormatManifest.enabled")

    @_named
    def isolation_level(self) -> str | None:
        key = "delta.isolationLevel"
        value = self.configuration.get(key)
        if value is not None and value.strip().lower() not in {v.lower() for v in ISOLATION_LEVELS}:
            raise InvalidTablePropertyError(
                f"Table property {key}={value!r} is not an isolation level: use one of "
                f"{', '.join(ISOLATION_LEVELS)}."
            )
        return value
