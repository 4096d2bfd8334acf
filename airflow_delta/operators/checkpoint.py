"""DeltaCheckpointOperator: scheduled table maintenance (checkpoint, log cleanup, manifests,
vacuum). It commits nothing: readers and writers keep running while it works."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_delta.hooks.delta import DeltaHook
from airflow_delta.operators.commit import is_templated

if TYPE_CHECKING:
    from airflow.sdk import Context

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000


def retention_hours(value: Any, table_uri: str) -> float | None:
    """`vacuum_retention_hours` as a number of hours (None: no VACUUM); a ValueError naming the
    table when it is not a number >= 0 (as after rendering a template to `"abc"` or `"-1"`)."""
    if value is None or value == "":
        return None
    try:
        hours = float(value)
    except (TypeError, ValueError):
        hours = math.nan
    if isinstance(value, bool) or not 0 <= hours < math.inf:
        raise ValueError(
            f"vacuum_retention_hours of table {table_uri} must be a number of hours >= 0, got "
            f"{value!r}; nothing was done"
        )
    return hours


def check_retention(table_uri: str, hours: float, configured_ms: int) -> None:
    """Refuse (VacuumRetentionError) a retention below the table's
    `delta.deletedFileRetentionDuration`, before the checkpoint: VACUUM would refuse it after."""
    if round(hours * HOUR_MS) >= configured_ms:
        return
    from airflow_delta.engine.errors import VacuumRetentionError

    raise VacuumRetentionError(
        f"Cannot vacuum table {table_uri} with a retention of {hours:g} hours: the table keeps "
        f"deleted files for {configured_ms / HOUR_MS:g} hours "
        "(delta.deletedFileRetentionDuration). A shorter retention can delete files that "
        "running writers or readers of older versions still need. Nothing was done (no "
        f"checkpoint either); use vacuum_retention_hours >= {configured_ms / HOUR_MS:g}."
    )


class DeltaCheckpointOperator(BaseOperator):
    """Checkpoint the latest version of the Delta table at `table_uri`, then optionally clean
    up expired log files, regenerate the symlink manifests and vacuum.

    Returns to XCom `{version, parts, num_actions, cleaned, vacuumed}` (plus `table`,
    `manifests` and `vacuumed_bytes`): the checkpointed version, the checkpoint's parts and
    actions, the number of log files deleted, and the number of data files vacuumed.

    :param table_uri: the table's location. (templated)
    :param cleanup_expired_logs: delete log files older than `delta.logRetentionDuration`
        that the new checkpoint makes unnecessary (default True; off when the table sets
        `delta.enableExpiredLogCleanup=false`).
    :param generate_symlink_manifest: rewrite `_symlink_format_manifest/` for Trino, Presto and
        Athena (default False).
    :param vacuum_retention_hours: when set, VACUUM data files unreferenced for this many
        hours; below the table's `delta.deletedFileRetentionDuration` (7 days by default) the
        task fails rather than risk readers of recent versions.
    :param delta_conn_id: `delta` connection with the storage options (None: local paths or
        credentials from the environment).

    Example::

        DeltaCheckpointOperator(task_id="maintain", table_uri="s3://lake/events",
                                generate_symlink_manifest=True, vacuum_retention_hours=168)
    """

    template_fields: Sequence[str] = ("table_uri", "vacuum_retention_hours")

    def __init__(
        self,
        *,
        table_uri: str,
        cleanup_expired_logs: bool = True,
        generate_symlink_manifest: bool = False,
        vacuum_retention_hours: float | None = None,
        delta_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        if not table_uri:
            raise ValueError("table_uri is required")
        if not is_templated(vacuum_retention_hours):
            vacuum_retention_hours = retention_hours(vacuum_retention_hours, table_uri)
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.cleanup_expired_logs = cleanup_expired_logs
        self.generate_symlink_manifest = generate_symlink_manifest
        self.vacuum_retention_hours = vacuum_retention_hours
        self.delta_conn_id = delta_conn_id

    @cached_property
    def hook(self) -> DeltaHook:
        return DeltaHook(self.delta_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        # Rendered now: check the retention before any work (a bad one fails the task before
        # the checkpoint, not after it).
        hours = retention_hours(self.vacuum_retention_hours, self.table_uri)
        delta_log = self.hook.get_delta_log(self.table_uri)
        snapshot = delta_log.update()
        if hours is not None:
            check_retention(self.table_uri, hours, snapshot.config.deleted_file_retention_ms)
        checkpoint = delta_log.checkpoint(snapshot)
        log.info(
            "Checkpointed table %s at version %s: %s part(s), %s actions",
            self.table_uri,
            checkpoint.version,
            checkpoint.parts,
            checkpoint.num_actions,
        )
        result: dict[str, Any] = {
            "table": self.table_uri,
            "version": checkpoint.version,
            "parts": checkpoint.parts,
            "num_actions": checkpoint.num_actions,
            "cleaned": 0,
            "manifests": None,
            "vacuumed": None,
            "vacuumed_bytes": None,
        }
        if self.cleanup_expired_logs:
            if snapshot.config.enable_expired_log_cleanup:
                cleaned = delta_log.cleanup_expired_logs(snapshot)
                result["cleaned"] = len(cleaned)
                log.info("Deleted %s expired log file(s) of table %s", len(cleaned), self.table_uri)
            else:
                log.info(
                    "Log cleanup skipped: table %s sets delta.enableExpiredLogCleanup=false",
                    self.table_uri,
                )
        if self.generate_symlink_manifest:
            update = delta_log.generate_symlink_manifest(snapshot)
            result["manifests"] = len(update.written)
        if hours is not None:
            vacuumed = delta_log.vacuum(retention_hours=hours)
            result["vacuumed"] = len(vacuumed.files_deleted)
            result["vacuumed_bytes"] = vacuumed.bytes_deleted
            log.info(
                "Vacuumed table %s: %s file(s), %s bytes deleted (retention %s hours)",
                self.table_uri,
                len(vacuumed.files_deleted),
                vacuumed.bytes_deleted,
                vacuumed.retention_hours,
            )
        return result
