"""VACUUM: which files go, which stay, and that nothing outside the table is ever touched."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import (
    AddFile,
    DeletionVectorDescriptor,
    DeltaLog,
    Operation,
    RemoveFile,
)
from airflow_delta.engine.commands import maintenance as vacuum_module
from airflow_delta.engine.commands.maintenance import (
    VacuumRetentionError,
    deletion_vector_path,
    vacuum,
    z85_decode,
)
from airflow_delta.engine.errors import CorruptLogError, DeltaProtocolError
from tests.delta_log_builder import add, commit_info, metadata, protocol, write_commit
from tests.pandas_free import imports_pandas

SCHEMA = pa.schema([("x", pa.int64()), ("_k", pa.string())])
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
NOW_MS = int(time.time() * 1000)

# -- helpers -----------------------------------------------------------------------------------


def put(root: Path, relative: str, age_days: float = 30, data: bytes = b"PAR1 data") -> Path:
    """A file at `root/relative` whose modification time is `age_days` ago."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp = time.time() - age_days * 86_400
    os.utime(path, (stamp, stamp))
    return path


def added(path: str, partition: str | None = "a", **kwargs) -> AddFile:
    values = {} if partition is None else {"_k": partition}
    return AddFile(path=path, partition_values=values, size=9, modification_time=0, **kwargs)


def removed(path: str, removed_ms_ago: int, partition: str | None = "a") -> RemoveFile:
    values = {} if partition is None else {"_k": partition}
    return RemoveFile(
        path=path, deletion_timestamp=NOW_MS - removed_ms_ago, partition_values=values
    )


def commit(delta_log: DeltaLog, actions) -> int:
    return delta_log.start_transaction().commit(actions, Operation("WRITE"))


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def build_table(tmp_path: Path) -> tuple[Path, DeltaLog]:
    """A table partitioned by `_k` (a partition directory that looks hidden but is not).

    Active: `_k=a/active.parquet` (old). Removed 10 days ago: `_k=a/old-removed.parquet`.
    Removed 1 hour ago: `_k=a/new-removed.parquet`. Orphans (in no commit): old
    `_k=b/orphan.parquet` and `top-orphan.parquet`, recent `_k=a/recent-orphan.parquet`.
    """
    root = tmp_path / "table"
    delta_log = DeltaLog.create_table(str(root), SCHEMA, ["_k"])
    for name in ("active", "old-removed", "new-removed"):
        put(root, f"_k=a/{name}.parquet")
    commit(
        delta_log, [added(f"_k=a/{n}.parquet") for n in ("active", "old-removed", "new-removed")]
    )
    commit(delta_log, [removed("_k=a/old-removed.parquet", 10 * DAY_MS)])
    commit(delta_log, [removed("_k=a/new-removed.parquet", HOUR_MS)])
    put(root, "_k=b/orphan.parquet")
    put(root, "top-orphan.parquet")
    put(root, "_k=a/recent-orphan.parquet", age_days=0)
    return root, delta_log


@pytest.fixture
def table(tmp_path: Path) -> tuple[Path, DeltaLog]:
    return build_table(tmp_path)


OLD_UNREFERENCED = ["_k=a/old-removed.parquet", "_k=b/orphan.parquet", "top-orphan.parquet"]

# -- tests -------------------------------------------------------------------------------------


def test_dry_run_lists_and_deletes_nothing(table) -> None:
    root, delta_log = table
    before = tree(root)

    result = vacuum(delta_log.location, dry_run=True)

    assert result.dry_run
    assert result.files_deleted == OLD_UNREFERENCED
    assert result.bytes_deleted == 9 * 3
    assert result.retention_hours == 168
    assert tree(root) == before


