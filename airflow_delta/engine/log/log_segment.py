"""The files of `_delta_log`: listing, log segments (which files make up a version), the latest
version, and reading one commit's commitInfo.

A log segment is the newest complete checkpoint at or below a version plus the commits after
it. Segments are built from one listing; `_last_checkpoint` only tells where to start listing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from airflow_delta.engine.errors import CorruptLogError, TableNotFoundError, VersionNotFoundError
from airflow_delta.engine.log.checkpoints import read_last_checkpoint
from airflow_delta.engine.log.log_store import FileStatus
from airflow_delta.engine.log.replay import parse_log_batch
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.actions import CommitInfo
from airflow_delta.engine.protocol.filenames import LogFileName

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LogSegment:
    """The newest complete checkpoint at or below `version`, and the commits after it."""

    log_path: str
    version: int
    deltas: tuple[FileStatus, ...]
    checkpoint_files: tuple[FileStatus, ...]
    checkpoint_version: int | None
    last_commit_timestamp: int


def complete_checkpoints(listing: list[FileStatus]) -> dict[int, list[FileStatus]]:
    """Complete checkpoints by version; multi-part ones with a missing part are ignored."""
    return _complete_checkpoints(_parsed(listing, "checkpoint"))


def _parsed(listing: list[FileStatus], *kinds: str) -> list[tuple[LogFileName, FileStatus]]:
    """The log files of `listing` of the `kinds` (commit, checkpoint, ...), their names parsed."""
    out = []
    for f in listing:
        parsed = filenames.parse_log_file_name(f.name)
        if parsed is not None and parsed.kind in kinds:
            out.append((parsed, f))
    return out


def _complete_checkpoints(
    checkpoint_files: list[tuple[LogFileName, FileStatus]],
) -> dict[int, list[FileStatus]]:
    single: dict[int, list[FileStatus]] = {}
    multi: dict[tuple[int, int], dict[int, FileStatus]] = {}
    for parsed, f in checkpoint_files:
        if parsed.num_parts is None:
            single.setdefault(parsed.version, [f])
        else:
            multi.setdefault((parsed.version, parsed.num_parts), {})[parsed.part] = f  # type: ignore[index]
    complete = dict(single)
    for (version, num_parts), parts in multi.items():
        if version not in complete and set(parts) == set(range(1, num_parts + 1)):
            complete[version] = [parts[i] for i in range(1, num_parts + 1)]
    return complete


def build_log_segment(
    table: str,
    log_path: str,
    listing: list[FileStatus],
    version: int | None = None,
    exclude_checkpoints: frozenset[int] = frozenset(),
    use_compactions: bool = True,
) -> LogSegment:
    """Choose the files that reconstruct `version` (the latest when None) from a listing.

    With `use_compactions`, a log compaction file `x.y.compacted.json` stands in for the
    commits x to y when they all belong to the segment and y is not its last version (whose
    own commit keeps the commitInfo), the longest such file first.
    """
    files = _parsed(listing, "commit", "checkpoint", "compaction")  # each name parsed once
    commits = {parsed.version: f for parsed, f in files if parsed.kind == "commit"}
    checkpoints = {
        v: cp_files
        for v, cp_files in _complete_checkpoints(
            [(parsed, f) for parsed, f in files if parsed.kind == "checkpoint"]
        ).items()
        if v not in exclude_checkpoints
    }
    latest = max([*commits, *checkpoints], default=-1)
    if latest < 0:
        raise TableNotFoundError(
            f"{table} is not a Delta table: {log_path} holds no commit or checkpoint. "
            "Check the path, or create the table first."
        )
    target = latest if version is None else version
    if target > latest or target < 0:
        raise VersionNotFoundError(
            f"Cannot time travel table {table} to version {target}: "
            f"available versions end at {latest}."
        )
    cp_version = max((v for v in checkpoints if v <= target), default=None)
    start = 0 if cp_version is None else cp_version + 1
    missing = [v for v in range(start, target + 1) if v not in commits]
    if missing:
        present = sorted(v for v in commits if v <= target)
        if cp_version is None and 0 not in commits:
            earliest = _earliest(commits, checkpoints)
            if version is not None:
                raise VersionNotFoundError(
                    f"Cannot time travel table {table} to version {target}: its history was "
                    f"cleaned up; the earliest recoverable version is {earliest}."
                )
            raise CorruptLogError(
                f"Table {table}: commits before version {earliest} are missing and no "
                "checkpoint covers them."
            )
        raise CorruptLogError(
            f"Table {table}: versions are not contiguous: missing {_ranges(missing)} between "
            f"{'checkpoint ' + str(cp_version) if cp_version is not None else 'version 0'} and "
            f"version {target} (commits present: {_ranges(present)}). The log is corrupt; "
            "restore the missing commit files."
        )
    if use_compactions:
        compactions = [(parsed, f) for parsed, f in files if parsed.kind == "compaction"]
        deltas = _with_compactions(compactions, commits, start, target)
    else:
        deltas = tuple(commits[v] for v in range(start, target + 1))
    cp_files = tuple(checkpoints[cp_version]) if cp_version is not None else ()
    last = commits.get(target) or cp_files[-1]
    return LogSegment(log_path, target, deltas, cp_files, cp_version, last.modification_time)


def _with_compactions(
    compactions: list[tuple[LogFileName, FileStatus]],
    commits: dict[int, FileStatus],
    start: int,
    target: int,
) -> tuple[FileStatus, ...]:
    """The commits from `start` to `target`, runs of them replaced by the compaction files
    that cover exactly such a run (the longest from each version)."""
    longest: dict[int, tuple[int, FileStatus]] = {}
    for parsed, f in compactions:
        if parsed.end_version is None:
            continue
        first, end = parsed.version, parsed.end_version
        if start <= first < end < target and end > longest.get(first, (first, f))[0]:
            longest[first] = (end, f)
    deltas: list[FileStatus] = []
    version = start
    while version <= target:
        end, f = longest.get(version, (version, commits[version]))
        deltas.append(f)
        version = end + 1
    return tuple(deltas)


def _earliest(commits: dict[int, FileStatus], checkpoints: dict[int, list[FileStatus]]) -> int:
    return min(checkpoints, default=min(commits, default=0))


def _ranges(versions: list[int]) -> str:
    """`[0, 2, 3, 4]` as `0, 2-4`."""
    out: list[str] = []
    for v in versions:
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


def list_log(location: TableLocation, start_name: str = "") -> list[FileStatus]:
    """The files of `_delta_log` from `start_name` on, in name order.

    Raises TableNotFoundError when a full listing finds nothing.
    """
    try:
        listing = location.store.list_from(location.log_path, start_name)
    except NotADirectoryError:
        listing = []
    if not listing and not start_name:
        what = "does not exist" if not location.store.exists(location.log_path) else "is empty"
        raise TableNotFoundError(
            f"{location.uri} is not a Delta table: {location.log_path} {what}. "
            "Check the path, or create the table first."
        )
    return listing


def commit_files(listing: list[FileStatus]) -> list[tuple[int, FileStatus]]:
    """(version, file) of every commit file in `listing`, in version order."""
    return [
        (p.version, f)
        for f in listing
        if (p := filenames.parse_log_file_name(f.name)) and p.kind == "commit"
    ]


def segment_from_hint(location: TableLocation) -> LogSegment | None:
    """The latest log segment found by listing from `_last_checkpoint`, if it is sound."""
    hint = read_last_checkpoint(location.store, location.log_path)
    if hint is None:
        return None
    listing = location.store.list_from(location.log_path, filenames.version_prefix(hint["version"]))
    try:
        segment = build_log_segment(
            location.uri, location.log_path, listing, use_compactions=location.use_log_compaction
        )
    except (CorruptLogError, TableNotFoundError, VersionNotFoundError):
        return None
    if segment.checkpoint_version is None:
        log.info(
            "Ignoring _last_checkpoint of %s: checkpoint %s not found",
            location.uri,
            hint["version"],
        )
        return None
    return segment


def segment_at(location: TableLocation, version: int, checkpoint_interval: int) -> LogSegment:
    """The log segment of `version`, found without listing the whole log when it can be.

    Writers checkpoint at the multiples of the table's `delta.checkpointInterval`: the log is
    listed from the one at or below `version` first. When that listing holds a complete
    checkpoint at or below `version`, it is the newest one (every later name was listed) and
    the segment is sound; otherwise (another interval then, no checkpoint written) the whole
    log is listed, as time travel does. A RESTORE to version 500 of a 1,000-commit log lists
    and parses a few names instead of 1,100.
    """
    if checkpoint_interval > 0 and version >= checkpoint_interval:
        start = filenames.version_prefix(version - version % checkpoint_interval)
        end = filenames.version_prefix(version + 1)  # later files need no parsing
        listing = location.store.list_range(location.log_path, start, end)
        use_compactions = location.use_log_compaction
        try:
            segment = build_log_segment(
                location.uri, location.log_path, listing, version, use_compactions=use_compactions
            )
        except (CorruptLogError, TableNotFoundError, VersionNotFoundError):
            segment = None  # the whole listing tells what is wrong, if anything is
        if segment is not None and segment.checkpoint_version is not None:
            return segment
    return build_log_segment(
        location.uri,
        location.log_path,
        list_log(location),
        version,
        use_compactions=location.use_log_compaction,
    )


def latest_version(location: TableLocation, start: int = 0) -> int:
    """The newest commit version, listing only from `start` (`start - 1` when none)."""
    listing = location.store.list_from(location.log_path, filenames.version_prefix(start))
    return max((v for v, _ in commit_files(listing)), default=start - 1)


def read_commit_info(location: TableLocation, version: int) -> CommitInfo | None:
    """The commitInfo of commit `version` (None when the commit has none).

    Raises FileNotFoundError when the commit file is gone.
    """
    path = location.log_file(filenames.delta_file(version))
    return parse_log_batch(location.store.read(path), path).commit_info


def latest_version_since(location: TableLocation, known_version: int) -> int:
    """The table's newest commit version, found from a version the caller already knows.

    -1 means no table. The cost does not grow with the table's history: while commit
    `known_version + 1` exists, the newest is found by probing commit names (`known + 1`,
    `+ 2`, `+ 4`, ..., then bisecting; commits are contiguous), O(log new versions) probes that
    read no log file older than `known_version`, and no listing (local and most fsspec
    filesystems list a whole directory; only S3 lists from a name). When neither
    `known_version + 1` nor `known_version` exists (log cleanup, a deleted or recreated table,
    a `known_version` of -1 on a log cleaned up to a checkpoint), the log is listed from
    `known_version`, then from the `_last_checkpoint` hint below it, then whole. A result
    below `known_version` means the table was deleted and created again.

    >>> latest_version_since(TableLocation.of("/data/events"), 9)  # doctest: +SKIP
    12
    """
    if _commit_exists(location, known_version + 1):
        return _last_contiguous(location, known_version + 1)
    if known_version >= 0 and _commit_exists(location, known_version):
        return known_version
    latest = latest_version(location, max(known_version, 0))
    if latest >= known_version or known_version <= 0:
        return latest
    hint = read_last_checkpoint(location.store, location.log_path)
    if hint is not None and hint["version"] < known_version:
        latest = latest_version(location, hint["version"])
        if latest >= hint["version"]:
            return latest
    return latest_version(location, 0)


def current_version(location: TableLocation) -> int:
    """The table's newest commit version (-1: no table), probed from its `_last_checkpoint`.

    >>> current_version(TableLocation.of("/data/events"))  # doctest: +SKIP
    12
    """
    hint = read_last_checkpoint(location.store, location.log_path)
    return latest_version_since(location, hint["version"] if hint else -1)


def _commit_exists(location: TableLocation, version: int) -> bool:
    """Whether commit `version` exists (`LogStore.exists` asks the storage, not a cache)."""
    return version >= 0 and location.store.exists(location.log_file(filenames.delta_file(version)))


def _last_contiguous(location: TableLocation, first: int) -> int:
    """The last of the contiguous commits from `first` (which exists): gallop, then bisect."""
    low, step = first, 1
    while _commit_exists(location, low + step):
        low += step
        step *= 2
    high = low + step  # missing
    while high - low > 1:
        mid = (low + high) // 2
        if _commit_exists(location, mid):
            low = mid
        else:
            high = mid
    return low
