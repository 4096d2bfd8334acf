"""Interop with deltalake (delta-rs), an independent Delta implementation.

1. Tables deltalake writes (appends, overwrites, deletes, merges, compactions, its own
   checkpoints, special-character and null partition values) read identically here.
2. Time travel by version and by timestamp agrees with deltalake.
3. deltalake reads the checkpoints this engine writes (classic and multi-part), with the
   commits they cover deleted so it has to; this engine reads them back to the same snapshot.
4. A table written by deltalake, checkpointed here and written by deltalake again reads the
   same through both.

Never call deltalake's ``to_pyarrow_table()``/``to_pandas()`` (they randomly abort the process
at exit here): data is read with ``pyarrow.dataset`` over ``DeltaTable.file_uris()``.
"""

from __future__ import annotations

import datetime as dt_
import json
import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from airflow_delta.engine import DeltaLog, Snapshot
from airflow_delta.engine.errors import VersionNotFoundError

PARTITION_BY = ["s", "d", "n"]
SPECIAL = ["a b", "x=y/z%", "100%", None, "plain"]
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("s", pa.string()),
        ("d", pa.date32()),
        ("n", pa.int32()),
        ("v", pa.float64()),
        ("name", pa.string()),
        ("day", pa.date32()),
    ]
)


# -- data and table builders ------------------------------------------------------------------


def batch(i: int, rows: int = 4) -> pa.Table:
    """Rows with ids i*100.. spread over partitions with special characters and nulls."""
    ks = range(rows)
    return pa.table(
        {
            "id": [i * 100 + k for k in ks],
            "s": [SPECIAL[(i + k) % len(SPECIAL)] for k in ks],
            "d": [
                None if (i + k) % 4 == 3 else dt_.date(2020, 1, 1) + dt_.timedelta(days=(i + k) % 3)
                for k in ks
            ],
            "n": [None if (i + k) % 5 == 4 else (i + k) % 3 for k in ks],
            "v": [None if k == 1 else i + k / 2 for k in ks],
            "name": [f"name-{i:03d}-{k}" for k in ks],
            "day": [dt_.date(2021, 1, 1) + dt_.timedelta(days=i + k) for k in ks],
        },
        schema=SCHEMA,
    )


class Model:
    """The rows a table should hold, tracked alongside the deltalake operations."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def append(self, t: pa.Table) -> None:
        for r in t.to_pylist():
            self.rows[r["id"]] = r

    def overwrite(self, t: pa.Table) -> None:
        self.rows = {}
        self.append(t)

    def delete(self, keep) -> None:
        self.rows = {k: r for k, r in self.rows.items() if keep(r)}

    @property
    def ids(self) -> list[int]:
        return sorted(self.rows)


def txn_props(**apps: int) -> CommitProperties:
    return CommitProperties(
        app_transactions=[Transaction(app_id=a, version=v) for a, v in apps.items()]
    )


class Writer:
    """deltalake operations on one table, each checked to commit exactly one version."""

    def __init__(self, path: Path, partition_by: list[str] | None = PARTITION_BY) -> None:
        self.uri = str(path)
        self.partition_by = partition_by
        self.model = Model()
        self.version = -1

    def _committed(self) -> None:
        self.version += 1
        assert DeltaTable(self.uri).version() == self.version

    def write(self, t: pa.Table, mode: str = "append", **kwargs: Any) -> None:
        write_deltalake(self.uri, t, mode=mode, partition_by=self.partition_by, **kwargs)
        self.model.overwrite(t) if mode == "overwrite" else self.model.append(t)
        self._committed()

    def delete(self, predicate: str, keep) -> None:
        DeltaTable(self.uri).delete(predicate)
        self.model.delete(keep)
        self._committed()

    def compact(self) -> None:
        metrics = DeltaTable(self.uri).optimize.compact()
        assert metrics["numFilesRemoved"] > metrics["numFilesAdded"] > 0, metrics
        self._committed()

    def merge(self, source: pa.Table) -> None:
        (
            DeltaTable(self.uri)
            .merge(source, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        self.model.append(source)
        self._committed()

    def checkpoint(self) -> None:
        DeltaTable(self.uri).create_checkpoint()
        cp = Path(self.uri, "_delta_log", f"{self.version:020d}.checkpoint.parquet")
        assert cp.exists()


# -- normalised views of a version, from both implementations --------------------------------


def _jsonable(value: Any) -> Any:
    """deltalake's typed stats values in the shape of the stats JSON (nulls dropped)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items() if v is not None}
    if isinstance(value, dt_.date):
        return value.isoformat()
    return value


