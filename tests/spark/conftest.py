"""A local Spark session shared by the Spark tests of one pytest worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from airflow_delta.spark.session import get_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = get_spark(
        "local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
        },
        app_name="airflow-delta-tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