def test_vacuum_deletes_only_old_unreferenced_files(table, caplog) -> None:
    root, delta_log = table
    before = tree(root)
    caplog.set_level(logging.INFO, logger="airflow_delta.engine.commands.maintenance")

    result = vacuum(delta_log.location)

    assert not result.dry_run
    assert result.files_deleted == OLD_UNREFERENCED
    assert tree(root) == before - set(OLD_UNREFERENCED)
    assert {"_k=a/active.parquet", "_k=a/new-removed.parquet", "_k=a/recent-orphan.parquet"} <= (
        tree(root)
    )
    assert delta_log.update().num_files == 1
    [record] = [r for r in caplog.records if r.name == "airflow_delta.engine.commands.maintenance"]
    assert str(root) in record.getMessage() and "3 of 6 files" in record.getMessage()
    assert vacuum(delta_log.location).files_deleted == []


def test_a_file_deleted_meanwhile_is_not_an_error(table, monkeypatch) -> None:
    root, delta_log = table
    list_files = vacuum_module._list_files

    def listed_then_deleted(*args):
        listed = list(list_files(*args))
        (root / "top-orphan.parquet").unlink()  # by a concurrent vacuum, say
        return iter(listed)

    monkeypatch.setattr(vacuum_module, "_list_files", listed_then_deleted)
    assert vacuum(delta_log.location).files_deleted == OLD_UNREFERENCED
    assert not any((root / f).exists() for f in OLD_UNREFERENCED)


def test_retention_below_the_tables_is_refused_unless_forced(table) -> None:
    root, delta_log = table
    before = tree(root)
    with pytest.raises(VacuumRetentionError) as info:
        vacuum(delta_log.location, retention_hours=0.5)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert str(root) in message
    assert "0.5 hours" in message and "168 hours" in message
    assert "enforce_retention_duration=False" in message and "--force" in message
    assert tree(root) == before

    result = vacuum(delta_log.location, retention_hours=0.5, enforce_retention_duration=False)

    # The file removed an hour ago is no longer protected; the half-hour-old orphan is not old.
    assert result.files_deleted == sorted([*OLD_UNREFERENCED, "_k=a/new-removed.parquet"])
    assert "_k=a/recent-orphan.parquet" in tree(root)


def test_a_longer_retention_keeps_more(table) -> None:
    _, delta_log = table
    assert vacuum(delta_log.location, retention_hours=24 * 60, dry_run=True).files_deleted == []
    assert vacuum(delta_log.location, retention_hours=24 * 8, dry_run=True).files_deleted == (
        OLD_UNREFERENCED
    )


def test_the_tables_retention_is_the_default(tmp_path: Path) -> None:
    root = tmp_path / "t"
    configuration = {"delta.deletedFileRetentionDuration": "interval 2 hours"}
    delta_log = DeltaLog.create_table(str(root), SCHEMA, [], configuration)
    put(root, "three-hours.parquet", age_days=3 / 24)
    put(root, "one-hour.parquet", age_days=1 / 24)

    assert vacuum(delta_log.location, dry_run=True).retention_hours == 2
    with pytest.raises(VacuumRetentionError, match=r"1 hours.*2 hours"):
        vacuum(delta_log.location, retention_hours=1)
    assert vacuum(delta_log.location).files_deleted == ["three-hours.parquet"]
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=">= 0"):
            vacuum(delta_log.location, retention_hours=bad, enforce_retention_duration=False)


def test_hidden_paths_log_and_manifests_are_untouched(table) -> None:
    root, delta_log = table
    hidden = [
        "_symlink_format_manifest/_k=a/manifest",
        "_tmp/part.parquet",
        ".hidden.parquet",
        "_k=a/.part-0.parquet.crc",
        "_k=a/_SUCCESS",
        "_delta_index/index.bin",
        "sub/.staging/x.parquet",
    ]
    for relative in hidden:
        put(root, relative)
    put(root, "_change_data/cdc-old.parquet")  # change data ages out like data files
    put(root, "_change_data/cdc-new.parquet", age_days=0)
    for path in Path(delta_log.log_path).iterdir():
        os.utime(path, (0, 0))
    log_before = sorted(p.name for p in Path(delta_log.log_path).iterdir())

    result = vacuum(delta_log.location)

    assert result.files_deleted == sorted(["_change_data/cdc-old.parquet", *OLD_UNREFERENCED])
    assert set(hidden) <= tree(root)
    assert "_change_data/cdc-new.parquet" in tree(root)
    assert sorted(p.name for p in Path(delta_log.log_path).iterdir()) == log_before
    assert delta_log.update().version == 3


