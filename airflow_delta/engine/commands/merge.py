"""MERGE INTO a Delta table: the clauses, the commit, and an in-process executor on pyarrow.

`MergeBuilder` holds what every MERGE shares, whatever runs it: the WHEN clauses and their
checks, partition pruning from the condition, the commit as operation MERGE, and Delta's
metrics. `ArrowMergeBuilder` runs a MERGE of an Arrow table in this process, the way Delta's
MergeIntoCommand does it, with pyarrow compute and no Spark:

1. partition pruning selects the candidate files through `filter_files_arrow`, which records the
   read for the conflict checks;
2. findTouchedFiles: the join keys of the candidate files are read and hash-joined with the
   source; target rows matched by several source rows are refused as in Delta;
3. writeAllChanges: the touched files are read whole, updated, deleted or copied per clause,
   and written with the inserted source rows by `DataFileWriter` (in parallel slices); the
   touched files are removed and every other file stays;
4. commit as operation MERGE.

The in-process executor takes the MERGEs most pipelines run: a condition that is an AND of
equalities between a target and a source column (plus `t.<partition> = <literal>` or
`IN (<literals>)`), clause conditions made of comparisons, IN, BETWEEN, IS [NOT] NULL and
AND/OR/NOT over `t.x`, `s.x` and literals (the engine's predicates, with Spark's semantics),
and assignments that are column references (`s.x`, `t.x`) or literals. Anything else, and
tables whose data needs more than this reader (column mapping, deletion vectors in the
candidate files, type changes, CHECK constraints or invariants), raises
`UnsupportedMergeError` before anything is written: the Spark MERGE
(`airflow_delta.spark.merge_delta`) runs those, and falls back to Spark by itself.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import functools
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from airflow_delta.engine.commands.data_files import (
    DataFileWriter,
    WritePlan,
    add_files,
    partition_runs,
)
from airflow_delta.engine.commands.data_reader import conform, fs_path, plain_table, same_family
from airflow_delta.engine.errors import (
    ConstraintViolationError,
    MultipleSourceRowMatchingTargetRowInMergeError,
    TableNotFoundError,
    UnsupportedMergeError,
)
from airflow_delta.engine.expressions.predicates import (
    InvalidPredicateError,
    PartitionPredicate,
    quote_identifier,
)
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.actions import Action, Operation, add_files_from_arrow
from airflow_delta.engine.protocol.features import check_writer_support
from airflow_delta.engine.protocol.schema import (
    arrow_type,
    delta_field_metadata,
    delta_type_name,
    parse_partition_value,
)
from airflow_delta.engine.txn.transaction import (
    CommitProperties,
    OptimisticTransaction,
    start_transaction,
)

log = logging.getLogger(__name__)

MATCHED = "matched"
NOT_MATCHED = "notMatched"
NOT_MATCHED_BY_SOURCE = "notMatchedBySource"

#: Most distinct source values turned into a `<partition> IN (...)` predicate to prune files.
MAX_PRUNING_VALUES = 1000
#: Most bytes of candidate files an in-process MERGE reads; larger MERGEs need Spark.
MAX_IN_PROCESS_BYTES = 4 * 1024**3
#: Inserted rows per writing task of an in-process MERGE (tasks run on a thread per core).
ROWS_PER_WRITE_SLICE = 500_000

#: Delta types whose partition predicates compare in the engine exactly as in Spark.
_PRUNABLE_TYPES = frozenset({"string", "byte", "short", "integer", "long", "boolean", "date"})

_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`|<=>|[<>!=]=|<>|\w+|\s+|.", re.S)
_LITERAL = re.compile(
    r"'[^'\\]*'|[+-]?\d+(?:\.\d+)?|true|false|date\s*'\d{4}-\d{2}-\d{2}'", re.IGNORECASE
)
_REFERENCE = re.compile(r"`?(\w+)`?\.(?:`([^`]+)`|(\w+))")
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
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
    and returns the metrics.
    """

    def __init__(
        self,
        target_uri: str,
        source_df: Any,
        condition: str,
        source_alias: str = "s",
        target_alias: str = "t",
        *,
        storage_options: Mapping[str, str] | None = None,
        commit_properties: CommitProperties | None = None,
    ) -> None:
        self.target_uri = target_uri
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
        return self._add(MergeClause(MATCHED, "update", condition, _assignments(set)))

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
        return self._add(MergeClause(NOT_MATCHED, "insert", condition, _assignments(values)))

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
        return self._add(MergeClause(NOT_MATCHED_BY_SOURCE, "update", condition, _assignments(set)))

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
            raise ValueError(
                f"When there are more than one {label} clauses in a MERGE statement, only the "
                f"last {label} clause can omit the condition (MERGE into {self.target_uri})."
            )
        self.clauses.append(clause)
        return self

    # -- execution --------------------------------------------------------------------------

    def execute(self) -> dict[str, int | None]:
        """Run the MERGE in one transaction; the metrics (ints) and the committed `version`.

        When the commit properties carry app transactions the table already holds (an
        idempotent MERGE that landed before), nothing is done and the result is
        `{"version": None}`. The transaction stays in `self.transaction` (attempts, conflicts
        checked, post-commit hook results).

        Metrics, with Delta's names: numSourceRows; numTargetRowsInserted; numTargetRowsUpdated
        and numTargetRowsDeleted (target rows, each once, split into the ...Matched... and
        ...NotMatchedBySource... counts); numTargetRowsCopied (the unchanged rows of the
        rewritten files); numOutputRows (rows written: inserted + updated + copied);
        numTargetFilesAdded/Removed and numTargetBytesAdded/Removed.

        Example: `merge_delta(uri, df, "t.id = s.id").when_matched_update_all().execute()`.
        """
        if not self.clauses:
            raise ValueError(
                f"MERGE into {self.target_uri}: there must be at least one WHEN clause."
            )
        txn = start_transaction(
            TableLocation.of(self.target_uri, self.storage_options),
            properties=self.commit_properties,
        )
        self.transaction = txn
        if txn.already_committed():
            return {"version": None}
        if txn.read_version < 0:
            raise TableNotFoundError(
                f"MERGE into {self.target_uri}: no Delta table there. Create it first "
                "(write_delta or DeltaLog.create_table)."
            )
        actions, metrics = self._write(txn)
        return {**metrics, "version": self._commit(txn, actions, metrics)}

    def _write(self, txn: OptimisticTransaction) -> tuple[list[Action], dict[str, int]]:
        """Write the changed rows; the add and remove actions and the metrics."""
        raise NotImplementedError

    def _commit(
        self, txn: OptimisticTransaction, actions: list[Action], metrics: dict[str, int]
    ) -> int:
        """Commit the written files as operation MERGE; the committed version."""
        parameters: dict[str, Any] = {"predicate": self.condition}
        for kind in (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE):
            parameters[f"{kind}Predicates"] = [c.describe() for c in self.clauses if c.kind == kind]
        return txn.commit(actions, Operation("MERGE", parameters, metrics))

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
            "numTargetFilesRemoved": len(removes),
            "numTargetBytesAdded": sum(a.size for a in adds),
            "numTargetBytesRemoved": sum(r.size or 0 for r in removes),
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

    def _check_assignments(self, columns: list[str]) -> None:
        """Key every assignment by its target column; ValueError for an unknown or repeated one."""
        by_lower = {c.lower(): c for c in columns}
        prefix = f"{self.target_alias.lower()}."
        for index, clause in enumerate(self.clauses):
            if not clause.assignments:
                continue
            resolved: dict[str, str] = {}
            for key, sql in clause.assignments.items():
                name = key.strip()
                name = name[len(prefix) :] if name.lower().startswith(prefix) else name
                if len(name) > 1 and name[0] == name[-1] == "`":
                    name = name[1:-1].replace("``", "`")
                column = by_lower.get(name.lower())
                if column is None or column in resolved:
                    problem = "is not a column of" if column is None else "is assigned twice in"
                    raise ValueError(
                        f"MERGE into {self.target_uri}: {key!r} {problem} the {clause.action} "
                        f"clause (target columns: {', '.join(columns)})."
                    )
                resolved[column] = sql
            self.clauses[index] = MergeClause(
                clause.kind, clause.action, clause.condition, resolved
            )

    # -- partition pruning ------------------------------------------------------------------

    def _pruning_predicates(
        self,
        txn: OptimisticTransaction,
        conjuncts: list[tuple[str, str | None]] | None = None,
    ) -> list[str]:
        """Predicates over the target's partition columns that the merge condition implies
        (`conjuncts`: `_partition_conjuncts`, when already computed)."""
        if any(c.kind == NOT_MATCHED_BY_SOURCE for c in self.clauses):
            return []
        conjuncts = self._partition_conjuncts(txn) if conjuncts is None else conjuncts
        return [p for _, p in conjuncts if p is not None]

    def _partition_conjuncts(self, txn: OptimisticTransaction) -> list[tuple[str, str | None]]:
        """Each conjunct of the condition with the partition predicate it implies (or None)."""
        partitions = {c.lower(): c for c in txn.metadata.partition_columns}
        unsafe = "\\" in self.condition or "--" in self.condition or "/*" in self.condition
        conjuncts = _conjuncts(self.condition)
        if not partitions or unsafe:
            return [(c, None) for c in conjuncts]
        schema = json.loads(txn.metadata.schema_string or "{}")
        fields = {f["name"].lower(): f for f in schema["fields"]}
        columns = {c: fields[c.lower()] for c in partitions.values()}
        result: list[tuple[str, str | None]] = []
        for conjunct in conjuncts:
            text = self._partition_predicate(conjunct, partitions, fields)
            if text is not None:
                try:
                    PartitionPredicate.parse(text, columns)
                except InvalidPredicateError:
                    text = None
            result.append((conjunct, text))
        return result

    def _partition_predicate(
        self, conjunct: str, partitions: dict[str, str], fields: dict[str, dict]
    ) -> str | None:
        """`conjunct` as a partition predicate of the target, or None when it is not one.

        `partitions` maps lower-case partition column names to theirs, `fields` lower-case
        column names to their schema fields.
        """
        tokens = [m for m in _TOKEN.finditer(conjunct) if not m.group().isspace()]
        ops = [
            i for i, m in enumerate(tokens) if m.group() in ("=", "==") or m.group().lower() == "in"
        ]
        if len(ops) != 1 or ops[0] in (0, len(tokens) - 1):
            return None
        op = tokens[ops[0]]
        left, right = conjunct[: op.start()].strip(), conjunct[op.end() :].strip()
        if op.group().lower() == "in":
            column = self._target_partition(left, partitions, fields)
            items = right[1:-1].split(",") if right[:1] == "(" and right[-1:] == ")" else []
            if column is None or not items or not all(_LITERAL.fullmatch(i.strip()) for i in items):
                return None
            return f"{quote_identifier(column)} IN ({', '.join(i.strip() for i in items)})"
        for one, other in ((left, right), (right, left)):
            column = self._target_partition(one, partitions, fields)
            if column is None:
                continue
            if _LITERAL.fullmatch(other):
                return f"{quote_identifier(column)} = {other}"
            return self._source_values(other, column, fields[column.lower()]["type"])
        return None

    def _target_partition(
        self, operand: str, partitions: dict[str, str], fields: dict[str, dict]
    ) -> str | None:
        """The partition column `operand` names as `<target alias>.<column>`, when prunable."""
        match = _REFERENCE.fullmatch(operand)
        if match is None or match.group(1).lower() != self.target_alias.lower():
            return None
        column = partitions.get((match.group(2) or match.group(3)).lower())
        if column is None:
            return None
        delta_type = fields[column.lower()]["type"]
        prunable = delta_type in _PRUNABLE_TYPES or str(delta_type).startswith("decimal(")
        return column if prunable else None

    def _source_values(self, operand: str, column: str, delta_type: str) -> str | None:
        """`column IN (...)` over the distinct values of the source column `operand` names."""
        match = _REFERENCE.fullmatch(operand)
        if match is None or match.group(1).lower() != self.source_alias.lower():
            return None
        values = self._source_values_of((match.group(2) or match.group(3)).lower(), delta_type)
        if values is None or len(values) > MAX_PRUNING_VALUES:
            return None
        literals = [_sql_literal(v) for v in values if v is not None]
        return f"{quote_identifier(column)} IN ({', '.join(literals)})" if literals else "FALSE"

    def _source_values_of(self, name: str, delta_type: str) -> list[Any] | None:
        """Up to MAX_PRUNING_VALUES + 1 distinct values of the source column `name` (lower
        case), or None when it is not one column of exactly `delta_type`."""
        raise NotImplementedError


