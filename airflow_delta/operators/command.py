"""DeltaCommandOperator: the base of the operators that run one of the engine's table commands
(DELETE, UPDATE, OPTIMIZE, RESTORE) in the worker's process.

They share everything of `DeltaCommitOperator` (exactly-once markers, conflict re-runs, the XCom
result, the asset event, OpenLineage) except the source: no rows come in, the command reads the
table itself, on pyarrow, and commits through the engine's commit path. No Spark session is
ever started, so these operators take no `source`, `spark_conn_id` or `spark_conf`; except
those whose command also runs on Spark (`takes_spark`: DELETE and UPDATE, `operators.dml`),
which take `spark_conn_id` and `spark_conf` for the session they start only when the engine
cannot run the command in process.

The command runs in the transaction `DeltaCommitOperator` opened with the task's commit
properties (its exactly-once marker among them): a retry of a task whose commit landed finds
the marker and runs nothing. When a command finds nothing to do (no row matched, nothing to
compact) it still commits the marker alone, so a retry does not run it again; with
`exactly_once=False` it commits nothing and the XCom says `skipped`.

Importing this module (DAG parsing) loads no engine, pyarrow or Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_delta.operators.commit import DeltaCommitOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_delta.engine.txn.commit_types import CommitResult
    from airflow_delta.engine.txn.transaction import OptimisticTransaction
    from airflow_delta.operators.commit import SparkOnDemand

log = logging.getLogger(__name__)

#: Arguments of DeltaCommitOperator that have no meaning for an in-process table command.
NOT_FOR_COMMANDS = ("source", "source_format", "source_options", "spark_conn_id", "spark_conf")
#: Those a command that can also run on Spark (`takes_spark`) accepts.
SPARK_ARGUMENTS = ("spark_conn_id", "spark_conf")


def split_columns(value: str | Sequence[str] | None) -> list[str]:
    """Column names from a list or a comma-separated string (a rendered template).

    >>> split_columns("day, country")
    ['day', 'country']
    >>> split_columns(["a", " b "])
    ['a', 'b']
    """
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(c).strip() for c in items if str(c).strip()]


def optional_text(value: Any) -> str | None:
    """A rendered optional argument: None for None, "" and "None" (what `{{ x or '' }}` and
    `{{ params.x }}` of an unset param render to), else the text stripped."""
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None") else text


class DeltaCommandOperator(DeltaCommitOperator):
    """Base of the operators that run an engine command on the Delta table at `table_uri` in
    this process (see the module docstring).

    :param table_uri: the table's location (local path, `file://`, `s3://`, ...); the table
        must exist. (templated)
    :param delta_conn_id: `delta` connection with the storage options; None for local paths
        or credentials from the environment.
    :param isolation_level: `Serializable` or `WriteSerializable` for this commit (default:
        the table's `delta.isolationLevel`, else WriteSerializable).
    :param max_commit_attempts: how many times the command (read + write + commit) runs when a
        concurrent commit conflicts (1 = never re-run).
    :param post_commit_hooks: hooks to run after the commit, any of "checkpoint",
        "symlink_manifest", "log_cleanup".
    :param exactly_once: commit with an idempotent-write marker of this task instance, so a
        retry after a landed commit does nothing. Default True.
    :param txn_app_id: own app id of the marker instead of the task instance's. (templated)
    :param txn_version: own version of the marker; goes with `txn_app_id`. (templated)
    :param user_metadata: text stored as commitInfo.userMetadata. (templated)
    """

    template_fields: Sequence[str] = ("table_uri", "txn_app_id", "txn_version", "user_metadata")
    # A predicate is SQL text, never a file to read: no template extensions.
    template_ext: Sequence[str] = ()
    takes_source = False
    #: Whether the command can also run on Spark (then `spark_conn_id` and `spark_conf` are
    #: taken, for the session started when the engine cannot run it in process).
    takes_spark = False
    executor = "in-process"

    def __init__(self, **kwargs: Any) -> None:
        taken = SPARK_ARGUMENTS if self.takes_spark else ()
        given = [name for name in NOT_FOR_COMMANDS if kwargs.get(name) and name not in taken]
        if given:
            where = "" if self.takes_spark else " in process"
            raise ValueError(
                f"{type(self).__name__} runs the engine's {self.operation}{where} and reads "
                f"the table itself: it takes no {', '.join(given)}"
            )
        super().__init__(**kwargs)

    def commit_once(
        self, spark: SparkOnDemand, context: Context, txn: OptimisticTransaction
    ) -> CommitResult:
        self.executor = "in-process"
        self.command_ran = True
        return self.run_command(txn, context)

    def run_command(self, txn: OptimisticTransaction, context: Context) -> CommitResult:
        """Run the command in `txn` (started on the latest snapshot with the task's commit
        properties) and return its CommitResult."""
        raise NotImplementedError

    def execute(self, context: Context) -> dict[str, Any]:
        self.command_ran = False
        return super().execute(context)

    def skip_reason(self, result: dict[str, Any]) -> str:
        if not getattr(self, "command_ran", False):
            return super().skip_reason(result)
        return f"{self.operation} found nothing to change in table {self.table_uri}"