def test_what_a_killed_writer_staged_is_swept(table) -> None:
    """A staging directory of Spark's parquet writer (`_spark-write-<uuid>`, with Spark's own
    `_temporary` directories in it) holds only what a killed writer left: its old files go,
    hidden names below it included; a running writer's recent files stay."""
    root, delta_log = table
    old = [
        "_spark-write-1/_temporary/0/_temporary/attempt_0/part-0.parquet",
        "_spark-write-1/part-1.parquet",
    ]
    for relative in old:
        put(root, relative)
    running = "_spark-write-2/_temporary/0/part-0.parquet"
    put(root, running, age_days=0)
    put(root, "_spark-write-3")  # a file, not a directory: hidden as ever

    result = vacuum(delta_log.location)

    assert result.files_deleted == sorted([*old, *OLD_UNREFERENCED])
    assert {running, "_spark-write-3"} <= tree(root)


def test_paths_from_the_log_never_reach_outside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "table"
    delta_log = DeltaLog.create_table(str(root), SCHEMA, [])
    outside = [put(tmp_path, name) for name in ("outside.parquet", "abs.parquet", "tableX.parquet")]
    sibling = put(tmp_path, "table2/part.parquet")
    kept_abs = put(root, "kept by absolute uri.parquet")
    kept_escaped = put(root, "a b%.parquet")
    kept_dotdot = put(root, "dir/kept.parquet")
    link = root / "link-out"
    link.symlink_to(tmp_path / "table2", target_is_directory=True)
    commit(
        delta_log,
        [
            added("../outside.parquet", None),
            added(f"file://{tmp_path}/abs.parquet", None),
            added(f"file:{root}/kept%20by%20absolute%20uri.parquet", None),
            added("a%20b%25.parquet", None),
            added("other/../dir/kept.parquet", None),
        ],
    )
    # A remove of a path outside the root, written straight into the log.
    (Path(delta_log.log_path) / f"{2:020d}.json").write_text(
        json.dumps({"remove": {"path": "../tableX.parquet", "deletionTimestamp": 0}})
        + "\n"
        + json.dumps({"remove": {"path": f"file://{tmp_path}/table2/part.parquet"}})
        + "\n"
    )
    put(root, "orphan.parquet")

    result = vacuum(delta_log.location, retention_hours=0, enforce_retention_duration=False)

    assert result.files_deleted == ["orphan.parquet"]
    for path in [*outside, sibling, kept_abs, kept_escaped, kept_dotdot]:
        assert path.is_file(), path
    assert link.is_symlink()


