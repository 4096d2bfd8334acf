"""TableLocation (`log.table_location`): a table's URI, its log store and its two paths."""

from __future__ import annotations

from airflow_delta.engine.log.log_store import LocalLogStore
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.paths import FileLocation


def test_a_local_table(tmp_path) -> None:
    location = TableLocation.of(f"file://{tmp_path}/t")
    assert isinstance(location.store, LocalLogStore)
    assert location.table_path == f"{tmp_path}/t"
    assert location.log_path == f"{tmp_path}/t/_delta_log"
    assert location.log_file("_last_checkpoint") == f"{tmp_path}/t/_delta_log/_last_checkpoint"
    assert location.root == FileLocation("file", "", f"{tmp_path}/t")
    assert repr(location) == f"TableLocation('file://{tmp_path}/t')"


def test_an_s3_table_keeps_its_uri_and_options() -> None:
    options = {"AWS_REGION": "us-east-1"}
    location = TableLocation.of("s3://bucket/path/t", options)
    assert location.uri == "s3://bucket/path/t"
    assert location.storage_options == options and location.storage_options is not options
    assert location.log_path.endswith("bucket/path/t/_delta_log")
    assert location.root == FileLocation("s3", "bucket", "/path/t")