def _partition_string(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt_.date):
        return value.isoformat()
    return str(value)


def dl_files(table: DeltaTable) -> dict[str, dict[str, Any]]:
    """deltalake's active files: path -> size, mtime, partition values, stats."""
    rows = pa.table(table.get_add_actions(flatten=False)).to_pylist()
    out = {
        r["path"]: {
            "size": r["size_bytes"],
            "modificationTime": r["modification_time"],
            "partitionValues": {
                k: _partition_string(v) for k, v in (r.get("partition") or {}).items()
            },
            "stats": {
                "numRecords": r["num_records"],
                "minValues": _jsonable(r.get("min") or {}),
                "maxValues": _jsonable(r.get("max") or {}),
                "nullCount": _jsonable(r.get("null_count") or {}),
            },
        }
        for r in rows
    }
    assert len(out) == len(rows), "deltalake lists a path twice"
    return out


def engine_files(snapshot: Snapshot) -> dict[str, dict[str, Any]]:
    """This engine's active files in the shape of `dl_files`."""
    rows = snapshot.files().to_pylist()
    out = {}
    for r in rows:
        stats = json.loads(r["stats"]) if r["stats"] else {}
        out[r["path"]] = {
            "size": r["size"],
            "modificationTime": r["modificationTime"],
            "partitionValues": dict(r["partitionValues"] or []),
            "stats": {
                "numRecords": stats.get("numRecords"),
                "minValues": _jsonable(stats.get("minValues") or {}),
                "maxValues": _jsonable(stats.get("maxValues") or {}),
                "nullCount": _jsonable(stats.get("nullCount") or {}),
            },
        }
    assert len(out) == len(rows), "the engine lists a path twice"
    return out


def dl_num_records(table: DeltaTable) -> int:
    counts = pa.table(table.get_add_actions(flatten=True)).column("num_records")
    assert counts.null_count == 0
    return int(pc.sum(counts).as_py() or 0)


def data_files(table: DeltaTable, root: str) -> list[str]:
    """Local paths of the files deltalake lists.

    Not `file_uris()`: it percent-encodes a table root that has a space but not the rest.
    """
    paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    return [os.path.join(root, unquote(p)) for p in paths]


def data_ids(table: DeltaTable, root: str) -> list[int]:
    """The ids in the data files deltalake lists, read by pyarrow (not by deltalake)."""
    files = data_files(table, root)
    if not files:
        return []
    ids = pads.dataset(files, format="parquet").to_table(columns=["id"]).column("id")
    return sorted(ids.to_pylist())


def assert_same(table: DeltaTable, snapshot: Snapshot) -> None:
    """deltalake and this engine see the same version of the same table."""
    assert snapshot.version == table.version()
    ours, theirs = engine_files(snapshot), dl_files(table)
    assert set(ours) == set(theirs)
    for path, want in theirs.items():
        assert ours[path] == want, path
    # paths in the log are URL-encoded relative URIs: decoded, they are deltalake's file URIs
    root = str(Path(table.table_uri.removeprefix("file://")))
    assert {os.path.join(root, unquote(p)) for p in ours} == set(table.file_uris())
    assert snapshot.num_files == len(theirs)
    assert snapshot.num_records == dl_num_records(table)
    assert snapshot.size_in_bytes == sum(f["size"] for f in theirs.values())
    protocol = table.protocol()
    assert snapshot.protocol.min_reader_version == protocol.min_reader_version
    assert snapshot.protocol.min_writer_version == protocol.min_writer_version
    metadata = table.metadata()
    assert snapshot.metadata.id == metadata.id
    assert snapshot.partition_columns == list(metadata.partition_columns)
    assert snapshot.metadata.configuration == dict(metadata.configuration)
    assert snapshot.metadata.created_time == metadata.created_time
    assert snapshot.schema.names == [f.name for f in table.schema().fields]