def test_deletion_vector_files(tmp_path: Path) -> None:
    root = tmp_path / "dv"
    delta_log = DeltaLog.create_table(
        str(root), SCHEMA, [], {"delta.enableDeletionVectors": "true"}
    )
    active_dv = DeletionVectorDescriptor("u", "ab^-aqEH.-t@S}K{vb[*k^", 40, 1, offset=1)
    removed_dv = DeletionVectorDescriptor("u", "00000000000000000001", 40, 1, offset=1)
    absolute_dv = DeletionVectorDescriptor("p", f"file://{root}/dvs/abs%20dv.bin", 40, 1, offset=1)
    inline_dv = DeletionVectorDescriptor("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0", 40, 1)
    active_dv_file = put(root, "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin")
    removed_dv_file = put(root, f"deletion_vector_{'0' * 8}-0000-0000-0000-{'0' * 11}1.bin")
    absolute_dv_file = put(root, "dvs/abs dv.bin")
    orphan_dv = put(root, "ab/deletion_vector_ffffffff-8816-431a-aaf6-d3fe2512ff61.bin")
    for name in ("f1", "f2", "f3", "f4"):
        put(root, f"{name}.parquet")
    commit(
        delta_log,
        [
            added("f1.parquet", None, deletion_vector=active_dv),
            added("f2.parquet", None, deletion_vector=removed_dv),
            added("f3.parquet", None, deletion_vector=absolute_dv),
            added("f4.parquet", None, deletion_vector=inline_dv),
        ],
    )
    [f2] = [f for f in delta_log.update().all_files() if f.path == "f2.parquet"]
    commit(delta_log, [f2.remove(NOW_MS - HOUR_MS)])

    result = vacuum(delta_log.location)

    assert result.files_deleted == ["ab/deletion_vector_ffffffff-8816-431a-aaf6-d3fe2512ff61.bin"]
    assert not orphan_dv.exists()
    for path in (active_dv_file, removed_dv_file, absolute_dv_file):
        assert path.is_file(), path


@pytest.mark.parametrize(
    ("storage_type", "value", "expected"),
    [
        (
            "u",
            "ab^-aqEH.-t@S}K{vb[*k^",
            "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin",
        ),
        ("u", "^-aqEH.-t@S}K{vb[*k^", "deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"),
        ("p", "s3://bucket/t/dv.bin", "s3://bucket/t/dv.bin"),
        ("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0", None),
    ],
)
def test_deletion_vector_path(storage_type: str, value: str, expected: str | None) -> None:
    assert deletion_vector_path(storage_type, value) == expected


def test_z85_decode() -> None:
    assert z85_decode("HelloWorld") == bytes.fromhex("864FD26FB559F75B")  # the ZeroMQ spec vector
    with pytest.raises(ValueError, match="multiple of 5"):
        z85_decode("abc")
    with pytest.raises(ValueError, match="not a Z85 character"):
        z85_decode("abc d")


@pytest.mark.parametrize("value", ["short", "ab" + "~" * 20])
def test_an_unreadable_deletion_vector_stops_vacuum(tmp_path: Path, value: str) -> None:
    dv = {"storageType": "u", "pathOrInlineDv": value, "sizeInBytes": 1, "cardinality": 1}
    features = ["deletionVectors"]
    write_commit(
        tmp_path,
        0,
        [
            commit_info(),
            protocol(3, 7, readerFeatures=features, writerFeatures=features),
            metadata(),
            add("f", deletionVector=dv),
        ],
    )
    put(tmp_path, "orphan.parquet")
    with pytest.raises(CorruptLogError, match="deletion vector"):
        vacuum(DeltaLog.for_table(str(tmp_path)).location)
    assert (tmp_path / "orphan.parquet").is_file()


def test_unknown_writer_features_are_refused(tmp_path: Path) -> None:
    write_commit(
        tmp_path,
        0,
        [commit_info(), protocol(1, 7, writerFeatures=["someFutureFeature"]), metadata(), add("f")],
    )
    put(tmp_path, "orphan.parquet")
    with pytest.raises(DeltaProtocolError, match="someFutureFeature"):
        vacuum(DeltaLog.for_table(str(tmp_path)).location)
    assert (tmp_path / "orphan.parquet").is_file()


def test_vacuum_manifests_and_log_cleanup_do_not_import_pandas(table) -> None:
    root, _ = table
    script = (
        "import sys\n"
        "from airflow_delta.engine import DeltaLog\n"
        "from airflow_delta.engine.commands.maintenance import cleanup_expired_logs\n"
        "from airflow_delta.engine.commands.maintenance import generate_symlink_manifest\n"
        "from airflow_delta.engine.commands.maintenance import vacuum\n"
        f"log = DeltaLog.for_table({str(root)!r})\n"
        "vacuum(log.location, retention_hours=0, enforce_retention_duration=False)\n"
        "generate_symlink_manifest(log.location)\n"
        "cleanup_expired_logs(log.location, now_ms=2**62)\n"
        "print('pandas' in sys.modules)\n"
    )
    assert not imports_pandas(script)
    assert "_k=a/new-removed.parquet" not in tree(root)
    assert (root / "_symlink_format_manifest/_k=a/manifest").is_file()


