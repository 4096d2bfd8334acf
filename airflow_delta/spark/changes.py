"""The change data feed of a Delta table as a Spark DataFrame: `read_changes`.

The engine's reader (`airflow_delta.engine.commands.change_data.read_changes`) finds each
commit's changes (its cdc files, else its adds and removes) and reads them as Arrow in this
process; the DataFrame is made from that Arrow table. It suits the incremental reads of a DAG
(the changes since the last run); a range holding more rows than the driver's memory should be
read in smaller ranges.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from airflow_delta.engine.commands.change_data import read_changes as read_changes_arrow
from airflow_delta.engine.log.history import Timestamp

__all__ = ["read_changes"]


def read_changes(
    spark: SparkSession,
    uri: str,
    starting_version: int | None = None,
    ending_version: int | None = None,
    *,
    starting_timestamp: Timestamp | None = None,
    ending_timestamp: Timestamp | None = None,
    columns: Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> DataFrame:
    """The row-level changes of the table at `uri` from `starting_version` (or
    `starting_timestamp`) to `ending_version` (or `ending_timestamp`; default the latest), both
    included: the table's columns plus `_change_type` (insert, delete, update_preimage,
    update_postimage), `_commit_version` and `_commit_timestamp`, as delta-spark's
    `spark.read.option("readChangeFeed", "true")` gives them.

    Raises ChangeDataFeedError when a version of the range did not record change data.

    >>> read_changes(spark, "/data/orders", 12).where("_change_type != 'update_preimage'")
    ... # doctest: +SKIP
    """
    changes = read_changes_arrow(
        uri,
        starting_version,
        ending_version,
        starting_timestamp=starting_timestamp,
        ending_timestamp=ending_timestamp,
        columns=columns,
        storage_options=storage_options,
    )
    return spark.createDataFrame(changes)
