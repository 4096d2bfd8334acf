"""DeltaRestoreOperator: RESTORE a Delta table to an earlier version or timestamp, run in
process by the engine (`airflow_delta.engine.restore`) in one exactly-once commit.

RESTORE commits a new version whose files are those of the target version (files removed since
are added back, files added since are removed): history is kept, and the restore can itself be
undone by a RESTORE to the version before it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_delta.operators.command import DeltaCommandOperator, optional_text
from airflow_delta.operators.commit import is_templated

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_delta.engine.txn.commit_types import CommitResult
    from airflow_delta.engine.txn.transaction import OptimisticTransaction

log = logging.getLogger(__name__)


def check_target(version: Any, timestamp: Any) -> None:
    """ValueError unless exactly one of `version` / `timestamp` is given. A template counts as
    given, and two templates are accepted: one of them may render to nothing (checked again
    when the task runs)."""
    given = [v for v in (version, timestamp) if v is not None and v != ""]
    templated = [v for v in given if is_templated(v)]
    if not given:
        raise ValueError("RESTORE needs the version or the timestamp to restore the table to")
    if len(given) == 2 and len(templated) < 2:
        raise ValueError(
            f"RESTORE takes a version or a timestamp, not both (version={version!r}, "
            f"timestamp={timestamp!r})"
        )
    if version is not None and not is_templated(version):
        if isinstance(version, bool) or not isinstance(version, int | str):
            raise ValueError(f"version must be a table version (an integer), got {version!r}")
        try:
            number = int(version)
        except ValueError:
            raise ValueError(
                f"version must be a table version (an integer), got {version!r}"
            ) from None
        if number < 0:
            raise ValueError(f"version must be >= 0, got {number}")
    if (
        timestamp is not None
        and not is_templated(timestamp)
        and not isinstance(timestamp, str | datetime)
    ):
        raise ValueError(
            f"timestamp must be ISO 8601 text or a datetime, got {type(timestamp).__name__}"
        )


class DeltaRestoreOperator(DeltaCommandOperator):
    """RESTORE the Delta table at `table_uri` to `version`, or to the latest version committed
    at or before `timestamp`, in process.

    The XCom `metrics` are delta-spark's RESTORE metrics (tableSizeAfterRestore,
    numOfFilesAfterRestore, numRemovedFiles, numRestoredFiles, removedFilesSize,
    restoredFilesSize). Connections, conflicts, hooks and exactly-once: see
    `DeltaCommandOperator`.

    :param version: the version to restore; exactly one of `version` and `timestamp`.
        (templated)
    :param timestamp: ISO 8601 text (UTC when it has no offset) or a datetime. (templated)
    :param ignore_missing_files: restore even when data files of the target version are gone
        (vacuumed); by default the task fails and nothing is committed.

    Example::

        DeltaRestoreOperator(
            task_id="roll_back",
            table_uri="/lake/orders",
            version="{{ params.good_version }}",
        )
    """

    template_fields: Sequence[str] = (
        *DeltaCommandOperator.template_fields,
        "version",
        "timestamp",
    )
    operation = "RESTORE"

    def __init__(
        self,
        *,
        version: int | str | None = None,
        timestamp: str | datetime | None = None,
        ignore_missing_files: bool = False,
        **kwargs: Any,
    ) -> None:
        check_target(version, timestamp)
        super().__init__(**kwargs)
        self.version = version
        self.timestamp = timestamp
        self.ignore_missing_files = ignore_missing_files

    def target(self) -> tuple[int | None, str | datetime | None]:
        """(version, timestamp) as rendered: exactly one of them, else ValueError."""
        version = optional_text(self.version)
        timestamp: str | datetime | None = self.timestamp
        if not isinstance(timestamp, datetime):
            timestamp = optional_text(timestamp)
        if (version is None) == (timestamp is None):
            raise ValueError(
                f"RESTORE of table {self.table_uri}: version and timestamp rendered to "
                f"{self.version!r} and {self.timestamp!r}; exactly one of them must be set"
            )
        if version is None:
            return None, timestamp
        try:
            number = int(version)
        except ValueError:
            raise ValueError(
                f"RESTORE of table {self.table_uri}: version must be an integer, got {version!r}"
            ) from None
        if number < 0:
            raise ValueError(f"RESTORE of table {self.table_uri}: version must be >= 0")
        return number, None

    def run_command(self, txn: OptimisticTransaction, context: Context) -> CommitResult:
        from airflow_delta.engine import restore

        version, timestamp = self.target()
        log.info(
            "RESTORE table %s (version %s) to %s%s, in process",
            self.table_uri,
            txn.read_version,
            f"version {version}" if version is not None else f"timestamp {timestamp}",
            " (missing files ignored)" if self.ignore_missing_files else "",
        )
        result: CommitResult = restore(
            txn,
            version=version,
            timestamp=timestamp,
            ignore_missing_files=self.ignore_missing_files,
        )
        return result
