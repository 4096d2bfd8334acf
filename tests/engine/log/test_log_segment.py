"""The log probes of log_segment on real tables: `latest_version_since` and `current_version`.

Tables are made by `DeltaLog.create_table` and real commits (tests/txn_helpers.py), or
written by hand (tests/delta_log_builder.py) where a test needs an exact log. To show
what a probe costs, some tests wrap the table's own log store in a spy that records each
`list_from` and `read` and passes it through: nothing is faked.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import VersionNotFoundError
from airflow_delta.engine.log.log_segment import (
    LogSegment,
    build_log_segment,
    current_version,
    latest_version_since,
    list_log,
    segment_at,
)
from airflow_delta.engine.log.log_store import LocalLogStore
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol import filenames
from tests.delta_log_builder import add, commit_info, make_table, write_commit
from tests.txn_helpers import SCHEMA, append, new_table


def table_at(path: Path, latest: int) -> DeltaLog:
    """A real table at `path` with versions 0 .. `latest` (a checkpoint at 10, 20, ...)."""
    log = new_table(path)
    for _ in range(latest):
        append(log)
    return log


class Spy:
    """Records the listings (`list_from` and `list_range`: on local disk the one lists through
    the other), `read` and `exists` calls of a location's log store, passing them on (`read`
    records reads and existence probes alike)."""

    def __init__(self, location: TableLocation, monkeypatch: pytest.MonkeyPatch) -> None:
        self.listed: list[str] = []  # start names
        self.read: list[str] = []  # file names
        store = location.store
        lister = "list_range" if isinstance(store, LocalLogStore) else "list_from"
        monkeypatch.setattr(store, lister, self._wrap(getattr(store, lister), self.listed, 1))
        monkeypatch.setattr(store, "read", self._wrap(store.read, self.read, 0))
        monkeypatch.setattr(store, "exists", self._wrap(store.exists, self.read, 0))

    @staticmethod
    def _wrap(call: Callable[..., Any], record: list[str], arg: int) -> Callable[..., Any]:
        def spied(*args: Any, **kwargs: Any) -> Any:
            value = args[arg] if len(args) > arg else kwargs.get("start_name", "")
            record.append(value.rsplit("/", 1)[-1] if arg == 0 else value)
            return call(*args, **kwargs)

        return spied

    def versions_read(self) -> list[int]:
        """Versions of the commit files read (probed), in order."""
        parsed = [filenames.parse_log_file_name(name) for name in self.read]
        return [p.version for p in parsed if p is not None and p.kind == "commit"]


def test_no_table_is_minus_one(tmp_path: Path) -> None:
    missing = TableLocation.of(str(tmp_path / "missing"))
    (tmp_path / "empty" / "_delta_log").mkdir(parents=True)
    empty = TableLocation.of(str(tmp_path / "empty"))
    for location in (missing, empty):
        for known in (-1, 0, 7):
            assert latest_version_since(location, known) == -1, (location, known)
        assert current_version(location) == -1


def test_the_latest_version_from_any_known_version(tmp_path: Path) -> None:
    log = table_at(tmp_path / "t", 5)
    for known in range(-1, 6):
        assert latest_version_since(log.location, known) == 5, known
    for known in (6, 7, 40):  # ahead of the table: it was recreated (or the caller is wrong)
        assert latest_version_since(log.location, known) == 5, known
    assert current_version(log.location) == 5


def test_new_commits_are_probed_without_listing_or_reading_older_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = table_at(tmp_path / "t", 3)
    for _ in range(37):
        append(log)  # 40 now
    location = TableLocation.of(str(tmp_path / "t"))
    spy = Spy(location, monkeypatch)
    assert latest_version_since(location, 3) == 40
    assert spy.listed == []
    assert min(spy.versions_read()) == 4  # nothing at or below the known version
    assert len(spy.read) <= 2 * 6 + 1  # gallop and bisect over 37 new versions: O(log n)
    spy.read.clear()
    assert latest_version_since(location, 40) == 40  # nothing new: two probes
    assert (spy.versions_read(), spy.listed) == ([41, 40], [])


def test_after_log_cleanup_lists_from_the_known_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = table_at(tmp_path / "t", 12)  # checkpoint at 10
    log_dir = tmp_path / "t" / "_delta_log"
    for v in range(10):  # what an expired-log cleanup leaves: checkpoint 10 and later commits
        (log_dir / filenames.delta_file(v)).unlink()
    location = TableLocation.of(str(tmp_path / "t"))
    spy = Spy(location, monkeypatch)
    assert latest_version_since(location, 4) == 12
    assert spy.listed == [filenames.version_prefix(4)]
    assert latest_version_since(location, -1) == 12  # version 0 is gone too
    assert current_version(log.location) == 12


def test_a_recreated_table_is_listed_from_its_checkpoint_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = tmp_path / "t"
    table_at(uri, 25)
    shutil.rmtree(uri)
    table_at(uri, 12)  # the new table: checkpoint 10, latest 12
    location = TableLocation.of(str(uri))
    spy = Spy(location, monkeypatch)
    assert latest_version_since(location, 25) == 12
    # from the known version (nothing), then from the hint: never the whole log
    assert spy.listed == [filenames.version_prefix(25), filenames.version_prefix(10)]


def test_a_stale_checkpoint_hint_falls_back_to_the_whole_log(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    for v in range(4):
        write_commit(uri, v, [commit_info()])
    (uri / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 30, "size": 1}))
    location = TableLocation.of(str(uri))
    assert latest_version_since(location, 20) == 3  # hint 30 is above 20: not used
    (uri / "_delta_log" / "_last_checkpoint").write_text(json.dumps({"version": 9, "size": 1}))
    assert latest_version_since(location, 20) == 3  # nothing from hint 9: the whole log
    assert current_version(location) == 3  # hint 9 has no commit: listed from 9, then whole


def test_a_broken_checkpoint_hint_is_ignored(tmp_path: Path) -> None:
    log = table_at(tmp_path / "t", 12)
    (tmp_path / "t" / "_delta_log" / "_last_checkpoint").write_text("{not json")
    assert current_version(log.location) == 12
    assert latest_version_since(log.location, 30) == 12


def test_probes_see_commits_of_another_writer_on_an_fsspec_store() -> None:
    """memory:// goes through the fsspec log store: the probes are reads, not exists()."""
    uri = f"memory://probes-{uuid.uuid4().hex}/t"
    log = DeltaLog.create_table(uri, SCHEMA, ["part"])
    assert latest_version_since(log.location, -1) == 0
    other = DeltaLog.for_table(uri)  # another writer, another DeltaLog
    for _ in range(5):
        append(other)
    assert latest_version_since(log.location, 0) == 5
    assert current_version(log.location) == 5
    assert latest_version_since(log.location, 9) == 5


