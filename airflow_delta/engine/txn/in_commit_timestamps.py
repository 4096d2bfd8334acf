"""In-commit timestamps (the `inCommitTimestamp` writer feature) of a commit attempt.

Per the protocol, a commit of a table with `delta.enableInCommitTimestamps` carries an
`inCommitTimestamp` in its commitInfo: the attempt's wall clock, but at least one millisecond
after the previous commit's. A commit that turns the feature on for a table that has earlier
commits also records the provenance in the table properties
`delta.inCommitTimestampEnablementVersion` (its own version) and
`delta.inCommitTimestampEnablementTimestamp` (its own inCommitTimestamp), and its timestamp is
later than the previous commit file's modification time: readers (delta-spark,
delta-kernel-rs and so DuckDB, this engine's `commit_timestamps`) take the commit times of the
versions before it from the files' modification times and after it from the commitInfo.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from airflow_delta.engine.log.log_segment import read_commit_info
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.actions import Action, Metadata
from airflow_delta.engine.protocol.config import TableConfig

ENABLEMENT_VERSION = "delta.inCommitTimestampEnablementVersion"
ENABLEMENT_TIMESTAMP = "delta.inCommitTimestampEnablementTimestamp"


def in_commit_timestamp(
    location: TableLocation, version: int, stale: Callable[[], Exception], enabling: bool
) -> int:
    """The inCommitTimestamp of commit `version`: wall clock, but strictly after the previous
    commit's inCommitTimestamp, and when the commit is `enabling` the feature on a table with
    earlier commits, strictly after the previous commit file's modification time. Raises
    `stale()` when the previous commit file is gone (expired-log cleanup passed this writer).
    """
    now = int(time.time() * 1000)
    if version == 0:
        return now
    try:
        previous = read_commit_info(location, version - 1)
    except FileNotFoundError:
        raise stale() from None
    prev_ict = (previous.in_commit_timestamp if previous else None) or 0
    stamp = max(now, prev_ict + 1)
    if enabling:
        name = filenames.delta_file(version - 1)
        listed = location.store.list_from(location.log_path, filenames.version_prefix(version - 1))
        mtime = next((f.modification_time for f in listed if f.name == name), None)
        if mtime is None:
            raise stale()
        stamp = max(stamp, mtime + 1)
    return stamp


def enables_in_commit_timestamps(actions: Sequence[Action], read_metadata: Metadata | None) -> bool:
    """Whether `actions` turn in-commit timestamps on for a table that has earlier commits
    (`read_metadata`, the metadata the transaction read, None for a new table) without them."""
    if read_metadata is None:
        return False
    if TableConfig(read_metadata.configuration).in_commit_timestamps_enabled:
        return False
    return any(
        isinstance(a, Metadata) and TableConfig(a.configuration).in_commit_timestamps_enabled
        for a in actions
    )


def with_enablement(actions: Sequence[Action], version: int, timestamp: int) -> list[Action]:
    """`actions`, their metadata recording that commit `version` (at `timestamp`) enabled
    in-commit timestamps."""
    provenance = {ENABLEMENT_VERSION: str(version), ENABLEMENT_TIMESTAMP: str(timestamp)}
    return [
        replace(a, configuration={**a.configuration, **provenance})
        if isinstance(a, Metadata)
        else a
        for a in actions
    ]
