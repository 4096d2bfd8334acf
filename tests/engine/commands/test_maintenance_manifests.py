"""Symlink manifests (`maintenance.generate_symlink_manifest` and the incremental update the
GenerateSymlinkManifest hook runs after commits): one manifest per partition, listing its data
files for Presto, Trino and Athena."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest

from airflow_delta.engine import AddFile, DeltaLog, Metadata, Operation, RemoveFile
from airflow_delta.engine.commands.maintenance import (
    MANIFEST_LOCATION,
    absolute_file_uri,
    generate_incremental_manifest,
    generate_symlink_manifest,
    table_root_uri,
)
from airflow_delta.engine.errors import DeltaProtocolError
from airflow_delta.engine.protocol.schema import partition_path
from tests.delta_log_builder import add, commit_info, metadata, protocol, write_commit
from tests.engine.commands.maintenance_tables import SCHEMA, SYMLINK, WRITE, commit, new_file

# -- helpers -----------------------------------------------------------------------------------


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
