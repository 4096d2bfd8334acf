"""DeltaCheckpointOperator: scheduled table maintenance (checkpoint, log cleanup, manifests,
vacuum). It commits nothing: readers and writers keep running while it works."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_delta.hooks.delta import DeltaHook

if TYPE_CHECKING:
    from airflow.sdk import Context

log = logging.getLogger(__name__)


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
        if isinstance(vacuum_retention_hours, int | float) and vacuum_retention_hours < 0:
            raise ValueError(f"vacuum_retention_hours must be >= 0, got {vacuum_retention_hours}")
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
        delta_log = self.hook.get_delta_log(self.table_uri)
        snapshot = delta_log.update()
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
        if self.vacuum_retention_hours is not None:
            vacuumed = delta_log.vacuum(retention_hours=float(self.vacuum_retention_hours))
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
