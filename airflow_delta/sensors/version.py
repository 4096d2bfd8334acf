"""DeltaTableVersionSensor: wait for a new version of a Delta table.

The sensor compares the table's latest version with a baseline, resolved once per task
instance:

1. `baseline_version` when given (explicit);
2. else the version the previous successful run of this task saw (its XCom), when that run
   watched the same table;
3. else the table's current version (-1 when the table does not exist yet: then its creation is
   the change waited for).

The first poke of a task instance keeps its baseline in the task state store (Airflow >= 3.3):
the later pokes (in reschedule mode `execute()` runs again for each) and the later tries read it
back, so a retry still reports a version committed while the failed try waited. Without a task
state store a reschedule uses the version the table had when the try first poked (by commit
time), and a retry the table's version when it starts.
A deferred sensor hands its baseline to `DeltaTableVersionTrigger`.

When the table reaches `target_version` (at once when it is already there or past it), or
without one a version after the baseline, the sensor
pushes the XCom `delta_table_version` = `{table, version, baseline, timestamp, operation,
recreated}`, puts the same dict in the `extra` of the asset events of its outlets, and returns the
version. A version below the baseline means the table was recreated: a change with
`allow_recreation=True` (`recreated: True`), else `DeltaTableRecreatedError`. A recreated table
that has already passed the baseline looks like an ordinary new version.

A poke that fails with a transient storage error (a dropped connection, a timeout, throttling,
an HTTP 5xx) counts as a poke that found nothing: the next poke retries (the trigger retries
with exponential backoff), until the sensor's timeout. Any other error of a poke or of the
trigger fails the task at once with a message naming the table and the fix.

With the OpenLineage provider installed, the sensor reports the table as its input dataset
(named as the operators name their output), with the version it observed once it has.

Importing this module (DAG parsing) loads no engine (pyarrow, fsspec): the argument checks are
pure Python, and the engine is imported by the methods that run when the sensor does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow.configuration import conf
from airflow.sdk import Asset, BaseSensorOperator, PokeReturnValue, TaskInstanceState
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.triggers.version import (
    DeltaTableRecreatedError,
    DeltaTableVersionTrigger,
    current_version,
    error_event,
    log_transient_error,
    log_waiting,
    poll_table_version,
    version_event,
    wait_error,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_delta.engine.delta_log import DeltaLog

#: XCom key of the provenance dict of the version the sensor found.
XCOM_KEY = "delta_table_version"
#: Task state store key of the baseline kept across the reschedules of a try.
BASELINE_STATE_KEY = "delta_table_version_baseline"


class DeltaTableVersionSensor(BaseSensorOperator):
    """Waits until a Delta table has a version after a baseline.

    :param table_uri: the table (local path, file://, s3://, ...). Templated.
    :param target_version: wait until the version is at least this (done at once when the
        table is already there or past it; the baseline then does not matter). Templated.
    :param baseline_version: the version to compare with; default: the version the previous
        successful run of this task saw, else the table's current version. Templated.
    :param allow_recreation: a version below the baseline (the table was deleted and created
        again) counts as a change; otherwise it fails the task with DeltaTableRecreatedError.
    :param delta_conn_id: the `delta` connection with the storage options; None for none.
    :param deferrable: wait in the triggerer (DeltaTableVersionTrigger) instead of a worker slot;
        default: `[operators] default_deferrable`.
    :param poke_interval: seconds between two checks (pokes, reschedules or trigger polls).

    Other arguments (`mode`, `timeout`, `soft_fail`, ...) are BaseSensorOperator's. Declare
    `outlets=[delta_table_asset(table_uri)]` to emit an asset event carrying the version.

    Example::

        DeltaTableVersionSensor(
            task_id="wait_for_events",
            table_uri="s3://lake/events",
            delta_conn_id="delta_s3",
            mode="reschedule",
            poke_interval=300,
            outlets=[delta_table_asset("s3://lake/events")],
        )
    """

    template_fields = ("table_uri", "target_version", "baseline_version")
    ui_color = "#cce8f4"

    def __init__(
        self,
        *,
        table_uri: str,
        target_version: int | str | None = None,
        baseline_version: int | str | None = None,
        allow_recreation: bool = False,
        delta_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not table_uri:
            raise ValueError(f"{self.task_id}: table_uri must not be empty")
        self.table_uri = table_uri
        self.target_version = target_version
        self.baseline_version = baseline_version
        self.allow_recreation = allow_recreation
        self.delta_conn_id = delta_conn_id
        self.deferrable = deferrable
        self._transient_errors = 0  # pokes in a row that failed with a transient storage error
        _check_versions(  # templated values are checked once rendered, in execute()
            self.task_id,
            None if _is_template(target_version) else target_version,
            None if _is_template(baseline_version) else baseline_version,
        )

    #: What the sensor observed (its XCom `delta_table_version`), once it has.
    found: dict[str, Any] | None = None

    @cached_property
    def hook(self) -> DeltaHook:
        """The hook of `delta_conn_id`."""
        return DeltaHook(self.delta_conn_id)

    @cached_property
    def delta_log(self) -> DeltaLog:
        """The DeltaLog of the (rendered) table."""
        return self.hook.get_delta_log(self.table_uri)

    def execute(self, context: Context) -> int | None:
        """Resolve the baseline, then wait: poke, reschedule, or check once and defer."""
        self._target, explicit = _check_versions(
            self.task_id, self.target_version, self.baseline_version
        )
        if explicit is None:
            self._baseline = self._resolve_baseline(context)
        else:
            self._baseline = explicit
            self.log.info(
                "Baseline version %s for Delta table '%s': explicit baseline_version",
                explicit,
                self.table_uri,
            )
        if not self.deferrable:
            return super().execute(context)
        try:  # the check before deferring, as BaseSensorOperator's loop handles a poke's failure
            found = self.poke(context)
        except AirflowFailException as exc:
            if self.soft_fail or getattr(self, "never_fail", False):
                raise AirflowSkipException(f"Skipping (soft_fail/never_fail): {exc}") from exc
            raise
        except AirflowSkipException:
            raise
        except Exception as exc:
            if getattr(self, "never_fail", False):
                raise AirflowSkipException(f"Skipping (never_fail): {exc}") from exc
            raise
        if found:
            return found.xcom_value
        self.defer(
            trigger=DeltaTableVersionTrigger(
                table_uri=process_independent_uri(self.table_uri),
                baseline_version=self._baseline,
                target_version=self._target,
                delta_conn_id=self.delta_conn_id,
                poll_interval=self.poke_interval,
                allow_recreation=self.allow_recreation,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def poke(self, context: Context) -> PokeReturnValue:
        """One check of the table against the baseline; done with the version as XCom value.

        A transient storage error is a poke that found nothing (logged with the table and the
        count of such pokes in a row): the next poke retries. Any other error fails the task
        with a message naming the table and the fix.
        """
        from airflow_delta.engine.log.storage_errors import is_transient_storage_error

        try:
            check = poll_table_version(
                self.delta_log, self._baseline, self._target, self.allow_recreation
            )
            found = version_event(self.delta_log, check) if check.done else None
        except DeltaTableRecreatedError:
            raise
        except Exception as exc:
            if not is_transient_storage_error(exc):
                event = error_event(exc, self.delta_conn_id, self._baseline)
                raise wait_error(self.table_uri, event) from exc
            self._transient_errors += 1
            log_transient_error(
                self.log, self.table_uri, self._transient_errors, exc, "at the next poke"
            )
            return PokeReturnValue(False)
        self._transient_errors = 0
        if found is None:
            log_waiting(self.log, check)
            return PokeReturnValue(False)
        return PokeReturnValue(True, self._finish(context, found))

    def execute_complete(self, context: Context, event: Mapping[str, Any]) -> int:
        """Resume after the trigger: finish with its version, or raise its error."""
        if event.get("status") != "success":
            if event.get("error_type") == DeltaTableRecreatedError.__name__:
                raise DeltaTableRecreatedError(event.get("message"))
            raise wait_error(self.table_uri, event)
        # the table as this task names it (the trigger may have watched its absolute path)
        return self._finish(context, {**event["event"], "table": self.table_uri})

    # -- OpenLineage (imported only when the OpenLineage provider asks) ------------------------

    def get_openlineage_facets_on_start(self) -> Any:
        """The watched table as the input dataset (OpenLineage's START event)."""
        return self._lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The watched table as the input dataset, with the version the sensor observed (none
        for a sensor that failed or was skipped)."""
        return self._lineage()

    def _lineage(self) -> Any:
        from airflow.providers.common.compat.openlineage.facet import Dataset
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_delta.operators.lineage import (
            input_facets,
            lineage_storage_options,
            openlineage_dataset_name,
        )

        options = lineage_storage_options(self.hook, self.table_uri)
        namespace, name = openlineage_dataset_name(self.table_uri, options)
        facets = input_facets(self.found)
        return OperatorLineage(inputs=[Dataset(namespace=namespace, name=name, facets=facets)])

    def _finish(self, context: Context, found: Mapping[str, Any]) -> int:
        """Log, push the XCom and set the outlet asset events' extra; the version found."""
        self.found = dict(found)
        if found["recreated"]:
            self.log.info(
                "Observed recreated Delta table '%s' at version %s (baseline: %s, operation: %s)",
                found["table"],
                found["version"],
                found["baseline"],
                found["operation"],
            )
        else:
            self.log.info(
                "Observed new Delta version %s (baseline: %s) for table '%s' (operation: %s)",
                found["version"],
                found["baseline"],
                found["table"],
                found["operation"],
            )
        context["ti"].xcom_push(key=XCOM_KEY, value=dict(found))
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra.update(found)
        return int(found["version"])

    def _resolve_baseline(self, context: Context) -> int:
        """The baseline when none is given (see the module docstring); logs where it came from."""
        reschedule_mode = self.reschedule and not self.deferrable
        store = context.get("task_state_store")
        first_poke = context.get("task_reschedule_count", 0) == 0
        kept = store.get(BASELINE_STATE_KEY) if store is not None else None
        if (
            isinstance(kept, dict)
            and kept.get("table") == self.table_uri
            and isinstance(kept_baseline := kept.get("baseline"), int)
        ):
            baseline, origin = kept_baseline, f"{kept['origin']}, kept since the first poke"
        else:
            baseline, origin = self._previous_run_baseline(context) or self._initial_baseline(
                context, reschedule_mode and not first_poke
            )
            if store is not None:
                store.set(
                    BASELINE_STATE_KEY,
                    {"table": self.table_uri, "baseline": baseline, "origin": origin},
                )
        self.log.info(
            "Baseline version %s for Delta table '%s': %s", baseline, self.table_uri, origin
        )
        return baseline

    def _previous_run_baseline(self, context: Context) -> tuple[int, str] | None:
        """The version the previous successful run of this task saw, if it watched this table."""
        ti = context["ti"]
        map_index = -1 if ti.map_index is None else ti.map_index  # -1: not a mapped task
        previous = ti.get_previous_ti(state=TaskInstanceState.SUCCESS, map_index=map_index)
        if previous is None:
            return None
        seen = ti.xcom_pull(
            task_ids=self.task_id, key=XCOM_KEY, run_id=previous.run_id, map_indexes=ti.map_index
        )
        if not isinstance(seen, Mapping) or seen.get("table") != self.table_uri:
            return None
        return int(seen["version"]), f"the version seen by the previous run {previous.run_id}"

    def _initial_baseline(self, context: Context, rescheduled: bool) -> tuple[int, str]:
        """The table's version now, or (a reschedule with nothing kept) when the try began."""
        if rescheduled:
            began = context["ti"].get_first_reschedule_date(context)
            if began is not None:
                return version_at(self.delta_log, began), f"the table's version at {began}"
        version = current_version(self.delta_log)
        if version < 0:
            return version, "the table does not exist yet: waiting for its creation"
        return version, "the table's current version"


def version_at(delta_log: DeltaLog, when: datetime) -> int:
    """The table's version at `when`, by commit time (-1 when there was no table yet).

    >>> version_at(DeltaLog.for_table("/data/events"), datetime(2024, 6, 1))  # doctest: +SKIP
    7
    """
    from airflow_delta.engine.errors import TableNotFoundError, VersionNotFoundError
    from airflow_delta.engine.log.history import version_at_timestamp

    try:
        return version_at_timestamp(delta_log.location, when)
    except (TableNotFoundError, VersionNotFoundError):
        return -1


def process_independent_uri(table_uri: str) -> str:
    """`table_uri` as the triggerer must see it: a relative local path made absolute here.

    The triggerer is another process, started in another directory: a relative path would
    name another table there, and the trigger would wait for a table nobody writes.

    >>> process_independent_uri("s3://lake/events") == "s3://lake/events"
    True
    """
    if urlsplit(table_uri).scheme or os.path.isabs(table_uri):
        return table_uri
    return os.path.abspath(table_uri)


def _is_template(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


def _as_version(task_id: str, name: str, value: int | str | None) -> int | None:
    """A version argument as an int (None stays None): a non-negative int or digit string."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ValueError(f"{task_id}: {name} must be a non-negative integer, got {value!r}")


def _check_versions(
    task_id: str, target_version: int | str | None, baseline_version: int | str | None
) -> tuple[int | None, int | None]:
    """(target, baseline) as ints; ValueError for a target not after an explicit baseline."""
    target = _as_version(task_id, "target_version", target_version)
    baseline = _as_version(task_id, "baseline_version", baseline_version)
    if target is not None and baseline is not None and target <= baseline:
        raise ValueError(
            f"{task_id}: target_version {target} must be above baseline_version {baseline}: "
            "the sensor waits for a version after the baseline"
        )
    return target, baseline
