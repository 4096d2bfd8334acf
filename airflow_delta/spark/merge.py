"""MERGE INTO a Delta table from a Spark DataFrame, as Delta's MergeIntoCommand runs it.

    result = (
        merge_delta("/data/events", updates, "t.id = s.id AND t.day = s.day")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    print(result.version, result.metrics["numTargetRowsUpdated"])  # a CommitResult

`execute()` runs in one transaction of the engine:

1. partition pruning: the conjuncts `t.<partition> = <literal>`, `t.<partition> IN (...)` and
   `t.<partition> = s.<column>` (as `IN` over the distinct source values) of the condition select
   the candidate files through `filter_files_arrow`, which records the read for the conflict
   checks (without a WHEN NOT MATCHED BY SOURCE clause only: those need every target row);
2. findTouchedFiles: the source joined with the candidate rows finds the files holding rows that
   a MATCHED or NOT MATCHED BY SOURCE clause modifies, and target rows matched by several
   source rows (MultipleSourceRowMatchingTargetRowInMergeError), counted per file by
   `spark/merge_matches.py`. For an upsert whose source keys are collected and unique and whose
   candidate rows are few, the driver joins the candidate files' key columns with the source
   keys instead (`spark/merge_driver.py`: no Spark job);
3. writeAllChanges: the rows of the touched files, updated, deleted or copied per clause, and
   the inserted source rows are written by `write_files`; the touched files are removed and
   every other file stays. One full outer join of the source with the touched rows gives both,
   unless the condition is equalities between target and source columns only and Spark
   broadcasts the source (`_join_keys`): then step 2 keeps its matches' source keys, the
   touched rows are joined with the broadcast source (no shuffle of the target rows), and the
   inserts are the source rows whose keys matched nothing. On a table with deletion vectors
   enabled (`spark/merge_deletion_vectors.py`) step 2 also finds the modified rows' indexes in
   their files, only the updated rows are written (no copies), and a touched file keeping
   unmodified rows is re-added with a new deletion vector (its old DV's rows and the modified
   ones) instead of being removed, as the in-process MERGE does. On a change-data-feed table
   (unless the MERGE only inserts), each output row also carries its change (`insert`,
   `update_postimage`, `delete`, NULL for a copy; an updated row adds its `update_preimage`),
   and `write_change_files` writes the `_change_data` files beside the data files in the same
   tasks (`cdc` actions, numTargetChangeFilesAdded). On a table with row tracking enabled the
   touched files' rows are read with their row ids and commit versions, which `write_files`
   stores: copied rows keep both, updated rows keep their id and take the commit's version,
   inserted rows get fresh ones;
4. commit as operation MERGE with Delta's parameters and metrics; `execute()` returns the
   commit's `CommitResult` (the version, with the metrics in `result.metrics`).

Conditions and assignments are Spark SQL over the aliases (`s` and `t` by default). The source
is evaluated several times (one aggregate for the row count and a join column's bounds and
distinct-value estimate, its distinct values when few, the two joins: `spark/merge_source.py`):
it must be deterministic. Only DataFrame APIs are used, so a Spark Connect session works too.

The source may also be Arrow data (a pyarrow Table, RecordBatchReader, or anything exporting an
Arrow stream): the MERGE then runs in this process on pyarrow
(`engine/commands/merge_in_process.py`), with no Spark job, when the engine's executor takes
it, and on Spark otherwise (the Arrow table becomes a DataFrame of the active or a default
local session). A DataFrame source of a `local[...]` session whose size Spark estimates at
`IN_PROCESS_SOURCE_BYTES` (a Spark conf, 64 MiB by default) or less, or built on the driver
from Python rows and holding that much or less, is collected once to Arrow and tried in
process first, since its driver is the machine the executors run on; it runs on Spark, from
the DataFrame (rows built on the driver: from the collected rows), when the engine refuses the
MERGE (`spark/merge_source.py`). The clauses, the pruning, the commit and the metrics are the
engine's `MergeBuilder`'s in every case.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField

from airflow_delta.engine import CommitProperties, DeltaLog, OptimisticTransaction
from airflow_delta.engine.commands.data_files import CHANGE_TYPE_COLUMN
from airflow_delta.engine.commands.deletion_vector_files import deletion_vectors_enabled
from airflow_delta.engine.commands.identity_values import check_merge_clauses
from airflow_delta.engine.commands.merge import (
    MATCHED,
    NOT_MATCHED,
    NOT_MATCHED_BY_SOURCE,
    MergeClause,
    arrow_table,
)
from airflow_delta.engine.commands.merge_in_process import ArrowMergeBuilder
from airflow_delta.engine.commands.row_ids import RowTracking
from airflow_delta.engine.errors import (
    DeltaError,
    MultipleSourceRowMatchingTargetRowInMergeError,
    UnsupportedMergeError,
)
from airflow_delta.engine.expressions.tokens import quote_identifier, split_conjuncts
from airflow_delta.engine.log.snapshot import Snapshot
from airflow_delta.engine.protocol.action_types import live_num_records
from airflow_delta.engine.protocol.actions import Action, AddCDCFile, AddFile
from airflow_delta.engine.protocol.features import change_data_feed_enabled
from airflow_delta.engine.protocol.identity import generated_columns, identity_columns
from airflow_delta.spark.constraints import store_assignment_errors, stored_value
from airflow_delta.spark.merge_deletion_vectors import file_changes, with_deletion_vectors
from airflow_delta.spark.merge_driver import KEY_PREFIX as _KEY
from airflow_delta.spark.merge_driver import driver_search_rows, search_on_driver, unmatched_rows
from airflow_delta.spark.merge_matches import CLAUSE as _ACTION
from airflow_delta.spark.merge_matches import FILE as _FILE
from airflow_delta.spark.merge_matches import (
    RESERVED,
    Found,
    check_reserved_names,
    count_matches,
    file_hashes,
)
from airflow_delta.spark.merge_matches import ROW as _ROW
from airflow_delta.spark.merge_matches import SOURCE as _SOURCE
from airflow_delta.spark.merge_source import (
    IN_PROCESS_SOURCE_BYTES,
    SourceFacts,
    broadcast_by_spark,
    collect_small_source,
    spark_source,
)
from airflow_delta.spark.read import scan_files
from airflow_delta.spark.sql_errors import spark_expressions
from airflow_delta.spark.time_zones import zone_safe
from airflow_delta.spark.write import write_change_files, write_files

__all__ = [
    "IN_PROCESS_SOURCE_BYTES",
    "DeltaMergeBuilder",
    "MergeClause",
    "MultipleSourceRowMatchingTargetRowInMergeError",
    "collect_small_source",
    "merge_delta",
]

log = logging.getLogger(__name__)

_TARGET = f"{RESERVED}target_row"
_BEFORE = f"{RESERVED}preimage"
#: The change a row of each clause action records on a change-data-feed table.
_CHANGE_TYPES = {"insert": "insert", "update": "update_postimage", "delete": "delete"}


class DeltaMergeBuilder(ArrowMergeBuilder):
    """MERGE of `source_df` (a Spark DataFrame, or Arrow data) into the Delta table at
    `target_uri`; `merge_delta` builds it.

    Each `when_*` method appends a clause and returns the builder; within each kind
    (MATCHED, NOT MATCHED, NOT MATCHED BY SOURCE) the first clause whose condition holds
    applies, and only the last clause of a kind may omit its condition. `execute()` commits
    and returns the commit's `CommitResult` (Delta's MERGE metrics in `result.metrics`).

    Example: `merge_delta(uri, df, "t.id = s.id").when_matched_delete("s.gone").execute()`.
    """

    #: Whether the Spark executor's output rows carry their changes (a change-data-feed table).
    _changes = False
    #: Whether it writes deletion vectors (a table with them enabled): modified rows only.
    _dvs = False
    #: Row tracking's materialized columns (a table with it enabled): the rows keep their ids.
    _tracking: RowTracking | None = None
    #: The source DataFrame's row count and pruning values (`spark/merge_source.py`).
    _facts: SourceFacts
    #: The source DataFrame's column types by lower-case name.
    _source_types: dict[str, Any] = {}

    def _many_source_values(self, name: str, delta_type: str) -> bool:
        if not isinstance(self.source_df, DataFrame):
            return super()._many_source_values(name, delta_type)
        return self._facts.many(name, delta_type)

    def _source_values_of(self, name: str, delta_type: str) -> list[Any] | None:
        if not isinstance(self.source_df, DataFrame):
            return super()._source_values_of(name, delta_type)
        return self._facts.values(name, delta_type)

    def _source_bounds_of(self, name: str, delta_type: str) -> tuple[Any, Any] | None:
        if not isinstance(self.source_df, DataFrame):
            return super()._source_bounds_of(name, delta_type)
        return self._facts.bounds(name, delta_type)

    def _write(self, txn: OptimisticTransaction) -> tuple[list[Action], dict[str, int]]:
        """In process when the source is Arrow data, or a small DataFrame of a local session
        (collected once, see `collect_small_source`), and the engine's executor takes it;
        else on Spark."""
        source = self.source_df
        arrow = collect_small_source(source) if isinstance(source, DataFrame) else source
        if arrow is not None:
            self.source_df = arrow
            try:
                return super()._write(txn)
            except UnsupportedMergeError as exc:
                log.info("%s: running it on Spark", exc)
        if isinstance(source, DataFrame):
            self.source_df = source if arrow is None else spark_source(source, arrow)
        else:
            from airflow_delta.spark.session import get_spark

            self.source_df = get_spark().createDataFrame(source)
        self.executor = "spark"
        return self._write_spark(txn)

    def _pruning_columns(self, txn: OptimisticTransaction) -> dict[tuple[str, str], bool]:
        """The source columns the pruning may ask about (`SourceFacts`): each that a conjunct
        of the condition equates with a target column, with that column's type and whether it
        is a partition column (then its distinct values are listed)."""
        if any(c.kind == NOT_MATCHED_BY_SOURCE for c in self.clauses):
            return {}
        if not self._plain_condition():
            return {}
        fields = json.loads(txn.metadata.schema_string or "{}").get("fields", [])
        types = {f["name"].lower(): f["type"] for f in fields}
        partitions = {c.lower() for c in txn.metadata.partition_columns}
        columns = {}
        for conjunct in split_conjuncts(self.condition):
            pair = self._equality(conjunct)
            delta_type = None if pair is None else types.get(pair[0].lower())
            if pair is not None and isinstance(delta_type, str):
                columns[(pair[1].lower(), delta_type)] = pair[0].lower() in partitions
        return columns

    def _write_spark(self, txn: OptimisticTransaction) -> tuple[list[Action], dict[str, int]]:
        """Read the candidate files, write the changed rows on Spark; actions and metrics."""
        spark, snapshot = self.source_df.sparkSession, txn.snapshot
        where = f"{self.target_uri} (version {txn.read_version})"
        check_reserved_names(where, [f.name for f in txn.metadata.schema], "table")
        check_reserved_names(where, self.source_df.columns, "source")
        self._source_types = {f.name.lower(): f.dataType for f in self.source_df.schema.fields}
        with self._spark_sql(txn):
            # one job: the row count, the pruning bounds (and a partition column's values)
            self._facts = SourceFacts(self.source_df, self._pruning_columns(txn))
        files = txn.filter_files_arrow(zone_safe(spark, txn, self._pruning_predicates(txn)))
        target = scan_files(spark, snapshot, files)
        self._check_assignments([f.name for f in target.schema.fields], self.source_df.columns)
        self._column_rules = self._computed_columns(txn)
        self._dvs = deletion_vectors_enabled(txn)
        self._tracking = RowTracking.of(txn.metadata)
        source = self.source_df.withColumn(_SOURCE, F.lit(True))
        modifying = [c for c in self.clauses if c.kind != NOT_MATCHED]
        found = self._search_on_driver(txn, files, modifying) if modifying else Found()
        if found is None:
            identified = self._identified_rows(spark, snapshot, files, target)
            with self._spark_sql(txn):
                found = self._find_touched_files(source, identified, modifying, self._join_keys())
        try:  # the search's cached matches serve the write
            paths = pa.array(found.paths, pa.string())
            touched = files.filter(pc.is_in(files.field("path"), paths))
            # change data files unless the MERGE only inserts (readers take adds as inserts)
            self._changes = bool(len(touched)) and change_data_feed_enabled(
                txn.protocol, txn.metadata
            )
            dvs = None
            if self._dvs:  # the touched files keep their unmodified rows under a DV
                dvs = file_changes(spark, txn, touched, found.modified, _FILE)
            with self._spark_sql(txn):
                output = self._output_rows(source, target, snapshot, (touched, len(files)), found)

            def write() -> tuple[list[AddFile], list[AddCDCFile]]:
                if output is None:
                    return [], []
                if self._changes:
                    return write_change_files(txn, output)
                return write_files(txn, output), []

            with store_assignment_errors(txn.read_version):
                adds, cdcs = write() if dvs is None else dvs.write(write)
        finally:
            found.release()
        if dvs is None:
            num_rows = _num_records(touched, lambda: scan_files(spark, snapshot, touched).count())
        else:  # rows a DV leaves in place are not copied
            num_rows = sum(n for n, _ in found.modified.values())
        actions, metrics = self._metrics(
            found.per_clause, touched, num_rows, adds, self._facts.rows()
        )
        if dvs is not None:
            actions, metrics = with_deletion_vectors(actions, metrics, touched, dvs)
        return [*actions, *cdcs], metrics | {"numTargetChangeFilesAdded": len(cdcs)}

    def _spark_sql(self, txn: OptimisticTransaction) -> AbstractContextManager[None]:
        """Spark's errors of the condition's and clauses' SQL as InvalidArgumentError."""
        fix = (
            f"Fix the condition or the clauses: source columns as {self.source_alias}.<name>, "
            f"target columns as {self.target_alias}.<name>."
        )
        return spark_expressions(f"MERGE into {self.target_uri}", txn.read_version, fix)

    def _output_rows(
        self,
        source: DataFrame,
        target: DataFrame,
        snapshot: Snapshot,
        files: tuple[pa.StructArray, int],
        found: Found,
    ) -> DataFrame | None:
        """The rows to write (None: none): the touched files' rows after the MATCHED and NOT
        MATCHED BY SOURCE clauses (with deletion vectors, the modified ones only), and the
        inserted source rows. `files`: the touched files and the number of candidate files
        (`target` reads those)."""
        spark, fields = source.sparkSession, target.schema.fields
        touched, candidates = files
        modifying = [c for c in self.clauses if c.kind != NOT_MATCHED]
        inserting = [c for c in self.clauses if c.kind == NOT_MATCHED]
        keys: dict[str, Any] = {"row_tracking": self._tracking.names if self._tracking else None}
        duplicates = found.duplicates
        if duplicates:
            keys |= {"file_id_column": _FILE, "row_index_column": _ROW}
        outputs = []

        def touched_rows() -> DataFrame:
            if len(touched) == candidates and not duplicates and self._tracking is None:
                return target  # every candidate file is touched: their scan, planned once
            return scan_files(spark, snapshot, touched, **keys)

        plain = not (duplicates or found.untouched_matches or found.keys)
        if modifying and inserting and plain:
            # every source row matching a candidate row matched one of the touched files: one
            # full outer join gives the updates, copies and inserts
            if len(touched):
                rows = touched_rows().withColumn(_TARGET, F.lit(True))
                outputs.append(self._rewrite_all(source, rows, fields, modifying + inserting))
            else:
                outputs.append(self._insert(source.alias(self.source_alias), fields, inserting))
        else:
            if len(touched):
                rows = touched_rows()
                outputs.append(self._rewrite(source, rows, fields, modifying, duplicates))
            if inserting:
                outputs.append(
                    self._insert(self._unmatched(source, target, found), fields, inserting)
                )
        if not outputs:
            return None
        return outputs[0] if len(outputs) == 1 else outputs[0].unionByName(outputs[1])

    def _computed_columns(self, txn: OptimisticTransaction) -> tuple[set[str], set[str], set[str]]:
        """The table's identity and generated columns and the source's columns (lowercase);
        IdentityColumnError for an insert giving a GENERATED ALWAYS identity column values, or
        an update assigning an identity column."""
        metadata = txn.metadata
        check_merge_clauses(metadata, self.clauses, self.source_df.columns, self.target_uri)
        identity = {c.name for c in identity_columns(metadata)}
        source = {c.lower() for c in self.source_df.columns}
        return identity, set(generated_columns(metadata)), source

    def _resolve(self, clause: MergeClause, column: str) -> str | None:
        """As the engine's, but identity columns are kept on update and handed out on insert
        (NULL: `write_files` fills them), and generated columns the clause does not give are
        recomputed (NULL: `write_files` computes them)."""
        sql = super()._resolve(clause, column)
        rules = getattr(self, "_column_rules", None)
        if rules is None or clause.action == "delete":
            return sql
        identity, generated, source = rules
        if column in identity and clause.action == "update":
            return None  # the target row keeps its value
        computed = column in identity or column in generated
        if computed and clause.assignments is None and column.lower() not in source:
            return "NULL"
        if sql is None and column in generated:
            return "NULL"
        return sql

    # -- the joins --------------------------------------------------------------------------

    def _join(self, source: DataFrame, target: DataFrame, how: str) -> DataFrame:
        return source.alias(self.source_alias).join(
            target.alias(self.target_alias), F.expr(self.condition), how
        )

    def _identified_rows(
        self, spark: Any, snapshot: Any, files: pa.StructArray, target: DataFrame
    ) -> tuple[DataFrame, Callable[[Any], str]]:
        """The candidate rows with a file key (`_FILE`) and a row id (`_ROW`) unique in the
        query, and the function mapping a file key to the file's log path. A plain scan
        (`target`: no partition values, no deletion vectors, no join inside) takes a 64-bit
        hash of Spark's file name (`file_hashes`) and a generated id, computed as it reads;
        otherwise (two names share a hash, or the MERGE writes deletion vectors, which need
        each row's index in its file) the scan attaches the file's position in `files` and
        the row index."""
        plain = (
            not self._dvs
            and not snapshot.metadata.partition_columns
            and (pc.struct_field(files, "deletionVector").null_count == len(files))
        )
        paths = pc.struct_field(files, "path").to_pylist()
        by_hash = file_hashes(spark, snapshot, paths) if plain and paths else None
        if by_hash is None:
            rows = scan_files(spark, snapshot, files, file_id_column=_FILE, row_index_column=_ROW)
            return rows, lambda key: paths[key]

        def log_path(key: Any) -> str:
            if key not in by_hash:
                raise DeltaError(
                    f"MERGE into {self.target_uri}: rows of an unexpected data file (its name's "
                    f"hash is {key})"
                )
            return by_hash[key]

        rows = target.select(
            "*",
            F.xxhash64(F.input_file_name()).alias(_FILE),
            F.monotonically_increasing_id().alias(_ROW),
        )
        return rows, log_path

    def _search_on_driver(
        self, txn: OptimisticTransaction, files: pa.StructArray, modifying: list[MergeClause]
    ) -> Found | None:
        """findTouchedFiles on the driver (`spark/merge_driver.py`) for an upsert: unconditional
        MATCHED clauses, a condition of column equalities, source keys collected and unique."""
        conditional = modifying[0].condition is not None
        pairs = [self._equality(c) for c in split_conjuncts(self.condition)]
        if conditional or any(c.kind != MATCHED for c in modifying) or None in pairs:
            return None  # (a condition with comments or escapes has no collected columns)
        keys = [(t, s.lower()) for t, s in (p for p in pairs if p is not None)]
        source = self._facts.collected([s for _, s in keys])
        if not keys or source is None or not self._facts.unique([s for _, s in keys]):
            return None
        limit = driver_search_rows(self.source_df.sparkSession.conf)
        searched = search_on_driver(txn, files, keys, source, len(modifying), self._dvs, limit)
        join_keys, alias = self._join_keys(), quote_identifier(self.source_alias)
        if searched is not None and join_keys:  # the inserts: source rows of other keys
            columns = [F.col(f"{alias}.{quote_identifier(k)}") for k in join_keys]
            found = searched[0]
            found.unmatched, found.matches = unmatched_rows(self.source_df, *searched[1:], columns)
            found.keys = join_keys
        return None if searched is None else searched[0]

    def _join_keys(self) -> list[str]:
        """The source's join columns when the search keeps its matches' keys for the inserts
        (the source rows of other keys): a MERGE that modifies and inserts, on equalities of
        target and source columns, from a source Spark broadcasts. The rewrite then joins the
        touched rows with the broadcast source (no shuffle of the target rows). Else none."""
        kinds = {c.kind for c in self.clauses}
        if kinds != {MATCHED, NOT_MATCHED} or not self._plain_condition():
            return []
        columns = [self._equality(c) for c in split_conjuncts(self.condition)]
        if not columns or None in columns or not broadcast_by_spark(self.source_df):
            return []
        return [c[1] for c in columns if c is not None]

    def _find_touched_files(
        self,
        source: DataFrame,
        identified: tuple[DataFrame, Callable[[Any], str]],
        clauses: list[MergeClause],
        keys: list[str],
    ) -> Found:
        """The touched files, the target rows each clause modifies, whether a touched file
        holds a row matched by several source rows that no clause modifies (copied once) or
        that an unconditional DELETE deletes (recorded as one change), whether an untouched
        file holds a row some source row matched, and per touched file its modified rows
        (with deletion vectors, and their indexes in the file).

        Raises MultipleSourceRowMatchingTargetRowInMergeError when a modified target row
        matched several source rows (unless the only MATCHED clause is an unconditional
        DELETE, as in Delta). With `keys` (source columns), the matches are cached with those
        columns' values and kept in the result (`Found.matches`); unique (`SourceFacts.unique`:
        no target row matches twice), they are counted with no grouping by target row.
        """
        target, log_path = identified
        by_source = any(c.kind == NOT_MATCHED_BY_SOURCE for c in clauses)
        joined = self._join(source, target, "right" if by_source else "inner")
        matched = F.col(_SOURCE).isNotNull()
        alias = quote_identifier(self.source_alias)
        key_values = [
            F.col(f"{alias}.{quote_identifier(k)}").alias(f"{_KEY}{i}") for i, k in enumerate(keys)
        ]
        rows = joined.select(
            _FILE, _ROW, matched.alias(_SOURCE), _first_clause(clauses, matched), *key_values
        )
        if keys:
            rows = rows.cache()
        try:
            single = bool(keys) and self._facts.unique(keys)
            found = count_matches(rows, len(clauses), by_source, self._dvs, log_path, single=single)
            delete = [MergeClause(MATCHED, "delete", None, {})]
            if found.conflicts and [c for c in clauses if c.kind == MATCHED] != delete:
                raise self._multiple_matches(found.conflicts)
        except BaseException:
            rows.unpersist()
            raise
        if keys:
            found.matches, found.keys = rows, keys
        return found

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
        if deleting and not self._changes:  # with changes: written as `delete` changes
            rows = rows.where(F.col(_ACTION).isNull() | ~F.col(_ACTION).isin(deleting))
        if self._dvs:  # unmodified rows stay in place, under the files' new deletion vectors
            rows = rows.where(F.col(_ACTION).isNotNull())
        if deduplicate:  # copies (or deletes) of one target row several source rows matched
            rows = rows.dropDuplicates([_FILE, _ROW])
        return self._outputs(rows, fields, clauses, target=True)

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
        if self._changes:  # deleted rows written as `delete` changes
            kept = in_target
        if self._dvs:  # unmodified rows stay in place, under the files' new deletion vectors
            kept = kept & F.col(_ACTION).isNotNull()
        rows = rows.where(kept | (~in_target & F.col(_ACTION).isNotNull()))
        return self._outputs(rows, fields, clauses, target=True)

    def _unmatched(self, source: DataFrame, target: DataFrame, found: Found) -> DataFrame:
        """The source rows that match no candidate row (`target`): by the search's filter, or
        those whose join keys are not among its kept matches (broadcast: distinct first when
        they outnumber the source's rows), else by the condition."""
        if found.unmatched is not None:
            return source.alias(self.source_alias).where(found.unmatched)
        if found.matches is None:
            return self._join(source, target, "left_anti")
        keys = [f"{_KEY}{i}" for i in range(len(found.keys))]
        matched = found.matches.select(*keys)
        if found.pairs > self._facts.rows():  # no larger than the source once distinct
            matched = matched.distinct()
        matched = matched.alias(_KEY)
        alias = quote_identifier(self.source_alias)
        on = [
            F.col(f"{alias}.{quote_identifier(name)}") == F.col(f"{_KEY}.{key}")
            for name, key in zip(found.keys, keys, strict=True)
        ]
        return source.alias(self.source_alias).join(F.broadcast(matched), on, "left_anti")

    def _insert(
        self, rows: DataFrame, fields: list[StructField], clauses: list[MergeClause]
    ) -> DataFrame:
        """The unmatched source `rows` (under the source alias) after the NOT MATCHED
        clauses."""
        rows = rows.withColumn(_ACTION, _first_clause(clauses, F.lit(False)))
        rows = rows.where(F.col(_ACTION).isNotNull())
        return self._outputs(rows, fields, clauses, target=False)

    def _outputs(
        self, rows: DataFrame, fields: list[StructField], clauses: list[MergeClause], target: bool
    ) -> DataFrame:
        """The output rows of the joined `rows` (each with its clause in `_ACTION`; `target`:
        with a target side); on a change-data-feed table, with CHANGE_TYPE_COLUMN: NULL for a
        copied row, the clause's change for the others, and an `update_preimage` row (the
        target row as it was) besides each updated row."""
        changes: list[Column] = []
        if self._changes:
            updating = [i for i, c in enumerate(clauses) if c.action == "update"]
            twice = F.array(F.lit(False), F.lit(True))
            before = F.when(F.col(_ACTION).isin(updating or [-1]), twice)
            rows = rows.withColumn(_BEFORE, F.explode(before.otherwise(F.array(F.lit(False)))))
            rows = rows.withColumn(_ACTION, F.when(~F.col(_BEFORE), F.col(_ACTION)))
            change = F.when(F.col(_BEFORE), F.lit("update_preimage"))
            for i, clause in enumerate(clauses):
                change = change.when(F.col(_ACTION) == i, F.lit(_CHANGE_TYPES[clause.action]))
            changes.append(change.alias(CHANGE_TYPE_COLUMN))
        outputs = [self._output(f, clauses, target) for f in fields]
        return rows.select(*outputs, *self._row_tracking(clauses, target), *changes)

    def _row_tracking(self, clauses: list[MergeClause], target: bool) -> list[Column]:
        """On a table with row tracking enabled, each output row's id and commit version
        (`write_files` stores them): a target row's, an updated row's version NULL (the
        commit's), both NULL for an inserted row (fresh); else none."""
        if self._tracking is None:
            return []
        names = self._tracking.names
        if not target:
            return [F.lit(None).cast("long").alias(n) for n in names]
        alias = quote_identifier(self.target_alias)
        row_id, version = (F.col(f"{alias}.{quote_identifier(n)}") for n in names)
        updating = [i for i, c in enumerate(clauses) if c.action == "update"]
        updated = F.col(_ACTION).isin(updating or [-1])
        version = F.when(updated, F.lit(None).cast("long")).otherwise(version)
        return [row_id.alias(names[0]), version.alias(names[1])]

    def _output(self, field: StructField, clauses: list[MergeClause], target: bool) -> Column:
        """Column `field` of an output row: the assignment of the clause applied, else the
        target row's value (`target`) or NULL."""
        default_sql = f"{quote_identifier(self.target_alias)}.{quote_identifier(field.name)}"
        assigned = [(i, self._resolve(c, field.name)) for i, c in enumerate(clauses)]
        branches = [(i, sql) for i, sql in assigned if sql is not None]
        # a source column of the column's own type is stored as it is (no cast can fail), and
        # a CASE of such columns alone is one SQL expression (one call to Spark, not ten)
        same = f"{quote_identifier(self.source_alias)}.{quote_identifier(field.name)}"
        as_is = self._source_types.get(field.name.lower()) == field.dataType
        if as_is and (branches or target) and all(sql == same for _, sql in branches):
            action = quote_identifier(_ACTION)
            whens = "".join(f" WHEN {action} = {i} THEN {same}" for i, _ in branches)
            otherwise = f" ELSE {default_sql}" if target else ""
            return F.expr(f"CASE{whens}{otherwise} END" if whens else default_sql).alias(field.name)
        value: Column | None = None
        command = f"MERGE into {self.target_uri}"
        for i, sql in branches:  # each cast on its own: the CASE keeps the column's type
            stored = F.expr(sql)
            if not (as_is and sql == same):
                stored = stored_value(stored, field, command)
            value = (F if value is None else value).when(F.col(_ACTION) == i, stored)
        default = F.col(default_sql) if target else F.lit(None)
        value = default if value is None else value.otherwise(default)
        return value.cast(field.dataType).alias(field.name)