@dataclass(frozen=True)
class _Clause:
    """A WHEN clause as the in-process MERGE runs it: its condition (None: always) over
    `t.<column>` / `s.<column>`, and its assignment (None: a delete)."""

    condition: PartitionPredicate | None
    assign: Callable[[pa.Table | None, pa.Table | None], pa.Table] | None

    def holds(self, target: pa.Table | None, source: pa.Table | None, rows: int) -> np.ndarray:
        """Per row, whether the condition is true of (`target` rows, `source` rows)."""
        if self.condition is None:
            return np.ones(rows, dtype=bool)
        columns = {}
        for name in self.condition.columns:
            side, column = name.split(".", 1)
            data = target if side == "t" else source
            assert data is not None
            columns[name] = data.column(column)
        return self.condition.evaluate_rows(columns, rows)


def _first_clause(
    clauses: list[_Clause], target: pa.Table | None, source: pa.Table | None, rows: int
) -> np.ndarray:
    """Per row, the index of the first of `clauses` whose condition holds (-1: none)."""
    action = np.full(rows, -1, dtype=np.int64)
    for i, clause in enumerate(clauses):
        open_rows = action < 0
        if not open_rows.any():
            break
        action[open_rows & clause.holds(target, source, rows)] = i
    return action


@dataclass(frozen=True)
class _Matches:
    """What findTouchedFiles found over the candidate rows (all files, in file order)."""

    lengths: np.ndarray  # rows per file
    starts: np.ndarray  # the first row of each file
    rows: np.ndarray  # per matching pair (sorted by target row): the target row
    srows: np.ndarray  # per pair: the source row
    pair_action: np.ndarray  # per pair: the MATCHED clause that applies (-1: none)
    is_matched: np.ndarray  # per row: some source row matched it
    by_source: np.ndarray  # per row: the NOT MATCHED BY SOURCE clause that applies (-1: none)
    modified: np.ndarray  # per row: a clause updates or deletes it
    touched: np.ndarray  # per file: it holds a modified row

    def num_modified(self, kind: str, index: int) -> int:
        """Target rows that clause `index` of `kind` (MATCHED, NOT MATCHED BY SOURCE) changes."""
        if kind == MATCHED:
            return len(np.unique(self.rows[self.pair_action == index]))
        return int(np.count_nonzero(self.by_source == index))


