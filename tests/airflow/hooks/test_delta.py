"""DeltaHook (`hooks.delta`): the `delta` connection's storage options with their secrets
masked, Spark sessions from `spark` and `spark_connect` connections, and a write to S3 (moto)
through a `delta` connection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_delta.engine.delta_log import DeltaLog


@pytest.fixture
def connection(monkeypatch: pytest.MonkeyPatch):
    """Define an Airflow connection through an AIRFLOW_CONN_<ID> variable (JSON form)."""

    def define(conn_id: str, **fields: Any) -> str:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
        return conn_id

    return define


def test_storage_options_from_the_connection_with_secrets_masked(connection) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    from airflow_delta.hooks.delta import DeltaHook

    conn_id = connection(
        "delta_lake",
        conn_type="delta",
        host="http://minio:9000",
        login="AKIAEXAMPLE",
        password="s3cr3t-password-value",
        extra={
            "client_kwargs": {"region_name": "eu-west-1"},
            "session_token": "tok-1234567890",
            "single_writer": False,
        },
    )
    options = DeltaHook(conn_id).storage_options
    assert options == {
        "endpoint_url": "http://minio:9000",
        "key": "AKIAEXAMPLE",
        "secret": "s3cr3t-password-value",
        "client_kwargs": {"region_name": "eu-west-1"},
        "session_token": "tok-1234567890",
        "single_writer": False,
    }
    line = "options: key=AKIAEXAMPLE secret=s3cr3t-password-value token=tok-1234567890"
    masked = redact(line)
    for secret in ("AKIAEXAMPLE", "s3cr3t-password-value", "tok-1234567890"):
        assert secret not in masked
    assert "eu-west-1" in redact("region eu-west-1")  # not a secret


def test_no_connection_means_no_storage_options(tmp_path) -> None:
    from airflow_delta.hooks.delta import DeltaHook

    hook = DeltaHook(None)
    assert hook.storage_options == {}
    assert hook.get_delta_log(str(tmp_path)).table_uri.endswith(tmp_path.name)


def test_extra_must_be_an_object(connection) -> None:
    from airflow_delta.hooks.delta import DeltaHook

    conn_id = connection("delta_bad", conn_type="delta", extra=["not", "an", "object"])
    with pytest.raises(ValueError, match="extra must be a JSON object"):
        _ = DeltaHook(conn_id).storage_options


def test_spark_session_from_a_spark_connection(connection, spark) -> None:
    """A `spark` connection to the session the process already runs: the same session back."""
    from airflow_delta.hooks.delta import DeltaHook

    conn_id = connection(
        "spark_local",
        conn_type="spark",
        host="local[2]",
        extra={"spark.sql.shuffle.partitions": "4"},
    )
    session = DeltaHook(None, spark_conn_id=conn_id).get_spark_session()
    assert session is spark or session.sparkContext is spark.sparkContext
    assert session.conf.get("spark.sql.shuffle.partitions") == "4"


def test_spark_connect_connection_maps_to_a_remote(connection) -> None:
    """The mapping the hook applies to a `spark_connect` connection (no server needed)."""
    from airflow.sdk import BaseHook

    from airflow_delta.spark.session import spark_target_from_connection

    conn_id = connection(
        "spark_connect_x",
        conn_type="spark_connect",
        host="connect.example",
        port=15003,
        login="etl",
        password="tkn",
        extra={"use_ssl": True, "spark.sql.shuffle.partitions": 8},
    )
    conn = BaseHook.get_connection(conn_id)
    target = spark_target_from_connection(
        conn.conn_type,
        conn.host,
        conn.port,
        conn.extra_dejson,
        login=conn.login,
        password=conn.password,
    )
    assert target.remote == "sc://connect.example:15003/;user_id=etl;token=tkn;use_ssl=true"
    assert target.conf == {"spark.sql.shuffle.partitions": "8"}


@pytest.mark.s3
def test_write_operator_commits_to_s3_through_a_delta_connection(
    airflow_db, spark, connection, monkeypatch: pytest.MonkeyPatch, s3_endpoint: str, s3_bucket
) -> None:
    """A `delta` connection (endpoint, keys) carries the storage options to the write."""
    from tests.airflow.conftest import load_dag
    from tests.airflow.metadata import task_states, xcoms

    bucket, options = s3_bucket
    monkeypatch.setenv("AIRFLOW_DELTA_TEST_BUCKET", bucket)
    connection(
        "delta_moto",
        conn_type="delta",
        host=s3_endpoint,
        login="testing",
        password="testing",
        extra={"client_kwargs": {"region_name": "us-east-1"}},
    )
    dag_run = load_dag("t_s3_write").test()
    assert task_states(dag_run) == {"write": "success"}
    result = xcoms(dag_run, "write")["return_value"]
    assert result["version"] == 0 and result["hooks"] == {"checkpoint": "ok"}
    snapshot = DeltaLog.for_table(f"s3://{bucket}/events", options).update()
    assert snapshot.version == 0 and snapshot.num_records == 30