def merge_delta(
    target: str | DeltaLog | OptimisticTransaction,
    source_df: DataFrame | Any,
    condition: str,
    source_alias: str = "s",
    target_alias: str = "t",
    *,
    storage_options: Mapping[str, str] | None = None,
    commit_properties: CommitProperties | None = None,
) -> DeltaMergeBuilder:
    """A MERGE of `source_df` into the Delta table `target` on `condition`.

    `target` is a URI (opened with `storage_options`), a `DeltaLog`, or a transaction already
    started on the table (then the MERGE reads and commits in it: no second snapshot).

    `source_df` is a Spark DataFrame or Arrow data (a pyarrow Table, RecordBatchReader, or
    anything exporting an Arrow stream: run in process when the engine's executor takes it).
    Add WHEN clauses with the builder's `when_*` methods, then `execute()`.

    Example::

        merge_delta(uri, updates, "t.id = s.id").when_matched_update_all()\\
            .when_not_matched_insert_all().execute()
    """
    if isinstance(target, DeltaLog):
        storage_options = target.storage_options
        target = target.table_uri
    target_uri = target.table if isinstance(target, OptimisticTransaction) else target
    if not isinstance(source_df, DataFrame):
        arrow = arrow_table(source_df)
        if arrow is None:
            raise TypeError(
                f"MERGE into {target_uri}: the source must be a Spark DataFrame or Arrow data, "
                f"not {type(source_df).__name__}"
            )
        source_df = arrow
    return DeltaMergeBuilder(
        target,
        source_df,
        condition,
        source_alias,
        target_alias,
        storage_options=storage_options,
        commit_properties=commit_properties,
    )


# -- helpers -----------------------------------------------------------------------------------


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


def _num_records(files: pa.StructArray, count: Callable[[], int]) -> int:
    """Rows in `files` from their stats (minus deletion vectors), else `count()`."""
    live = live_num_records(files)
    return count() if live.null_count else int(pc.sum(live).as_py() or 0)