def commit_files(path: Path) -> list[Path]:
    return sorted(p for p in (path / "_delta_log").glob("*.json") if p.stem.isdigit())


# -- tables written by deltalake --------------------------------------------------------------


@pytest.fixture(scope="module")
def partitioned_table(tmp_path_factory: pytest.TempPathFactory) -> Writer:
    """35 versions: appends, delete, compaction, merge, overwrite, two deltalake checkpoints."""
    w = Writer(tmp_path_factory.mktemp("dl") / "partitioned table")
    w.write(batch(0), mode="error")  # v0
    for i in range(1, 10):  # v1-v9
        w.write(batch(i))
    w.delete("id >= 300 AND id < 302", lambda r: not 300 <= r["id"] < 302)  # v10
    w.checkpoint()  # checkpoint 10
    for i in range(10, 15):  # v11-v15
        w.write(batch(i))
    w.compact()  # v16
    src = pa.concat_tables([batch(12).slice(0, 2), batch(50)])
    w.merge(src)  # v17
    w.write(batch(60), mode="overwrite")  # v18
    for i in range(19, 30):  # v19-v29
        w.write(batch(i))
    w.checkpoint()  # checkpoint 29
    w.delete("s = 'a b'", lambda r: r["s"] != "a b")  # v30
    for i in range(31, 35):  # v31-v34
        w.write(batch(i))
    assert w.version == 34
    return w


@pytest.fixture(scope="module")
def plain_table(tmp_path_factory: pytest.TempPathFactory) -> Writer:
    """An unpartitioned table with an overwrite, a delete, a compaction and a checkpoint."""
    w = Writer(tmp_path_factory.mktemp("dl") / "plain", partition_by=None)
    w.write(batch(0), mode="error")  # v0
    for i in range(1, 6):  # v1-v5
        w.write(batch(i))
    w.delete("v > 4.0", lambda r: r["v"] is None or r["v"] <= 4.0)  # v6: rewrites files
    w.compact()  # v7
    w.checkpoint()
    w.write(batch(8), mode="overwrite")  # v8
    for i in range(9, 12):  # v9-v11
        w.write(batch(i))
    w.merge(pa.concat_tables([batch(10).slice(1, 2), batch(70)]))  # v12
    return w


TABLES = ["partitioned_table", "plain_table"]


@pytest.mark.parametrize("table_fixture", TABLES)
def test_latest_version_reads_identically(table_fixture: str, request) -> None:
    w: Writer = request.getfixturevalue(table_fixture)
    table = DeltaTable(w.uri)
    snapshot = DeltaLog.for_table(w.uri).update()
    assert snapshot.log_segment.checkpoint_version is not None  # deltalake's checkpoint is used
    assert_same(table, snapshot)
    assert data_ids(table, w.uri) == w.model.ids
    assert snapshot.num_records == len(w.model.ids)


def test_partition_values_with_special_characters_and_nulls(partitioned_table: Writer) -> None:
    snapshot = DeltaLog.for_table(partitioned_table.uri).update()
    seen = {k: set() for k in PARTITION_BY}
    for f in snapshot.all_files():
        assert set(f.partition_values) == set(PARTITION_BY)
        for k, v in f.partition_values.items():
            seen[k].add(v)
        # the file really is where its URL-encoded path says, below the table root
        assert Path(partitioned_table.uri, unquote(f.path)).is_file()
    assert seen["s"] == set(SPECIAL)
    assert seen["d"] == {"2020-01-01", "2020-01-02", "2020-01-03", None}
    assert seen["n"] == {"0", "1", "2", None}
    delta_log = DeltaLog.for_table(partitioned_table.uri)

    def strings(version: int) -> set[str | None]:
        return {f.partition_values["s"] for f in delta_log.snapshot_at(version=version).all_files()}

    assert "a b" in strings(29)
    assert "a b" not in strings(30)  # deleted at v30, written again from v31


@pytest.mark.parametrize("table_fixture", TABLES)
def test_time_travel_to_every_version(table_fixture: str, request) -> None:
    w: Writer = request.getfixturevalue(table_fixture)
    delta_log = DeltaLog.for_table(w.uri)
    for version in range(w.version + 1):
        assert_same(DeltaTable(w.uri, version=version), delta_log.snapshot_at(version=version))
    with pytest.raises(VersionNotFoundError):
        delta_log.snapshot_at(version=w.version + 1)


