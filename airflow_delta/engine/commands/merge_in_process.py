"""MERGE of Arrow data run in this process on pyarrow, the way Delta's MergeIntoCommand does it.

`ArrowMergeBuilder` (built by `merge_arrow`) is a `MergeBuilder` (`engine/commands/merge.py`:
the clauses, pruning, commit and metrics) whose executor runs with pyarrow compute and no Spark:

1. partition pruning selects the candidate files through `filter_files_arrow`, which records the
   read for the conflict checks;
2. findTouchedFiles: the join keys of the candidate files are read and hash-joined with the
   source; target rows matched by several source rows are refused as in Delta;
3. writeAllChanges: the touched files are read whole, updated, deleted or copied per clause,
   and written with the inserted source rows by `DataFileWriter` (in parallel slices); the
   touched files are removed and every other file stays;
4. commit as operation MERGE.

It takes the MERGEs most pipelines run: a condition that is an AND of equalities between a
target and a source column (plus `t.<partition> = <literal>` or `IN (<literals>)`), clause
conditions made of comparisons, IN, BETWEEN, IS [NOT] NULL and AND/OR/NOT over `t.x`, `s.x`
and literals (the engine's predicates, with Spark's semantics), and assignments that are column
references (`s.x`, `t.x`), literals, or value expressions over both sides that the engine's
evaluator handles (`expressions/values.py`). Candidate files with deletion vectors are read without
their deleted rows and rewritten whole when touched. Generated columns are computed by the
engine's evaluator where a clause leaves them out (an update recomputes them) and checked where
it gives them; identity columns get fresh values on insert (`identity_values.py`) and keep
theirs on update. Anything else, and tables whose data needs more than this reader (type
changes, a CHECK constraint or invariant or an expression the evaluator lacks), raises
`UnsupportedMergeError` before anything is written: the Spark MERGE
(`airflow_delta.spark.merge_delta`) runs those, and falls back to Spark by itself.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_delta.engine.commands.data_files import (
    ChangeRows,
    with_change_type,
    write_change_tasks,
)
from airflow_delta.engine.commands.data_reader import FileReader, plain_table, repeat_scalar
from airflow_delta.engine.commands.deletion_vector_files import (
    DeletionVectorWriter,
    deletion_vectors_enabled,
    live_row_indexes,
    with_deletion_vector,
)
from airflow_delta.engine.commands.identity_values import IdentityValues, check_merge_clauses
from airflow_delta.engine.commands.merge import (
    MATCHED,
    MAX_PRUNING_VALUES,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    MergeBuilder,
    MergeClause,
    arrow_table,
)
from airflow_delta.engine.commands.merge_values import (
    cast_to_field,
    castable,
    match_keys,
    sql_literal,
)
from airflow_delta.engine.commands.row_ids import RowTracking
from airflow_delta.engine.errors import (
    InvalidArgumentError,
    InvalidPredicateError,
    UnsupportedMergeError,
)
from airflow_delta.engine.expressions.constraints import RowChecks
from airflow_delta.engine.expressions.generated import (
    GeneratedColumn,
    generate_checked,
    parse_generated_columns,
)
from airflow_delta.engine.expressions.parser import parse_value
from airflow_delta.engine.expressions.predicates import PartitionPredicate
from airflow_delta.engine.protocol.action_types import add_files_from_arrow
from airflow_delta.engine.protocol.actions import Action, AddFile
from airflow_delta.engine.protocol.columnar import sorted_unique
from airflow_delta.engine.protocol.features import change_data_feed_enabled, check_writer_support
from airflow_delta.engine.protocol.identity import generated_columns
from airflow_delta.engine.protocol.schema import arrow_type, delta_field_metadata
from airflow_delta.engine.txn.commit_types import CommitProperties
from airflow_delta.engine.txn.transaction import OptimisticTransaction

log = logging.getLogger(__name__)

#: Most bytes of candidate files an in-process MERGE reads; larger MERGEs need Spark.
MAX_IN_PROCESS_BYTES = 4 * 1024**3
#: Inserted rows per writing task of an in-process MERGE (tasks run on a thread per core).
ROWS_PER_WRITE_SLICE = 500_000


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
            return len(sorted_unique(self.rows[self.pair_action == index]))
        return int(np.count_nonzero(self.by_source == index))


class ArrowMergeBuilder(MergeBuilder):
    """MERGE of an Arrow table into a Delta table, run in this process on pyarrow.

    `merge_arrow` builds it; see the module docstring for what it runs (anything else raises
    UnsupportedMergeError before writing).

    Example: `merge_arrow(uri, pa.table({"id": [1], "v": ["x"]}), "t.id = s.id")
    .when_matched_update_all().when_not_matched_insert_all().execute()`.
    """

    _generated: list[GeneratedColumn] = []  # the table's generated columns (set by `_write`)
    _identity: IdentityValues  # the identity values it hands out (set by `_write`)
    _checks = RowChecks()  # the table's invariants and CHECK constraints (set by `_write`)

    def _source_values_of(self, name: str, delta_type: str) -> list[Any] | None:
        source = arrow_table(self.source_df)
        assert source is not None  # merge_arrow and merge_delta take Arrow data only
        found = [c for c in source.column_names if c.lower() == name]
        if len(found) != 1 or source.schema.field(found[0]).type != arrow_type(delta_type):
            return None
        column = source.column(found[0])
        # a prefix holding more distinct values than are listed settles it without a full pass
        values = pc.unique(column.slice(0, 4 * (MAX_PRUNING_VALUES + 1)))
        if len(values) <= MAX_PRUNING_VALUES and len(column) > 4 * (MAX_PRUNING_VALUES + 1):
            values = pc.unique(column)
        return list(values[: MAX_PRUNING_VALUES + 1].to_pylist())

    def _source_bounds_of(self, name: str, delta_type: str) -> tuple[Any, Any] | None:
        source = arrow_table(self.source_df)
        assert source is not None  # merge_arrow and merge_delta take Arrow data only
        (found,) = [c for c in source.column_names if c.lower() == name]
        bounds = pc.min_max(source.column(found))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        return None if low is None else (low, high)

    def _write(self, txn: OptimisticTransaction) -> tuple[list[Action], dict[str, int]]:
        # view and large types (deltalake, polars) as the regular types the table holds
        source = plain_table(arrow_table(self.source_df))
        self.source_df = source
        table = self._table_schema(txn)
        self._check_assignments(table.names, source.column_names)
        self._generated = self._generated_columns(txn)
        self._identity = IdentityValues(txn.metadata, self.target_uri)
        check_merge_clauses(txn.metadata, self.clauses, source.column_names, self.target_uri)
        conjuncts = self._partition_conjuncts(txn)
        keys = self._keys(conjuncts, table, source)
        clauses: dict[str, list[_Clause]] = {
            k: [] for k in (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE)
        }
        for clause in self.clauses:
            clauses[clause.kind].append(
                _Clause(
                    self._condition(clause, table, source),
                    self._assigner(clause, table, source),
                )
            )
        files = txn.filter_files_arrow(self._pruning_predicates(txn, conjuncts))
        size = pc.sum(pc.struct_field(files, "size")).as_py() or 0
        if size > MAX_IN_PROCESS_BYTES:
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: {size / 1024**3:.1f} GiB of candidate files is "
                f"more than the in-process MERGE reads ({MAX_IN_PROCESS_BYTES / 1024**3:.0f} GiB)"
            )
        reader = FileReader(txn, table)
        literal = [p for c, p in conjuncts if p is not None and not self._reads_source(c)]
        found = self._find_touched_files_in_process(reader, files, source, keys, literal, clauses)
        touched = files.filter(pa.array(found.touched))
        # change data files unless the MERGE only inserts (readers take its adds as inserts)
        cdf = change_data_feed_enabled(txn.protocol, txn.metadata) and bool(len(touched))
        dvs = DeletionVectorWriter(txn.location) if deletion_vectors_enabled(txn) else None
        tasks = self._changes_in_process(reader, files, found, source, clauses, cdf, dvs is None)
        with_dv = [] if dvs is None else _deletion_vectors(reader, files, found, dvs)
        if dvs is not None:
            dvs.finish()
        try:
            adds, cdcs = write_change_tasks(txn, tasks, self._not_null(txn), "MERGE")
            txn.identity_high_water_marks.update(self._identity.marks())
        except BaseException:
            if dvs is not None:
                dvs.abort()
            raise
        position = {MATCHED: 0, NOT_MATCHED_BY_SOURCE: 0}
        per_clause = []
        for clause in self.clauses:
            if clause.kind != NOT_MATCHED:
                per_clause.append(found.num_modified(clause.kind, position[clause.kind]))
                position[clause.kind] += 1
        rows = int(found.lengths[found.touched].sum())
        if dvs is not None:  # rows a DV leaves in place are not copied
            rows = int(np.count_nonzero(found.modified))
        self.executor = "in-process"
        log.info(
            "MERGE into %s ran in process: %d of %d candidate files touched, %d files written",
            self.target_uri,
            len(touched),
            len(files),
            len(adds),
        )
        actions, metrics = self._metrics(per_clause, touched, rows, adds, source.num_rows)
        had_dv = len(touched) - pc.struct_field(touched, "deletionVector").null_count
        updated_dvs = sum(1 for old, _ in with_dv if old.deletion_vector is not None)
        metrics |= {
            "numTargetChangeFilesAdded": len(cdcs),
            "numTargetFilesRemoved": len(touched) - len(with_dv),
            "numTargetDeletionVectorsAdded": len(with_dv),
            "numTargetDeletionVectorsRemoved": had_dv,
            "numTargetDeletionVectorsUpdated": updated_dvs,
        }
        return [*actions, *(new for _, new in with_dv), *cdcs], metrics

    def _find_touched_files_in_process(
        self,
        reader: FileReader,
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
        pairs = match_keys(target, source, keys, eligible)
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
        reader: FileReader,
        files: pa.StructArray,
        found: _Matches,
        source: pa.Table,
        clauses: dict[str, list[_Clause]],
        cdf: bool,
        copy: bool = True,
    ) -> list[Callable[[], pa.Table | ChangeRows]]:
        """writeAllChanges as tasks, each giving rows to write: one per touched file (its rows
        updated, deleted or, with `copy`, copied per clause; without, a deletion vector keeps
        the unmodified rows in place), and the inserted source rows in slices; with `cdf`,
        and their changes."""
        tasks: list[Callable[[], pa.Table | ChangeRows]] = []
        tracking = RowTracking.of(reader.txn.metadata)
        reader.txn.row_ids_preserved = tracking is not None  # rewritten rows keep their ids
        for i in np.flatnonzero(found.touched):
            start, end = int(found.starts[i]), int(found.starts[i] + found.lengths[i])
            low, high = np.searchsorted(found.rows, [start, end])
            tasks.append(
                functools.partial(
                    self._file_changes,
                    reader,
                    files[int(i)].as_py(),
                    tracking,
                    slice(start, end),
                    slice(low, high),
                    found,
                    source,
                    clauses,
                    cdf,
                    copy,
                )
            )
        inserting = clauses[NOT_MATCHED]
        if inserting:
            taken = np.zeros(source.num_rows, dtype=bool)
            taken[found.srows] = True
            new = source.filter(pa.array(~taken))
            action = _first_clause(inserting, None, new, new.num_rows)
            for n, clause in enumerate(inserting):
                rows = new.filter(pa.array(action == n))
                assert clause.assign is not None
                for offset in range(0, rows.num_rows, ROWS_PER_WRITE_SLICE):
                    piece = rows.slice(offset, ROWS_PER_WRITE_SLICE)
                    tasks.append(functools.partial(_inserted, clause.assign, piece, cdf))
        return tasks

    @staticmethod
    def _file_changes(
        reader: FileReader,
        file: dict[str, Any],
        tracking: RowTracking | None,
        rows: slice,
        pairs: slice,
        found: _Matches,
        source: pa.Table,
        clauses: dict[str, list[_Clause]],
        cdf: bool,
        copy: bool = True,
    ) -> pa.Table | ChangeRows:
        """The rows of one touched `file` (ADD_TYPE fields; `rows` of the candidates, `pairs`
        of the matching pairs) after the clauses, without the rows its deletion vector deletes
        (with `tracking`, each row's id and commit version); with `cdf`, and their changes
        (the updated rows before and after, the deleted rows)."""
        dv = file["deletionVector"]
        data = reader.read_file(file["path"], file["partitionValues"], reader.table.names)
        if dv is not None:
            data = data.filter(pa.array(reader.kept(dv, data.num_rows)))
        if tracking is not None:
            data = tracking.attach(data, tracking.of_file(reader, file))
        plain = tracking.without if tracking is not None else (lambda t: t)
        parts, changes = [], []
        local = found.rows[pairs] - rows.start
        action = found.pair_action[pairs]
        by_source = found.by_source[rows]
        chosen_rows = [
            (c, sorted_unique(local[action == i])) for i, c in enumerate(clauses[MATCHED])
        ]
        chosen_rows += [
            (c, np.flatnonzero(by_source == i))
            for i, c in enumerate(clauses[NOT_MATCHED_BY_SOURCE])
        ]
        for i, (clause, chosen) in enumerate(chosen_rows):
            if not len(chosen):
                continue
            target = data.take(pa.array(chosen))
            if clause.assign is None:
                changes.append(with_change_type(plain(target), "delete"))
                continue
            matched = i < len(clauses[MATCHED])  # one source row per row (checked)
            srows = found.srows[pairs][action == i] if matched else None
            updated = clause.assign(target, None if srows is None else source.take(pa.array(srows)))
            changes.append(with_change_type(plain(target), "update_preimage"))
            changes.append(with_change_type(updated.cast(reader.table), "update_postimage"))
            parts.append(updated if tracking is None else tracking.updated(updated, target))
        if copy:
            parts.append(data.filter(pa.array(~found.modified[rows])))
        schema = reader.table if tracking is None else tracking.schema(reader.table)
        output = (
            pa.concat_tables([p.cast(schema) for p in parts]) if parts else schema.empty_table()
        )
        return ChangeRows(output, pa.concat_tables(changes) if changes else None) if cdf else output

    # -- planning ---------------------------------------------------------------------------

    def _table_schema(self, txn: OptimisticTransaction) -> pa.Schema:
        """The table's schema; UnsupportedMergeError when its data needs more than pyarrow."""
        check_writer_support(txn.protocol, txn.table, txn.metadata)
        metadata = txn.metadata
        problems = []
        try:
            self._checks = RowChecks.of(metadata)
        except InvalidPredicateError as exc:
            problems.append(f"a CHECK constraint or invariant ({exc})")
        schema = metadata.schema
        for f in schema:
            if "delta.typeChanges" in delta_field_metadata(f):
                problems.append(f"column {f.name} (type changes)")
            if pa.types.is_null(f.type):
                problems.append(f"column {f.name} ({f.type})")
        if problems:
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: the in-process MERGE does not handle "
                + ", ".join(problems)
            )
        return pa.schema([pa.field(f.name, f.type) for f in schema])

    def _planned(
        self, clause: MergeClause, field: pa.Field, sql: str, table: pa.Schema, source: pa.Table
    ) -> tuple[str, Any]:
        """How `clause` computes column `field` from `sql`: ("s" or "t", a column of that
        side), ("value", a literal scalar) or ("expr", (expression, columns it reads as
        `t.<name>` / `s.<name>`)); UnsupportedMergeError for what the engine does not
        evaluate, InvalidArgumentError for a column the clause cannot read."""
        ref = self._reference(sql)
        if ref is None:
            try:
                return "value", sql_literal(sql, field.type, self.target_uri)
            except UnsupportedMergeError:
                pass
            try:
                text, types = self._qualified(sql, clause, table, source)
                expr, used = parse_value(text, types)
            except (InvalidPredicateError, UnsupportedMergeError) as exc:
                raise UnsupportedMergeError(
                    f"MERGE into {self.target_uri}: the in-process MERGE does not evaluate "
                    f"{sql!r} ({exc})"
                ) from None
            return "expr", (expr, sorted(used))
        side = "s" if ref[0] == self.source_alias.lower() else "t"
        if side == "t" and clause.kind == NOT_MATCHED:
            raise InvalidArgumentError(
                f"MERGE into {self.target_uri}: an insert cannot read the target ({sql})"
            )
        if side == "s" and clause.kind == NOT_MATCHED_BY_SOURCE:
            raise InvalidArgumentError(
                f"MERGE into {self.target_uri}: a NOT MATCHED BY SOURCE clause cannot "
                f"read the source ({sql})"
            )
        if side == "t":
            known = {n.lower(): n for n in table.names}.get(ref[1].lower())
            if known is None:
                raise InvalidArgumentError(f"MERGE into {self.target_uri}: unknown column {sql}")
            return side, known
        name = self._source_column(source, ref[1])
        given = source.schema.field(name).type
        if pa.types.is_dictionary(given):
            given = given.value_type
        if not castable(given, field.type):
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: the in-process MERGE does not store "
                f"{given} values in column {field.name} ({field.type})"
            )
        return side, name

    def _generated_columns(self, txn: OptimisticTransaction) -> list[GeneratedColumn]:
        """The table's generated columns, parsed; UnsupportedMergeError for an expression the
        engine does not evaluate (Spark computes it)."""
        fields = {f["name"]: f for f in json.loads(txn.metadata.schema_string or "{}")["fields"]}
        try:
            return parse_generated_columns(generated_columns(txn.metadata), fields)
        except InvalidPredicateError as exc:
            raise UnsupportedMergeError(
                f"MERGE into {self.target_uri}: the engine does not evaluate a generated "
                f"column's expression ({exc})"
            ) from None

    @staticmethod
    def _not_null(txn: OptimisticTransaction) -> list[str]:
        """The table's non-nullable top-level columns (NOT NULL constraints)."""
        return [f.name for f in txn.metadata.schema if not f.nullable]

    def _assigner(self, clause: MergeClause, table: pa.Schema, source: pa.Table) -> Any:
        """A function (target rows, source rows) -> the output rows of `clause`, typed as the
        table (None for a delete); UnsupportedMergeError for an expression it cannot evaluate."""
        if clause.action == "delete":
            return None
        plan: list[tuple[str, Any]] = []
        generated = {c.name for c in self._generated}
        computed = generated | set(self._identity.columns)
        in_source = {c.lower() for c in source.column_names}
        for field in table:
            sql = self._resolve(clause, field.name)
            if field.name in computed and clause.assignments is None:
                sql = sql if field.name.lower() in in_source else None  # a star takes what exists
            if field.name in self._identity.columns and clause.action == "update":
                sql = None  # an update keeps the row's identity value
            if sql is None:  # an update keeps the target's value, an insert leaves NULL
                keep = clause.action == "update" and field.name not in generated
                plan.append(("t", field.name) if keep else ("null", None))  # NULL: computed
                continue
            plan.append(self._planned(clause, field, sql, table, source))

        def assign(target: pa.Table | None, src: pa.Table | None) -> pa.Table:
            either = target if target is not None else src
            assert either is not None
            rows = either.num_rows
            columns = []
            for field, (kind, value) in zip(table, plan, strict=True):
                if kind in ("s", "t"):
                    side = src if kind == "s" else target
                    assert side is not None  # the plan reads only the sides its clause has
                    column = side.column(value)
                elif kind == "value" and value is not None:
                    column = repeat_scalar(value, rows)
                elif kind == "expr":
                    expr, used = value
                    sides = {"t": target, "s": src}
                    given = {n: _side(sides, n).column(n[2:]) for n in used}
                    column = expr.evaluate(given)
                    if isinstance(column, pa.Scalar):
                        column = repeat_scalar(column, rows) if column.is_valid else None
                    column = pa.nulls(rows, field.type) if column is None else column
                else:
                    column = pa.nulls(rows, field.type)
                columns.append(cast_to_field(column, field, self.target_uri))
            rows = pa.Table.from_arrays(columns, schema=table)
            if clause.action == "insert" and self._identity:
                rows = self._identity.fill(rows)
            context = f"MERGE into {self.target_uri}: nothing written"
            if self._generated:
                rows = generate_checked(rows, self._generated, context)
            if self._checks:
                self._checks.check(rows, context)
            return rows

        return assign


