"""What a commit takes and what it gives: CommitProperties (the options of one commit) and
CommitResult (the version it landed at and what it took)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_delta.engine.errors import InvalidArgumentError
from airflow_delta.engine.protocol.actions import SetTransaction
from airflow_delta.engine.txn.conflicts import IsolationLevel
from airflow_delta.engine.txn.post_commit import PostCommitHook

#: Commit attempts before CommitFailedError (delta-rs gives up after 15).
DEFAULT_MAX_COMMIT_ATTEMPTS = 100


@dataclass
class CommitProperties:
    """Options of one commit (one object rather than a dozen loose arguments).

    :param user_metadata: free text stored as commitInfo.userMetadata.
    :param max_commit_attempts: attempts before CommitFailedError (default 100).
    :param isolation_level: override of the table's `delta.isolationLevel`.
    :param commit_lock: serialise the commits of writers that share this process.
    :param custom_metadata: extra commitInfo fields.
    :param app_transactions: idempotent-write markers (`SetTransaction(app_id, version)`)
        committed with the actions; `already_committed()` tells whether the table holds them.
    :param post_commit_hooks: hooks to run after the commit, by name (`"checkpoint"`,
        `"symlink_manifest"`, `"log_cleanup"`) or as `PostCommitHook` objects, run in the
        order given.
    """

    user_metadata: str | None = None
    max_commit_attempts: int = DEFAULT_MAX_COMMIT_ATTEMPTS
    isolation_level: IsolationLevel | str | None = None
    commit_lock: bool = True
    custom_metadata: dict[str, Any] = field(default_factory=dict)
    app_transactions: Sequence[SetTransaction] = ()
    post_commit_hooks: Sequence[str | PostCommitHook] = ()

    def __post_init__(self) -> None:
        # commitInfo.userMetadata is a string for every reader: deltalake's history() fails
        # on a table whose log holds a number there
        if self.user_metadata is not None and not isinstance(self.user_metadata, str):
            raise InvalidArgumentError(
                f"CommitProperties: user_metadata must be text (or None), not "
                f"{type(self.user_metadata).__name__} {self.user_metadata!r}; pass "
                "str(value), or put structured values in custom_metadata"
            )
        attempts = self.max_commit_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise InvalidArgumentError(
                f"CommitProperties: max_commit_attempts must be a positive int, not {attempts!r}"
            )


class CommitResult(int):
    """What one commit did: the committed version, the attempts and conflicts it took, the
    post-commit hooks it ran and the operation's metrics.

    `commit()` returns one, and `write_delta`, `merge_delta`/`merge_arrow`, the operators' XCom
    and the CLI carry it unchanged. As an int it is the committed version, so a caller that
    wants only the version uses it as one. A skipped write (its app transaction was already
    committed, or mode "ignore" on an existing table) has `version` None, `skipped` True and
    the int value -1, the engine's "no version".

    >>> r = CommitResult(3, table="/t", operation="WRITE", attempts=2)
    >>> (r == 3, r.version, r.attempts, r.skipped)
    (True, 3, 2, False)
    """

    table: str
    version: int | None
    operation: str
    read_version: int
    attempts: int
    conflicts_resolved: tuple[int, ...]
    hooks: dict[str, str]
    metrics: dict[str, Any]

    def __new__(
        cls,
        version: int | None,
        *,
        table: str,
        operation: str,
        read_version: int = -1,
        attempts: int = 0,
        conflicts_resolved: Sequence[int] = (),
        hooks: Mapping[str, str] | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> CommitResult:
        result = super().__new__(cls, -1 if version is None else version)
        fields = {
            "table": table,
            "version": version,
            "operation": operation,
            "read_version": read_version,
            "attempts": attempts,
            "conflicts_resolved": tuple(conflicts_resolved),
            "hooks": dict(hooks or {}),
            "metrics": dict(metrics or {}),
        }
        result.__dict__.update(fields)
        return result

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"CommitResult is immutable: cannot set {name}")

    @property
    def skipped(self) -> bool:
        """True when nothing was committed."""
        return self.version is None

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready values (for XCom and the CLI)."""
        return {
            "table": self.table,
            "version": self.version,
            "operation": self.operation,
            "skipped": self.skipped,
            "read_version": self.read_version,
            "attempts": self.attempts,
            "conflicts_resolved": list(self.conflicts_resolved),
            "hooks": dict(self.hooks),
            "metrics": dict(self.metrics),
        }

    def __reduce__(self) -> tuple[Any, ...]:
        args = self.to_dict()
        version = args.pop("version")
        del args["skipped"]
        return (_rebuild_commit_result, (version, args))

    def __str__(self) -> str:
        return str(self.version)

    def __repr__(self) -> str:
        return (
            f"CommitResult(version={self.version}, table={self.table!r}, "
            f"operation={self.operation!r}, attempts={self.attempts}, "
            f"conflicts_resolved={list(self.conflicts_resolved)}, metrics={self.metrics})"
        )


def _rebuild_commit_result(version: int | None, fields: dict[str, Any]) -> CommitResult:
    return CommitResult(version, **fields)
