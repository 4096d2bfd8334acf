"""DeltaOptimizeOperator: OPTIMIZE (bin-packing compaction, optionally Z-order) of a Delta
table, run in process by the engine (`airflow_delta.engine.optimize`) in one exactly-once
commit.

The commit's adds and removes carry `dataChange=false`: readers of the table's changes see
nothing, and a compaction does not fail concurrent appends.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_delta.operators.command import DeltaCommandOperator, optional_text, split_columns
from airflow_delta.operators.commit import is_templated

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_delta.engine.txn.commit_types import CommitResult
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

log = logging.getLogger(__name__)


def check_size(name: str, value: Any, *, minimum: int) -> None:
    """ValueError unless `value` (when given and not a template) is an integer >= minimum."""
    if value is None or is_templated(value):
        return
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name} must be a number of bytes, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a number of bytes, got {value!r}") from None
    if number < minimum:
        raise ValueError(f"{name} must be at least {minimum} bytes, got {number}")


class DeltaOptimizeOperator(DeltaCommandOperator):
    """OPTIMIZE the Delta table at `table_uri` in process: bin-pack the small files of each
    partition into files of about `target_size` bytes, or with `zorder_by` rewrite them
    clustered by those columns (Z-order).

    The XCom `metrics` are delta-spark's OPTIMIZE metrics (numFilesAdded, numFilesRemoved,
    filesAdded/filesRemoved sizes, partitionsOptimized, zOrderStats, ...). Connections,
    conflicts, hooks and exactly-once: see `DeltaCommandOperator`.

    :param partition_filter: SQL condition over partition columns choosing the partitions to
        compact (e.g. `"day >= '{{ macros.ds_add(ds, -7) }}'"`); None for the whole table.
        (templated)
    :param zorder_by: columns (data columns, not partition columns) to Z-order by: a list, or
        a comma-separated string. None or empty: bin-packing only. (templated)
    :param target_size: bytes a compacted file aims at (default: the table's
        `delta.targetFileSize`, else 256 MiB). (templated)
    :param min_file_size: files smaller than this are compacted, larger ones left alone unless
        they have a deletion vector (default: `target_size`). (templated)

    Example::

        DeltaOptimizeOperator(
            task_id="compact",
            table_uri="s3://lake/events",
            partition_filter="day = '{{ ds }}'",
            zorder_by=["user_id", "ts"],
        )
    """

    template_fields: Sequence[str] = (
        *DeltaCommandOperator.template_fields,
        "partition_filter",
        "zorder_by",
        "target_size",
        "min_file_size",
    )
    template_fields_renderers = {"partition_filter": "sql"}
    operation = "OPTIMIZE"

    def __init__(
        self,
        *,
        partition_filter: str | None = None,
        zorder_by: Sequence[str] | str | None = None,
        target_size: int | str | None = None,
        min_file_size: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        if partition_filter is not None and (
            not isinstance(partition_filter, str) or not partition_filter.strip()
        ):
            raise ValueError(
                "partition_filter must be SQL text over partition columns, or None for the "
                f"whole table; got {partition_filter!r}"
            )
        if zorder_by is not None and not is_templated(zorder_by):
            if not isinstance(zorder_by, str | Sequence) or any(
                not isinstance(c, str) for c in zorder_by
            ):
                raise ValueError(f"zorder_by must be column names, got {zorder_by!r}")
            columns = split_columns(zorder_by)
            duplicated = sorted({c for c in columns if columns.count(c) > 1})
            if duplicated:
                raise ValueError(f"zorder_by names column(s) {duplicated} more than once")
        check_size("target_size", target_size, minimum=1)
        check_size("min_file_size", min_file_size, minimum=0)
        super().__init__(**kwargs)
        self.partition_filter = partition_filter
        self.given["partition_filter"] = partition_filter
        self.zorder_by = zorder_by
        self.target_size = target_size
        self.min_file_size = min_file_size

    def run_command(self, txn: OptimisticTransaction, context: Context) -> CommitResult:
        from airflow_delta.engine import optimize

        partition_filter = self.scope("partition_filter")
        zorder_by = split_columns(self.zorder_by) or None
        target_size, min_file_size = self.size("target_size"), self.size("min_file_size")
        sizes = {"target_size": target_size, "min_file_size": min_file_size}
        log.info(
            "OPTIMIZE table %s (version %s)%s%s%s, in process",
            self.table_uri,
            txn.read_version,
            f" where {partition_filter}" if partition_filter else "",
            f" ZORDER BY ({', '.join(zorder_by)})" if zorder_by else "",
            "".join(f", {k}={v}" for k, v in sizes.items() if v is not None),
        )
        return optimize(
            txn,
            partition_filter,
            target_size=target_size,
            min_file_size=min_file_size,
            zorder_by=zorder_by,
        )

    def size(self, name: str) -> int | None:
        """The rendered `target_size` / `min_file_size`: None when unset (the engine's
        default), else a checked integer."""
        text = optional_text(getattr(self, name))
        if text is None:
            return None
        check_size(name, text, minimum=1 if name == "target_size" else 0)
        return int(text)
