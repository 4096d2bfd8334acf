"""DeltaHook: the `delta` connection (storage options, secrets masked), the table's DeltaLog,
and the Spark session of a task.

A `delta` connection describes where tables live, not one table:

- `login` / `password` become the storage options `key` / `secret` (S3 access key id and secret
  access key, as s3fs names them) and `host` becomes `endpoint_url` (an S3-compatible endpoint
  such as MinIO); all three are optional;
- the extra JSON object holds any other fsspec storage options, passed as they are (for example
  `{"client_kwargs": {"region_name": "eu-west-1"}}`, or `{"single_writer": true}` for a store
  without atomic put-if-absent that only one writer uses).

Storage options never appear in logs: the password and every option whose name says it is a
secret are registered with Airflow's secrets masker when the connection is read.

Spark: `get_spark_session(spark_conn_id)` maps an apache-spark provider `spark` connection
(master URL) or `spark_connect` connection (`sc://` remote) the way that provider's
PySparkOperator does; with no connection the session is local (`local[*]`).

Importing this module (DAG parsing, the triggerer) loads neither the engine (pyarrow, fsspec)
nor Spark: `get_delta_log` and `get_spark_session` import them when called.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_delta.engine.delta_log import DeltaLog

#: Substrings of option names whose values are masked in task logs.
SECRET_OPTION_MARKERS = ("secret", "password", "passwd", "token", "credential", "private", "key")


class DeltaHook(BaseHook):
    """Storage options and DeltaLogs for the tables behind one `delta` connection.

    :param delta_conn_id: the `delta` connection; None means no connection (local paths, or
        credentials from the environment such as `AWS_*` variables).
    :param spark_conn_id: the default `spark` / `spark_connect` connection of
        `get_spark_session`; None means a local session.

    Example (in a task)::

        hook = DeltaHook("delta_s3")
        snapshot = hook.get_delta_log("s3://lake/events").update()
    """

    conn_name_attr = "delta_conn_id"
    default_conn_name = "delta_default"
    conn_type = "delta"
    hook_name = "Delta Lake"

    def __init__(self, delta_conn_id: str | None = None, spark_conn_id: str | None = None) -> None:
        super().__init__()
        self.delta_conn_id = delta_conn_id
        self.spark_conn_id = spark_conn_id

    @cached_property
    def storage_options(self) -> dict[str, Any]:
        """The fsspec storage options of the connection (empty without a connection)."""
        if not self.delta_conn_id:
            return {}
        conn = self.get_connection(self.delta_conn_id)
        extra = conn.extra_dejson
        if not isinstance(extra, Mapping):
            raise ValueError(
                f"Connection {self.delta_conn_id!r}: the extra must be a JSON object of storage "
                f"options, got {type(extra).__name__}"
            )
        options: dict[str, Any] = {}
        if conn.host:
            options["endpoint_url"] = conn.host
        if conn.login:
            options["key"] = conn.login
        if conn.password:
            options["secret"] = conn.password
        options.update(extra)
        mask_storage_options(options)
        return options

    def get_delta_log(self, uri: str) -> DeltaLog:
        """The DeltaLog of the table at `uri`, with this connection's storage options."""
        from airflow_delta.engine.delta_log import DeltaLog  # the engine loads at run time

        return DeltaLog.for_table(uri, self.storage_options)

    def get_spark_session(
        self, spark_conn_id: str | None = None, config_kwargs: Mapping[str, Any] | None = None
    ) -> SparkSession:
        """A SparkSession from `spark_conn_id` (default: the hook's), else a local one.

        `config_kwargs` are Spark conf entries that override the connection's extras.
        """
        from airflow_delta.spark.session import get_spark, spark_session_from_connection

        conn_id = spark_conn_id or self.spark_conn_id
        if not conn_id:
            return get_spark(conf=config_kwargs)
        conn = self.get_connection(conn_id)
        if conn.password:
            mask_secret(conn.password)
        return spark_session_from_connection(
            conn.conn_type or "spark",
            conn.host,
            conn.port,
            conn.extra_dejson,
            config_kwargs,
            login=conn.login,
            password=conn.password,
        )


def mask_storage_options(options: Mapping[str, Any]) -> None:
    """Register every secret-looking value of `options` (nested too) with the masker."""
    for name, value in options.items():
        if isinstance(value, Mapping):
            mask_storage_options(value)
        elif value and any(marker in str(name).lower() for marker in SECRET_OPTION_MARKERS):
            mask_secret(value)  # by value: Airflow's own list of secret names is narrower
