"""A table's history (`log.history`): commitInfo newest first, commit timestamps made strictly
increasing, and time travel by timestamp in any of the forms a user passes. Time travel through
snapshots is in test_snapshot.py."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, timedelta

import pytest

from airflow_delta.engine.errors import VersionNotFoundError
from airflow_delta.engine.log.history import (
    commit_timestamps,
    history,
    to_epoch_ms,
    version_at_timestamp,
)
from airflow_delta.engine.log.table_location import TableLocation
from tests.delta_log_builder import add, make_table, write_commit


def test_to_epoch_ms_of_every_timestamp_form() -> None:
    assert to_epoch_ms(1_700_000_000_123) == 1_700_000_000_123
    assert to_epoch_ms("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert to_epoch_ms("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    assert to_epoch_ms("2023-11-14 22:13:20") == 1_700_000_000_000  # no offset: UTC
    assert to_epoch_ms(datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)) == 1_700_000_000_000
    assert to_epoch_ms(date(1970, 1, 2)) == 86_400_000
    with pytest.raises(ValueError, match="'yesterday' is not an ISO 8601 timestamp"):
        to_epoch_ms("yesterday")


def test_equal_modification_times_become_strictly_increasing(tmp_path) -> None:
    make_table(tmp_path, 3)
    for v in range(3):
        os.utime(tmp_path / "_delta_log" / f"{v:020d}.json", (1_700_000_000, 1_700_000_000))
    location = TableLocation.of(str(tmp_path))
    assert commit_timestamps(location) == [
        (0, 1_700_000_000_000),
        (1, 1_700_000_000_001),
        (2, 1_700_000_000_002),
    ]
    assert version_at_timestamp(location, 1_700_000_000_001) == 1
    with pytest.raises(VersionNotFoundError, match="earliest available commit \\(version 0 at"):
        version_at_timestamp(location, "2023-11-14T22:13:19Z")


def test_history_newest_first_with_a_limit(tmp_path) -> None:
    make_table(tmp_path, 2)
    write_commit(tmp_path, 2, [add("f2")])  # no commitInfo: the file's time
    location = TableLocation.of(str(tmp_path))
    newest, *older = history(location)
    mtime_ns = (tmp_path / "_delta_log" / f"{2:020d}.json").stat().st_mtime_ns
    assert newest == {"timestamp": mtime_ns // 10**6, "version": 2}
    assert [(h["version"], h["operation"]) for h in older] == [(1, "WRITE"), (0, "CREATE")]
    assert [h["version"] for h in history(location, limit=2)] == [2, 1]


@pytest.mark.parametrize("ms", [1_076_321_715_626, 2_181_185_690_174])
def test_time_travel_to_a_commits_own_datetime_finds_it(tmp_path, ms: int) -> None:
    """A datetime exactly at a commit's millisecond converts to that millisecond (the float
    `timestamp() * 1000` came out 1 ms early for such values, and time travel missed the
    commit)."""
    make_table(tmp_path, 2)
    for v, stamp in ((0, ms - 1000), (1, ms)):
        path = tmp_path / "_delta_log" / f"{v:020d}.json"
        os.utime(path, ns=(stamp * 1_000_000, stamp * 1_000_000))
    location = TableLocation.of(str(tmp_path))
    assert commit_timestamps(location)[1] == (1, ms)
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    assert to_epoch_ms(moment) == ms
    assert to_epoch_ms(moment.isoformat()) == ms
    assert version_at_timestamp(location, moment) == 1