@pytest.mark.parametrize("table_fixture", TABLES)
def test_history_matches(table_fixture: str, request) -> None:
    w: Writer = request.getfixturevalue(table_fixture)
    ours = DeltaLog.for_table(w.uri).history()
    theirs = DeltaTable(w.uri).history()
    assert [h["version"] for h in ours] == list(range(w.version, -1, -1))
    assert [(h["version"], h["operation"]) for h in ours] == [
        (h["version"], h["operation"]) for h in theirs
    ]
    operations = {h["operation"] for h in ours}
    assert {"WRITE", "DELETE", "OPTIMIZE", "MERGE"} <= operations


def test_removes_and_compaction_are_replayed(partitioned_table: Writer) -> None:
    """Compaction removes many files and re-adds few: both engines agree file by file."""
    delta_log = DeltaLog.for_table(partitioned_table.uri)
    before, after = delta_log.snapshot_at(version=15), delta_log.snapshot_at(version=16)
    paths_before = {f.path for f in before.all_files()}
    paths_after = {f.path for f in after.all_files()}
    assert len(paths_after) < len(paths_before)
    assert paths_before - paths_after and paths_after - paths_before
    assert before.num_records == after.num_records
    added = [f for f in after.all_files() if f.path not in paths_before]
    assert added and not any(f.data_change for f in added)  # checkpoint-free: from JSON
    removed_paths = paths_before - paths_after
    tombstones = {r["path"] for r in after.tombstones().to_pylist()}
    assert removed_paths <= tombstones
    # the overwrite at v18 tombstones every file that was active at v17
    v17 = {f.path for f in delta_log.snapshot_at(version=17).all_files()}
    v18 = delta_log.snapshot_at(version=18)
    assert v17.isdisjoint(f.path for f in v18.all_files())
    assert v17 <= {r["path"] for r in v18.tombstones().to_pylist()}


# -- time travel by timestamp ------------------------------------------------------------------


def test_time_travel_by_timestamp(tmp_path: Path) -> None:
    w = Writer(tmp_path / "ts", partition_by=None)
    for i in range(5):
        w.write(batch(i, rows=2))
    t0 = 1_600_000_000  # seconds
    for i, f in enumerate(commit_files(tmp_path / "ts")):
        os.utime(f, (t0 + 60 * i, t0 + 60 * i))
    delta_log = DeltaLog.for_table(w.uri)

    def at(seconds: float) -> dt_.datetime:
        return dt_.datetime.fromtimestamp(seconds, dt_.UTC)

    cases = {
        t0 + 90: 1,  # between v1 and v2
        t0 + 120: 2,  # exactly v2
        t0 + 240: 4,  # exactly the latest
        t0 + 10_000: 4,  # after the latest
        t0: 0,  # exactly the first
    }
    for seconds, version in cases.items():
        assert delta_log.snapshot_at(timestamp=at(seconds)).version == version, seconds
        assert delta_log.snapshot_at(timestamp=seconds * 1000).version == version
        iso = at(seconds).isoformat().replace("+00:00", "Z")
        assert delta_log.snapshot_at(timestamp=iso).version == version, iso
        table = DeltaTable(w.uri)
        table.load_as_version(at(seconds))
        assert table.version() == version  # deltalake agrees
        assert_same(table, delta_log.snapshot_at(timestamp=at(seconds)))
    with pytest.raises(VersionNotFoundError):
        delta_log.snapshot_at(timestamp=at(t0 - 1))
    with pytest.raises(VersionNotFoundError):
        delta_log.snapshot_at(timestamp=(t0 - 60) * 1000)


# -- checkpoints written by this engine, read by deltalake -----------------------------------


