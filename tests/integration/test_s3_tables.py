"""The engine on S3 (a real moto_server on 127.0.0.1, reached through s3fs)."""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import CorruptLogError, TableNotFoundError
from airflow_delta.engine.log.log_store import get_log_store
from tests.delta_log_builder import add, make_table, remove, write_commit

pytestmark = pytest.mark.s3


def upload(local, bucket: str, options: dict[str, str], name: str = "t") -> str:
    uri = f"s3://{bucket}/{name}"
    store, root = get_log_store(uri, options)
    for path in sorted(local.rglob("*")):
        if path.is_file():
            store.write(store.join(root, str(path.relative_to(local))), path.read_bytes(), True)
    return uri


def test_replay_checkpoint_and_time_travel_on_s3(tmp_path, s3_bucket) -> None:
    bucket, options = s3_bucket
    uri = upload(make_table(tmp_path / "t", 5), bucket, options)
    log = DeltaLog.for_table(uri, options)
    snap = log.update()
    assert (snap.version, snap.num_files) == (4, 5)
    result = log.checkpoint()
    assert result.version == 4
    store, root = get_log_store(uri, options)
    hint = json.loads(store.read(store.join(root, "_delta_log", "_last_checkpoint")))
    assert hint["version"] == 4 and hint["numOfAddFiles"] == 5
    again = DeltaLog.for_table(uri, options).update()
    assert again.log_segment.checkpoint_version == 4
    assert [f.path for f in again.all_files()] == [f.path for f in snap.all_files()]
    assert log.snapshot_at(version=1).num_files == 2


def test_checkpoint_over_a_checkpoint_streams_from_s3(tmp_path, s3_bucket, monkeypatch) -> None:
    """The old checkpoint's file actions are read through s3fs a few rows at a time."""
    import pyarrow.parquet as pq

    from airflow_delta.engine.log import checkpoints

    monkeypatch.setattr(checkpoints, "READ_BATCH_ROWS", 2)
    bucket, options = s3_bucket
    local = make_table(tmp_path / "t", 7)
    DeltaLog.for_table(str(local)).checkpoint()  # v6: f0..f6
    write_commit(local, 7, [add("f7"), remove("f1", deletion_timestamp=2**62)])
    write_commit(local, 8, [remove("f5", deletion_timestamp=2**62), add("f8")])
    uri = upload(local, bucket, options)
    log = DeltaLog.for_table(uri, options)
    snap = log.update()
    assert snap.log_segment.checkpoint_version == 6
    result = log.checkpoint(snap)
    assert (result.version, result.num_of_add_files) == (8, 7)
    assert result.num_actions == 2 + 7 + 2  # protocol, metadata, files, two tombstones
    store, root = get_log_store(uri, options)
    with store.fs.open(store.join(root, "_delta_log", f"{8:020d}.checkpoint.parquet")) as fh:
        assert pq.ParquetFile(fh).metadata.num_row_groups > 2  # streamed 2 old rows at a time
    again = DeltaLog.for_table(uri, options).update()
    assert again.log_segment.checkpoint_version == 8
    assert sorted(f.path for f in again.all_files()) == [f"f{i}" for i in (0, 2, 3, 4, 6, 7, 8)]
    assert sorted(t["path"] for t in again.tombstones().to_pylist()) == ["f1", "f5"]


def test_s3_errors_are_typed(tmp_path, s3_bucket) -> None:
    bucket, options = s3_bucket
    with pytest.raises(TableNotFoundError):
        DeltaLog.for_table(f"s3://{bucket}/missing", options).update()
    table = make_table(tmp_path / "g", 3)
    (table / "_delta_log" / f"{1:020d}.json").unlink()
    uri = upload(table, bucket, options, "gap")
    with pytest.raises(CorruptLogError, match="missing 1"):
        DeltaLog.for_table(uri, options).update()


