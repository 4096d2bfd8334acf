"""DeltaCommitOperator: what the operators that commit to a Delta table share.

- **The source** of the rows: a Spark SQL query (or a `.sql` file), a callable
  `(spark, context) -> DataFrame` (or Arrow data, such as a pyarrow Table), or a path read with
  `source_format` (`"delta"` reads a Delta table through this package). The callable's `spark`
  starts on first use: a callable returning Arrow data without touching it starts no JVM, and
  DeltaMergeOperator then merges in process (the engine's pyarrow MERGE) when it can.
- **Exactly-once.** Each commit carries an idempotent-write marker (Delta's `txn` action) whose
  app id names the DAG, the task, the map index and the DAG run, and whose version comes from
  the DAG run. A retry of a task whose commit already landed finds the marker, writes nothing
  and says so in the log. The run id is part of the app id because Delta skips a write when the
  table holds the app's version *or a later one*: with one app id per task, a backfill or a
  catch-up run finishing after a later run would be skipped and its data lost.
- **Conflicts.** The engine already retries a commit whose version was taken when the winning
  commit does not conflict. A real conflict (ConcurrentAppendException and its kin) is handled
  here: the whole read + write + commit runs again, up to `max_commit_attempts` times; then the
  task fails with the Delta exception, which names the table, the versions and the winning
  operation.
- **Results.** XCom gets `{table, version, operation, skipped, attempts, conflicts, metrics,
  hooks, app_id, txn_version}`; the table's asset (the operator's outlet) gets an event whose
  `extra` carries the version and the operation; OpenLineage gets the table as output dataset
  with its schema and the committed version (`operators.lineage`).

Importing this module (DAG parsing) loads no engine, pyarrow or Spark: the engine is imported
by the methods that run at execute time, and the argument checks of `__init__` use pure-Python
constants (`POST_COMMIT_HOOK_NAMES`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_delta.assets import delta_table_asset
from airflow_delta.hooks.delta import DeltaHook

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.definitions.mappedoperator import OperatorPartial
    from pyspark.sql import SparkSession

    from airflow_delta.engine.errors import DeltaConcurrentModificationException
    from airflow_delta.engine.protocol.actions import SetTransaction
    from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

log = logging.getLogger(__name__)

#: The source of a write or a MERGE: SQL text, a `.sql` file, a callable, or a path.
#: A callable gets the task's SparkSession (started on first use) and the task context.
Source = str | Callable[..., Any]

#: The post-commit hooks a task can ask for, in the order they run: the names of the engine's
#: `txn.post_commit.POST_COMMIT_HOOKS`, copied so that checking them at DAG parse time loads no
#: engine (tests/airflow/test_light_imports.py holds the two equal).
POST_COMMIT_HOOK_NAMES: tuple[str, ...] = ("checkpoint", "symlink_manifest", "log_cleanup")


def parse_post_commit_hooks(hooks: str | Sequence[str] | None) -> list[str]:
    """The post-commit hooks asked for, checked and in the order they run: a list of names, or
    one string holding a name or a comma-separated list of them (never read letter by letter).

    >>> parse_post_commit_hooks("log_cleanup, checkpoint")
    ['checkpoint', 'log_cleanup']
    """
    if hooks is None:
        return []
    if isinstance(hooks, str):
        names = [name.strip() for name in hooks.split(",") if name.strip()]
    elif isinstance(hooks, Sequence | set | frozenset):
        names = list(hooks)
    else:
        raise ValueError(
            "post_commit_hooks must be a hook name, a comma-separated string of them or a list, "
            f"not {type(hooks).__name__}; valid names: {', '.join(POST_COMMIT_HOOK_NAMES)}"
        )
    unknown = [name for name in names if name not in POST_COMMIT_HOOK_NAMES]
    if unknown:
        raise ValueError(
            f"Unknown post-commit hook(s) {unknown}: use "
            f"{', '.join(POST_COMMIT_HOOK_NAMES)} (a list, or one string such as "
            '"checkpoint,log_cleanup")'
        )
    return sorted(set(names), key=POST_COMMIT_HOOK_NAMES.index)


#: The prefix of the AssetAlias through which a task whose `table_uri` is known only at run
#: time (templated, or mapped by `expand`) emits its table's asset event.
TABLE_ALIAS_PREFIX = "delta-table-of-task:"


def table_outlets(table_uri: Any, outlets: Any, task_id: str) -> list[Any]:
    """The outlets of a committing task: the user's, plus the table's asset when `table_uri`
    is a literal, else an AssetAlias (`TABLE_ALIAS_PREFIX` + task id) that the task resolves
    to the table's asset when it commits. Declared at parse time for mapped and unmapped tasks
    alike, so the scheduler knows the asset and each task instance emits one event."""
    from airflow.sdk import AssetAlias

    if outlets is None:
        declared: list[Any] = []
    else:  # one asset, as BaseOperator takes it, or several
        declared = list(outlets) if isinstance(outlets, (list, tuple, set)) else [outlets]
    if any(_is_table_alias(o) for o in declared):
        return declared  # a mapped instance: partial() declared the alias, the events go there
    if isinstance(table_uri, str) and table_uri and not is_templated(table_uri):
        wanted: Any = delta_table_asset(table_uri)
        if all(getattr(o, "uri", None) != wanted.uri for o in declared):
            declared.append(wanted)
    else:
        wanted = AssetAlias(name=TABLE_ALIAS_PREFIX + task_id, group="delta")
        if all(getattr(o, "name", None) != wanted.name for o in declared):
            declared.append(wanted)
    return declared


def scoped_table_alias(
    outlets: list[Any], dag_id: str | None, task_id: str, given: str
) -> list[Any]:
    """`outlets` with the table's AssetAlias that `table_outlets` named by the task id as
    `given` renamed `TABLE_ALIAS_PREFIX` + `<dag_id>.<task_id>` (the task id with its group's
    prefix): two DAGs with a task of the same id would otherwise share one alias, and Airflow
    would resolve it to both tables."""
    from airflow.sdk import AssetAlias

    if dag_id is None:
        return outlets
    bare = TABLE_ALIAS_PREFIX + given
    scoped = AssetAlias(name=f"{TABLE_ALIAS_PREFIX}{dag_id}.{task_id}", group="delta")
    return [scoped if _is_table_alias(o) and o.name == bare else o for o in outlets]


def _is_table_alias(outlet: Any) -> bool:
    return type(outlet).__name__ == "AssetAlias" and outlet.name.startswith(TABLE_ALIAS_PREFIX)


def retryable_conflicts() -> tuple[type[DeltaConcurrentModificationException], ...]:
    """The conflicts after which re-running read + write + commit can succeed: every Delta
    conflict (ConcurrentAppendException, ConcurrentDeleteReadException,
    ConcurrentDeleteDeleteException, MetadataChangedException, ProtocolChangedException - as
    when two tasks create the same table - and ConcurrentTransactionException). The re-run
    reads the new snapshot, so a protocol this engine cannot write is then refused with
    DeltaProtocolError, which is not retried.

    >>> [c.__name__ for c in retryable_conflicts()]
    ['DeltaConcurrentModificationException']
    """
    from airflow_delta.engine.errors import DeltaConcurrentModificationException

    return (DeltaConcurrentModificationException,)


#: The XCom key under which the result dict is also pushed (besides `return_value`).
XCOM_KEY = "delta_commit"


class SparkOnDemand:
    """The task's SparkSession, started the first time an attribute is used, so that a source
    callable returning Arrow data starts no JVM. `started` says whether it was."""

    def __init__(self, start: Callable[[], SparkSession]) -> None:
        self._start = start
        self._session: SparkSession | None = None

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> SparkSession:
        if self._session is None:
            self._session = self._start()
        return self._session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session(), name)


def is_templated(value: Any) -> bool:
    """True when `value` is a string still holding a Jinja expression."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


