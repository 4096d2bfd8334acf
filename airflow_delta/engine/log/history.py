"""A table's history: the commitInfo of each commit, commit timestamps, and time travel by
timestamp (the latest version committed at or before a moment)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from airflow_delta.engine.errors import (
    CorruptLogError,
    InvalidArgumentError,
    TableNotFoundError,
    VersionNotFoundError,
)
from airflow_delta.engine.log.log_segment import commit_files, list_log
from airflow_delta.engine.log.log_store import FileStatus
from airflow_delta.engine.log.snapshot import load_snapshot
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.log_json import parse_json

Timestamp = datetime | date | str | int | float
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def to_epoch_ms(ts: Timestamp, table: str = "") -> int:
    """Milliseconds since the epoch of a datetime, ISO-8601 string or number of ms;
    InvalidArgumentError (naming `table`) for anything else.

    Naive datetimes and strings without an offset are taken as UTC.

    >>> to_epoch_ms("1970-01-01T00:00:01Z")
    1000
    """
    where = f"Table {table}: " if table else ""
    if isinstance(ts, int | float) and not isinstance(ts, bool):
        return int(ts)
    if isinstance(ts, str):
        text = ts.strip().replace("Z", "+00:00")
        try:
            ts = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidArgumentError(
                f"{where}{ts!r} is not an ISO 8601 timestamp (such as '2024-06-01T00:00:00Z')"
            ) from None
    if not isinstance(ts, date):
        raise InvalidArgumentError(
            f"{where}a timestamp is a datetime, a date, ISO 8601 text or epoch milliseconds, "
            f"not {ts!r}"
        )
    if not isinstance(ts, datetime):
        ts = datetime(ts.year, ts.month, ts.day)
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=UTC)
    # exact integer arithmetic: `ts.timestamp() * 1000` (a float) lands 1 ms early for about one
    # millisecond value in a hundred, and time travel to a commit's own time then misses it
    return (ts - _EPOCH) // _MS


def commit_timestamps(location: TableLocation) -> list[tuple[int, int]]:
    """(version, timestamp ms) of every commit file, made strictly increasing.

    Uses inCommitTimestamp from the versions where the table enabled it, and the commit
    file's modification time before that (adjusted to be monotonic, as Delta does).
    """
    commits = commit_files(list_log(location))
    if not commits:
        raise TableNotFoundError(f"{location.uri} has no commit files")
    config = load_snapshot(location).config
    ict_from = (
        config.in_commit_timestamp_enablement_version or 0
        if config.in_commit_timestamps_enabled
        else None
    )
    out: list[tuple[int, int]] = []
    prev = -1
    for version, f in commits:
        ts = f.modification_time
        if ict_from is not None and version >= ict_from:
            ts = _in_commit_timestamp(location, f) or ts
        ts = max(ts, prev + 1)
        out.append((version, ts))
        prev = ts
    return out


def _in_commit_timestamp(location: TableLocation, f: FileStatus) -> int | None:
    first = location.store.read(f.path).split(b"\n", 1)[0]
    try:
        line = parse_json(first, f.path)
    except CorruptLogError:
        return None
    info = line.get("commitInfo") if isinstance(line, dict) else None
    ict = info.get("inCommitTimestamp") if isinstance(info, dict) else None
    return ict if isinstance(ict, int) and not isinstance(ict, bool) else None


def version_at_timestamp(location: TableLocation, timestamp: Timestamp) -> int:
    """The latest version committed at or before `timestamp`."""
    ts = to_epoch_ms(timestamp, location.uri)
    stamps = commit_timestamps(location)
    eligible = [v for v, t in stamps if t <= ts]
    if not eligible:
        first_v, first_ts = stamps[0]
        raise VersionNotFoundError(
            f"Cannot time travel table {location.uri} to {timestamp}: it is before the "
            f"earliest available commit (version {first_v} at "
            f"{datetime.fromtimestamp(first_ts / 1000, UTC).isoformat()})."
        )
    return eligible[-1]


def history(location: TableLocation, limit: int | None = None) -> list[dict[str, Any]]:
    """commitInfo of each commit plus its `version`, newest first."""
    commits = commit_files(list_log(location))[::-1]
    if limit is not None:
        commits = commits[:limit]
    out = []
    for version, f in commits:
        info: dict[str, Any] = {}
        for line in location.store.read(f.path).splitlines():
            if b'"commitInfo"' in line:
                parsed = parse_json(line, f"{f.path}: the commitInfo line")
                found = parsed.get("commitInfo") if isinstance(parsed, dict) else None
                if found is not None and not isinstance(found, dict):
                    raise CorruptLogError(f"{f.path}: commitInfo is not a JSON object")
                info = dict(found or {})
                break
        info.setdefault("timestamp", f.modification_time)
        out.append({**info, "version": version})
    return out