def test_deltalake_reads_a_checkpoint_written_on_s3(tmp_path, s3_bucket) -> None:
    from deltalake import DeltaTable

    bucket, options = s3_bucket
    table = make_table(tmp_path / "t", 3)
    write_commit(
        table,
        3,
        [
            {
                "add": {
                    "path": "f3",
                    "partitionValues": {},
                    "size": 1,
                    "modificationTime": 0,
                    "dataChange": True,
                }
            }
        ],
    )
    uri = upload(table, bucket, options)
    DeltaLog.for_table(uri, options).checkpoint()
    store, root = get_log_store(uri, options)
    for v in range(4):  # deltalake must now use our checkpoint
        store.delete(store.join(root, "_delta_log", f"{v:020d}.json"))
    dt = DeltaTable(uri, storage_options={**options, "AWS_ALLOW_HTTP": "true"})
    assert dt.version() == 3
    assert sorted(u.rsplit("/", 1)[-1] for u in dt.file_uris()) == ["f0", "f1", "f2", "f3"]


def test_in_process_merge_on_s3(tmp_path, s3_bucket) -> None:
    """merge_arrow reads and writes data files on S3 through fsspec; deltalake reads the rows."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from airflow_delta.engine.commands.merge_in_process import merge_arrow

    bucket, options = s3_bucket
    local = tmp_path / "local"
    data = pa.table({"id": [1, 2, 3], "part": ["a", "a", "b"]})
    write_deltalake(str(local), data, partition_by=["part"])
    uri = upload(local, bucket, options, "merged")
    updates = pa.table({"id": [3, 4], "part": ["c", "a"]})
    result = (
        merge_arrow(uri, updates, "t.id = s.id", storage_options=options)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert (result.version, result.metrics["numTargetFilesRemoved"]) == (1, 1)
    store, root = get_log_store(uri, options)
    local_copy = tmp_path / "copy"
    for path in store.fs.find(root):
        target = local_copy / path[len(root) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.fs.cat_file(path))
    rows = DeltaTable(str(local_copy)).to_pyarrow_dataset().to_table().to_pylist()
    assert sorted((r["id"], r["part"]) for r in rows) == [(1, "a"), (2, "a"), (3, "c"), (4, "a")]


def test_a_write_to_a_missing_bucket_fails_and_creates_no_bucket(s3_bucket) -> None:
    """s3fs's makedirs creates a missing bucket: a write to a mistyped one made it (in the
    store's region, outside any policy) instead of failing as delta-rs and Spark's S3A do."""
    import pyarrow as pa

    from airflow_delta.engine import write_table
    from tests.conftest import s3_client

    _, options = s3_bucket
    missing = f"typo-{uuid.uuid4().hex[:12]}"
    with pytest.raises(TableNotFoundError, match=r"bucket \(or container\) '.*' does not"):
        DeltaLog.create_table(
            f"s3://{missing}/events", pa.schema([("id", pa.int64())]), storage_options=options
        )
    with pytest.raises(
        TableNotFoundError, match=r"bucket \(or container\) '.*' does not"
    ) as caught:
        write_table(f"s3://{missing}/events", pa.table({"id": [1]}), storage_options=options)
    assert f"{missing}/events" in str(caught.value)
    buckets = [b["Name"] for b in s3_client(options).list_buckets()["Buckets"]]
    assert missing not in buckets


def test_an_empty_last_checkpoint_on_s3_is_ignored(tmp_path, s3_bucket) -> None:
    """A bounded read of an empty object (the `_last_checkpoint` hint is read so) returns b""
    on every object store: Azure answers any range of an empty blob with 416."""
    bucket, options = s3_bucket
    uri = upload(make_table(tmp_path / "t", 3), bucket, options, name="empty-hint")
    DeltaLog.for_table(uri, options).checkpoint()
    store, root = get_log_store(uri, options)
    hint = store.join(root, "_delta_log", "_last_checkpoint")
    store.write(hint, b"", overwrite=True)
    assert store.read(hint, max_size=1000) == b""
    assert DeltaLog.for_table(uri, options).update().version == 2