def _inserted(
    assign: Callable[[pa.Table | None, pa.Table | None], pa.Table], source: pa.Table, cdf: bool
) -> pa.Table | ChangeRows:
    """The rows a NOT MATCHED clause inserts from `source`; with `cdf`, and as changes."""
    rows = assign(None, source)
    return ChangeRows(rows, with_change_type(rows, "insert")) if cdf else rows


def merge_arrow(
    target: str | OptimisticTransaction,
    source: Any,
    condition: str,
    source_alias: str = "s",
    target_alias: str = "t",
    *,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> ArrowMergeBuilder:
    """A MERGE of `source` (a pyarrow Table, RecordBatchReader or anything exporting an Arrow
    stream) into the Delta table `target` (a URI, or a transaction started on it) on
    `condition`, run in this process.

    Example::

        merge_arrow(uri, updates, "t.id = s.id").when_matched_update_all()\\
            .when_not_matched_insert_all().execute()
    """
    table = arrow_table(source)  # read once: a RecordBatchReader is consumed
    if table is None:
        uri = target.table if isinstance(target, OptimisticTransaction) else target
        raise TypeError(f"MERGE into {uri}: the source is not Arrow data: {type(source)}")
    return ArrowMergeBuilder(
        target,
        table,
        condition,
        source_alias,
        target_alias,
        storage_options=storage_options,
        commit_properties=commit_properties,
    )


# -- reading and writing data files ----------------------------------------------------------


def _file_mask(
    txn: OptimisticTransaction, files: pa.StructArray, predicates: list[str]
) -> np.ndarray:
    """Per file: whether its partition satisfies every predicate (its rows can match)."""
    if not predicates or not len(files):
        return np.ones(len(files), dtype=bool)
    schema = json.loads(txn.metadata.schema_string or '{"fields": []}')
    fields = {f["name"].lower(): f for f in schema["fields"]}
    columns = {c: fields[c.lower()] for c in txn.metadata.partition_columns}
    predicate = PartitionPredicate.all_of(
        [PartitionPredicate.parse(p, columns) for p in predicates]
    )
    return np.asarray(pc.fill_null(predicate.evaluate(files), False).to_numpy(zero_copy_only=False))


# -- helpers ------------------------------------------------------------------------------------


def _side(sides: Mapping[str, pa.Table | None], name: str) -> pa.Table:
    """The rows (target "t" or source "s") that column `name` (`t.<column>`) reads."""
    rows = sides[name[0]]
    assert rows is not None  # the plan reads only the sides its clause has
    return rows


def _deletion_vectors(
    reader: FileReader, files: pa.StructArray, found: _Matches, dvs: DeletionVectorWriter
) -> list[tuple[AddFile, AddFile]]:
    """(old, re-added with a deletion vector) of each touched file some of whose live rows
    stay: its new DV deletes the rows of its old one and the rows the MERGE modified (written
    elsewhere). A file whose every live row is modified is removed whole (not listed)."""
    out = []
    for i in np.flatnonzero(found.touched):
        start, end = int(found.starts[i]), int(found.starts[i] + found.lengths[i])
        modified = found.modified[start:end]
        if modified.all():
            continue
        (file,) = add_files_from_arrow(files.slice(int(i), 1))
        dv = file.deletion_vector
        old = reader.deletion_vectors.read(dv.to_json_dict()) if dv is not None else None
        old = old if old is not None else np.zeros(0, dtype=np.uint64)
        rows = live_row_indexes(modified, old, file.num_records)
        out.append((file, with_deletion_vector(file, dvs.add(np.union1d(old, rows)))))
    return out