class ArrowMergeBuilder(MergeBuilder):
    """MERGE of an Arrow table into a Delta table, run in this process on pyarrow.

    `merge_arrow` builds it; see the module docstring for what it runs (anything else raises
    UnsupportedMergeError before writing).

    Example: `merge_arrow(uri, pa.table({"id": [1], "v": ["x"]}), "t.id = s.id")
    .when_matched_update_all().when_not_matched_insert_all().execute()`.
    """

    def _source_values_of(self, name: str, delta_type: str) -> list[Any] | None:
        source = arrow_table(self.source_df)
        found = [c for c in source.column_names if c.lower() == name]
        if len(found) != 1 or source.schema.field(found[0]).type != arrow_type(delta_type):
            return None
        return pc.unique(source.column(found[0]))[: MAX_PRUNING_VALUES + 1].to_pylist()

    def _write(self, txn: OptimisticTransaction) -> tuple[list[Action], dict[str, int]]:
        # view and large types (deltalake, polars) as the regular types the table holds
        source = plain_table(arrow_table(self.source_df))
        self.source_df = source
        table = self._table_schema(txn)
        self._check_assignments(table.names)
        conjuncts = self._partition_conjuncts(txn)
        keys = self._keys(conjuncts, table, source)
        clauses = {kind: [] for kind in (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE)}
        for clause in self.clauses:
            clauses[clause.kind].append(
                _Clause(
                    self._condition(clause, table, source),
                    self._assigner(clause, table, source),
                )
            )
        files = txn.filter_files_arrow(self._pruning_predicates(txn, conjuncts))
        if pc.struct_field(files, "deletionVector").null_count != len(files):
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: candidate files have deletion vectors"
            )
        size = pc.sum(pc.struct_field(files, "size")).as_py() or 0
        if size > MAX_IN_PROCESS_BYTES:
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: {size / 1024**3:.1f} GiB of candidate files is "
                f"more than the in-process MERGE reads ({MAX_IN_PROCESS_BYTES / 1024**3:.0f} GiB)"
            )
        reader = _FileReader(txn, table)
        literal = [p for c, p in conjuncts if p is not None and not self._reads_source(c)]
        found = self._find_touched_files_in_process(reader, files, source, keys, literal, clauses)
        touched = files.filter(pa.array(found.touched))
        tasks = self._changes_in_process(reader, files, found, source, clauses)
        adds = _write_tasks(txn, tasks, self._not_null(txn)) if tasks else []
        position = {MATCHED: 0, NOT_MATCHED_BY_SOURCE: 0}
        per_clause = []
        for clause in self.clauses:
            if clause.kind != NOT_MATCHED:
                per_clause.append(found.num_modified(clause.kind, position[clause.kind]))
                position[clause.kind] += 1
        rows = int(found.lengths[found.touched].sum())
        self.executor = "in-process"
        log.info(
            "MERGE into %s ran in process: %d of %d candidate files touched, %d files written",
            self.target_uri,
            len(touched),
            len(files),
            len(adds),
        )
        return self._metrics(per_clause, touched, rows, adds, source.num_rows)

    def _find_touched_files_in_process(
        self,
        reader: _FileReader,
        files: pa.StructArray,
        source: pa.Table,
        keys: list[tuple[str, str]],
        literal: list[str],
        clauses: dict[str, list[_Clause]],
    ) -> _Matches:
        """Join the join keys of `files` whose partition satisfies the `literal` predicates
        with the source's, evaluate the MATCHED and NOT MATCHED BY SOURCE conditions; which
        rows each clause modifies, and the files holding them.

        Raises MultipleSourceRowMatchingTargetRowInMergeError when a target row matched several
        source rows and a MATCHED clause modifies it (unless the only MATCHED clause is an
        unconditional delete, as in Delta).
        """
        matched, by_source = clauses[MATCHED], clauses[NOT_MATCHED_BY_SOURCE]
        used = {t for t, _ in keys}
        for clause in (*matched, *by_source):
            if clause.condition is not None:
                used |= {n[2:] for n in clause.condition.columns if n.startswith("t.")}
        target = reader.read(files, [c for c in reader.table.names if c in used])
        eligible = np.repeat(_file_mask(reader.txn, files, literal), reader.lengths)
        pairs = _match(target, source, keys, eligible)
        order = np.argsort(pairs.column("row").to_numpy(), kind="stable")
        rows = pairs.column("row").to_numpy()[order]
        srows = pairs.column("srow").to_numpy()[order]
        pair_action = np.full(len(rows), -1, dtype=np.int64)
        if matched and len(rows):
            conditional = any(c.condition is not None for c in matched)
            pair_target = target.take(pa.array(rows)) if conditional else None
            pair_source = source.take(pa.array(srows)) if conditional else None
            pair_action = _first_clause(matched, pair_target, pair_source, len(rows))
        counts = np.bincount(rows, minlength=target.num_rows)
        acting = np.bincount(rows, weights=pair_action >= 0, minlength=target.num_rows)
        repeated = int(np.count_nonzero((counts > 1) & (acting > 0)))
        delete_only = [(c.condition, c.assign) for c in matched] == [(None, None)]
        if repeated and not delete_only:
            raise self._multiple_matches(repeated)
        is_matched = counts > 0
        modified = acting > 0
        by_source_action = np.full(target.num_rows, -1, dtype=np.int64)
        if by_source:
            unmatched = np.flatnonzero(~is_matched)
            if len(unmatched):
                rows_of = target.take(pa.array(unmatched))
                by_source_action[unmatched] = _first_clause(
                    by_source, rows_of, None, len(unmatched)
                )
            modified |= by_source_action >= 0
        ends = np.cumsum(reader.lengths)
        per_file = np.concatenate([[0], np.cumsum(modified, dtype=np.int64)])[ends]
        per_file = np.diff(np.concatenate([[0], per_file]))
        return _Matches(
            reader.lengths,
            ends - reader.lengths,
            rows,
            srows,
            pair_action,
            is_matched,
            by_source_action,
            modified,
            per_file > 0,
        )

    def _changes_in_process(
        self,
        reader: _FileReader,
        files: pa.StructArray,
        found: _Matches,
        source: pa.Table,
        clauses: dict[str, list[_Clause]],
    ) -> list[Callable[[], pa.Table]]:
        """writeAllChanges as tasks, each giving rows to write: one per touched file (its rows
        updated, deleted or copied per clause), and the inserted source rows in slices."""
        tasks: list[Callable[[], pa.Table]] = []
        paths = pc.struct_field(files, "path")
        values = pc.struct_field(files, "partitionValues")
        for i in np.flatnonzero(found.touched):
            start, end = int(found.starts[i]), int(found.starts[i] + found.lengths[i])
            low, high = np.searchsorted(found.rows, [start, end])
            tasks.append(
                functools.partial(
                    self._file_changes,
                    reader,
                    (paths[i].as_py(), values[i].as_py()),
                    slice(start, end),
                    slice(low, high),
                    found,
                    source,
                    clauses,
                )
            )
        inserting = clauses[NOT_MATCHED]
        if inserting:
            taken = np.zeros(source.num_rows, dtype=bool)
            taken[found.srows] = True
            new = source.filter(pa.array(~taken))
            action = _first_clause(inserting, None, new, new.num_rows)
            for i, clause in enumerate(inserting):
                rows = new.filter(pa.array(action == i))
                assert clause.assign is not None
                for offset in range(0, rows.num_rows, ROWS_PER_WRITE_SLICE):
                    piece = rows.slice(offset, ROWS_PER_WRITE_SLICE)
                    tasks.append(functools.partial(clause.assign, None, piece))
        return tasks

    @staticmethod
    def _file_changes(
        reader: _FileReader,
        file: tuple[str, Any],
        rows: slice,
        pairs: slice,
        found: _Matches,
        source: pa.Table,
        clauses: dict[str, list[_Clause]],
    ) -> pa.Table:
        """The rows of one touched `file` (path, partition values; `rows` of the candidates,
        `pairs` of the matching pairs) after the clauses."""
        data = reader.read_file(*file, reader.table.names)
        parts = []
        local = found.rows[pairs] - rows.start
        action = found.pair_action[pairs]
        for i, clause in enumerate(clauses[MATCHED]):
            chosen = action == i
            if clause.assign is not None and chosen.any():  # one source row per row (checked)
                target = data.take(pa.array(local[chosen]))
                parts.append(
                    clause.assign(target, source.take(pa.array(found.srows[pairs][chosen])))
                )
        by_source = found.by_source[rows]
        for i, clause in enumerate(clauses[NOT_MATCHED_BY_SOURCE]):
            chosen = np.flatnonzero(by_source == i)
            if clause.assign is not None and len(chosen):
                parts.append(clause.assign(data.take(pa.array(chosen)), None))
        parts.append(data.filter(pa.array(~found.modified[rows])))
        return pa.concat_tables([p.cast(reader.table) for p in parts])

    # -- planning ---------------------------------------------------------------------------

    def _table_schema(self, txn: OptimisticTransaction) -> pa.Schema:
        """The table's schema; UnsupportedMergeError when its data needs more than pyarrow."""
        check_writer_support(txn.protocol, txn.table, txn.metadata)
        metadata = txn.metadata
        problems = []
        if metadata.column_mapping_mode != "none":
            problems.append("column mapping")
        if any(k.lower().startswith("delta.constraints.") for k in metadata.configuration):
            problems.append("CHECK constraints")
        schema = metadata.schema
        for f in schema:
            extra = delta_field_metadata(f)
            if "delta.invariants" in extra or "delta.typeChanges" in extra:
                problems.append(f"column {f.name} (invariants or type changes)")
            if pa.types.is_null(f.type) or _nested(f.type):
                problems.append(f"column {f.name} ({f.type})")
        if problems:
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: the in-process MERGE does not handle "
                + ", ".join(problems)
            )
        return pa.schema([pa.field(f.name, f.type) for f in schema])

    @staticmethod
    def _not_null(txn: OptimisticTransaction) -> list[str]:
        """The table's non-nullable top-level columns (NOT NULL constraints)."""
        return [f.name for f in txn.metadata.schema if not f.nullable]

    def _source_column(self, source: pa.Table, name: str) -> str:
        found = [c for c in source.column_names if c.lower() == name.lower()]
        if len(found) != 1:
            problem = "is ambiguous in" if found else "is not a column of"
            raise ValueError(
                f"MERGE into {self.target_uri}: {self.source_alias}.{name} {problem} the source "
                f"(columns: {', '.join(source.column_names)})"
            )
        return found[0]

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

    def _keys(
        self, conjuncts: list[tuple[str, str | None]], table: pa.Schema, source: pa.Table
    ) -> list[tuple[str, str]]:
        """(target column, source column) of each equality of the condition; `conjuncts` come
        with their partition predicates (those over literals are evaluated on the files)."""
        keys = []
        target_alias = self.target_alias.lower()
        by_lower = {n.lower(): n for n in table.names}
        for conjunct, partition in conjuncts:
            if partition is not None and not self._reads_source(conjunct):
                continue
            sides = re.split(r"(?<![<>!=])==?(?![=>])", conjunct)
            refs = [self._reference(s) for s in sides] if len(sides) == 2 else [None]
            if None in refs or {r[0] for r in refs if r} != {
                target_alias,
                self.source_alias.lower(),
            }:
                raise UnsupportedMergeError(
                    f"MERGE into {self.target_uri}: the in-process MERGE needs a condition of "
                    f"equalities between target and source columns, not {conjunct!r}"
                )
            t_ref, s_ref = refs if refs[0][0] == target_alias else refs[::-1]
            target = by_lower.get(t_ref[1].lower())
            if target is None:
                raise ValueError(
                    f"MERGE into {self.target_uri}: {self.target_alias}.{t_ref[1]} is not a "
                    f"column of the table (columns: {', '.join(table.names)})"
                )
            name = self._source_column(source, s_ref[1])
            t_type, s_type = table.field(target).type, source.schema.field(name).type
            if not _joinable(t_type, s_type):
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

    def _condition(
        self, clause: MergeClause, table: pa.Schema, source: pa.Table
    ) -> PartitionPredicate | None:
        """The clause's condition over `t.<column>` and `s.<column>`, parsed by the engine's
        predicates (comparisons, IN, BETWEEN, IS NULL, AND/OR/NOT, literals: Spark's
        semantics); UnsupportedMergeError for anything else."""
        if clause.condition is None:
            return None
        sides = {MATCHED: "ts", NOT_MATCHED: "s", NOT_MATCHED_BY_SOURCE: "t"}[clause.kind]
        types: dict[str, str | dict] = {}
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

        try:
            text = _QUALIFIED.sub(qualify, clause.condition)
            return PartitionPredicate.parse(text, types)
        except (UnsupportedMergeError, InvalidPredicateError, ValueError) as exc:
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: the in-process MERGE cannot evaluate the "
                f"condition {clause.condition!r}: {exc}"
            ) from None

    def _assigner(self, clause: MergeClause, table: pa.Schema, source: pa.Table) -> Any:
        """A function (target rows, source rows) -> the output rows of `clause`, typed as the
        table (None for a delete); UnsupportedMergeError for an expression it cannot evaluate."""
        if clause.action == "delete":
            return None
        plan: list[tuple[str, Any]] = []
        for field in table:
            sql = self._resolve(clause, field.name)
            if sql is None:  # an update keeps the target's value, an insert leaves NULL
                plan.append(("t", field.name) if clause.action == "update" else ("null", None))
                continue
            ref = self._reference(sql)
            if ref is not None:
                side = "s" if ref[0] == self.source_alias.lower() else "t"
                if side == "t" and clause.kind == NOT_MATCHED:
                    raise ValueError(
                        f"MERGE into {self.target_uri}: an insert cannot read the target ({sql})"
                    )
                if side == "s" and clause.kind == NOT_MATCHED_BY_SOURCE:
                    raise ValueError(
                        f"MERGE into {self.target_uri}: a NOT MATCHED BY SOURCE clause cannot "
                        f"read the source ({sql})"
                    )
                if side == "s":
                    name = self._source_column(source, ref[1])
                    given = source.schema.field(name).type
                    if pa.types.is_dictionary(given):
                        given = given.value_type
                    if not _castable(given, field.type):
                        raise UnsupportedMergeError(
                            f"MERGE into {self.target_uri}: the in-process MERGE does not store "
                            f"{given} values in column {field.name} ({field.type})"
                        )
                else:
                    name = {n.lower(): n for n in table.names}.get(ref[1].lower())
                    if name is None:
                        raise ValueError(f"MERGE into {self.target_uri}: unknown column {sql}")
                plan.append((side, name))
            else:
                plan.append(("value", _literal(sql, field.type, self.target_uri)))

        def assign(target: pa.Table | None, src: pa.Table | None) -> pa.Table:
            rows = (target if target is not None else src).num_rows
            columns = []
            for field, (kind, value) in zip(table, plan, strict=True):
                if kind == "s":
                    column = src.column(value)
                elif kind == "t":
                    column = target.column(value)
                elif kind == "value" and value is not None:
                    column = _repeat(value, rows)
                else:
                    column = pa.nulls(rows, field.type)
                columns.append(_cast(column, field, self.target_uri))
            return pa.Table.from_arrays(columns, schema=table)

        return assign


