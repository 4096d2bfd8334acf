"""MERGE INTO a Delta table from a Spark DataFrame, as Delta's MergeIntoCommand runs it.

    metrics = (
        merge_delta("/data/events", updates, "t.id = s.id AND t.day = s.day")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )

`execute()` runs in one transaction of the engine:

1. partition pruning: the conjuncts `t.<partition> = <literal>`, `t.<partition> IN (...)` and
   `t.<partition> = s.<column>` (as `IN` over the distinct source values) of the condition select
   the candidate files through `filter_files_arrow`, which records the read for the conflict
   checks (without a WHEN NOT MATCHED BY SOURCE clause only: those need every target row);
2. findTouchedFiles: the source joined with the candidate rows finds the files holding rows that
   a MATCHED or NOT MATCHED BY SOURCE clause modifies, and target rows matched by several
   source rows (MultipleSourceRowMatchingTargetRowInMergeError);
3. writeAllChanges: the rows of the touched files, updated, deleted or copied per clause, and
   the inserted source rows are written by `write_files`; the touched files are removed and
   every other file stays;
4. commit as operation MERGE with Delta's parameters and metrics.

Conditions and assignments are Spark SQL over the aliases (`s` and `t` by default). The source
is evaluated several times (pruning values, the two joins, the row count): it must be
deterministic. Only DataFrame APIs are used, so a Spark Connect session works too.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField

from airflow_delta.engine import CommitProperties, DeltaLog, Operation, OptimisticTransaction
from airflow_delta.engine.actions import Action, add_files_from_arrow
from airflow_delta.engine.errors import DeltaError, TableNotFoundError
from airflow_delta.engine.predicates import InvalidPredicateError, PartitionPredicate
from airflow_delta.spark.read import _TableLayout, scan_files
from airflow_delta.spark.write import write_files

MATCHED = "matched"
NOT_MATCHED = "notMatched"
NOT_MATCHED_BY_SOURCE = "notMatchedBySource"

#: Most distinct source values turned into a `<partition> IN (...)` predicate to prune files.
MAX_PRUNING_VALUES = 1000

#: Delta types whose partition predicates compare in the engine exactly as in Spark.
_PRUNABLE_TYPES = frozenset({"string", "byte", "short", "integer", "long", "boolean", "date"})

_FILE = "__delta_merge_file"
_ROW = "__delta_merge_row_id"
_SOURCE = "__delta_merge_source_row"
_ACTION = "__delta_merge_clause"
_TARGET = "__delta_merge_target_row"

_TOKEN = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`|<=>|[<>!=]=|<>|\w+|\s+|.", re.S)
_LITERAL = re.compile(
    r"'[^'\\]*'|[+-]?\d+(?:\.\d+)?|true|false|date\s*'\d{4}-\d{2}-\d{2}'", re.IGNORECASE
)
_REFERENCE = re.compile(r"(\w+)\.(?:`([^`]+)`|(\w+))")


class MultipleSourceRowMatchingTargetRowInMergeError(DeltaError):
    """Several source rows matched one target row that a MATCHED clause updates or deletes."""


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


class DeltaMergeBuilder:
    """MERGE of `source_df` into the Delta table at `target_uri`; `merge_delta` builds it.

    Each `when_*` method appends a clause and returns the builder; within each kind
    (MATCHED, NOT MATCHED, NOT MATCHED BY SOURCE) the first clause whose condition holds
    applies, and only the last clause of a kind may omit its condition. `execute()` commits
    and returns the metrics.

    Example: `merge_delta(uri, df, "t.id = s.id").when_matched_delete("s.gone").execute()`.
    """

    def __init__(
        self,
        target_uri: str,
        source_df: DataFrame,
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

    # -- clauses ----------------------------------------------------------------------------

    def when_matched_update(
        self, set: Mapping[str, str], condition: str | None = None
    ) -> DeltaMergeBuilder:
        """Update matched target rows: `set` maps target columns to SQL expressions.

        Example: `.when_matched_update({"value": "s.value"}, "s.ts > t.ts")`.
        """
        return self._add(MergeClause(MATCHED, "update", condition, _assignments(set)))

    def when_matched_update_all(self, condition: str | None = None) -> DeltaMergeBuilder:
        """Set every target column of matched rows from the source column of the same name.

        Example: `.when_matched_update_all()`.
        """
        return self._add(MergeClause(MATCHED, "update", condition))

    def when_matched_delete(self, condition: str | None = None) -> DeltaMergeBuilder:
        """Delete matched target rows.

        Example: `.when_matched_delete("s.deleted")`.
        """
        return self._add(MergeClause(MATCHED, "delete", condition, {}))

    def when_not_matched_insert(
        self, values: Mapping[str, str], condition: str | None = None
    ) -> DeltaMergeBuilder:
        """Insert source rows that match no target row; columns not in `values` are NULL.

        Example: `.when_not_matched_insert({"id": "s.id", "value": "upper(s.value)"})`.
        """
        return self._add(MergeClause(NOT_MATCHED, "insert", condition, _assignments(values)))

    def when_not_matched_insert_all(self, condition: str | None = None) -> DeltaMergeBuilder:
        """Insert unmatched source rows, each target column from the source column of its name.

        Example: `.when_not_matched_insert_all("s.value IS NOT NULL")`.
        """
        return self._add(MergeClause(NOT_MATCHED, "insert", condition))

    def when_not_matched_by_source_update(
        self, set: Mapping[str, str], condition: str | None = None
    ) -> DeltaMergeBuilder:
        """Update target rows that no source row matches (expressions over the target only).

        Example: `.when_not_matched_by_source_update({"active": "false"})`.
        """
        return self._add(MergeClause(NOT_MATCHED_BY_SOURCE, "update", condition, _assignments(set)))

    def when_not_matched_by_source_delete(self, condition: str | None = None) -> DeltaMergeBuilder:
        """Delete target rows that no source row matches.

        Example: `.when_not_matched_by_source_delete("t.day < '2024-01-01'")`.
        """
        return self._add(MergeClause(NOT_MATCHED_BY_SOURCE, "delete", condition, {}))

    def _add(self, clause: MergeClause) -> DeltaMergeBuilder:
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
        txn = DeltaLog.for_table(self.target_uri, self.storage_options).start_transaction(
            properties=self.commit_properties
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

    def _commit(
        self, txn: OptimisticTransaction, actions: list[Action], metrics: dict[str, int]
    ) -> int:
        """Commit the written files as operation MERGE; the committed version."""
        parameters: dict[str, Any] = {"predicate": self.condition}
        for kind in (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE):
            parameters[f"{kind}Predicates"] = [c.describe() for c in self.clauses if c.kind == kind]
        return txn.commit(actions, Operation("MERGE", parameters, metrics))

    def _write(self, txn: OptimisticTransaction) -> tuple[list[Action], dict[str, int]]:
        """Read the candidate files, write the changed rows; the actions and the metrics."""
        spark, snapshot = self.source_df.sparkSession, txn.snapshot
        files = txn.filter_files_arrow(self._pruning_predicates(txn))
        target = scan_files(spark, snapshot, files)
        fields = target.schema.fields
        self._check_assignments([f.name for f in fields])
        source = self.source_df.withColumn(_SOURCE, F.lit(True))
        modifying = [c for c in self.clauses if c.kind != NOT_MATCHED]
        inserting = [c for c in self.clauses if c.kind == NOT_MATCHED]
        keys = {"file_column": _FILE, "row_index_column": _ROW}

        paths: list[str] = []
        per_clause = [0] * len(modifying)
        duplicates = untouched_matches = False
        if modifying:
            paths, per_clause, duplicates, untouched_matches = self._find_touched_files(
                source, self._identified_rows(spark, snapshot, files), modifying
            )
        touched = files.filter(pc.is_in(files.field("path"), pa.array(paths, pa.string())))
        outputs = []
        if modifying and inserting and not duplicates and not untouched_matches:
            # every source row matching a candidate row matched one of the touched files: one
            # full outer join gives the updates, copies and inserts
            if len(touched):
                rows = scan_files(spark, snapshot, touched).withColumn(_TARGET, F.lit(True))
                outputs.append(self._rewrite_all(source, rows, fields, modifying + inserting))
            else:
                outputs.append(self._insert(source, None, fields, inserting))
        else:
            if len(touched):
                rows = scan_files(spark, snapshot, touched, **(keys if duplicates else {}))
                outputs.append(self._rewrite(source, rows, fields, modifying, duplicates))
            if inserting:
                outputs.append(self._insert(source, target, fields, inserting))
        adds = []
        if outputs:
            output = outputs[0] if len(outputs) == 1 else outputs[0].unionByName(outputs[1])
            adds = write_files(txn, output)
        now = int(time.time() * 1000)
        removes = [f.remove(now) for f in add_files_from_arrow(touched)]

        def modified(kind: str, action: str) -> int:
            pairs = zip(modifying, per_clause, strict=True)
            return sum(n for c, n in pairs if (c.kind, c.action) == (kind, action))

        updated = modified(MATCHED, "update") + modified(NOT_MATCHED_BY_SOURCE, "update")
        deleted = modified(MATCHED, "delete") + modified(NOT_MATCHED_BY_SOURCE, "delete")
        copied = _num_records(touched, lambda: scan_files(spark, snapshot, touched).count())
        copied -= updated + deleted
        output_rows = sum(a.num_records or 0 for a in adds)
        metrics = {
            "numSourceRows": self.source_df.count(),
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

    # -- partition pruning ------------------------------------------------------------------

    def _pruning_predicates(self, txn: OptimisticTransaction) -> list[str]:
        """Predicates over the target's partition columns that the merge condition implies."""
        partitions = {c.lower(): c for c in txn.metadata.partition_columns}
        unsafe = "\\" in self.condition or "--" in self.condition or "/*" in self.condition
        if not partitions or unsafe or any(c.kind == NOT_MATCHED_BY_SOURCE for c in self.clauses):
            return []
        schema = json.loads(txn.metadata.schema_string or "{}")
        fields = {f["name"].lower(): f for f in schema["fields"]}
        columns = {c: fields[c.lower()] for c in partitions.values()}
        predicates = []
        for conjunct in _conjuncts(self.condition):
            text = self._partition_predicate(conjunct, partitions, fields)
            if text is None:
                continue
            try:
                PartitionPredicate.parse(text, columns)
            except InvalidPredicateError:
                continue
            predicates.append(text)
        return predicates

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
            return f"{_quote(column)} IN ({', '.join(i.strip() for i in items)})"
        for one, other in ((left, right), (right, left)):
            column = self._target_partition(one, partitions, fields)
            if column is None:
                continue
            if _LITERAL.fullmatch(other):
                return f"{_quote(column)} = {other}"
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
        name = (match.group(2) or match.group(3)).lower()
        found = [f for f in self.source_df.schema.fields if f.name.lower() == name]
        if len(found) != 1 or found[0].dataType.jsonValue() != delta_type:
            return None  # a cast would decide what matches: leave it to Spark
        rows = (
            self.source_df.select(F.col(_quote(found[0].name)))
            .distinct()
            .limit(MAX_PRUNING_VALUES + 1)
            .collect()
        )
        if len(rows) > MAX_PRUNING_VALUES:
            return None
        values = [_sql_literal(r[0]) for r in rows if r[0] is not None]
        return f"{_quote(column)} IN ({', '.join(values)})" if values else "FALSE"

    # -- the joins --------------------------------------------------------------------------

    def _join(self, source: DataFrame, target: DataFrame, how: str) -> DataFrame:
        return source.alias(self.source_alias).join(
            target.alias(self.target_alias), F.expr(self.condition), how
        )

    def _identified_rows(
        self, spark: Any, snapshot: Any, files: pa.StructArray
    ) -> tuple[DataFrame, Callable[[Any], str]]:
        """The candidate rows with a file key (`_FILE`) and a row id (`_ROW`) unique in the
        query, and the function mapping a file key to the file's log path.

        A plain scan (no partition values, no deletion vectors: no join inside) takes Spark's
        own file name and a generated id, both computed while the file is read; otherwise the
        scan attaches the log path and the row index itself.
        """
        plain = not snapshot.metadata.partition_columns and (
            pc.struct_field(files, "deletionVector").null_count == len(files)
        )
        if not plain or not len(files):
            rows = scan_files(spark, snapshot, files, file_column=_FILE, row_index_column=_ROW)
            return rows, lambda key: key
        layout = _TableLayout.of(spark, snapshot)
        by_uri = {
            _file_uri(layout.resolve(path).spark_uri): path
            for path in pc.struct_field(files, "path").to_pylist()
        }

        def log_path(key: Any) -> str:
            key = _file_uri(key)
            if key not in by_uri:
                raise DeltaError(
                    f"MERGE into {self.target_uri}: rows of an unexpected data file {key!r}"
                )
            return by_uri[key]

        rows = scan_files(spark, snapshot, files).select(
            "*",
            F.input_file_name().alias(_FILE),
            F.monotonically_increasing_id().alias(_ROW),
        )
        return rows, log_path

    def _find_touched_files(
        self,
        source: DataFrame,
        identified: tuple[DataFrame, Callable[[Any], str]],
        clauses: list[MergeClause],
    ) -> tuple[list[str], list[int], bool, bool]:
        """The touched files, the target rows each clause modifies, whether a touched file
        holds a row matched by several source rows that no clause modifies (copied once), and
        whether an untouched file holds a row some source row matched.

        Raises MultipleSourceRowMatchingTargetRowInMergeError when a modified target row
        matched several source rows (unless the only MATCHED clause is an unconditional
        DELETE, as in Delta).
        """
        target, log_path = identified
        by_source = any(c.kind == NOT_MATCHED_BY_SOURCE for c in clauses)
        joined = self._join(source, target, "right" if by_source else "inner")
        matched = F.col(_SOURCE).isNotNull()
        rows = joined.select(_FILE, _ROW, matched.alias(_SOURCE), _first_clause(clauses, matched))
        # only target rows that matched can match several times: group those alone
        per_row = (
            rows.where(F.col(_SOURCE))
            .groupBy(_FILE, _ROW)
            .agg(
                F.count(F.lit(1)).alias("matches"),
                F.count(_ACTION).alias("modified"),
                F.max(_ACTION).alias(_ACTION),
            )
        )
        if by_source:
            unmatched = rows.where(~F.col(_SOURCE) & F.col(_ACTION).isNotNull()).select(
                _FILE,
                F.lit(0).cast("long").alias("matches"),
                F.lit(1).cast("long").alias("modified"),
                _ACTION,
            )
            per_row = per_row.select(_FILE, "matches", "modified", _ACTION).unionByName(unmatched)
        several = F.col("matches") > 1
        modified = F.col("modified") > 0
        per_file = (
            per_row.groupBy(_FILE)
            .agg(
                F.count(F.when(modified, 1)).alias("modified"),
                F.count(F.when(F.col("matches") > 0, 1)).alias("matched"),
                F.count(F.when(several & modified, 1)).alias("conflicts"),
                F.count(F.when(several & ~modified, 1)).alias("copies"),
                *(
                    F.count(F.when(F.col(_ACTION) == i, 1)).alias(f"c{i}")
                    for i in range(len(clauses))
                ),
            )
            .collect()
        )
        untouched_matches = any(r["modified"] == 0 and r["matched"] > 0 for r in per_file)
        per_file = [r for r in per_file if r["modified"] > 0]
        matched_clauses = [c for c in clauses if c.kind == MATCHED]
        delete_only = matched_clauses == [MergeClause(MATCHED, "delete", None, {})]
        conflicts = sum(r["conflicts"] for r in per_file)
        if conflicts and not delete_only:
            raise MultipleSourceRowMatchingTargetRowInMergeError(
                "Cannot perform Merge as multiple source rows matched and attempted to modify the "
                "same target row in the Delta table in possibly conflicting ways. By SQL semantics "
                "of Merge, when multiple source rows match on the same target row, the result may "
                "be ambiguous as it is unclear which source row should be used to update or delete "
                "the matching target row. You can preprocess the source table to eliminate the "
                "possibility of multiple matches. Please refer to "
                "https://docs.delta.io/latest/delta-update.html#upsert-into-a-table-using-merge "
                f"(table {self.target_uri}, {conflicts} target row(s) matched more than once)."
            )
        counts = [sum(r[f"c{i}"] for r in per_file) for i in range(len(clauses))]
        return (
            [log_path(r[_FILE]) for r in per_file],
            counts,
            any(r["copies"] for r in per_file),
            untouched_matches,
        )

    def _rewrite(
        self,
        source: DataFrame,
        target: DataFrame,
        fields: list[StructField],
        clauses: list[MergeClause],
        deduplicate: bool,
    ) -> DataFrame:
        """The rows of the touched files after the MATCHED and NOT MATCHED BY SOURCE clauses."""
        rows = self._join(source, target, "right")
        rows = rows.withColumn(_ACTION, _first_clause(clauses, F.col(_SOURCE).isNotNull()))
        deleting = [i for i, c in enumerate(clauses) if c.action == "delete"]
        if deleting:
            rows = rows.where(F.col(_ACTION).isNull() | ~F.col(_ACTION).isin(deleting))
        if deduplicate:  # copies of one target row that several source rows matched
            rows = rows.dropDuplicates([_FILE, _ROW])
        alias = _quote(self.target_alias)
        return rows.select(
            *(self._output(f, clauses, F.col(f"{alias}.{_quote(f.name)}")) for f in fields)
        )

    def _rewrite_all(
        self,
        source: DataFrame,
        target: DataFrame,
        fields: list[StructField],
        clauses: list[MergeClause],
    ) -> DataFrame:
        """The rows of the touched files after the MATCHED and NOT MATCHED BY SOURCE clauses and
        the inserted source rows, from one full outer join (`target` has the `_TARGET` flag)."""
        rows = self._join(source, target, "full")
        in_source, in_target = F.col(_SOURCE).isNotNull(), F.col(_TARGET).isNotNull()
        rows = rows.withColumn(_ACTION, _first_clause(clauses, in_source, in_target))
        deleting = [i for i, c in enumerate(clauses) if c.action == "delete"]
        kept = in_target & (F.col(_ACTION).isNull() | ~F.col(_ACTION).isin(deleting or [-1]))
        rows = rows.where(kept | (~in_target & F.col(_ACTION).isNotNull()))
        alias = _quote(self.target_alias)
        return rows.select(
            *(self._output(f, clauses, F.col(f"{alias}.{_quote(f.name)}")) for f in fields)
        )

    def _insert(
        self,
        source: DataFrame,
        target: DataFrame | None,
        fields: list[StructField],
        clauses: list[MergeClause],
    ) -> DataFrame:
        """The source rows that match no candidate row (`target`; None: all of them match
        none), after the NOT MATCHED clauses."""
        if target is None:
            rows = source.alias(self.source_alias)
        else:
            rows = self._join(source, target, "left_anti")
        rows = rows.withColumn(_ACTION, _first_clause(clauses, F.lit(False)))
        rows = rows.where(F.col(_ACTION).isNotNull())
        return rows.select(*(self._output(f, clauses, F.lit(None)) for f in fields))

    def _output(self, field: StructField, clauses: list[MergeClause], default: Column) -> Column:
        """Column `field` of an output row: the assignment of the clause applied, else `default`."""
        value: Column | None = None
        for i, clause in enumerate(clauses):
            sql = self._resolve(clause, field.name)
            if sql is not None:
                applied = F.col(_ACTION) == i
                if value is None:
                    value = F.when(applied, F.expr(sql))
                else:
                    value = value.when(applied, F.expr(sql))
        value = default if value is None else value.otherwise(default)
        return value.cast(field.dataType).alias(field.name)

    def _resolve(self, clause: MergeClause, column: str) -> str | None:
        """The SQL expression `clause` assigns to the target `column` (None: not assigned)."""
        if clause.action == "delete":
            return None
        if clause.assignments is None:
            return f"{_quote(self.source_alias)}.{_quote(column)}"
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


