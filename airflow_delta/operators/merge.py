"""DeltaMergeOperator: MERGE a source into a Delta table in one exactly-once commit."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_delta.operators.commit import DeltaCommitOperator, rendered_scope

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_delta.engine.txn.commit_types import CommitResult
    from airflow_delta.engine.txn.transaction import OptimisticTransaction
    from airflow_delta.operators.commit import SparkOnDemand
    from airflow_delta.spark.merge import DeltaMergeBuilder

#: (when, then) of a clause dict -> (builder method, the key holding its assignments).
CLAUSES: dict[tuple[str, str], tuple[str, str | None]] = {
    ("matched", "update"): ("when_matched_update", "set"),
    ("matched", "update_all"): ("when_matched_update_all", None),
    ("matched", "delete"): ("when_matched_delete", None),
    ("not_matched", "insert"): ("when_not_matched_insert", "values"),
    ("not_matched", "insert_all"): ("when_not_matched_insert_all", None),
    ("not_matched_by_source", "update"): ("when_not_matched_by_source_update", "set"),
    ("not_matched_by_source", "delete"): ("when_not_matched_by_source_delete", None),
}

#: A clause list, or a callable adding the clauses to the builder.
Clauses = Sequence[Mapping[str, Any]] | Callable[["DeltaMergeBuilder"], "DeltaMergeBuilder"]


def validate_clauses(clauses: Sequence[Mapping[str, Any]]) -> None:
    """Raise ValueError naming the first malformed clause dict.

    A clause is `{"when": "matched" | "not_matched" | "not_matched_by_source", "then":
    "update" | "update_all" | "delete" | "insert" | "insert_all", "condition": optional SQL,
    "set" / "values": {column: SQL}}`.

    >>> validate_clauses([{"when": "matched", "then": "update_all"}])
    """
    if not clauses:
        raise ValueError("MERGE needs at least one clause")
    for i, clause in enumerate(clauses):
        if not isinstance(clause, Mapping):
            raise ValueError(f"clause {i} must be a dict, got {type(clause).__name__}")
        key = (clause.get("when"), clause.get("then"))
        if key not in CLAUSES:
            raise ValueError(
                f"clause {i} {dict(clause)}: 'when'/'then' must be one of "
                + ", ".join(f"{w}/{t}" for w, t in CLAUSES)
            )
        _, assignments = CLAUSES[key]
        allowed = {"when", "then", "condition"} | ({assignments} if assignments else set())
        extra = set(clause) - allowed
        if extra:
            raise ValueError(f"clause {i}: unknown key(s) {sorted(extra)} (allowed: {allowed})")
        if assignments and not clause.get(assignments):
            raise ValueError(f"clause {i} ({key[0]} {key[1]}) needs {assignments!r}")


def apply_clauses(builder: DeltaMergeBuilder, clauses: Clauses) -> DeltaMergeBuilder:
    """Add `clauses` (dicts, or a callable on the builder) to `builder`; the builder."""
    if callable(clauses):
        return clauses(builder)
    validate_clauses(clauses)
    for clause in clauses:
        method, assignments = CLAUSES[(clause["when"], clause["then"])]
        args = [dict(clause[assignments])] if assignments else []
        builder = getattr(builder, method)(*args, condition=clause.get("condition"))
    return builder


class DeltaMergeOperator(DeltaCommitOperator):
    """MERGE the source into the Delta table at `table_uri` (which must exist).

    Arguments of the source, the connections, conflicts, hooks and exactly-once: see
    `DeltaCommitOperator`. The XCom `metrics` are the MERGE metrics (numTargetRowsInserted,
    numTargetRowsUpdated, numTargetRowsDeleted, numTargetRowsCopied, numTargetFilesAdded,
    numTargetFilesRemoved, ...).

    :param condition: the ON condition in Spark SQL, over `source_alias` and `target_alias`.
        (templated)
    :param clauses: the WHEN clauses, in order: a list of dicts (see `validate_clauses`), or a
        callable that adds them to the `DeltaMergeBuilder` and returns it. (templated)
    :param source_alias: the source's alias in the condition and clauses (default "s").
    :param target_alias: the table's alias (default "t").

    Example::

        DeltaMergeOperator(
            task_id="upsert_customers",
            table_uri="/lake/customers",
            source="SELECT * FROM updates",
            condition="t.id = s.id",
            clauses=[
                {"when": "matched", "then": "update_all"},
                {"when": "not_matched", "then": "insert_all"},
            ],
        )
    """

    template_fields: Sequence[str] = (*DeltaCommitOperator.template_fields, "condition", "clauses")
    operation = "MERGE"
    accepts_arrow = True

    def __init__(
        self,
        *,
        condition: str,
        clauses: Clauses,
        source_alias: str = "s",
        target_alias: str = "t",
        **kwargs: Any,
    ) -> None:
        if not condition:
            raise ValueError("condition is required")
        if not callable(clauses):
            validate_clauses(clauses)
        if source_alias == target_alias:
            raise ValueError(f"source_alias and target_alias must differ, both {source_alias!r}")
        super().__init__(**kwargs)
        self.condition = condition
        # Airflow calls callables found in template fields: keep a callable apart.
        self.clauses = None if callable(clauses) else clauses
        self.clauses_callable = clauses if callable(clauses) else None
        self.source_alias = source_alias
        self.target_alias = target_alias
        self.given["condition"] = condition
        if isinstance(clauses, Sequence) and not isinstance(clauses, str):
            self.given["clauses"] = [dict(c) for c in clauses]

    def rendered_clauses(self) -> list[Any]:
        """The clause dicts as rendered; a clause condition that was a template and rendered
        to nothing is refused (`rendered_scope`): without its condition a `delete` clause
        would delete every matched (or every unmatched target) row."""
        clauses = [dict(c) if isinstance(c, Mapping) else c for c in self.clauses or []]
        given = self.given.get("clauses") or []
        for i, (clause, as_given) in enumerate(zip(clauses, given, strict=False)):
            if isinstance(clause, dict) and "condition" in as_given:
                clause["condition"] = rendered_scope(
                    self.operation,
                    self.table_uri,
                    f"clauses[{i}] condition",
                    clause.get("condition"),
                    as_given["condition"],
                )
        return clauses

    def commit_once(
        self, spark: SparkOnDemand, context: Context, txn: OptimisticTransaction
    ) -> CommitResult:
        from airflow_delta.spark.merge import merge_delta

        builder = merge_delta(
            txn,
            self.read_source(spark, context),
            self.scope("condition") or "",  # never None: the condition is required
            self.source_alias,
            self.target_alias,
            storage_options=self.hook.storage_options,
        )
        builder = apply_clauses(builder, self.clauses_callable or self.rendered_clauses())
        result = builder.execute()
        self.executor = builder.executor
        return result
