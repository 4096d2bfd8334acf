"""MERGE INTO a Delta table: the WHEN clauses, the shared builder, the commit and the metrics.

`MergeBuilder` holds what every MERGE shares, whatever runs it: the WHEN clauses and their
checks, partition pruning from the condition, the commit as operation MERGE, and Delta's
metrics. Its executors subclass it and write the changed rows (`_write`):

- `ArrowMergeBuilder` (`engine/commands/merge_in_process.py`, built by `merge_arrow`) runs a
  MERGE of Arrow data in this process on pyarrow;
- `DeltaMergeBuilder` (`airflow_delta.spark.merge`, built by `merge_delta`) runs it on Spark,
  and tries the in-process executor first when it can.

`execute()` returns the commit's `CommitResult`: the committed version, with Delta's MERGE
metrics in `result.metrics`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_delta.engine.commands.merge_values import joinable
from airflow_delta.engine.errors import (
    InvalidArgumentError,
    InvalidPredicateError,
    MultipleSourceRowMatchingTargetRowInMergeError,
    TableNotFoundError,
    UnsupportedMergeError,
)
from airflow_delta.engine.expressions.predicates import PartitionPredicate
from airflow_delta.engine.expressions.tokens import (
    Token,
    assigned_columns,
    quote_identifier,
    quote_string,
    split_conjuncts,
    tokenize,
)
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.action_types import add_files_from_arrow
from airflow_delta.engine.protocol.actions import Action, Operation
from airflow_delta.engine.protocol.schema import delta_type_name
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.transaction import OptimisticTransaction, start_transaction

log = logging.getLogger(__name__)

MATCHED = "matched"
NOT_MATCHED = "notMatched"
NOT_MATCHED_BY_SOURCE = "notMatchedBySource"

#: Most distinct source values turned into a `<partition> IN (...)` predicate to prune files.
MAX_PRUNING_VALUES = 10_000

#: Delta types whose partition predicates compare in the engine exactly as in Spark.
_PRUNABLE_TYPES = frozenset({"string", "byte", "short", "integer", "long", "boolean", "date"})

_LITERAL = re.compile(
    r"'[^'\\]*'|[+-]?\d+(?:\.\d+)?|true|false|date\s*'\d{4}-\d{2}-\d{2}'", re.IGNORECASE
)
_REFERENCE = re.compile(r"`?(\w+)`?\.(?:`([^`]+)`|(\w+))")
#: A string literal (kept as it is) or an `<alias>.<column>` reference in a clause condition.
_QUALIFIED = re.compile(
    r"(?P<string>'(?:[^'\\]|'')*')|`?(?P<alias>[A-Za-z_]\w*)`?\.(?:`(?P<quoted>[^`]+)`|(?P<bare>\w+))"
)


@dataclass(frozen=True)
class MergeClause:
    """One WHEN clause: its kind (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE), action
    (update, delete, insert), condition, and assignments (None: every column from the source).
    """

    kind: str
    action: str
    condition: str | None = None
    assignments: Mapping[str, str] | None = None

    def describe(self) -> dict[str, str]:
        """The clause as Delta records it in the MERGE operation parameters."""
        return {
            **({"predicate": self.condition} if self.condition else {}),
            "actionType": self.action,
        }


class MergeBuilder:
    """MERGE of a source into the Delta table at `target_uri`: the clauses, pruning, commit
    and metrics. Subclasses run it (`_write`, `_source_values_of`).

    Each `when_*` method appends a clause and returns the builder; within each kind
    (MATCHED, NOT MATCHED, NOT MATCHED BY SOURCE) the first clause whose condition holds
    applies, and only the last clause of a kind may omit its condition. `execute()` commits
    and returns the commit's `CommitResult` (Delta's MERGE metrics in `result.metrics`).
    """

    def __init__(
        self,
        target: str | OptimisticTransaction,
        source_df: Any,
        condition: str,
        source_alias: str = "s",
        target_alias: str = "t",
        *,
        storage_options: Mapping[str, str] | None = None,
        commit_properties: CommitProperties | None = None,
    ) -> None:
        #: a transaction the caller started (and already checked), used instead of a new one
        self.given_transaction = target if isinstance(target, OptimisticTransaction) else None
        self.target_uri = target.table if isinstance(target, OptimisticTransaction) else target
        if self.given_transaction is not None and commit_properties is not None:
            raise InvalidArgumentError(
                f"MERGE into {self.target_uri}: pass commit_properties to the transaction you "
                "give, not beside it"
            )
        self.source_df = source_df
        self.condition = condition
        self.source_alias = source_alias
        self.target_alias = target_alias
        self.storage_options = storage_options
        self.commit_properties = commit_properties
        self.clauses: list[MergeClause] = []
        self.transaction: OptimisticTransaction | None = None
        #: what ran the MERGE: "in-process" (pyarrow) or "spark" (None before `execute()`)
        self.executor: str | None = None

    # -- clauses ----------------------------------------------------------------------------

    def when_matched_update(self, set: Mapping[str, str], condition: str | None = None) -> Any:
        """Update matched target rows: `set` maps target columns to SQL expressions.

        Example: `.when_matched_update({"value": "s.value"}, "s.ts > t.ts")`.
        """
        return self._add(
            MergeClause(MATCHED, "update", condition, _assignments(set, self.target_uri))
        )

    def when_matched_update_all(self, condition: str | None = None) -> Any:
        """Set every target column of matched rows from the source column of the same name.

        Example: `.when_matched_update_all()`.
        """
        return self._add(MergeClause(MATCHED, "update", condition))

    def when_matched_delete(self, condition: str | None = None) -> Any:
        """Delete matched target rows.

        Example: `.when_matched_delete("s.deleted")`.
        """
        return self._add(MergeClause(MATCHED, "delete", condition, {}))

    def when_not_matched_insert(
        self, values: Mapping[str, str], condition: str | None = None
    ) -> Any:
        """Insert source rows that match no target row; columns not in `values` are NULL.

        Example: `.when_not_matched_insert({"id": "s.id", "value": "upper(s.value)"})`.
        """
        return self._add(
            MergeClause(NOT_MATCHED, "insert", condition, _assignments(values, self.target_uri))
        )

    def when_not_matched_insert_all(self, condition: str | None = None) -> Any:
        """Insert unmatched source rows, each target column from the source column of its name.

        Example: `.when_not_matched_insert_all("s.value IS NOT NULL")`.
        """
        return self._add(MergeClause(NOT_MATCHED, "insert", condition))

    def when_not_matched_by_source_update(
        self, set: Mapping[str, str], condition: str | None = None
    ) -> Any:
        """Update target rows that no source row matches (expressions over the target only).

        Example: `.when_not_matched_by_source_update({"active": "false"})`.
        """
        return self._add(
            MergeClause(
                NOT_MATCHED_BY_SOURCE, "update", condition, _assignments(set, self.target_uri)
            )
        )

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> Any:
        """Delete target rows that no source row matches.

        Example: `.when_not_matched_by_source_delete("t.day < '2024-01-01'")`.
        """
        return self._add(MergeClause(NOT_MATCHED_BY_SOURCE, "delete", condition, {}))

    def _add(self, clause: MergeClause) -> Any:
        if any(c.kind == clause.kind and c.condition is None for c in self.clauses):
            label = {MATCHED: "MATCHED", NOT_MATCHED: "NOT MATCHED"}.get(
                clause.kind, "NOT MATCHED BY SOURCE"
            )
            raise InvalidArgumentError(
                f"When there are more than one {label} clauses in a MERGE statement, only the "
                f"last {label} clause can omit the condition (MERGE into {self.target_uri})."
            )
        self.clauses.append(clause)
        return self

    # -- execution --------------------------------------------------------------------------

    def execute(self) -> CommitResult:
        """Run the MERGE in one transaction; the commit's CommitResult: as an int, the
        committed version (`result.version`), with the metrics in `result.metrics`.

        When the commit properties carry app transactions the table already holds (an
        idempotent MERGE that landed before), nothing is done and the result is skipped
        (`result.version` None, `result.skipped` True, no metrics). The transaction stays in
        `self.transaction` (attempts, conflicts checked, post-commit hook results).

        Metrics (ints), with Delta's names: numSourceRows; numTargetRowsInserted;
        numTargetRowsUpdated and numTargetRowsDeleted (target rows, each once, split into the
        ...Matched... and ...NotMatchedBySource... counts); numTargetRowsCopied (the unchanged
        rows of the rewritten files); numOutputRows (rows written: inserted + updated +
        copied); numTargetFilesAdded/Removed and numTargetBytesAdded/Removed.

        Example: `result = merge_delta(uri, df, "t.id = s.id").when_matched_update_all()
        .execute()`, then `result.version` and `result.metrics["numTargetRowsUpdated"]`.
        """
        if not self.clauses:
            raise InvalidArgumentError(
                f"MERGE into {self.target_uri}: there must be at least one WHEN clause."
            )
        txn = self.given_transaction or start_transaction(
            TableLocation.of(self.target_uri, self.storage_options),
            properties=self.commit_properties,
        )
        self.transaction = txn
        if txn.already_committed():
            return txn.result(None, self._operation())
        if txn.read_version < 0:
            raise TableNotFoundError(
                f"MERGE into {self.target_uri}: no Delta table there. Create it first "
                "(write_delta or DeltaLog.create_table)."
            )
        actions, metrics = self._write(txn)
        return self._commit(txn, actions, metrics)

    def _write(self, txn: OptimisticTransaction) -> tuple[list[Action], dict[str, int]]:
        """Write the changed rows; the add and remove actions and the metrics."""
        raise NotImplementedError

    def _commit(
        self, txn: OptimisticTransaction, actions: list[Action], metrics: dict[str, int]
    ) -> CommitResult:
        """Commit the written files as operation MERGE; the commit's result."""
        return txn.commit(actions, self._operation(metrics))

    def _operation(self, metrics: dict[str, int] | None = None) -> Operation:
        """Operation MERGE with Delta's parameters (the condition and the clauses)."""
        parameters: dict[str, Any] = {"predicate": self.condition}
        for kind in (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE):
            parameters[f"{kind}Predicates"] = [c.describe() for c in self.clauses if c.kind == kind]
        return Operation("MERGE", parameters, metrics)

    def _metrics(
        self,
        per_clause: Sequence[int],
        touched: pa.StructArray,
        copied_and_modified: int,
        adds: Sequence[Any],
        source_rows: int,
    ) -> tuple[list[Action], dict[str, int]]:
        """The actions (adds, then the removes of `touched`) and Delta's MERGE metrics.

        `per_clause`: target rows each modifying (non-insert) clause changed, in clause order;
        `copied_and_modified`: the rows of the touched files.
        """
        modifying = [c for c in self.clauses if c.kind != NOT_MATCHED]
        now = int(time.time() * 1000)
        removes = [f.remove(now) for f in add_files_from_arrow(touched)]

        def modified(kind: str, action: str) -> int:
            pairs = zip(modifying, per_clause, strict=True)
            return sum(n for c, n in pairs if (c.kind, c.action) == (kind, action))

        updated = modified(MATCHED, "update") + modified(NOT_MATCHED_BY_SOURCE, "update")
        deleted = modified(MATCHED, "delete") + modified(NOT_MATCHED_BY_SOURCE, "delete")
        copied = copied_and_modified - updated - deleted
        output_rows = sum(a.num_records or 0 for a in adds)
        metrics = {
            "numSourceRows": source_rows,
            "numTargetRowsInserted": output_rows - updated - copied,
            "numTargetRowsUpdated": updated,
            "numTargetRowsMatchedUpdated": modified(MATCHED, "update"),
            "numTargetRowsNotMatchedBySourceUpdated": modified(NOT_MATCHED_BY_SOURCE, "update"),
            "numTargetRowsDeleted": deleted,
            "numTargetRowsMatchedDeleted": modified(MATCHED, "delete"),
            "numTargetRowsNotMatchedBySourceDeleted": modified(NOT_MATCHED_BY_SOURCE, "delete"),
            "numTargetRowsCopied": copied,
            "numOutputRows": output_rows,
            "numTargetFilesAdded": len(adds),
            "numTargetChangeFilesAdded": 0,  # the executors count their cdc files
            "numTargetFilesRemoved": len(removes),
            "numTargetBytesAdded": sum(a.size for a in adds),
            "numTargetBytesRemoved": sum(r.size or 0 for r in removes),
            # rewriting executors write no DV; the removed files take theirs with them
            "numTargetDeletionVectorsAdded": 0,
            "numTargetDeletionVectorsRemoved": sum(r.deletion_vector is not None for r in removes),
            "numTargetDeletionVectorsUpdated": 0,
        }
        return [*adds, *removes], metrics

    def _multiple_matches(self, rows: int) -> MultipleSourceRowMatchingTargetRowInMergeError:
        return MultipleSourceRowMatchingTargetRowInMergeError(
            "Cannot perform Merge as multiple source rows matched and attempted to modify the "
            "same target row in the Delta table in possibly conflicting ways. By SQL semantics "
            "of Merge, when multiple source rows match on the same target row, the result may "
            "be ambiguous as it is unclear which source row should be used to update or delete "
            "the matching target row. You can preprocess the source table to eliminate the "
            "possibility of multiple matches. Please refer to "
            "https://docs.delta.io/latest/delta-update.html#upsert-into-a-table-using-merge "
            f"(table {self.target_uri}, {rows} target row(s) matched more than once)."
        )

    def _resolve(self, clause: MergeClause, column: str) -> str | None:
        """The SQL expression `clause` assigns to the target `column` (None: not assigned)."""
        if clause.action == "delete":
            return None
        if clause.assignments is None:
            return f"{quote_identifier(self.source_alias)}.{quote_identifier(column)}"
        return clause.assignments.get(column)

    def _check_assignments(self, columns: list[str], source_columns: Sequence[str] = ()) -> None:
        """Key every assignment by its target column; InvalidArgumentError for an unknown or
        repeated one.

        Warns when an update-all or insert-all clause leaves source columns out because the
        table has no column of their name (`source_columns`: the source's).
        """
        by_lower = {c.lower(): c for c in columns}
        ignored = [c for c in source_columns if c.lower() not in by_lower]
        star = [c for c in self.clauses if c.assignments is None and c.action != "delete"]
        if ignored and star:
            log.warning(
                "MERGE into %s: the %s clause ignores the source columns the table does not have: "
                "%s. Add them to the table first (ALTER TABLE, or a write with merge_schema=True) "
                "to keep them.",
                self.target_uri,
                " and ".join(sorted({f"{c.action}-all" for c in star})),
                ", ".join(ignored),
            )
        for index, clause in enumerate(self.clauses):
            if not clause.assignments:
                continue
            resolved, bad = assigned_columns(columns, clause.assignments, self.target_alias)
            if bad is not None:
                raise InvalidArgumentError(
                    f"MERGE into {self.target_uri}: {bad[0]!r} {bad[1]} the {clause.action} "
                    f"clause (target columns: {', '.join(columns)})."
                )
            self.clauses[index] = MergeClause(
                clause.kind, clause.action, clause.condition, resolved
            )

    # -- partition pruning ------------------------------------------------------------------

    def _pruning_predicates(
        self,
        txn: OptimisticTransaction,
        conjuncts: list[tuple[str, str | None]] | None = None,
    ) -> list[str]:
        """Predicates over the target's columns that the merge condition implies, to choose
        the candidate files: over partition columns (`conjuncts`: `_partition_conjuncts`, when
        already computed), and over data columns, which prune by the files' stats.

        `t.k = s.k` on a data column becomes `k IN (<the source's distinct keys>)`, or with more
        than MAX_PRUNING_VALUES keys the range `k BETWEEN <min> AND <max>`; a target row can
        only match a source row whose key it equals, so a file whose stats exclude every key
        holds no matching row. No pruning when a NOT MATCHED BY SOURCE clause reads every row.
        """
        if any(c.kind == NOT_MATCHED_BY_SOURCE for c in self.clauses):
            return []
        conjuncts = self._partition_conjuncts(txn) if conjuncts is None else conjuncts
        partition = [p for _, p in conjuncts if p is not None]
        return partition + self._data_predicates(txn, [c for c, p in conjuncts if p is None])

    def _data_predicates(self, txn: OptimisticTransaction, conjuncts: list[str]) -> list[str]:
        """The conjuncts over one non-partition column of the target (against a literal or a
        source column) as predicates for data skipping."""
        if not conjuncts or not self._plain_condition():
            return []
        schema = json.loads(txn.metadata.schema_string or "{}")
        fields = {f["name"].lower(): f for f in schema["fields"]}
        partitions = {c.lower() for c in txn.metadata.partition_columns}
        data = {name: f["name"] for name, f in fields.items() if name not in partitions}
        predicates = []
        for conjunct in conjuncts:
            text = self._column_predicate(conjunct, data, fields)
            if text is None:
                continue
            try:
                txn.parse_file_predicate(text)
            except InvalidPredicateError:
                continue  # no pruning by this conjunct; the MERGE itself still applies it
            predicates.append(text)
        return predicates

    def _plain_condition(self) -> bool:
        """Whether the condition has no escape or comment, which conjunct splitting and
        pruning do not interpret."""
        return not any(mark in self.condition for mark in ("\\", "--", "/*"))

    def _partition_conjuncts(self, txn: OptimisticTransaction) -> list[tuple[str, str | None]]:
        """Each conjunct of the condition with the partition predicate it implies (or None)."""
        partitions = {c.lower(): c for c in txn.metadata.partition_columns}
        conjuncts = split_conjuncts(self.condition)
        if not partitions or not self._plain_condition():
            return [(c, None) for c in conjuncts]
        schema = json.loads(txn.metadata.schema_string or "{}")
        fields = {f["name"].lower(): f for f in schema["fields"]}
        columns = {c: fields[c.lower()] for c in partitions.values()}
        result: list[tuple[str, str | None]] = []
        for conjunct in conjuncts:
            text = self._column_predicate(conjunct, partitions, fields)
            if text is not None:
                try:
                    PartitionPredicate.parse(text, columns)
                except InvalidPredicateError:
                    text = None
            result.append((conjunct, text))
        return result

    def _column_predicate(
        self, conjunct: str, columns: dict[str, str], fields: dict[str, dict[str, Any]]
    ) -> str | None:
        """`conjunct` as a predicate over one column of the target, or None when it is not one.

        `columns` maps the lower-case names of the columns it may use (the partition columns,
        or the data columns) to theirs, `fields` lower-case column names to their schema fields.
        """
        tokens = tokenize(conjunct, lenient=True)[:-1]  # the end token left out
        ops = [i for i, t in enumerate(tokens) if _is_equality(t) or _is_keyword(t, "in")]
        if len(ops) != 1 or ops[0] in (0, len(tokens) - 1):
            return None
        op = tokens[ops[0]]
        left, right = conjunct[: op.start].strip(), conjunct[op.end :].strip()
        if _is_keyword(op, "in"):
            column = self._target_column(left, columns, fields)
            items = right[1:-1].split(",") if right[:1] == "(" and right[-1:] == ")" else []
            if column is None or not items or not all(_LITERAL.fullmatch(i.strip()) for i in items):
                return None
            return f"{quote_identifier(column)} IN ({', '.join(i.strip() for i in items)})"
        for one, other in ((left, right), (right, left)):
            column = self._target_column(one, columns, fields)
            if column is None:
                continue
            if _LITERAL.fullmatch(other):
                return f"{quote_identifier(column)} = {other}"
            return self._source_values(other, column, fields[column.lower()]["type"])
        return None

    def _target_column(
        self, operand: str, columns: dict[str, str], fields: dict[str, dict[str, Any]]
    ) -> str | None:
        """The column of `columns` that `operand` names as `<target alias>.<column>`, when
        prunable."""
        ref = self._reference(operand)
        if ref is None or ref[0] != self.target_alias.lower():
            return None
        column = columns.get(ref[1].lower())
        if column is None:
            return None
        delta_type = fields[column.lower()]["type"]
        prunable = delta_type in _PRUNABLE_TYPES or str(delta_type).startswith("decimal(")
        return column if prunable else None

    def _source_values(self, operand: str, column: str, delta_type: str) -> str | None:
        """`column IN (...)` over the distinct values of the source column `operand` names,
        or `column BETWEEN <min> AND <max>` when they are more than MAX_PRUNING_VALUES."""
        ref = self._reference(operand)
        if ref is None or ref[0] != self.source_alias.lower():
            return None
        name = ref[1].lower()
        if not self._many_source_values(name, delta_type):
            values = self._source_values_of(name, delta_type)
            if values is None:
                return None
            if len(values) <= MAX_PRUNING_VALUES:
                literals = [_sql_literal(v) for v in sorted(v for v in values if v is not None)]
                if not literals:
                    return "FALSE"
                return f"{quote_identifier(column)} IN ({', '.join(literals)})"
        bounds = self._source_bounds_of(name, delta_type)
        if bounds is None:
            return None
        low, high = (_sql_literal(b) for b in bounds)
        return f"{quote_identifier(column)} BETWEEN {low} AND {high}"

    def _many_source_values(self, name: str, delta_type: str) -> bool:
        """Whether the source column `name` (lower case) is one column of exactly `delta_type`
        known to hold more than MAX_PRUNING_VALUES distinct values without listing them (then
        its bounds prune); False by default: `_source_values_of` lists them."""
        return False

    def _source_values_of(self, name: str, delta_type: str) -> list[Any] | None:
        """Up to MAX_PRUNING_VALUES + 1 distinct values of the source column `name` (lower
        case), or None when it is not one column of exactly `delta_type`."""
        raise NotImplementedError

    def _source_bounds_of(self, name: str, delta_type: str) -> tuple[Any, Any] | None:
        """The least and greatest non-NULL value of the source column `name` (lower case), or
        None when it has none (the caller knows it is one column of exactly `delta_type`)."""
        raise NotImplementedError

    # -- the condition over the target and source columns ----------------------------------

    def _reference(self, text: str) -> tuple[str, str] | None:
        """(alias lower case, column) of `<alias>.<column>`, or None."""
        match = _REFERENCE.fullmatch(text.strip())
        if match is None:
            return None
        alias = match.group(1).lower()
        if alias not in (self.source_alias.lower(), self.target_alias.lower()):
            return None
        return alias, match.group(2) or match.group(3)

    def _reads_source(self, sql: str) -> bool:
        """Whether `sql` names a column of the source alias."""
        alias = self.source_alias.lower()
        return any(m.group(1).lower() == alias for m in _REFERENCE.finditer(sql))

    def _source_column(self, source: pa.Table, name: str) -> str:
        """The column of the Arrow `source` that `<source alias>.<name>` names."""
        found: list[str] = [c for c in source.column_names if c.lower() == name.lower()]
        if len(found) != 1:
            problem = "is ambiguous in" if found else "is not a column of"
            raise InvalidArgumentError(
                f"MERGE into {self.target_uri}: {self.source_alias}.{name} {problem} the source "
                f"(columns: {', '.join(source.column_names)})"
            )
        return found[0]

    def _keys(
        self, conjuncts: list[tuple[str, str | None]], table: pa.Schema, source: pa.Table
    ) -> list[tuple[str, str]]:
        """(target column, source column) of each equality of the condition; `conjuncts` come
        with their partition predicates (those over literals are evaluated on the files)."""
        keys = []
        by_lower = {n.lower(): n for n in table.names}
        for conjunct, partition in conjuncts:
            if partition is not None and not self._reads_source(conjunct):
                continue
            columns = self._equality(conjunct)
            if columns is None:
                raise UnsupportedMergeError(
                    f"MERGE into {self.target_uri}: the in-process MERGE needs a condition of "
                    f"equalities between target and source columns, not {conjunct!r}"
                )
            target = by_lower.get(columns[0].lower())
            if target is None:
                raise InvalidArgumentError(
                    f"MERGE into {self.target_uri}: {self.target_alias}.{columns[0]} is not a "
                    f"column of the table (columns: {', '.join(table.names)})"
                )
            name = self._source_column(source, columns[1])
            t_type, s_type = table.field(target).type, source.schema.field(name).type
            if not joinable(t_type, s_type):
                raise UnsupportedMergeError(
                    f"MERGE into {self.target_uri}: the in-process MERGE does not join "
                    f"{t_type} with {s_type} ({conjunct!r})"
                )
            keys.append((target, name))
        if not keys:
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: the condition {self.condition!r} has no "
                "equality between a target and a source column"
            )
        return keys

    def _equality(self, conjunct: str) -> tuple[str, str] | None:
        """(target column, source column) of a conjunct `<target alias>.<column> = <source
        alias>.<column>` (either way round), else None."""
        equalities = [t for t in tokenize(conjunct, lenient=True) if _is_equality(t)]
        if len(equalities) != 1:
            return None
        op = equalities[0]
        refs = [self._reference(side) for side in (conjunct[: op.start], conjunct[op.end :])]
        target, source = self.target_alias.lower(), self.source_alias.lower()
        if refs[0] is not None and refs[1] is not None and refs[1][0] == target:
            refs.reverse()
        if refs[0] is None or refs[1] is None or (refs[0][0], refs[1][0]) != (target, source):
            return None
        return refs[0][1], refs[1][1]

    def _condition(
        self, clause: MergeClause, table: pa.Schema, source: pa.Table
    ) -> PartitionPredicate | None:
        """The clause's condition over `t.<column>` and `s.<column>`, parsed by the engine's
        predicates (comparisons, IN, BETWEEN, IS NULL, AND/OR/NOT, literals: Spark's
        semantics); UnsupportedMergeError for anything else."""
        if clause.condition is None:
            return None
        try:
            text, types = self._qualified(clause.condition, clause, table, source)
            return PartitionPredicate.parse(text, types)
        except (UnsupportedMergeError, InvalidPredicateError, ValueError) as exc:
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: the in-process MERGE cannot evaluate the "
                f"condition {clause.condition!r}: {exc}"
            ) from None

    def _qualified(
        self, sql: str, clause: MergeClause, table: pa.Schema, source: pa.Table
    ) -> tuple[str, dict[str, str | dict[str, Any]]]:
        """`sql` with each `<alias>.<column>` the clause may read (the target in MATCHED and
        NOT MATCHED BY SOURCE clauses, the source in MATCHED and NOT MATCHED ones) renamed to
        one column `t.<column>` or `s.<column>`, and those columns' Delta types;
        UnsupportedMergeError for a column the clause cannot read."""
        sides = {MATCHED: "ts", NOT_MATCHED: "s", NOT_MATCHED_BY_SOURCE: "t"}[clause.kind]
        types: dict[str, str | dict[str, Any]] = {}
        by_lower = {n.lower(): n for n in table.names}

        def qualify(match: re.Match[str]) -> str:
            if match.group("string"):
                return match.group(0)
            alias = match.group("alias").lower()
            column = match.group("quoted") or match.group("bare")
            side = {self.target_alias.lower(): "t", self.source_alias.lower(): "s"}.get(alias)
            if side is None:
                return match.group(0)
            if side not in sides:
                raise UnsupportedMergeError(f"{match.group(0)} cannot be used in this clause")
            if side == "t":
                name = by_lower.get(column.lower())
                if name is None:
                    raise UnsupportedMergeError(f"{match.group(0)} is not a target column")
                kind = delta_type_name(table.field(name).type)
            else:
                found = [c for c in source.column_names if c.lower() == column.lower()]
                if len(found) != 1:
                    raise UnsupportedMergeError(f"{match.group(0)} is not one source column")
                name = found[0]
                kind = delta_type_name(source.schema.field(name).type)
            types[f"{side}.{name}"] = kind
            return quote_identifier(f"{side}.{name}")

        return _QUALIFIED.sub(qualify, sql), types


# -- helpers -----------------------------------------------------------------------------------


def arrow_table(source: Any) -> pa.Table | None:
    """`source` as a pyarrow Table (read whole) when it is Arrow data (a Table, a
    RecordBatchReader, or anything exporting an Arrow stream but a Spark DataFrame), else None."""
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatchReader):
        return source.read_all()
    if hasattr(source, "__arrow_c_stream__") and not hasattr(source, "sparkSession"):
        return pa.table(source)
    return None


def _assignments(mapping: Mapping[str, str], table: str) -> dict[str, str]:
    """A copy of `mapping` (target column -> SQL expression); InvalidArgumentError naming the
    target `table` when empty or not text."""
    if not mapping or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise InvalidArgumentError(
            f"MERGE into {table}: assignments must map target column names to SQL "
            f"expressions, got {mapping!r}"
        )
    return dict(mapping)


def _is_equality(token: Token) -> bool:
    return token.kind == "op" and token.value in ("=", "==")


def _is_keyword(token: Token, word: str) -> bool:
    return token.kind == "ident" and token.value.lower() == word


def _sql_literal(value: object) -> str:
    """A value of a prunable partition type as a literal of the engine's predicates."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    return quote_string(str(value))
