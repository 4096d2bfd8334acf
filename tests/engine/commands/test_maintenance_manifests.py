"""Post-commit work: symlink manifests (GenerateSymlinkManifest) and expired log cleanup."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote, unquote

import pyarrow as pa
import pytest

from airflow_delta.engine import AddFile, DeltaLog, Metadata, Operation, RemoveFile
from airflow_delta.engine.commands.maintenance import (
    MANIFEST_LOCATION,
    absolute_file_uri,
    cleanup_expired_logs,
    generate_incremental_manifest,
    generate_symlink_manifest,
    table_root_uri,
)
from airflow_delta.engine.errors import DeltaProtocolError, VersionNotFoundError
from airflow_delta.engine.protocol.schema import partition_path
from airflow_delta.engine.txn.post_commit import GenerateSymlinkManifest, LogCleanupHook
from tests.unit.delta_log_builder import add, commit_info, metadata, protocol, write_commit

SCHEMA = pa.schema([("x", pa.int64()), ("a", pa.string()), ("b", pa.string())])
SYMLINK = {"delta.compatibility.symlinkFormatManifest.enabled": "true"}
WRITE = Operation("WRITE")

Partition = dict[str, str | None]

# -- helpers -----------------------------------------------------------------------------------


def new_file(root: Path, partition: Partition, name: str, columns=("a", "b")) -> AddFile:
    """A data file on disk and its AddFile (path URL-encoded, as writers log it)."""
    relative = f"{partition_path(partition, columns)}/{name}" if columns else name
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"PAR1 data")
    return AddFile(
        path=quote(relative, safe="/="),
        partition_values=dict(partition),
        size=9,
        modification_time=int(time.time() * 1000),
    )


def commit(delta_log: DeltaLog, actions, operation: Operation = WRITE) -> tuple[int, dict]:
    txn = delta_log.start_transaction()
    version = txn.commit(actions, operation)
    return version, dict(txn.hook_results)


def removal(f: AddFile, with_partition: bool = True) -> RemoveFile:
    if with_partition:
        return f.remove(int(time.time() * 1000))
    return RemoveFile(path=f.path, deletion_timestamp=int(time.time() * 1000))


def manifests_on_disk(root: Path) -> dict[str, set[str]]:
    """Partition dir -> the URIs its manifest lists ("" for the root manifest)."""
    base = root / MANIFEST_LOCATION
    out = {}
    for path in base.rglob("*"):
        if path.is_file():
            assert path.name == "manifest", path
            lines = path.read_text().split("\n")
            assert lines[-1] == "", "every line ends with a newline"
            relative = path.parent.relative_to(base).as_posix()
            out["" if relative == "." else relative] = set(lines[:-1])
    return out


def expected_manifests(delta_log: DeltaLog, version: int | None = None) -> dict[str, set[str]]:
    """What the manifests must hold for a version, computed from its snapshot."""
    snapshot = delta_log.snapshot_at(version=version)
    columns = snapshot.partition_columns
    out: dict[str, set[str]] = {}
    for f in snapshot.all_files():
        directory = partition_path(f.partition_values, columns) if columns else ""
        out.setdefault(directory, set()).add(f"file:{delta_log.table_path}/{unquote(f.path)}")
    return out


def assert_manifests_match(root: Path, delta_log: DeltaLog) -> dict[str, set[str]]:
    found = manifests_on_disk(root)
    assert found == expected_manifests(delta_log)
    for uris in found.values():
        for uri in uris:
            assert uri.startswith("file:/")
            assert os.path.isfile(uri.removeprefix("file:")), uri
    return found


def empty_dirs(root: Path) -> list[str]:
    return [
        str(p) for p in (root / MANIFEST_LOCATION).rglob("*") if p.is_dir() and not any(p.iterdir())
    ]


@pytest.fixture
def table(tmp_path: Path) -> tuple[Path, DeltaLog]:
    root = tmp_path / "events table"
    delta_log = DeltaLog.create_table(str(root), SCHEMA, ["a", "b"], SYMLINK)
    return root, delta_log


# -- symlink manifests -------------------------------------------------------------------------


def test_manifests_follow_appends_deletes_and_overwrites(table) -> None:
    root, delta_log = table
    tricky = {"a": "1", "b": "x=y/z %"}
    plain = {"a": "1", "b": "plain"}
    null = {"a": "2", "b": None}
    f1, f2 = new_file(root, tricky, "f1.parquet"), new_file(root, tricky, "f2.parquet")
    f3, f4 = new_file(root, plain, "f3.parquet"), new_file(root, null, "f4.parquet")

    _, results = commit(delta_log, [f1, f2, f3, f4])
    assert results == {"symlink_manifest": "ok"}
    found = assert_manifests_match(root, delta_log)
    assert set(found) == {"a=1/b=x%3Dy%2Fz %25", "a=1/b=plain", "a=2/b=__HIVE_DEFAULT_PARTITION__"}
    assert found["a=1/b=x%3Dy%2Fz %25"] == {
        f"file:{root}/a=1/b=x%3Dy%2Fz %25/f1.parquet",
        f"file:{root}/a=1/b=x%3Dy%2Fz %25/f2.parquet",
    }

    # Delete: one file of the tricky partition, the only file of the null partition.
    commit(delta_log, [removal(f1), removal(f4)], Operation("DELETE"))
    found = assert_manifests_match(root, delta_log)
    assert "a=2/b=__HIVE_DEFAULT_PARTITION__" not in found
    assert not (root / MANIFEST_LOCATION / "a=2").exists(), "emptied directories are removed"

    # Overwrite of a=1: every file there replaced by files in a new partition.
    f5 = new_file(root, {"a": "1", "b": "new"}, "f5.parquet")
    commit(delta_log, [removal(f2), removal(f3), f5], Operation("WRITE", {"mode": "Overwrite"}))
    found = assert_manifests_match(root, delta_log)
    assert set(found) == {"a=1/b=new"}
    assert empty_dirs(root) == []


def test_only_touched_partitions_are_rewritten(table) -> None:
    root, delta_log = table
    commit(delta_log, [new_file(root, {"a": "1", "b": "x"}, "f1.parquet")])
    commit(delta_log, [new_file(root, {"a": "2", "b": "y"}, "f2.parquet")])
    untouched = root / MANIFEST_LOCATION / "a=1/b=x/manifest"
    before = untouched.stat()
    touched = root / MANIFEST_LOCATION / "a=2/b=y/manifest"
    touched_before = touched.stat()

    commit(delta_log, [new_file(root, {"a": "2", "b": "y"}, "f3.parquet")])

    assert untouched.stat().st_ino == before.st_ino  # a rewrite replaces the file (new inode)
    assert touched.stat().st_ino != touched_before.st_ino
    assert_manifests_match(root, delta_log)


def test_remove_without_partition_values_uses_the_read_snapshot(table) -> None:
    root, delta_log = table
    keep = new_file(root, {"a": "1", "b": "k"}, "keep.parquet")
    gone = new_file(root, {"a": "3", "b": "g"}, "gone.parquet")
    commit(delta_log, [keep, gone])
    assert set(manifests_on_disk(root)) == {"a=1/b=k", "a=3/b=g"}

    _, results = commit(delta_log, [removal(gone, with_partition=False)], Operation("DELETE"))

    assert results == {"symlink_manifest": "ok"}
    assert set(assert_manifests_match(root, delta_log)) == {"a=1/b=k"}


def test_unpartitioned_table(tmp_path: Path) -> None:
    root = tmp_path / "flat"
    delta_log = DeltaLog.create_table(str(root), SCHEMA, [], SYMLINK)
    f1 = new_file(root, {}, "part 1.parquet", columns=())
    f2 = new_file(root, {}, "part-2.parquet", columns=())
    commit(delta_log, [f1, f2])
    assert manifests_on_disk(root) == {
        "": {f"file:{root}/part 1.parquet", f"file:{root}/part-2.parquet"}
    }
    assert (root / MANIFEST_LOCATION / "manifest").is_file()

    commit(delta_log, [removal(f1)], Operation("DELETE"))
    assert_manifests_match(root, delta_log)

    commit(delta_log, [removal(f2)], Operation("DELETE"))
    assert manifests_on_disk(root) == {}
    assert not (root / MANIFEST_LOCATION / "manifest").exists()


def test_full_and_incremental_generation_agree(table) -> None:
    root, delta_log = table
    files = [new_file(root, {"a": str(i % 3), "b": f"v{i % 2}"}, f"f{i}.parquet") for i in range(8)]
    commit(delta_log, files[:4])
    commit(delta_log, files[4:])
    commit(delta_log, [removal(files[0]), removal(files[3]), removal(files[6])])
    incremental = assert_manifests_match(root, delta_log)

    stale = root / MANIFEST_LOCATION / "a=9/b=old/manifest"
    stale.parent.mkdir(parents=True)
    stale.write_text(f"file:{root}/a=9/b=old/gone.parquet\n")
    (root / MANIFEST_LOCATION / "a=1/b=v1/manifest").write_text("garbage\n")

    update = generate_symlink_manifest(delta_log.location)

    assert update.full
    assert str(stale) in update.deleted
    assert manifests_on_disk(root) == incremental
    assert empty_dirs(root) == []


def test_first_incremental_run_without_manifests_is_a_full_run(tmp_path: Path) -> None:
    root = tmp_path / "t"
    delta_log = DeltaLog.create_table(str(root), SCHEMA, ["a", "b"])  # manifests not enabled
    commit(delta_log, [new_file(root, {"a": str(i), "b": "x"}, f"f{i}.parquet") for i in range(3)])
    assert not (root / MANIFEST_LOCATION).exists()

    # Enabling the property in a commit that writes to one partition registers the hook, which
    # finds no manifest yet and writes all of them.
    txn = delta_log.start_transaction()
    current = txn.snapshot.metadata
    txn.update_metadata(
        Metadata(
            id=current.id,
            schema_string=current.schema_string,
            partition_columns=current.partition_columns,
            configuration={**current.configuration, **SYMLINK},
            created_time=current.created_time,
        )
    )
    txn.commit([new_file(root, {"a": "0", "b": "x"}, "g.parquet")], WRITE)

    assert txn.hook_results == {"symlink_manifest": "ok"}
    assert set(assert_manifests_match(root, delta_log)) == {"a=0/b=x", "a=1/b=x", "a=2/b=x"}


def test_incremental_update_reports_a_full_run_when_the_root_is_missing(table) -> None:
    root, delta_log = table
    f1 = new_file(root, {"a": "1", "b": "x"}, "f1.parquet")
    f2 = new_file(root, {"a": "2", "b": "x"}, "f2.parquet")
    commit(delta_log, [f1, f2])
    read = delta_log.snapshot_at(version=1)
    f3 = new_file(root, {"a": "1", "b": "x"}, "f3.parquet")
    version, _ = commit(delta_log, [f3])
    latest = delta_log.snapshot_at(version=version)

    partial = generate_incremental_manifest(delta_log.location, read, latest, [f3])
    assert not partial.full
    assert partial.written == [str(root / MANIFEST_LOCATION / "a=1/b=x/manifest")]

    for path in sorted((root / MANIFEST_LOCATION).rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    (root / MANIFEST_LOCATION).rmdir()
    full = generate_incremental_manifest(delta_log.location, read, latest, [f3])
    assert full.full
    assert set(assert_manifests_match(root, delta_log)) == {"a=1/b=x", "a=2/b=x"}


def test_manifests_of_a_table_deltalake_wrote(tmp_path: Path) -> None:
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "t")
    data = pa.table({"x": [1, 2, 3, 4], "b": ["x=y/z %", "plain", None, "plain"]})
    write_deltalake(uri, data, partition_by=["b"])
    write_deltalake(uri, data.slice(0, 2), partition_by=["b"], mode="append")

    generate_symlink_manifest(DeltaLog.for_table(uri).location)

    listed = set().union(*manifests_on_disk(Path(uri)).values())
    assert listed == {f"file:{u}" for u in DeltaTable(uri).file_uris()}
    assert set(manifests_on_disk(Path(uri))) == {
        "b=x%3Dy%2Fz %25",
        "b=plain",
        "b=__HIVE_DEFAULT_PARTITION__",
    }


def test_no_manifests_without_the_property(tmp_path: Path) -> None:
    root = tmp_path / "t"
    delta_log = DeltaLog.create_table(str(root), SCHEMA, ["a", "b"])
    _, results = commit(delta_log, [new_file(root, {"a": "1", "b": "x"}, "f.parquet")])
    assert results == {}
    assert not (root / MANIFEST_LOCATION).exists()


def test_hook_is_idempotent_per_transaction(table) -> None:
    _, delta_log = table
    txn = delta_log.start_transaction()
    txn.register_post_commit_hook(GenerateSymlinkManifest())
    txn.register_post_commit_hook(GenerateSymlinkManifest())
    assert len(txn.post_commit_hooks) == 1


def test_deletion_vectors_are_refused_after_the_commit_succeeds(tmp_path: Path) -> None:
    root = tmp_path / "dv"
    configuration = {**SYMLINK, "delta.enableDeletionVectors": "true"}
    delta_log = DeltaLog.create_table(str(root), SCHEMA, ["a", "b"], configuration)
    version, results = commit(delta_log, [new_file(root, {"a": "1", "b": "x"}, "f.parquet")])

    assert version == 1 and delta_log.update().version == 1
    assert results["symlink_manifest"].startswith("failed: ")
    assert "deletion vectors" in results["symlink_manifest"]
    assert "delta.enableDeletionVectors=true" in results["symlink_manifest"]
    assert not (root / MANIFEST_LOCATION).exists()


def test_files_with_deletion_vectors_are_refused(tmp_path: Path) -> None:
    dv = {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
        "sizeInBytes": 40,
        "cardinality": 2,
    }
    write_commit(
        tmp_path,
        0,
        [
            commit_info(),
            protocol(3, 7, readerFeatures=["deletionVectors"], writerFeatures=["deletionVectors"]),
            metadata(SYMLINK),
            add("f1", deletionVector=dv),
        ],
    )
    with pytest.raises(
        DeltaProtocolError, match=r"1 active files have deletion vectors.*deleted rows"
    ):
        generate_symlink_manifest(DeltaLog.for_table(str(tmp_path)).location)
    assert not (tmp_path / MANIFEST_LOCATION).exists()


def test_column_mapping_is_refused(tmp_path: Path) -> None:
    configuration = {**SYMLINK, "delta.columnMapping.mode": "name"}
    write_commit(tmp_path, 0, [commit_info(), protocol(2, 5), metadata(configuration), add("f1")])
    with pytest.raises(DeltaProtocolError, match=r"column mapping.*wrong or empty columns"):
        generate_symlink_manifest(DeltaLog.for_table(str(tmp_path)).location)
    assert not (tmp_path / MANIFEST_LOCATION).exists()


@pytest.mark.parametrize(
    ("root", "path", "expected"),
    [
        ("file:/t", "a=1/b=x%253Dy/f%20g.parquet", "file:/t/a=1/b=x%3Dy/f g.parquet"),
        ("file:/t", "file:///other/f%20g.parquet", "file:/other/f g.parquet"),
        ("file:/t", "/abs/f.parquet", "file:/abs/f.parquet"),
        ("s3://bucket/t", "p=1/f.parquet", "s3://bucket/t/p=1/f.parquet"),
        ("s3://bucket/t", "s3://elsewhere/k%20x.parquet", "s3://elsewhere/k x.parquet"),
        ("s3://bucket/t", "/k.parquet", "s3://bucket/k.parquet"),
    ],
)
def test_absolute_file_uri(root: str, path: str, expected: str) -> None:
    assert absolute_file_uri(root, path) == expected


def test_table_root_uri(tmp_path: Path) -> None:
    assert table_root_uri(DeltaLog.for_table(str(tmp_path / "t")).location) == f"file:{tmp_path}/t"
    options = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}
    s3 = DeltaLog.for_table("s3://bucket/path/t", options)
    assert table_root_uri(s3.location) == "s3://bucket/path/t"


# -- expired log cleanup -----------------------------------------------------------------------


def log_dir(delta_log: DeltaLog) -> Path:
    return Path(delta_log.log_path)


def age(paths, days: float) -> None:
    stamp = time.time() - days * 86_400
    for path in paths:
        os.utime(path, (stamp, stamp))


def log_files(delta_log: DeltaLog, *versions: int) -> list[Path]:
    """The log files of `versions` (commits, checkpoints, checksums)."""
    prefixes = {f"{v:020d}." for v in versions}
    return [p for p in log_dir(delta_log).iterdir() if p.name[:21] in prefixes]


def appended_table(root: Path, commits: int, configuration=None) -> tuple[DeltaLog, dict[int, int]]:
    """A table with `commits` appends after version 0; num_files of every version."""
    delta_log = DeltaLog.create_table(str(root), SCHEMA, [], configuration)
    for i in range(commits):
        commit(delta_log, [new_file(root, {}, f"f{i}.parquet", columns=())])
    counts = {v: delta_log.snapshot_at(version=v).num_files for v in range(commits + 1)}
    return delta_log, counts


def assert_versions(delta_log: DeltaLog, counts: dict[int, int], first_readable: int) -> None:
    for version, num_files in counts.items():
        if version >= first_readable:
            assert delta_log.snapshot_at(version=version).num_files == num_files, version
        else:
            with pytest.raises(VersionNotFoundError):
                delta_log.snapshot_at(version=version)


def test_cleanup_deletes_below_the_newest_checkpoint(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 25)  # checkpoints at 10 and 20
    names = {p.name for p in log_dir(delta_log).iterdir()}
    assert {f"{v:020d}.checkpoint.parquet" for v in (10, 20)} <= names
    age(log_dir(delta_log).iterdir(), days=31)

    deleted = cleanup_expired_logs(delta_log.location)

    expected = {f"{v:020d}.json" for v in range(20)} | {f"{10:020d}.checkpoint.parquet"}
    assert set(deleted) == expected
    assert deleted == sorted(deleted), "oldest first"
    assert {p.name for p in log_dir(delta_log).iterdir()} == names - expected
    assert (log_dir(delta_log) / "_last_checkpoint").exists()
    assert_versions(delta_log, counts, first_readable=20)
    assert delta_log.update().version == 25


def test_cleanup_keeps_what_commits_within_retention_need(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 25)
    age(log_files(delta_log, *range(15)), days=31)  # 15..25 (and checkpoint 20) are recent

    deleted = cleanup_expired_logs(delta_log.location)

    # Commit 15 is within retention: it needs checkpoint 10 and commits 11-14, old or not.
    assert set(deleted) == {f"{v:020d}.json" for v in range(10)}
    assert_versions(delta_log, counts, first_readable=10)


def test_cleanup_respects_the_configured_retention(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 12)
    age(log_dir(delta_log).iterdir(), days=2)
    assert cleanup_expired_logs(delta_log.location) == []  # default: 30 days
    assert_versions(delta_log, counts, first_readable=0)

    short, short_counts = appended_table(
        tmp_path / "short", 12, {"delta.logRetentionDuration": "interval 1 day"}
    )
    age(log_dir(short).iterdir(), days=2)
    assert set(cleanup_expired_logs(short.location)) == {f"{v:020d}.json" for v in range(10)}
    assert_versions(short, short_counts, first_readable=10)


def test_cleanup_without_a_checkpoint_deletes_nothing(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 5)
    assert not any("checkpoint" in p.name for p in log_dir(delta_log).iterdir())
    age(log_dir(delta_log).iterdir(), days=365)
    assert cleanup_expired_logs(delta_log.location) == []
    assert_versions(delta_log, counts, first_readable=0)


def test_cleanup_of_multi_part_checkpoints_checksums_and_compactions(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 8, {"delta.checkpointInterval": "1000"})
    delta_log.checkpoint(delta_log.snapshot_at(version=3), part_size=2)
    delta_log.checkpoint(delta_log.snapshot_at(version=6))
    log = log_dir(delta_log)
    extra = [
        f"{1:020d}.crc",
        f"{2:020d}.crc",
        f"{7:020d}.crc",
        f"{1:020d}.{4:020d}.compacted.json",  # below the boundary: deleted
        f"{5:020d}.{7:020d}.compacted.json",  # spans the boundary: kept
    ]
    for name in extra:
        (log / name).write_text("{}\n")
    parts = sorted(p.name for p in log.iterdir() if ".checkpoint.0" in p.name)
    assert len(parts) == 3  # 4 files + protocol + metadata, 2 actions per part
    age(log.iterdir(), days=31)
    age([log / f"{1:020d}.crc"], days=29)  # below the boundary but within retention
    deleted = cleanup_expired_logs(delta_log.location)

    assert set(deleted) == {
        *(f"{v:020d}.json" for v in range(6)),
        *parts,
        f"{2:020d}.crc",
        f"{1:020d}.{4:020d}.compacted.json",
    }
    remaining = {p.name for p in log.iterdir()}
    assert {f"{1:020d}.crc", f"{7:020d}.crc", f"{5:020d}.{7:020d}.compacted.json"} <= remaining
    assert_versions(delta_log, counts, first_readable=6)


def test_cleanup_skips_an_incomplete_multi_part_checkpoint(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 6, {"delta.checkpointInterval": "1000"})
    delta_log.checkpoint(delta_log.snapshot_at(version=2))
    delta_log.checkpoint(delta_log.snapshot_at(version=4), part_size=2)
    log = log_dir(delta_log)
    next(p for p in log.iterdir() if ".checkpoint.0000000001." in p.name).unlink()
    age(log.iterdir(), days=31)

    deleted = cleanup_expired_logs(delta_log.location)

    assert f"{3:020d}.json" not in deleted  # checkpoint 4 is incomplete: 2 is the boundary
    assert set(deleted) == {f"{v:020d}.json" for v in range(2)}
    assert_versions(delta_log, counts, first_readable=2)


def test_log_cleanup_hook(tmp_path: Path) -> None:
    delta_log, counts = appended_table(tmp_path / "t", 10)  # checkpoint at 10
    age(log_dir(delta_log).iterdir(), days=31)
    txn = delta_log.start_transaction()
    txn.register_post_commit_hook(LogCleanupHook())
    version = txn.commit([new_file(tmp_path / "t", {}, "g.parquet", columns=())], WRITE)

    assert txn.hook_results == {"log_cleanup": "ok"}
    assert not (log_dir(delta_log) / f"{9:020d}.json").exists()
    assert_versions(delta_log, {**counts, version: counts[10] + 1}, first_readable=10)


def test_log_cleanup_hook_honours_enable_expired_log_cleanup(tmp_path: Path) -> None:
    configuration = {"delta.enableExpiredLogCleanup": "false"}
    delta_log, counts = appended_table(tmp_path / "t", 10, configuration)
    age(log_dir(delta_log).iterdir(), days=31)
    txn = delta_log.start_transaction()
    txn.register_post_commit_hook(LogCleanupHook())
    txn.commit([new_file(tmp_path / "t", {}, "g.parquet", columns=())], WRITE)

    assert txn.hook_results == {"log_cleanup": "ok"}
    assert_versions(delta_log, counts, first_readable=0)


@pytest.mark.s3
def test_manifests_on_s3(s3_bucket) -> None:
    bucket, options = s3_bucket
    delta_log = DeltaLog.create_table(f"s3://{bucket}/t", SCHEMA, ["a", "b"], SYMLINK, options)
    f1 = AddFile("a=1/b=x%253Dy/f%201.parquet", {"a": "1", "b": "x=y"}, 9, 0)
    f2 = AddFile("a=2/b=z/f2.parquet", {"a": "2", "b": "z"}, 9, 0)
    assert commit(delta_log, [f1, f2])[1] == {"symlink_manifest": "ok"}
    fs = delta_log.store.fs
    base = f"{bucket}/t/{MANIFEST_LOCATION}"
    assert fs.cat_file(f"{base}/a=1/b=x%3Dy/manifest") == (
        f"s3://{bucket}/t/a=1/b=x%3Dy/f 1.parquet\n".encode()
    )

    assert commit(delta_log, [removal(f2)], Operation("DELETE"))[1] == {"symlink_manifest": "ok"}
    assert fs.find(base) == [f"{base}/a=1/b=x%3Dy/manifest"]

    stale = f"{base}/a=3/b=old/manifest"
    fs.pipe_file(stale, b"s3://elsewhere\n")
    assert generate_symlink_manifest(delta_log.location).deleted == [stale]
    assert fs.find(base) == [f"{base}/a=1/b=x%3Dy/manifest"]
