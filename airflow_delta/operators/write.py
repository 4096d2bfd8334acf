"""DeltaWriteOperator: write the rows of a source to a Delta table in one exactly-once commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from airflow_delta.operators.commit import DeltaCommitOperator, is_templated

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_delta.engine.txn.commit_types import CommitResult
    from airflow_delta.engine.txn.transaction import OptimisticTransaction
    from airflow_delta.operators.commit import SparkOnDemand
    from airflow_delta.spark.write import WriteMode

MODES = ("append", "overwrite", "error", "errorifexists", "ignore")


class DeltaWriteOperator(DeltaCommitOperator):
    """Write a source's rows to the Delta table at `table_uri` (created when missing).

    Arguments of the source, the connections, conflicts, hooks and exactly-once: see
    `DeltaCommitOperator`. A source callable returning Arrow data (a pyarrow Table, pandas or
    polars through Arrow) is written in process by the engine (`engine.write_table`, no Spark);
    XCom `executor` says which ran.

    :param mode: "append" (default), "overwrite", "error" (fail when the table exists) or
        "ignore" (do nothing when it exists).
    :param partition_by: partition columns of a new table (or of an overwrite_schema).
        (templated)
    :param replace_where: with mode="overwrite": replace only the rows matching this predicate
        on partition columns; written rows outside it fail the task. (templated)
    :param partition_overwrite_mode: "static" (default) or "dynamic" (mode="overwrite"
        replaces only the partitions the source writes to).
    :param merge_schema: add the source's new columns to the table schema.
    :param overwrite_schema: with mode="overwrite": replace schema and partitioning.
    :param table_properties: `delta.*` properties of a new table (e.g.
        `{"delta.checkpointInterval": "20"}`).
    :param target_file_size: bytes per data file before a new one is started (default
        128 MiB).

    Example::

        DeltaWriteOperator(
            task_id="load_events",
            table_uri="s3://lake/events",
            source="SELECT * FROM parquet.`s3://landing/events/{{ ds }}`",
            partition_by=["day"],
            post_commit_hooks=["symlink_manifest"],
        )
    """

    template_fields: Sequence[str] = (
        *DeltaCommitOperator.template_fields,
        "partition_by",
        "replace_where",
    )
    operation = "WRITE"
    accepts_arrow = True

    def __init__(
        self,
        *,
        mode: str = "append",
        partition_by: Sequence[str] | None = None,
        replace_where: str | None = None,
        partition_overwrite_mode: str = "static",
        merge_schema: bool = False,
        overwrite_schema: bool = False,
        table_properties: Mapping[str, str] | None = None,
        target_file_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        if mode.lower() not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        overwrite = mode.lower() == "overwrite"
        if partition_overwrite_mode not in ("static", "dynamic"):
            raise ValueError(
                "partition_overwrite_mode must be 'static' or 'dynamic', not "
                f"{partition_overwrite_mode!r}"
            )
        if not overwrite and (
            replace_where or overwrite_schema or partition_overwrite_mode == "dynamic"
        ):
            raise ValueError(
                "replace_where, overwrite_schema and partition_overwrite_mode='dynamic' need "
                "mode='overwrite'"
            )
        if (bool(replace_where) + overwrite_schema + (partition_overwrite_mode == "dynamic")) > 1:
            raise ValueError(
                "replace_where, overwrite_schema and partition_overwrite_mode='dynamic' exclude "
                "each other"
            )
        if isinstance(partition_by, str) and not is_templated(partition_by):
            partition_by = [partition_by]
        super().__init__(**kwargs)
        self.mode = mode.lower()
        self.partition_by = partition_by
        self.replace_where = replace_where
        self.given["replace_where"] = replace_where
        self.partition_overwrite_mode = partition_overwrite_mode
        self.merge_schema = merge_schema
        self.overwrite_schema = overwrite_schema
        self.table_properties = dict(table_properties or {})
        self.target_file_size = target_file_size

    def skip_reason(self, result: dict[str, Any]) -> str:
        if self.mode != "ignore":
            return super().skip_reason(result)
        return (
            f"table {self.table_uri} exists and mode is 'ignore' (or an earlier try of this "
            "task committed this write)"
        )

    def commit_once(
        self, spark: SparkOnDemand, context: Context, txn: OptimisticTransaction
    ) -> CommitResult:
        from airflow_delta.engine.commands.data_files import DEFAULT_TARGET_FILE_SIZE

        partition_by = self.partition_by
        if isinstance(partition_by, str):  # a rendered template: "day" or "day, country"
            partition_by = [c.strip() for c in partition_by.split(",") if c.strip()]
        source = self.read_source(spark, context)
        if not hasattr(source, "sparkSession"):  # Arrow data from the source callable
            from airflow_delta.engine.commands.write import write_table

            schema_mode = "merge" if self.merge_schema else None
            self.executor = "in-process"
            return write_table(
                txn,
                source,
                mode="error" if self.mode == "errorifexists" else self.mode,
                partition_by=list(partition_by) if partition_by else None,
                configuration=self.table_properties or None,
                target_file_size=self.target_file_size or DEFAULT_TARGET_FILE_SIZE,
                replace_where=self.scope("replace_where"),
                partition_overwrite_mode=self.partition_overwrite_mode,
                schema_mode="overwrite" if self.overwrite_schema else schema_mode,
            )
        from airflow_delta.spark.write import write_delta

        self.executor = "spark"
        return write_delta(
            source,
            txn,
            mode=cast("WriteMode", self.mode),
            partition_by=list(partition_by) if partition_by else None,
            replace_where=self.scope("replace_where"),
            merge_schema=self.merge_schema,
            overwrite_schema=self.overwrite_schema,
            storage_options=self.hook.storage_options,
            partition_overwrite_mode=cast(
                "Literal['static', 'dynamic']", self.partition_overwrite_mode
            ),
            configuration=self.table_properties or None,
            target_file_size=self.target_file_size or DEFAULT_TARGET_FILE_SIZE,
        )