def _compaction(table: Path, first: int, end: int, actions: list[dict]) -> None:
    log = table / "_delta_log"
    text = "".join(json.dumps(a) + "\n" for a in actions)
    (log / f"{first:020d}.{end:020d}.compacted.json").write_text(text)


def test_log_compaction_files_stand_in_for_their_commits(tmp_path: Path) -> None:
    """Commits 1-3 each add a file; the compaction file 1.3 holds their reconciled actions.
    To show which one replay read, the compaction file here names different files."""
    table = make_table(tmp_path / "t", versions=6)  # f0 .. f5
    _compaction(table, 1, 3, [add("c1"), add("c2")])
    _compaction(table, 2, 3, [add("never")])  # a shorter one from a later start: not chosen
    _compaction(table, 3, 5, [add("never")])  # reaches the last version: not chosen
    used = DeltaLog.for_table(str(table)).update()
    assert sorted(f.path for f in used.all_files()) == ["c1", "c2", "f0", "f4", "f5"]
    assert [f.name for f in used.log_segment.deltas][1] == (f"{1:020d}.{3:020d}.compacted.json")
    assert used.version == 5 and used.commit_info is not None
    ignored = DeltaLog.for_table(str(table), {"use_log_compaction": "false"}).update()
    assert sorted(f.path for f in ignored.all_files()) == [f"f{i}" for i in range(6)]
    at_2 = DeltaLog.for_table(str(table)).snapshot_at(2)  # 1.3 reaches past version 2
    assert sorted(f.path for f in at_2.all_files()) == ["f0", "f1", "f2"]


def _whole_log_segment(location: TableLocation, version: int) -> LogSegment:
    return build_log_segment(location.uri, location.log_path, list_log(location), version)


def test_segment_at_lists_from_the_interval_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table_at(tmp_path / "t", 35)  # checkpoints at 10, 20 and 30
    location = TableLocation.of(str(tmp_path / "t"))
    expected = {v: _whole_log_segment(location, v) for v in range(36)}
    spy = Spy(location, monkeypatch)
    for version in range(36):
        assert segment_at(location, version, 10) == expected[version], version
    assert spy.listed[:1] == [""]  # below the first checkpoint: the whole log
    assert spy.listed[10:12] == [filenames.version_prefix(10)] * 2  # then from a checkpoint
    assert spy.listed.count("") == 10


@pytest.mark.parametrize("interval", [1, 7, 15, 100])
def test_segment_at_falls_back_to_the_whole_log(tmp_path: Path, interval: int) -> None:
    # checkpoints elsewhere than the interval puts them, and one removed: the same segments
    table_at(tmp_path / "t", 35)
    (tmp_path / "t" / "_delta_log" / f"{20:020d}.checkpoint.parquet").unlink()
    location = TableLocation.of(str(tmp_path / "t"))
    for version in range(36):
        assert segment_at(location, version, interval) == _whole_log_segment(location, version)
    with pytest.raises(VersionNotFoundError):
        segment_at(location, 36, interval)