def merge_arrow(
    target_uri: str,
    source: Any,
    condition: str,
    source_alias: str = "s",
    target_alias: str = "t",
    *,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> ArrowMergeBuilder:
    """A MERGE of `source` (a pyarrow Table, RecordBatchReader or anything exporting an Arrow
    stream) into the Delta table at `target_uri` on `condition`, run in this process.

    Example::

        merge_arrow(uri, updates, "t.id = s.id").when_matched_update_all()\\
            .when_not_matched_insert_all().execute()
    """
    table = arrow_table(source)  # read once: a RecordBatchReader is consumed
    if table is None:
        raise TypeError(f"MERGE into {target_uri}: the source is not Arrow data: {type(source)}")
    return ArrowMergeBuilder(
        target_uri,
        table,
        condition,
        source_alias,
        target_alias,
        storage_options=storage_options,
        commit_properties=commit_properties,
    )


# -- in-process execution ------------------------------------------------------------------


class _FileReader:
    """Reads data files of one snapshot as the table's columns (partition values included)."""

    def __init__(self, txn: OptimisticTransaction, table: pa.Schema) -> None:
        self.txn = txn
        self.table = table
        self.partition_columns = list(txn.metadata.partition_columns)
        self.fs = txn.location.store.fs
        self.root = txn.location.root
        self.lengths = np.zeros(0, dtype=np.int64)

    def read(self, files: pa.StructArray, columns: Sequence[str]) -> pa.Table:
        """The `columns` of every row of `files`, in file order; sets `lengths` (rows/file)."""
        paths = pc.struct_field(files, "path").to_pylist()
        values = pc.struct_field(files, "partitionValues").to_pylist()
        with ThreadPoolExecutor(min(len(paths), os.cpu_count() or 1) or 1) as pool:
            tables = list(
                pool.map(lambda f: self.read_file(*f, columns), zip(paths, values, strict=True))
            )
        self.lengths = np.array([t.num_rows for t in tables], dtype=np.int64)
        if not tables:
            return self.table.empty_table().select(list(columns))
        return pa.concat_tables(tables)

    def read_file(self, path: str, partition: Any, columns: Sequence[str]) -> pa.Table:
        """The `columns` of the data file at `path` (as the log names it) whose partition
        values are `partition` (the log's map, as key-value pairs). Columns are read as the
        table's types (`data_reader.conform`: view and large types of other writers)."""
        location = fs_path(
            self.fs, self.root, path, table=self.txn.table, version=self.txn.read_version
        )
        local = "file" in self.fs.protocol
        data = [c for c in columns if c not in self.partition_columns]
        try:
            with contextlib.nullcontext(location) if local else self.fs.open(location, "rb") as f:
                file = pq.ParquetFile(f, memory_map=local)
                names = {n.lower(): n for n in file.schema_arrow.names}
                present = [names[c.lower()] for c in data if c.lower() in names]
                read = file.read(columns=present, use_threads=False)
        except FileNotFoundError:
            raise self.txn.snapshot.missing_data_file(path) from None
        given = dict(partition or [])
        arrays = []
        for name in columns:
            field = self.table.field(name)
            found = names.get(name.lower())
            if name in self.partition_columns:
                value = parse_partition_value(given.get(name), _delta_type(self.txn, name))
                arrays.append(_repeat(pa.scalar(value, field.type), read.num_rows))
            elif found is None:
                arrays.append(pa.nulls(read.num_rows, field.type))
            else:
                arrays.append(_cast(conform(read.column(found), field.type), field, path))
        return pa.Table.from_arrays(
            arrays, schema=pa.schema([self.table.field(c) for c in columns])
        )


def _file_mask(
    txn: OptimisticTransaction, files: pa.StructArray, predicates: list[str]
) -> np.ndarray:
    """Per file: whether its partition satisfies every predicate (its rows can match)."""
    if not predicates or not len(files):
        return np.ones(len(files), dtype=bool)
    schema = json.loads(txn.metadata.schema_string)
    fields = {f["name"].lower(): f for f in schema["fields"]}
    columns = {c: fields[c.lower()] for c in txn.metadata.partition_columns}
    predicate = PartitionPredicate.all_of(
        [PartitionPredicate.parse(p, columns) for p in predicates]
    )
    return pc.fill_null(predicate.evaluate(files), False).to_numpy(zero_copy_only=False)


def _match(
    target: pa.Table, source: pa.Table, keys: list[tuple[str, str]], eligible: np.ndarray
) -> pa.Table:
    """(row, srow): the target row index and source row index of every matching pair of an
    `eligible` target row, from a hash join (NULL keys match nothing)."""
    left = [_key(target.column(t)) for t, _ in keys]
    right = [_key(source.column(s)) for _, s in keys]
    names = [f"k{i}" for i in range(len(keys))]
    rows = pa.array(np.arange(target.num_rows, dtype=np.int64))
    srows = pa.array(np.arange(source.num_rows, dtype=np.int64))
    first = pa.table([*left, rows], names=[*names, "row"])
    if not eligible.all():
        first = first.filter(pa.array(eligible))
    second = pa.table([*right, srows], names=[*names, "srow"])
    joined = first.join(second, keys=names, join_type="inner", use_threads=True)
    return joined.select(["row", "srow"])


def _write_tasks(
    txn: OptimisticTransaction, tasks: list[Callable[[], pa.Table]], not_null: list[str]
) -> list[Any]:
    """Run the `tasks` in parallel, each writing the rows it gives (the table's columns) to
    its own data files; their AddFiles. A NULL in a `not_null` column fails the write and
    every file written is removed."""
    txn.has_written = True
    metadata = txn.metadata
    plan = WritePlan.for_table(txn.location, metadata)
    writers = [DataFileWriter(plan, task) for task in range(len(tasks))]
    types = {f["name"]: f["type"] for f in json.loads(metadata.schema_string)["fields"]}
    columns = list(metadata.partition_columns)

    def write(task: int) -> list[dict[str, Any]]:
        output = tasks[task]()
        for name in not_null:
            if output.column(name).null_count:
                raise ConstraintViolationError(
                    f"NOT NULL constraint on column {name} ({quote_identifier(name)} IS NOT "
                    f"NULL) violated by a row of the MERGE into {txn.table}",
                    f"NOT NULL({name})",
                    f"{quote_identifier(name)} IS NOT NULL",
                )
        for c in columns:
            if types[c] == "string":  # "" is a null partition value: group it with the nulls
                column = output.column(c)
                index = output.schema.get_field_index(c)
                output = output.set_column(index, c, pc.if_else(pc.equal(column, ""), None, column))
        if columns:
            keys = [(c, "ascending", "at_end") for c in columns]
            output = output.take(pc.sort_indices(output, sort_keys=keys))
        writer = writers[task]
        for batch in output.to_batches():
            if batch.num_rows:
                for values, rows in partition_runs(plan, batch):
                    writer.add(values, rows)
        return writer.finish()

    try:
        with ThreadPoolExecutor(min(len(tasks), os.cpu_count() or 1)) as pool:
            rows = [r for result in pool.map(write, range(len(tasks))) for r in result]
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    return add_files(rows)


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


def _nested(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_map(t)


def _joinable(target: pa.DataType, source: pa.DataType) -> bool:
    """Whether keys of these types join exactly as Spark compares them (no floats)."""
    if pa.types.is_integer(target) and pa.types.is_integer(source):
        return True
    comparable = (
        pa.types.is_string(target)
        or pa.types.is_binary(target)
        or pa.types.is_boolean(target)
        or pa.types.is_date(target)
        or pa.types.is_timestamp(target)
        or pa.types.is_decimal(target)
    )
    return comparable and target == source


def _key(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A join key as compared: integers of every width as int64."""
    if pa.types.is_integer(column.type) and column.type != pa.int64():
        return pc.cast(column, pa.int64())
    return column


def _repeat(value: pa.Scalar, rows: int) -> pa.Array:
    """`value` repeated `rows` times (vectorised)."""
    return pa.array([value.as_py()], value.type).take(np.zeros(rows, dtype=np.int64))


def _castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether a MERGE may store `source` values in a `target` column (same family)."""
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
    if any(f(source) for f in numeric) and any(f(target) for f in numeric):
        return True
    if pa.types.is_timestamp(target):
        return pa.types.is_timestamp(source) or pa.types.is_date(source)
    return pa.types.is_null(source) or same_family(source, target)


def _cast(
    column: pa.ChunkedArray | pa.Array, field: pa.Field, where: str
) -> pa.ChunkedArray | pa.Array:
    """`column` cast to `field`'s type; a cast across type families or one that loses values
    is an error naming the column (timestamps are truncated to microseconds, as in Spark)."""
    if same_family(column.type, field.type):  # the type in another layout (or dictionary)
        return conform(column, field.type)
    if pa.types.is_dictionary(column.type):
        column = pc.cast(column, column.type.value_type)
    if not _castable(column.type, field.type):
        raise ValueError(
            f"MERGE into {where}: cannot store {column.type} values in column {field.name} "
            f"({field.type})"
        )
    try:
        return pc.cast(column, field.type, safe=not pa.types.is_timestamp(field.type))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(
            f"MERGE into {where}: cannot cast column {field.name} from {column.type} to "
            f"{field.type}: {exc}"
        ) from None


def _literal(sql: str, type_: pa.DataType, table: str) -> pa.Scalar | None:
    """A SQL literal (NULL, TRUE/FALSE, a number, a 'string') as a scalar of `type_`."""
    text = sql.strip()
    lowered = text.lower()
    if lowered == "null":
        return None
    value: Any
    if lowered in ("true", "false"):
        value = lowered == "true"
    elif _NUMBER.fullmatch(text):
        value = decimal.Decimal(text) if "." in text else int(text)
        if pa.types.is_floating(type_):
            value = float(value)
    elif len(text) > 1 and text[0] == text[-1] == "'" and "\\" not in text:
        value = text[1:-1].replace("''", "'")
    else:
        raise UnsupportedMergeError(
            f"MERGE into {table}: the in-process MERGE evaluates column references and "
            f"literals only, not {sql!r}"
        )
    try:
        return pc.cast(pa.scalar(value), type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise UnsupportedMergeError(
            f"MERGE into {table}: the in-process MERGE cannot use {sql} as {type_}: {exc}"
        ) from None


def _delta_type(txn: OptimisticTransaction, column: str) -> Any:
    fields = json.loads(txn.metadata.schema_string)["fields"]
    return next(f["type"] for f in fields if f["name"] == column)


def _assignments(mapping: Mapping[str, str]) -> dict[str, str]:
    """A copy of `mapping` (target column -> SQL expression); ValueError when empty or not text."""
    if not mapping or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise ValueError(
            f"MERGE assignments must map target column names to SQL expressions, got {mapping!r}"
        )
    return dict(mapping)


def _conjuncts(condition: str) -> list[str]:
    """The top-level AND operands of a SQL condition, outer parentheses removed."""
    parts, depth, start, between = [], 0, 0, False
    for token in _TOKEN.finditer(condition):
        word = token.group().lower()
        depth += {"(": 1, ")": -1}.get(word, 0)
        if depth or word not in ("and", "between"):
            continue
        if word == "between" or between:
            between = word == "between"
            continue
        parts.append(condition[start : token.start()])
        start = token.end()
    parts.append(condition[start:])
    result = []
    for part in (p.strip() for p in parts):
        inner = _unwrap(part)
        result.extend(_conjuncts(inner) if inner is not None else [part])
    return result


def _unwrap(text: str) -> str | None:
    """`text` without the parentheses that enclose all of it, or None."""
    if not text.startswith("("):
        return None
    depth = 0
    for token in _TOKEN.finditer(text):
        depth += {"(": 1, ")": -1}.get(token.group(), 0)
        if depth == 0:
            return text[1:-1] if token.end() == len(text) else None
    return None


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
    return "'" + str(value).replace("'", "''") + "'"
