"""Post-commit hooks: work that follows a successful commit and can never undo it.

The hooks: a checkpoint of the committed version (CheckpointHook), symlink manifests for
Presto/Trino/Athena (GenerateSymlinkManifest) and the cleanup of expired log files
(LogCleanupHook); the work itself lives in `engine.commands.maintenance`. A hook's failure is
logged ("Error when executing post-commit hook [name] for commit [version]") and handed to the
hook's `handle_error`; the commit stays committed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from airflow_delta.engine.commands.maintenance import (
    cleanup_expired_logs,
    generate_incremental_manifest,
)
from airflow_delta.engine.log.snapshot import Snapshot
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol.actions import Action, Metadata
from airflow_delta.engine.protocol.config import TableConfig

log = logging.getLogger(__name__)


class CommittedTransaction(Protocol):
    """What a hook sees of the transaction that committed (an OptimisticTransaction)."""

    location: TableLocation
    snapshot: Snapshot
    #: The version the interval checkpoint wrote after this commit (None: none).
    checkpointed_version: int | None

    @property
    def metadata(self) -> Metadata: ...

    def committed_snapshot(self, version: int) -> Snapshot: ...


class PostCommitHook:
    """Something to run after a commit; `name` identifies it in logs and results."""

    name: str = "hook"

    def run(
        self,
        txn: CommittedTransaction,
        committed_version: int,
        committed_actions: Sequence[Action],
    ) -> None:
        raise NotImplementedError

    def handle_error(self, error: Exception, version: int) -> None:
        """Called with the error a failed run raised; the default only logs it."""
        log.warning("Post-commit hook %s failed for version %s: %s", self.name, version, error)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


class CheckpointHook(PostCommitHook):
    """Write a checkpoint of the committed version, unless the interval checkpoint just did."""

    name = "checkpoint"

    def run(
        self,
        txn: CommittedTransaction,
        committed_version: int,
        committed_actions: Sequence[Action],
    ) -> None:
        if txn.checkpointed_version != committed_version:
            txn.committed_snapshot(committed_version).write_checkpoint()


class GenerateSymlinkManifest(PostCommitHook):
    """Keep `_symlink_format_manifest/` in step with the table, for Presto, Trino and Athena.

    After a commit only the manifests of the partitions its AddFiles and RemoveFiles touched
    are rewritten (a full generation when no manifest exists yet). Registered by the
    transaction when `delta.compatibility.symlinkFormatManifest.enabled` is true.
    """

    name = "symlink_manifest"

    def run(
        self,
        txn: CommittedTransaction,
        committed_version: int,
        committed_actions: Sequence[Action],
    ) -> None:
        snapshot = txn.committed_snapshot(committed_version)
        generate_incremental_manifest(txn.location, txn.snapshot, snapshot, committed_actions)


class LogCleanupHook(PostCommitHook):
    """Delete log files older than `delta.logRetentionDuration` that no version needs.

    Does nothing when `delta.enableExpiredLogCleanup` is false. Meant to run after a
    checkpoint, as Delta does: only a newer checkpoint lets older log files go.
    """

    name = "log_cleanup"

    def run(
        self,
        txn: CommittedTransaction,
        committed_version: int,
        committed_actions: Sequence[Action],
    ) -> None:
        config = TableConfig(txn.metadata.configuration)
        if config.enable_expired_log_cleanup:
            cleanup_expired_logs(txn.location, config)


#: The hooks a user can ask for by name, in the order they run best in.
POST_COMMIT_HOOKS: dict[str, type[PostCommitHook]] = {
    CheckpointHook.name: CheckpointHook,
    GenerateSymlinkManifest.name: GenerateSymlinkManifest,
    LogCleanupHook.name: LogCleanupHook,
}


def post_commit_hook(name: str) -> PostCommitHook:
    """The hook called `name` ("checkpoint", "symlink_manifest" or "log_cleanup").

    >>> post_commit_hook("checkpoint").name
    'checkpoint'
    """
    try:
        return POST_COMMIT_HOOKS[name]()
    except KeyError:
        raise ValueError(
            f"Unknown post-commit hook {name!r}: use one of {', '.join(POST_COMMIT_HOOKS)}"
        ) from None
