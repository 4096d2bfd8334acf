"""DeltaDeleteOperator and DeltaUpdateOperator: DELETE and UPDATE by a SQL predicate in one
exactly-once commit.

They run in process, by the engine (`airflow_delta.engine.delete` / `update`), when it evaluates
the predicate and the assignments (comparisons, IN, BETWEEN, IS NULL, AND/OR/NOT, literals,
column references, arithmetic, CASE, casts and the common functions). Otherwise (a function the
engine lacks, or a table the in-process command does not handle: UnsupportedCommandError or
InvalidPredicateError from the engine) they run on
Spark (`airflow_delta.spark.delete` / `update`), in a session started as DeltaMergeOperator
starts one (`spark_conn_id`, `spark_conf`; a local session without a connection). Without
pyspark the task fails with UnsupportedCommandError naming the table and the fix. XCom's
`executor` and the task log say which one ran.

On a table with deletion vectors enabled (`delta.enableDeletionVectors=true`) a touched file
keeps its other rows under a deletion vector, in process and on Spark; otherwise it is
rewritten. See docs/delete-update.md for what the predicates and assignments accept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_delta.operators.command import DeltaCommandOperator
from airflow_delta.operators.commit import is_templated

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyspark.sql import SparkSession

    from airflow_delta.engine.txn.commit_types import CommitResult
    from airflow_delta.engine.txn.transaction import OptimisticTransaction
    from airflow_delta.operators.commit import SparkOnDemand

log = logging.getLogger(__name__)


def check_predicate(operation: str, predicate: Any) -> None:
    """ValueError unless `predicate` is None (every row) or non-blank SQL text."""
    if predicate is None:
        return
    if not isinstance(predicate, str):
        raise ValueError(
            f"{operation}: predicate must be SQL text (or None for every row), got "
            f"{type(predicate).__name__}"
        )
    if not predicate.strip():
        raise ValueError(
            f"{operation}: predicate is empty; pass predicate=None to {operation} every row"
        )


def check_assignments(assignments: Any) -> None:
    """ValueError unless `assignments` maps column names to SQL text (at least one)."""
    if not isinstance(assignments, Mapping) or not assignments:
        raise ValueError(
            "UPDATE needs `set`: a non-empty dict of column -> SQL expression, e.g. "
            f"{{'status': \"'closed'\"}}; got {assignments!r}"
        )
    for column, value in assignments.items():
        if not isinstance(column, str) or not column.strip():
            raise ValueError(f"UPDATE set: column names must be non-empty text, got {column!r}")
        if not isinstance(value, str) or not value.strip():
            raise ValueError(
                f"UPDATE set[{column!r}] must be SQL text (a literal is quoted: \"'x'\", "
                f"'42', 'NULL'), got {value!r}"
            )


class DeltaDmlOperator(DeltaCommandOperator):
    """Base of DeltaDeleteOperator and DeltaUpdateOperator: the command runs in process when
    the engine evaluates it, else on Spark (see the module docstring).

    :param spark_conn_id: `spark` / `spark_connect` connection of the session the command runs
        in when the engine cannot run it in process; None for a local session.
    :param spark_conf: Spark conf for that session, over the connection's extras. (templated)
    """

    template_fields: Sequence[str] = (*DeltaCommandOperator.template_fields, "spark_conf")
    template_fields_renderers = {"spark_conf": "json"}
    takes_spark = True

    def commit_once(
        self, spark: SparkOnDemand, context: Context, txn: OptimisticTransaction
    ) -> CommitResult:
        from airflow_delta.engine.errors import InvalidPredicateError, UnsupportedCommandError

        self.executor = "in-process"
        self.command_ran = True
        try:
            return self.run_command(txn, context)
        except (UnsupportedCommandError, InvalidPredicateError) as exc:
            reason: Exception = exc
        log.info(
            "The in-process %s cannot run it on table %s: %s: %s Running it on Spark.",
            self.operation,
            self.table_uri,
            type(reason).__name__,
            reason,
        )
        session = self.spark_session(spark, reason)
        self.executor = "spark"
        from pyspark.errors import AnalysisException

        from airflow_delta.engine.errors import InvalidArgumentError

        try:
            return self.run_on_spark(session, txn, context)
        except (AnalysisException, InvalidPredicateError, InvalidArgumentError) as exc:
            raise InvalidPredicateError(
                self.statement(),
                f"of {self.operation} on table {self.table_uri} is taken neither by the engine "
                f"({type(reason).__name__}: {reason}) nor by Spark ({type(exc).__name__}: "
                f"{str(exc)[:500]}); nothing was written. Fix the predicate or the assignments.",
            ) from exc

    def spark_session(self, spark: SparkOnDemand, reason: Exception) -> SparkSession:
        """The task's Spark session; UnsupportedCommandError naming the table and the fix
        when pyspark is not installed."""
        import importlib.util

        from airflow_delta.engine.errors import UnsupportedCommandError

        if importlib.util.find_spec("pyspark") is None:
            raise UnsupportedCommandError(
                f"{self.operation} of table {self.table_uri}: the in-process {self.operation} "
                f"cannot run it ({reason}), and pyspark is not installed, so it cannot run on "
                "Spark either; nothing was written. Install airflow-delta[spark] (with "
                "spark_conn_id for a cluster, else a local session starts), or use only what "
                "the engine evaluates (see docs/delete-update.md)."
            )
        return spark.session()

    def run_on_spark(
        self, spark: SparkSession, txn: OptimisticTransaction, context: Context
    ) -> CommitResult:
        """Run the command on Spark in `txn`; its CommitResult."""
        raise NotImplementedError

    def statement(self) -> str:
        """The predicate (and assignments) as the error messages show them."""
        predicate = getattr(self, "predicate", None)
        assignments = getattr(self, "set", None)
        where = predicate if predicate is not None else "TRUE"
        if not assignments:
            return where
        return ", ".join(f"{c} = {v}" for c, v in dict(assignments).items()) + f" WHERE {where}"


class DeltaDeleteOperator(DeltaDmlOperator):
    """DELETE the rows of the Delta table at `table_uri` that satisfy `predicate`: in process
    when the engine evaluates it, else on Spark.

    The XCom `metrics` are delta-spark's DELETE metrics (numDeletedRows, numRemovedFiles,
    numAddedFiles, numCopiedRows, numDeletionVectorsAdded, ...). Connections, conflicts, hooks
    and exactly-once: see `DeltaCommandOperator`; Spark: see `DeltaDmlOperator`.

    :param predicate: SQL condition over the table's columns; rows where it is NULL are kept.
        In process: comparisons, IN, BETWEEN, IS [NOT] NULL, AND/OR/NOT, literals; anything
        else (`amount * 2 > 10`, `upper(name) = 'X'`) runs on Spark. None deletes every row; it
        is a required argument so that no task deletes everything by omission, and a template
        rendering to empty text fails the task. (templated)

    Example::

        DeltaDeleteOperator(
            task_id="erase_user",
            table_uri="s3://lake/events",
            predicate="user_id = {{ params.user_id }}",
        )
    """

    template_fields: Sequence[str] = (*DeltaDmlOperator.template_fields, "predicate")
    template_fields_renderers = {"predicate": "sql", "spark_conf": "json"}
    operation = "DELETE"

    def __init__(self, *, predicate: str | None, **kwargs: Any) -> None:
        check_predicate(self.operation, predicate)
        super().__init__(**kwargs)
        self.predicate = predicate
        self.given["predicate"] = predicate

    def run_command(self, txn: OptimisticTransaction, context: Context) -> CommitResult:
        from airflow_delta.engine.commands.dml import delete

        predicate = self.scope("predicate")
        log.info(
            "DELETE from table %s (version %s) where %s, in process",
            self.table_uri,
            txn.read_version,
            predicate if predicate is not None else "TRUE (every row)",
        )
        return delete(txn, predicate)

    def run_on_spark(
        self, spark: SparkSession, txn: OptimisticTransaction, context: Context
    ) -> CommitResult:
        from airflow_delta.spark.dml import delete

        predicate = self.scope("predicate")
        log.info(
            "DELETE from table %s (version %s) where %s, on Spark",
            self.table_uri,
            txn.read_version,
            predicate if predicate is not None else "TRUE (every row)",
        )
        return delete(spark, txn, predicate)


class DeltaUpdateOperator(DeltaDmlOperator):
    """UPDATE the rows of the Delta table at `table_uri` that satisfy `predicate`: in process
    when the engine evaluates the predicate and the assignments, else on Spark.

    The XCom `metrics` are delta-spark's UPDATE metrics (numUpdatedRows, numCopiedRows,
    numRemovedFiles, numAddedFiles, numDeletionVectorsAdded, ...). Connections, conflicts,
    hooks and exactly-once: see `DeltaCommandOperator`; Spark: see `DeltaDmlOperator`.

    :param set: column -> SQL expression, cast to the column's type. In process: a column
        reference, a literal (`'x'`, `42`, `NULL`, `DATE '2024-01-01'`, `TIMESTAMP '...'`) or
        a condition; anything else (`amount * 2`, `upper(name)`) runs on Spark. (templated)
    :param predicate: SQL condition selecting the rows to update (see DeltaDeleteOperator);
        None updates every row. Required, for the same reason. (templated)

    Example::

        DeltaUpdateOperator(
            task_id="close_orders",
            table_uri="/lake/orders",
            set={"status": "'closed'", "closed_on": "DATE '{{ ds }}'"},
            predicate="status = 'open' AND day < '{{ macros.ds_add(ds, -30) }}'",
        )
    """

    template_fields: Sequence[str] = (*DeltaDmlOperator.template_fields, "set", "predicate")
    template_fields_renderers = {"predicate": "sql", "set": "json", "spark_conf": "json"}
    operation = "UPDATE"

    def __init__(self, *, set: Mapping[str, str], predicate: str | None, **kwargs: Any) -> None:
        if not is_templated(set):
            check_assignments(set)
        check_predicate(self.operation, predicate)
        super().__init__(**kwargs)
        self.set = dict(set) if isinstance(set, Mapping) else set
        self.predicate = predicate
        self.given["predicate"] = predicate

    def run_command(self, txn: OptimisticTransaction, context: Context) -> CommitResult:
        from airflow_delta.engine.commands.dml import update

        check_assignments(self.set)  # as rendered
        predicate = self.scope("predicate")
        log.info(
            "UPDATE table %s (version %s) set %s where %s, in process",
            self.table_uri,
            txn.read_version,
            ", ".join(f"{c} = {v}" for c, v in self.set.items()),
            predicate if predicate is not None else "TRUE (every row)",
        )
        return update(txn, self.set, predicate)

    def run_on_spark(
        self, spark: SparkSession, txn: OptimisticTransaction, context: Context
    ) -> CommitResult:
        from airflow_delta.spark.dml import update

        predicate = self.scope("predicate")
        log.info(
            "UPDATE table %s (version %s) set %s where %s, on Spark",
            self.table_uri,
            txn.read_version,
            ", ".join(f"{c} = {v}" for c, v in self.set.items()),
            predicate if predicate is not None else "TRUE (every row)",
        )
        return update(spark, txn, self.set, predicate)