#: What a template renders to when its value is missing: None (`render_template_as_native_obj`),
#: "None" (`{{ params.x }}` of an unset param) or blank text (`{{ x or '' }}`).
RENDERED_NOTHING = ("", "None")


def rendered_text(value: Any) -> str | None:
    """A rendered text argument as text: a native-rendered object (an int, a Path) becomes its
    string, None stays None.

    >>> rendered_text(123), rendered_text(None)
    ('123', None)
    """
    return None if value is None else str(value)


def rendered_scope(operation: str, table_uri: str, name: str, value: Any, template: Any) -> Any:
    """The rendered SQL argument `name` whose None means "the whole table" (a DELETE or UPDATE
    predicate, a write's replace_where, an OPTIMIZE partition filter), as text or None.

    `template` is the argument as given to the operator. When it was a template, rendering to
    nothing (None, "None" or blank) is refused with ValueError naming the table and the fix:
    a missing value must not widen the command to every row. An argument given as None stays
    None: that is the explicit whole table.

    >>> rendered_scope("DELETE", "/t", "predicate", "day = '2024-06-01'", "day = '{{ ds }}'")
    "day = '2024-06-01'"
    >>> rendered_scope("DELETE", "/t", "predicate", None, None)  # explicitly every row
    """
    text = rendered_text(value)
    if text is not None and text.strip() not in RENDERED_NOTHING:
        return text
    if text is None and not is_templated(template):
        return None
    raise ValueError(
        f"{operation} of table {table_uri}: {name} {template!r} rendered to {text!r}; refusing "
        f"to run {operation} on the whole table for a missing value. Fix the template or the "
        f"value it reads (a param, an XCom), or pass {name}=None for the whole table."
    )