@pytest.mark.s3
def test_vacuum_on_s3(s3_bucket) -> None:
    bucket, options = s3_bucket
    uri = f"s3://{bucket}/t"
    delta_log = DeltaLog.create_table(uri, SCHEMA, ["_k"], storage_options=options)
    fs = delta_log.store.fs
    for name in ("active", "recent-removed", "old-removed", "orphan"):
        fs.pipe_file(f"{bucket}/t/_k=a/{name}.parquet", b"PAR1 data")
    for key in ("t2/part.parquet", "outside.parquet", "t/_tmp/x.parquet", "t/.hidden"):
        fs.pipe_file(f"{bucket}/{key}", b"x")
    commit(
        delta_log, [added(f"_k=a/{n}.parquet") for n in ("active", "recent-removed", "old-removed")]
    )
    # Everything on S3 was just written: look from 30 days in the future instead of aging files.
    later = NOW_MS + 30 * DAY_MS
    commit(
        delta_log,
        [
            RemoveFile(
                "_k=a/old-removed.parquet", later - 8 * DAY_MS, partition_values={"_k": "a"}
            ),
            RemoveFile("_k=a/recent-removed.parquet", later - DAY_MS, partition_values={"_k": "a"}),
            RemoveFile("../outside.parquet", later - 8 * DAY_MS, partition_values={"_k": "a"}),
        ],
    )

    dry = vacuum(delta_log.location, dry_run=True, now_ms=later)
    assert dry.files_deleted == ["_k=a/old-removed.parquet", "_k=a/orphan.parquet"]
    assert fs.exists(f"{bucket}/t/_k=a/orphan.parquet")

    result = vacuum(delta_log.location, now_ms=later)

    assert result.files_deleted == dry.files_deleted
    fs.invalidate_cache()
    remaining = set(fs.find(bucket))
    assert f"{bucket}/t/_k=a/orphan.parquet" not in remaining
    assert f"{bucket}/t/_k=a/old-removed.parquet" not in remaining
    assert {
        f"{bucket}/t/_k=a/active.parquet",
        f"{bucket}/t/_k=a/recent-removed.parquet",
        f"{bucket}/t2/part.parquet",
        f"{bucket}/outside.parquet",
        f"{bucket}/t/_tmp/x.parquet",
        f"{bucket}/t/.hidden",
        f"{bucket}/t/_delta_log/{0:020d}.json",
    } <= remaining
    assert DeltaLog.for_table(uri, options).update().num_files == 1


def test_vacuum_agrees_with_deltalake(tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "t")
    data = pa.table({"x": [1, 2, 3], "b": ["x=y/z %", "plain", None]})
    write_deltalake(uri, data, partition_by=["b"])
    write_deltalake(uri, data, partition_by=["b"], mode="overwrite")
    put(Path(uri), "b=plain/orphan.parquet", age_days=0.001)
    put(Path(uri), "_hidden/x.parquet", age_days=0.001)
    time.sleep(0.01)
    theirs = DeltaTable(uri).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=True, full=True
    )

    ours = vacuum(
        DeltaLog.for_table(uri).location, retention_hours=0, enforce_retention_duration=False
    )

    assert len(ours.files_deleted) == 4  # 3 overwritten files and the orphan
    assert ours.files_deleted == sorted(theirs)
    assert not any((Path(uri) / f).exists() for f in ours.files_deleted)
    assert all(os.path.isfile(u) for u in DeltaTable(uri).file_uris())
    assert (Path(uri) / "_hidden/x.parquet").is_file()
