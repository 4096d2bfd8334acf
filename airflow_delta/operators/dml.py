"""DeltaDeleteOperator and DeltaUpdateOperator: DELETE and UPDATE by a SQL predicate, run in
process by the engine (`airflow_delta.engine.delete` / `update`) in one exactly-once commit.

On a table with deletion vectors enabled (`delta.enableDeletionVectors=true`) a touched file
keeps its other rows under a deletion vector; otherwise it is rewritten. See docs/delete-update.md
for what the predicates and assignments accept.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_delta.operators.command import DeltaCommandOperator
from airflow_delta.operators.commit import is_templated

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_delta.engine.txn.commit_types import CommitResult
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

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


def rendered_predicate(operation: str, table_uri: str, predicate: str | None) -> str | None:
    """The predicate after rendering: a template that rendered to blank text is refused rather
    than taken for "every row"."""
    if predicate is not None and not predicate.strip():
        raise ValueError(
            f"{operation} of table {table_uri}: the predicate rendered to empty text; refusing "
            f"to {operation} every row (pass predicate=None for that)"
        )
    return predicate


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


class DeltaDeleteOperator(DeltaCommandOperator):
    """DELETE the rows of the Delta table at `table_uri` that satisfy `predicate`, in process.

    The XCom `metrics` are delta-spark's DELETE metrics (numDeletedRows, numRemovedFiles,
    numAddedFiles, numCopiedRows, numDeletionVectorsAdded, ...). Connections, conflicts, hooks
    and exactly-once: see `DeltaCommandOperator`.

    :param predicate: SQL condition over the table's columns (comparisons, IN, BETWEEN,
        IS [NOT] NULL, AND/OR/NOT, literals); rows where it is NULL are kept. None deletes every
        row; it is a required argument so that no task deletes everything by omission, and a
        template rendering to empty text fails the task. (templated)

    Example::

        DeltaDeleteOperator(
            task_id="erase_user",
            table_uri="s3://lake/events",
            predicate="user_id = {{ params.user_id }}",
        )
    """

    template_fields: Sequence[str] = (*DeltaCommandOperator.template_fields, "predicate")
    template_fields_renderers = {"predicate": "sql"}
    operation = "DELETE"

    def __init__(self, *, predicate: str | None, **kwargs: Any) -> None:
        check_predicate(self.operation, predicate)
        super().__init__(**kwargs)
        self.predicate = predicate

    def run_command(self, txn: OptimisticTransaction, context: Context) -> CommitResult:
        from airflow_delta.engine.commands.dml import delete

        predicate = rendered_predicate(self.operation, self.table_uri, self.predicate)
        log.info(
            "DELETE from table %s (version %s) where %s, in process",
            self.table_uri,
            txn.read_version,
            predicate if predicate is not None else "TRUE (every row)",
        )
        return delete(txn, predicate)


class DeltaUpdateOperator(DeltaCommandOperator):
    """UPDATE the rows of the Delta table at `table_uri` that satisfy `predicate`, in process.

    The XCom `metrics` are delta-spark's UPDATE metrics (numUpdatedRows, numCopiedRows,
    numRemovedFiles, numAddedFiles, numDeletionVectorsAdded, ...). Connections, conflicts,
    hooks and exactly-once: see `DeltaCommandOperator`.

    :param set: column -> SQL expression: a column reference, a literal (`'x'`, `42`, `NULL`,
        `DATE '2024-01-01'`, `TIMESTAMP '...'`) or a condition, cast to the column's type.
        Arithmetic and function calls are refused before anything is written. (templated)
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

    template_fields: Sequence[str] = (*DeltaCommandOperator.template_fields, "set", "predicate")
    template_fields_renderers = {"predicate": "sql", "set": "json"}
    operation = "UPDATE"

    def __init__(self, *, set: Mapping[str, str], predicate: str | None, **kwargs: Any) -> None:
        if not is_templated(set):
            check_assignments(set)
        check_predicate(self.operation, predicate)
        super().__init__(**kwargs)
        self.set = dict(set) if isinstance(set, Mapping) else set
        self.predicate = predicate

    def run_command(self, txn: OptimisticTransaction, context: Context) -> CommitResult:
        from airflow_delta.engine.commands.dml import update

        check_assignments(self.set)  # as rendered
        predicate = rendered_predicate(self.operation, self.table_uri, self.predicate)
        log.info(
            "UPDATE table %s (version %s) set %s where %s, in process",
            self.table_uri,
            txn.read_version,
            ", ".join(f"{c} = {v}" for c, v in self.set.items()),
            predicate if predicate is not None else "TRUE (every row)",
        )
        return update(txn, self.set, predicate)