def build_checkpoint_source(path: Path) -> Writer:
    """Partitioned, with app transactions, an overwrite and a delete (tombstones)."""
    w = Writer(path)
    w.write(batch(0), mode="error")  # v0
    w.write(batch(1), commit_properties=txn_props(etl=1))  # v1
    w.write(batch(2), commit_properties=txn_props(etl=2, other=10))  # v2
    w.write(batch(3), mode="overwrite")  # v3: tombstones
    w.write(batch(4), commit_properties=txn_props(etl=3))  # v4
    w.write(batch(5))  # v5
    w.delete("s = 'x=y/z%'", lambda r: r["s"] != "x=y/z%")  # v6: more tombstones
    w.write(pa.concat_tables([batch(6), batch(7)]))  # v7
    return w


def _rows_by_path(arr: pa.StructArray) -> dict[str, dict[str, Any]]:
    out = {}
    for r in arr.to_pylist():
        r = dict(r)
        r.pop("dataChange")  # a checkpoint stores dataChange=false
        for k in ("partitionValues", "tags"):
            if r.get(k) is not None:
                r[k] = dict(r[k])
        out[r["path"]] = r
    return out


def engine_state(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "version": snapshot.version,
        "protocol": snapshot.protocol.to_json_dict(),
        "metadata": snapshot.metadata.to_json_dict(),
        "txns": {k: t.to_json_dict() for k, t in snapshot.set_transactions.items()},
        "files": _rows_by_path(snapshot.files()),
        "tombstones": _rows_by_path(snapshot.tombstones()),
    }


def drop_commits_through(path: Path, version: int, keep_last: bool = False) -> None:
    """Delete the commits a checkpoint at `version` covers, so readers must use it.

    `keep_last` keeps the commit of `version` itself: deltalake's writer needs it (it fails
    with "Invalid table version" without it, after its own checkpoints too).
    """
    end = version - 1 if keep_last else version
    dropped = [f for f in commit_files(path) if int(f.stem) <= end]
    assert len(dropped) == end + 1
    for f in dropped:
        f.unlink()
    for f in (path / "_delta_log").glob("*.crc"):
        f.unlink()