def merge_delta(
    target_uri: str,
    source_df: DataFrame,
    condition: str,
    source_alias: str = "s",
    target_alias: str = "t",
    *,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> DeltaMergeBuilder:
    """A MERGE of `source_df` into the Delta table at `target_uri` on `condition`.

    Add WHEN clauses with the builder's `when_*` methods, then `execute()`.

    Example::

        merge_delta(uri, updates, "t.id = s.id").when_matched_update_all()\\
            .when_not_matched_insert_all().execute()
    """
    return DeltaMergeBuilder(
        target_uri,
        source_df,
        condition,
        source_alias,
        target_alias,
        storage_options=storage_options,
        commit_properties=commit_properties,
    )


# -- helpers -----------------------------------------------------------------------------------


def _assignments(mapping: Mapping[str, str]) -> dict[str, str]:
    """A copy of `mapping` (target column -> SQL expression); ValueError when empty or not text."""
    if not mapping or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
    ):
        raise ValueError(
            f"MERGE assignments must map target column names to SQL expressions, got {mapping!r}"
        )
    return dict(mapping)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


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


def _first_clause(
    clauses: list[MergeClause], matched: Column, in_target: Column | None = None
) -> Column:
    """The index of the first clause that applies to a joined row (NULL when none does).

    `matched`: the row has a source side; `in_target` (full outer joins only): it has a target
    side. Without `in_target`, a row without a source side is a target row and vice versa.
    """
    first: Column | None = None
    for i, clause in enumerate(clauses):
        if in_target is None:
            applies = matched if clause.kind == MATCHED else ~matched
        elif clause.kind == MATCHED:
            applies = matched & in_target
        elif clause.kind == NOT_MATCHED:
            applies = matched & ~in_target
        else:
            applies = ~matched & in_target
        if clause.condition is not None:
            applies = applies & F.expr(clause.condition)
        first = F.when(applies, F.lit(i)) if first is None else first.when(applies, F.lit(i))
    assert first is not None, "a MERGE has at least one clause"
    return first.alias(_ACTION)


def _file_uri(uri: str) -> str:
    """`uri` with a `file:` URI's empty authority dropped (`file:///x` and `file:/x` alike)."""
    if uri.startswith("file://"):
        rest = uri[len("file:") :].lstrip("/")
        return f"file:/{rest}"
    return uri


def _num_records(files: pa.StructArray, count: Callable[[], int]) -> int:
    """Rows in `files` from their stats (minus deletion vectors), else `count()`."""
    if not len(files):
        return 0
    stats = pc.fill_null(files.field("stats"), "")
    found = pc.extract_regex(stats, r'"numRecords"\s*:\s*(?P<n>\d+)')
    if found.null_count:
        return count()
    total = pc.sum(pc.cast(found.field("n"), pa.int64())).as_py()
    deleted = pc.sum(pc.struct_field(files.field("deletionVector"), "cardinality")).as_py()
    return int(total - (deleted or 0))
