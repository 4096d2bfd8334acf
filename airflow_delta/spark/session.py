"""SparkSession from defaults (`local[*]`), a master URL, or a Spark Connect `sc://` remote."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

#: Conf applied to every session this module builds (callers' conf wins).
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}


def _prepare_environment() -> None:
    """Environment the driver and local Python workers need on these machines."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def get_spark(
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, Any] | None = None,
    app_name: str = "airflow-delta",
) -> SparkSession:
    """A SparkSession: Spark Connect when `remote` (`sc://host:port`) is given, else `master`
    (default `local[*]`). `conf` entries are set on the builder and override the defaults.

    Example: `get_spark("spark://127.0.0.1:7077", conf={"spark.executor.memory": "2g"})`.
    """
    _prepare_environment()
    builder = SparkSession.builder.appName(app_name)
    builder = builder.remote(remote) if remote else builder.master(master or "local[*]")
    for key, value in {**DEFAULT_CONF, **dict(conf or {})}.items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate()