@pytest.mark.parametrize("part_size", [None, 3], ids=["classic", "multipart"])
def test_deltalake_reads_engine_checkpoint(tmp_path: Path, part_size: int | None) -> None:
    w = build_checkpoint_source(tmp_path / "source")
    copy = tmp_path / "copy"
    shutil.copytree(w.uri, copy)
    delta_log = DeltaLog.for_table(str(copy))
    from_json = delta_log.update()
    assert from_json.log_segment.checkpoint_version is None
    want = engine_state(from_json)
    assert want["tombstones"], "the overwrite and the delete leave tombstones"
    assert want["txns"].keys() == {"etl", "other"}

    kwargs = {} if part_size is None else {"part_size": part_size}
    result = delta_log.checkpoint(**kwargs)
    n_actions = 2 + len(want["txns"]) + len(want["files"]) + len(want["tombstones"])
    assert (result.version, result.num_actions) == (w.version, n_actions)
    assert result.num_of_add_files == len(want["files"])
    log_dir = copy / "_delta_log"
    if part_size is None:
        assert result.parts == 1
        names = [f"{w.version:020d}.checkpoint.parquet"]
    else:
        assert result.parts == -(-n_actions // part_size) > 3
        names = [
            f"{w.version:020d}.checkpoint.{i:010d}.{result.parts:010d}.parquet"
            for i in range(1, result.parts + 1)
        ]
    assert sorted(p.name for p in log_dir.glob("*.checkpoint*")) == names
    hint = json.loads((log_dir / "_last_checkpoint").read_text())
    assert hint["version"] == w.version and hint["size"] == n_actions
    assert hint.get("parts", 1) == result.parts

    drop_commits_through(copy, w.version)

    # deltalake can only reach this version through our checkpoint
    table = DeltaTable(str(copy))
    original = DeltaTable(w.uri)
    assert table.version() == original.version() == w.version
    assert dl_files(table) == dl_files(original)
    assert table.metadata().id == original.metadata().id
    assert list(table.metadata().partition_columns) == PARTITION_BY
    assert table.protocol() == original.protocol()
    assert table.transaction_version("etl") == 3
    assert table.transaction_version("other") == 10
    assert dl_num_records(table) == len(w.model.ids)
    assert pads.dataset(table.file_uris(), format="parquet").count_rows() == len(w.model.ids)
    assert data_ids(table, str(copy)) == w.model.ids
    assert table.schema() == original.schema()

    # and this engine reads its own checkpoint back to the same snapshot
    from_checkpoint = DeltaLog.for_table(str(copy)).update()
    assert from_checkpoint.log_segment.checkpoint_version == w.version
    assert from_checkpoint.log_segment.deltas == ()
    assert engine_state(from_checkpoint) == want
    assert from_checkpoint.transactions == {"etl": 3, "other": 10}
    assert from_checkpoint.metadata == from_json.metadata
    assert from_checkpoint.protocol == from_json.protocol
    assert all(not f.data_change for f in from_checkpoint.all_files())
    assert_same(table, from_checkpoint)


def test_engine_checkpoint_of_a_plain_table_with_many_versions(tmp_path: Path) -> None:
    """A multi-part checkpoint of an unpartitioned 31-version table, read by deltalake."""
    w = Writer(tmp_path / "many", partition_by=None)
    for i in range(31):
        w.write(batch(i, rows=1), commit_properties=txn_props(job=i))
    delta_log = DeltaLog.for_table(w.uri)
    result = delta_log.checkpoint(part_size=7)
    assert result.version == 30 and result.parts == -(-(2 + 1 + 31) // 7)
    drop_commits_through(Path(w.uri), 30)
    table = DeltaTable(w.uri)
    assert table.version() == 30
    assert table.transaction_version("job") == 30
    assert data_ids(table, w.uri) == w.model.ids
    assert_same(table, DeltaLog.for_table(w.uri).update())


# -- several writers on one table ------------------------------------------------------------


def test_mixed_writers(tmp_path: Path) -> None:
    """deltalake writes, this engine checkpoints, deltalake writes on top, both read the same."""
    w = build_checkpoint_source(tmp_path / "mixed")
    uri = w.uri
    delta_log = DeltaLog.for_table(uri)

    result = delta_log.checkpoint(part_size=4)  # multi-part, at v7
    assert result.parts > 1
    drop_commits_through(Path(uri), result.version, keep_last=True)

    def check() -> None:
        table = DeltaTable(uri)
        assert table.version() == w.version
        snapshot = DeltaLog.for_table(uri).update()
        assert_same(table, snapshot)
        assert data_ids(table, w.uri) == w.model.ids
        assert snapshot.num_records == len(w.model.ids)

    check()
    w.write(batch(8), commit_properties=txn_props(etl=4))  # v8 on top of our checkpoint
    w.write(batch(9))  # v9
    check()
    # deltalake removes files it only knows from our checkpoint (partition predicate)
    w.delete("s = 'plain'", lambda r: r["s"] != "plain")  # v10
    check()
    w.merge(pa.concat_tables([batch(6).slice(0, 2), batch(90)]))  # v11
    check()
    assert DeltaTable(uri).transaction_version("etl") == 4
    assert DeltaLog.for_table(uri).update().transactions == {"etl": 4, "other": 10}

    # our classic checkpoint at v11, then deltalake's own at v13, our engine reads both
    assert delta_log.checkpoint().version == 11
    w.write(batch(12))  # v12
    w.compact()  # v13
    check()
    w.checkpoint()  # deltalake's checkpoint at v13
    w.write(batch(14), commit_properties=txn_props(other=11))  # v14
    snapshot = DeltaLog.for_table(uri).update()
    assert snapshot.log_segment.checkpoint_version == 13
    assert snapshot.transactions == {"etl": 4, "other": 11}
    check()
    # time travel in both engines over the versions still in the log
    for version in range(result.version, w.version + 1):
        assert_same(DeltaTable(uri, version=version), delta_log.snapshot_at(version=version))


def test_time_travel_before_a_cleaned_up_checkpoint(tmp_path: Path) -> None:
    """With the commits a checkpoint covers deleted, older versions are not found."""
    w = build_checkpoint_source(tmp_path / "cleaned")
    delta_log = DeltaLog.for_table(w.uri)
    delta_log.checkpoint()
    w.write(batch(8))  # v8
    drop_commits_through(Path(w.uri), 7)
    assert delta_log.snapshot_at(version=7).version == 7
    assert delta_log.snapshot_at(version=8).version == 8
    for version in (0, 6):
        with pytest.raises(VersionNotFoundError):
            delta_log.snapshot_at(version=version)