def exactly_once_txn(context: Context) -> SetTransaction:
    """The idempotent-write marker of a task instance: app id from the DAG, task, map index and
    DAG run; version from the DAG run (its `run_after`, in epoch milliseconds).

    Example: `airflow-delta/etl/write/-1/scheduled__2026-01-01T00:00:00+00:00`, version
    `1767225600000`.
    """
    from airflow_delta.engine.protocol.actions import SetTransaction

    ti, dag_run = context["ti"], context["dag_run"]
    app_id = f"airflow-delta/{ti.dag_id}/{ti.task_id}/{ti.map_index}/{ti.run_id}"
    return SetTransaction(app_id, int(dag_run.run_after.timestamp() * 1000))


class DeltaCommitOperator(BaseOperator):
    """Base of the operators that commit to one Delta table (see the module docstring).

    :param table_uri: the table's location (local path, `file://`, `s3://`, ...). (templated)
    :param source: Spark SQL text (or a path ending in `.sql`), a callable
        `(spark, context) -> DataFrame`, or with `source_format` a path to read. (templated)
    :param source_format: read `source` as a path in this format (`parquet`, `csv`, `json`,
        `orc`, or `delta` for a Delta table). (templated)
    :param source_options: reader options for `source_format` (e.g. `{"header": "true"}`).
        (templated)
    :param delta_conn_id: `delta` connection with the storage options; None for local paths
        or credentials from the environment.
    :param spark_conn_id: `spark` / `spark_connect` connection; None for a local session.
    :param spark_conf: Spark conf for the session, over the connection's extras. (templated)
    :param isolation_level: `Serializable` or `WriteSerializable` for this commit (default:
        the table's `delta.isolationLevel`, else WriteSerializable).
    :param max_commit_attempts: how many times read + write + commit run when a concurrent
        commit conflicts (1 = never re-run).
    :param post_commit_hooks: hooks to run after the commit, any of "checkpoint",
        "symlink_manifest", "log_cleanup", as a list or one string (`"checkpoint"`,
        `"checkpoint,log_cleanup"`); they run in that order whatever the order given (log
        cleanup needs the new checkpoint).
    :param exactly_once: commit with an idempotent-write marker of this task instance, so a
        retry after a landed commit does nothing. Default True.
    :param txn_app_id: own app id of the marker instead of the task instance's. (templated)
    :param txn_version: own version of the marker; goes with `txn_app_id`. (templated)
    :param user_metadata: text stored as commitInfo.userMetadata. (templated)
    """

    template_fields: Sequence[str] = (
        "table_uri",
        "source",
        "source_format",
        "source_options",
        "spark_conf",
        "txn_app_id",
        "txn_version",
        "user_metadata",
    )
    template_ext: Sequence[str] = (".sql",)
    template_fields_renderers = {"source": "sql", "source_options": "json", "spark_conf": "json"}
    #: The operation name in the table's history (WRITE, MERGE).
    operation: str = ""
    #: What wrote the data of the last commit: "spark", or "in-process" (the engine's pyarrow
    #: MERGE, DELETE, UPDATE, ...); None when nothing was written.
    executor: str | None = None
    #: Whether the operator reads a `source` (WRITE, MERGE); the table commands of
    #: `operators.command` (DELETE, UPDATE, OPTIMIZE, RESTORE) take none.
    takes_source: bool = True

    def __init__(
        self,
        *,
        table_uri: str,
        source: Source | None = None,
        source_format: str | None = None,
        source_options: Mapping[str, Any] | None = None,
        delta_conn_id: str | None = None,
        spark_conn_id: str | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        isolation_level: str | None = None,
        max_commit_attempts: int = 3,
        post_commit_hooks: str | Sequence[str] = (),
        exactly_once: bool = True,
        txn_app_id: str | None = None,
        txn_version: int | str | None = None,
        user_metadata: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not table_uri:
            raise ValueError("table_uri is required")
        if source is None and not self.takes_source:
            pass  # an in-process table command (operators.command): no rows come in
        elif not (isinstance(source, str) or callable(source)):
            raise ValueError(
                "source must be Spark SQL text, a .sql file, a callable (spark, context) -> "
                f"DataFrame, or a path with source_format; got {type(source).__name__}"
            )
        if source_format is not None and not isinstance(source, str):
            raise ValueError("source_format needs source to be a path")
        if isolation_level is not None and isolation_level not in (
            "Serializable",
            "WriteSerializable",
        ):
            raise ValueError(
                f"isolation_level must be 'Serializable' or 'WriteSerializable', not "
                f"{isolation_level!r}"
            )
        if max_commit_attempts < 1:
            raise ValueError(f"max_commit_attempts must be at least 1, got {max_commit_attempts}")
        hooks = parse_post_commit_hooks(post_commit_hooks)
        if (txn_app_id is None) != (txn_version is None):
            raise ValueError("txn_app_id and txn_version go together")
        if txn_app_id is not None and not exactly_once:
            raise ValueError("txn_app_id/txn_version make the write idempotent: keep exactly_once")
        given = kwargs.get("task_id", "")
        kwargs["outlets"] = table_outlets(table_uri, kwargs.get("outlets"), given)
        super().__init__(**kwargs)
        dag_id = self.dag.dag_id if self.has_dag() else None
        self.outlets = scoped_table_alias(list(self.outlets), dag_id, self.task_id, given)
        self.table_uri = table_uri
        # Airflow calls callables found in template fields: keep a callable source apart.
        self.source = None if callable(source) else source
        self.source_callable = source if callable(source) else None
        self.source_format = source_format
        self.source_options = dict(source_options or {})
        self.delta_conn_id = delta_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.isolation_level = isolation_level
        self.max_commit_attempts = max_commit_attempts
        self.post_commit_hooks = hooks
        self.exactly_once = exactly_once
        self.txn_app_id = txn_app_id
        self.txn_version = txn_version
        self.user_metadata = user_metadata
        self.result: dict[str, Any] | None = None
        #: The table's schemaString after the last commit attempt (OpenLineage's schema facet).
        self.table_schema: str | None = None
        #: The arguments of `scope()` as given (templates unrendered), by name.
        self.given: dict[str, Any] = {"txn_app_id": txn_app_id}

    def scope(self, name: str) -> str | None:
        """The rendered SQL argument `name` whose None means the whole table (see
        `rendered_scope`: a template rendered to nothing is refused)."""
        return rendered_scope(
            self.operation, self.table_uri, name, getattr(self, name), self.given.get(name)
        )

    @classmethod
    def partial(cls, **kwargs: Any) -> OperatorPartial:
        """`partial()` of a mapped task, declaring the table's outlet as `__init__` does (which
        does not run for a mapped task at parse time): the table's asset when `table_uri` is
        given here as a literal, else an AssetAlias through which each mapped instance emits
        the event of the table it wrote."""
        from airflow.sdk.bases.operator import partial as base_partial

        given = kwargs.get("task_id", "")
        kwargs["outlets"] = table_outlets(kwargs.get("table_uri"), kwargs.get("outlets"), given)
        declared = base_partial(cls, **kwargs)
        dag, task_id = declared.kwargs.get("dag"), declared.kwargs["task_id"]
        declared.kwargs["outlets"] = scoped_table_alias(
            declared.kwargs["outlets"], dag.dag_id if dag is not None else None, task_id, given
        )
        return declared

    @cached_property
    def hook(self) -> DeltaHook:
        return DeltaHook(self.delta_conn_id, self.spark_conn_id)

    # -- what subclasses provide --------------------------------------------------------------

    def commit_once(
        self, spark: SparkOnDemand, context: Context, txn: OptimisticTransaction
    ) -> CommitResult:
        """One read + write + commit in `txn` (started on the latest snapshot, with the task's
        commit properties); the commit's result (version None when skipped)."""
        raise NotImplementedError

    # -- source ---------------------------------------------------------------------------

    #: Whether `commit_once` takes Arrow data from a source callable as it is (else the rows
    #: become a Spark DataFrame).
    accepts_arrow = False

    def read_source(self, spark: SparkOnDemand, context: Context) -> Any:
        """The source rows (read again on each attempt): a DataFrame, or the Arrow data a source
        callable returned when the operator `accepts_arrow`."""
        if self.source_callable is not None:
            data = self.source_callable(spark, context)
            if hasattr(data, "sparkSession"):
                return data
            from airflow_delta.engine.commands.merge import arrow_table

            arrow = arrow_table(data)
            if arrow is None:
                raise TypeError(
                    f"source callable of task {self.task_id} returned {type(data).__name__}, "
                    "not a Spark DataFrame or Arrow data"
                )
            return arrow if self.accepts_arrow else spark.createDataFrame(arrow)
        assert self.source is not None
        session = spark.session()
        if self.source_format is None:
            return session.sql(self.source)
        if self.source_format.lower() == "delta":
            from airflow_delta.spark.read import read_delta

            return read_delta(session, self.source, storage_options=self.hook.storage_options)
        reader = session.read.format(self.source_format)
        return reader.options(**{k: str(v) for k, v in self.source_options.items()}).load(
            self.source
        )

    # -- execution --------------------------------------------------------------------------

    def commit_properties(self, context: Context) -> CommitProperties:
        """The commit's options: isolation, hooks, user metadata and the exactly-once marker."""
        from airflow_delta.engine.protocol.actions import SetTransaction
        from airflow_delta.engine.txn.commit_types import CommitProperties

        app_transactions: list[SetTransaction] = []
        app_id = rendered_text(self.txn_app_id)
        if is_templated(self.given.get("txn_app_id")) and (
            app_id is None or app_id.strip() in RENDERED_NOTHING
        ):
            raise ValueError(
                f"Task {self.task_id} writing {self.table_uri}: txn_app_id "
                f"{self.given['txn_app_id']!r} rendered to {app_id!r}: every task whose template "
                "misses its value would share that app id, and a write finding a later version "
                "under it is skipped as already committed. Fix the template or the value it reads."
            )
        if app_id is not None and self.txn_version is not None:
            try:
                version = int(self.txn_version)
            except (TypeError, ValueError):
                raise ValueError(
                    f"Task {self.task_id} writing {self.table_uri}: txn_version must be an "
                    f"integer (the app transaction's version), got {self.txn_version!r}; fix "
                    "the value or its template"
                ) from None
            app_transactions.append(SetTransaction(app_id, version))
        elif self.exactly_once:
            app_transactions.append(exactly_once_txn(context))
        ti = context["ti"]
        return CommitProperties(
            user_metadata=rendered_text(self.user_metadata),
            isolation_level=self.isolation_level,
            app_transactions=app_transactions,
            post_commit_hooks=self.post_commit_hooks,
            custom_metadata={
                "airflow": {
                    "dag_id": ti.dag_id,
                    "task_id": ti.task_id,
                    "run_id": ti.run_id,
                    "map_index": ti.map_index,
                    "try_number": ti.try_number,
                }
            },
        )

    def execute(self, context: Context) -> dict[str, Any]:
        properties = self.commit_properties(context)
        conflicts: list[dict[str, Any]] = []
        attempts = 0
        for run in range(1, self.max_commit_attempts + 1):
            try:
                outcome = self._commit_once_unless_committed(context, properties)
                break
            except retryable_conflicts() as exc:
                attempts += 1
                conflicts.append({"exception": type(exc).__name__, "message": str(exc)})
                if run == self.max_commit_attempts:
                    raise type(exc)(
                        f"{exc}\nGave up on table {self.table_uri} after {run} run(s) of read, "
                        f"write and commit (max_commit_attempts={self.max_commit_attempts}); "
                        "raise max_commit_attempts or keep concurrent writers to disjoint "
                        "partitions."
                    ) from exc
                log.warning(
                    "Conflict on table %s (run %s of %s): %s: %s Re-running read, write and "
                    "commit.",
                    self.table_uri,
                    run,
                    self.max_commit_attempts,
                    type(exc).__name__,
                    exc,
                )
        conflicts += [
            {"winning_version": v, "resolution": "no logical conflict, committed after it"}
            for v in outcome.conflicts_resolved
        ]
        result = self._result(outcome, attempts, conflicts, properties)
        self._log_result(result)
        self._emit_asset_event(context, result)
        context["ti"].xcom_push(key=XCOM_KEY, value=result)
        self.result = result
        return result

    def _commit_once_unless_committed(
        self, context: Context, properties: CommitProperties
    ) -> CommitResult:
        """Open the table and a transaction once, then `commit_once` in it, unless the table
        already holds this write's exactly-once marker: then neither Spark nor the source is
        touched."""
        from airflow_delta.engine.protocol.actions import Operation

        self.executor = None
        txn = self.hook.get_delta_log(self.table_uri).start_transaction(properties=properties)
        if txn.already_committed():
            outcome = txn.result(None, Operation(self.operation))
        else:
            spark = SparkOnDemand(
                lambda: self.hook.get_spark_session(config_kwargs=self.spark_conf)
            )
            outcome = self.commit_once(spark, context, txn)
        self.table_schema = txn.metadata.schema_string  # for OpenLineage, after the commit
        return outcome

    def _result(
        self,
        outcome: CommitResult,
        reruns: int,
        conflicts: list[dict[str, Any]],
        properties: CommitProperties,
    ) -> dict[str, Any]:
        """The XCom value: the commit's result, plus the conflicts and re-runs of this task."""
        marker = properties.app_transactions[0] if properties.app_transactions else None
        version = outcome.version
        if outcome.skipped:  # the table's version now; the one that carried our data is older
            version = outcome.read_version
        return {
            **outcome.to_dict(),
            "table": self.table_uri,
            "version": version,
            "operation": self.operation,
            "attempts": reruns + outcome.attempts,
            "conflicts": conflicts,
            "app_id": marker.app_id if marker else None,
            "txn_version": marker.version if marker else None,
            "executor": self.executor,
        }

    def _log_result(self, result: dict[str, Any]) -> None:
        if result["skipped"]:
            log.info(
                "Skipped: %s; nothing written. The table is at version %s.",
                self.skip_reason(result),
                result["version"],
            )
            return
        log.info(
            "Committed version %s of table %s (operation %s, run %s) after %s commit attempt(s), "
            "%s conflict(s); metrics %s",
            result["version"],
            self.table_uri,
            self.operation,
            "in process" if result["executor"] == "in-process" else "on Spark",
            result["attempts"],
            len(result["conflicts"]),
            result["metrics"],
        )
        for name, outcome in result["hooks"].items():
            log.info("Post-commit hook %s on version %s: %s", name, result["version"], outcome)

    def skip_reason(self, result: dict[str, Any]) -> str:
        """Why a commit was skipped, for the log."""
        return (
            f"table {self.table_uri} already holds this write (app id {result['app_id']}, txn "
            f"version {result['txn_version']}), committed by an earlier try of this task"
        )

    def _emit_asset_event(self, context: Context, result: dict[str, Any]) -> None:
        uri = delta_table_asset(self.table_uri).uri  # as Airflow normalises it (s3://b -> s3://b/)
        extra = {
            "table": self.table_uri,
            "version": result["version"],
            "operation": self.operation,
            "skipped": result["skipped"],
        }
        for outlet in self.outlets:
            if getattr(outlet, "uri", None) == uri:
                context["outlet_events"][outlet].extra.update(extra)
                return
        for outlet in self.outlets:
            if _is_table_alias(outlet):
                # table_uri was templated or mapped: the event goes through the alias
                asset = delta_table_asset(self.table_uri)
                context["outlet_events"][outlet].add(asset, extra=extra)
                return

    # -- OpenLineage (imported only when the OpenLineage provider asks) ------------------------

    def get_openlineage_facets_on_start(self) -> Any:
        """The datasets as they are known before the task commits (the START event): the table
        as the output, named only (its schema and version come with the task's end), and a path
        source (`source_format`) as the input."""
        return self._lineage({})

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The table as the output dataset, with its schema and the version this task
        committed, and a path source (`source_format`) as the input dataset (OpenLineage)."""
        from airflow_delta.operators.lineage import output_facets

        return self._lineage(output_facets(self.result, self.table_schema))

    def _lineage(self, facets: dict[str, Any]) -> Any:
        """OperatorLineage: the table as the output with `facets`, a path source as the input."""
        from airflow.providers.common.compat.openlineage.facet import Dataset
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_delta.operators.lineage import (
            lineage_storage_options,
            openlineage_dataset_name,
        )

        options = lineage_storage_options(self.hook, self.table_uri)
        namespace, name = openlineage_dataset_name(self.table_uri, options)
        inputs = []
        if self.source_format is not None and self.source:
            source_namespace, source_name = openlineage_dataset_name(self.source, options)
            inputs.append(Dataset(namespace=source_namespace, name=source_name))
        return OperatorLineage(
            inputs=inputs, outputs=[Dataset(namespace=namespace, name=name, facets=facets)]
        )
