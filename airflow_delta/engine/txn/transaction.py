"""OptimisticTransaction: read a snapshot, record what was read, commit actions atomically.

Follows Delta's OptimisticTransactionImpl: `prepare_commit`, isolation level, blind-append
detection, `do_commit_retry_iteratively` (write `N.json` put-if-absent; on FileExistsError
`check_for_conflicts` against the winners and try the next version), `post_commit`
(checkpoint every `delta.checkpointInterval` versions) and `run_post_commit_hooks`.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from airflow_delta import __version__
from airflow_delta.engine.errors import (
    CommitFailedError,
    DeltaProtocolError,
    InvalidCommitError,
    StaleCommitError,
    TableNotFoundError,
    TransactionStateError,
    naming_table,
)
from airflow_delta.engine.expressions.predicates import TRUE, PartitionPredicate, parse_predicates
from airflow_delta.engine.expressions.skipping import parse_file_predicates
from airflow_delta.engine.log.checkpoints import read_last_checkpoint
from airflow_delta.engine.log.log_segment import latest_version
from airflow_delta.engine.log.replay import parse_log_batch
from airflow_delta.engine.log.snapshot import Snapshot, load_snapshot
from airflow_delta.engine.log.table_location import TableLocation
from airflow_delta.engine.protocol import filenames
from airflow_delta.engine.protocol.action_types import ADD_TYPE, REMOVE_TYPE, add_files_from_arrow
from airflow_delta.engine.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Operation,
    Protocol,
    RemoveFile,
    SetTransaction,
    serialize_actions,
)
from airflow_delta.engine.protocol.columnar import array_from_pylist
from airflow_delta.engine.protocol.config import TableConfig
from airflow_delta.engine.protocol.features import (
    check_change_data,
    check_writer_support,
    required_protocol,
    writer_features,
)
from airflow_delta.engine.protocol.identity import identity_marks, with_identity_high_water_marks
from airflow_delta.engine.txn.commit_checks import (
    check_file_actions,
    check_new_metadata,
    features_wanted,
    without_feature_requests,
)
from airflow_delta.engine.txn.commit_types import CommitProperties, CommitResult
from airflow_delta.engine.txn.conflicts import (
    DEFAULT_ISOLATION_LEVEL,
    ConflictChecker,
    CurrentTransactionInfo,
    IsolationLevel,
    WinningCommitSummary,
)
from airflow_delta.engine.txn.in_commit_timestamps import (
    enables_in_commit_timestamps,
    in_commit_timestamp,
    with_enablement,
)
from airflow_delta.engine.txn.post_commit import (
    GenerateSymlinkManifest,
    LogCleanupHook,
    PostCommitHook,
    post_commit_hook,
)
from airflow_delta.engine.txn.row_tracking import (
    ROW_TRACKING_DOMAIN,
    RowIdAssigner,
    prepare_row_tracking,
    with_materialized_column_names,
)

log = logging.getLogger(__name__)

#: Backoff between attempts: full jitter over min(cap, base * 2**(attempt-1)) seconds.
BACKOFF_BASE_SECONDS = 0.005
BACKOFF_CAP_SECONDS = 0.05

ENGINE_INFO = f"airflow-delta/{__version__}"
_commit_locks: dict[str, threading.Lock] = {}
_commit_locks_guard = threading.Lock()


def _reset_commit_locks() -> None:
    """In a forked child: fresh locks. A lock held by another thread of the parent at the
    fork would stay held forever in the child (Airflow's executors fork)."""
    global _commit_locks, _commit_locks_guard
    _commit_locks = {}
    _commit_locks_guard = threading.Lock()


os.register_at_fork(after_in_child=_reset_commit_locks)


class OptimisticTransaction:
    """A set of actions, as part of an Operation, committed atomically to a snapshot's table."""

    def __init__(
        self,
        location: TableLocation,
        snapshot: Snapshot,
        properties: CommitProperties | None = None,
    ) -> None:
        self.location = location
        self.snapshot = snapshot
        self.properties = properties or CommitProperties()
        self.txn_id = str(uuid.uuid4())
        self.new_metadata: Metadata | None = None
        self.new_protocol: Protocol | None = None
        self.read_predicates: list[PartitionPredicate] = []
        self.read_files: list[pa.StructArray] = []
        self.read_txn: set[str] = set()
        self.has_written = False
        self.changes_from_files = False  # a CDF table's changes read from adds and removes
        self.row_ids_preserved = False  # a rewrite that kept its rows' row ids (materialized)
        self.row_ids: RowIdAssigner | None = None  # set by prepare_commit on row-tracking tables
        self.committed_actions: list[Action] = []
        #: identity column -> the last value this transaction's rows hold (committed as the
        #: column's delta.identity.highWaterMark in the commit's metadata)
        self.identity_high_water_marks: dict[str, int] = {}
        self.committed = False
        self.post_commit_hooks: list[PostCommitHook] = []
        self.attempts = 0
        self.conflicts_checked: list[int] = []
        self.hook_results: dict[str, str] = {}
        self.checkpointed_version: int | None = None
        self._committed_snapshot: Snapshot | None = None
        for hook in self.properties.post_commit_hooks:
            self.register_post_commit_hook(
                hook if isinstance(hook, PostCommitHook) else post_commit_hook(hook)
            )

    # -- what the transaction reads --------------------------------------------------------

    @property
    def read_version(self) -> int:
        return self.snapshot.version

    @property
    def metadata(self) -> Metadata:
        """The new metadata of this transaction, else the snapshot's."""
        return self.new_metadata or self.snapshot.metadata

    @property
    def protocol(self) -> Protocol:
        return self.new_protocol or self.snapshot.protocol

    @property
    def table(self) -> str:
        return self.location.uri

    def _column_types(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The schema fields of the partition columns and of the other columns, by name (whole
        fields: column mapping needs their metadata)."""
        metadata = self.metadata
        if metadata is None:
            return {}, {}
        fields = json.loads(metadata.schema_string or "{}").get("fields", [])
        by_name = {f["name"]: f for f in fields}
        partitions = list(metadata.partition_columns)
        data = {name: f for name, f in by_name.items() if name not in partitions}
        return {c: by_name.get(c, "string") for c in partitions}, data

    def parse_file_predicate(self, predicate: str | Sequence[str] | None) -> PartitionPredicate:
        """`predicate` (SQL over any of the table's columns) parsed for data skipping; raises
        InvalidPredicateError for an unknown column or a malformed predicate."""
        with naming_table(self.table, self.read_version):
            return parse_file_predicates(predicate, *self._column_types())

    def filter_files_arrow(
        self, predicate: str | Sequence[str] | None = None, *, data_skipping: bool = True
    ) -> pa.StructArray:
        """The active files that may hold rows satisfying `predicate`, columnar (ADD_TYPE).

        `predicate` is SQL over any columns: partition columns select by partition values,
        data columns by the files' statistics (`expressions.skipping`; a file is kept unless
        its stats prove that no row matches). With `data_skipping=False` only partition
        columns may be used (for callers that remove the files whole). Records the predicate
        in `read_predicates` (a concurrent add conflicts unless it provably cannot match) and
        the files in `read_files`.
        """
        if data_skipping:
            parsed = self.parse_file_predicate(predicate)
        else:
            with naming_table(self.table, self.read_version):
                parsed = parse_predicates(predicate, self._column_types()[0])
        files = self.matching_files(parsed)
        self.read_predicates.append(parsed)
        self.read_files.append(files)
        return files

    def track_files_read(self, files: pa.StructArray) -> None:
        """Record a read of `files` (ADD_TYPE): removing one concurrently conflicts."""
        self.read_files.append(files)

    def filter_files(
        self, predicate: str | Sequence[str] | None = None, *, data_skipping: bool = True
    ) -> list[AddFile]:
        """The AddFiles to scan for `predicate` (SQL over the table's columns; None = all)."""
        return add_files_from_arrow(self.filter_files_arrow(predicate, data_skipping=data_skipping))

    def matching_files(self, predicate: PartitionPredicate) -> pa.StructArray:
        """The active files `predicate` (parsed) may select, not recorded as read; a malformed
        partition value is a CorruptLogError naming the table and version."""
        files = self.snapshot.files() if self.read_version >= 0 else pa.nulls(0, ADD_TYPE)
        if predicate.matches_all():
            return files
        with naming_table(self.table, self.read_version):
            return files.filter(predicate.evaluate(files))

    def read_whole_table(self) -> None:
        """Record that the transaction depends on the whole table."""
        self.read_predicates.append(TRUE)

    def txn_version(self, app_id: str) -> int:
        """The latest version committed by `app_id`, or -1; records the read."""
        self.read_txn.add(app_id)
        return self.snapshot.transactions.get(app_id, -1) if self.read_version >= 0 else -1

    def already_committed(self) -> bool:
        """True when the table already holds every app transaction of the commit properties
        at (or past) its version: an idempotent write that landed before. Records the reads.

        Example: a retried task with `CommitProperties(app_transactions=[SetTransaction(
        "etl", 7)])` finds `already_committed()` true once version 7 of "etl" was committed.
        """
        wanted = self.properties.app_transactions
        return bool(wanted) and all(self.txn_version(t.app_id) >= t.version for t in wanted)

    def _state_error(self, message: str) -> TransactionStateError:
        """A misuse of this transaction (Delta's message, plus the table and read version)."""
        return TransactionStateError(
            f"{message} (table {self.table}, read version {self.read_version}; start a new "
            "transaction for another commit)"
        )

    # -- metadata ----------------------------------------------------------------------------

    def update_metadata(self, metadata: Metadata) -> None:
        """Change the table metadata in this transaction (once, before writing data)."""
        if self.has_written:
            raise self._state_error(
                "Cannot update the metadata in a transaction that has already written data."
            )
        if self.new_metadata is not None:
            raise self._state_error("Cannot change the metadata more than once in a transaction.")
        self.verify_new_metadata(metadata)
        self.new_metadata = metadata

    def update_metadata_for_new_table(self, metadata: Metadata) -> None:
        """Set the metadata of a table this transaction creates (read version -1)."""
        if self.read_version >= 0:
            raise InvalidCommitError(
                f"Table {self.table} already exists at version {self.read_version}"
            )
        self.update_metadata(metadata)

    def verify_new_metadata(self, metadata: Metadata) -> None:
        """Check names, partition columns and the features the metadata needs.

        A feature the current protocol lacks is added through `new_protocol`.
        """
        check_new_metadata(metadata, self.table)
        current = self.snapshot.protocol if self.read_version >= 0 else None
        wanted = features_wanted(metadata, current is None, self.table)
        if current is None or not wanted <= writer_features(current):
            protocol = required_protocol(current, wanted)
            if current is None or protocol != current:
                self.new_protocol = protocol

    # -- hooks and metadata of the commit ------------------------------------------------------

    def register_post_commit_hook(self, hook: PostCommitHook) -> None:
        """Run `hook` after the commit (each hook once)."""
        if hook not in self.post_commit_hooks:
            self.post_commit_hooks.append(hook)

    def get_user_metadata(self, operation: Operation) -> str | None:
        return (operation.parameters or {}).get("userMetadata") or self.properties.user_metadata

    def get_isolation_level(self, actions: Sequence[Action]) -> IsolationLevel:
        """SnapshotIsolation when no file action changes data, else the table's level."""
        file_actions = [a for a in actions if isinstance(a, AddFile | RemoveFile | AddCDCFile)]
        if file_actions and not any(a.data_change for a in file_actions):
            return IsolationLevel.SNAPSHOT_ISOLATION
        override = self.properties.isolation_level
        if override is not None:
            return IsolationLevel.parse(override) if isinstance(override, str) else override
        configured = TableConfig(self.metadata.configuration).isolation_level
        return IsolationLevel.parse(configured) if configured else DEFAULT_ISOLATION_LEVEL

    # -- commit ---------------------------------------------------------------------------

    def commit(self, actions: Sequence[Action], operation: Operation) -> CommitResult:
        """Commit `actions` as `operation`; the result (an int: the committed version)."""
        prepared = self.prepare_commit(actions, operation)
        isolation = self.get_isolation_level(prepared)
        only_add_files = not any(isinstance(a, RemoveFile) for a in prepared)
        depends_on_files = bool(self.read_predicates or any(len(f) for f in self.read_files))
        is_blind_append = only_add_files and not depends_on_files
        config = TableConfig(self.metadata.configuration, self.table)  # validated in prepare
        has_file_actions = any(isinstance(a, AddFile | RemoveFile) for a in prepared)
        if config.symlink_manifest_enabled and has_file_actions:
            self.register_post_commit_hook(GenerateSymlinkManifest())
        info: dict[str, Any] = {
            "timestamp": int(time.time() * 1000),
            "operation": operation.name,
            "operationParameters": {
                k: v if isinstance(v, str) else json.dumps(v)
                for k, v in (operation.parameters or {}).items()
            },
            **({"readVersion": self.read_version} if self.read_version >= 0 else {}),
            "isolationLevel": isolation.value,
            "isBlindAppend": is_blind_append,
            "operationMetrics": {
                k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
                for k, v in (operation.metrics or {}).items()
            },
            "engineInfo": ENGINE_INFO,
            "txnId": self.txn_id,
        }
        user_metadata = self.get_user_metadata(operation)
        if user_metadata is not None:
            info["userMetadata"] = user_metadata
        info.update(self.properties.custom_metadata)
        version = self.do_commit_retry_iteratively(
            self.read_version + 1, CommitInfo(info), prepared, isolation
        )
        log.info("Committed delta #%s to %s", version, self.location.log_path)
        needs_checkpoint = version > 0 and version % config.checkpoint_interval == 0
        self.post_commit(version, needs_checkpoint)
        self.run_post_commit_hooks(version, self.committed_actions or prepared)
        return self.result(version, operation)

    def result(self, version: int | None, operation: Operation) -> CommitResult:
        """The CommitResult of this transaction: committed at `version`, or skipped (None)."""
        return CommitResult(
            version,
            table=self.table,
            operation=operation.name,
            read_version=self.read_version,
            attempts=self.attempts,
            conflicts_resolved=self.conflicts_checked,
            hooks=self.hook_results,
            metrics=operation.metrics,
        )

    def prepare_commit(self, actions: Sequence[Action], operation: Operation) -> list[Action]:
        """Validate the actions and add the new metadata and protocol."""
        if self.committed:
            raise self._state_error("Transaction already committed.")
        actions = [a for a in actions if not isinstance(a, CommitInfo)]
        metadatas = [a for a in actions if isinstance(a, Metadata)]
        if self.new_metadata is not None:
            metadatas.append(self.new_metadata)
        if len(metadatas) > 1:
            raise self._state_error("Cannot change the metadata more than once in a transaction.")
        if metadatas and self.new_metadata is None:
            self.verify_new_metadata(metadatas[0])
        metadatas = [without_feature_requests(with_materialized_column_names(m)) for m in metadatas]
        metadatas = self._with_identity_marks(metadatas)
        protocols = [a for a in actions if isinstance(a, Protocol)]
        if self.new_protocol is not None and self.new_protocol not in protocols:
            protocols.append(self.new_protocol)
        if len(protocols) > 1:
            raise InvalidCommitError(
                f"Table {self.table}: a commit can carry at most one protocol action"
            )
        others = [a for a in actions if not isinstance(a, Metadata | Protocol)]
        now = int(time.time() * 1000)
        for app_txn in self.properties.app_transactions:
            self.read_txn.add(app_txn.app_id)  # a concurrent write of the same app conflicts
            others.append(SetTransaction(app_txn.app_id, app_txn.version, now))
        prepared: list[Action] = [*protocols, *metadatas, *others]
        if self.read_version < 0 and not (protocols and metadatas):
            raise InvalidCommitError(
                f"Table {self.table}: the first commit (version 0) must carry both a protocol "
                "and a metadata action; use DeltaLog.create_table."
            )
        protocol = protocols[0] if protocols else self.snapshot.protocol
        metadata = metadatas[0] if metadatas else self.snapshot.metadata
        # Every property the commit and its hooks act on is read now, before the commit file
        # is written: a bad value must not fail a commit after its version landed.
        TableConfig(metadata.configuration, self.table).validate()
        check_writer_support(protocol, self.table, metadata)
        check_file_actions(prepared, metadata, self.table, self.snapshot.domain_metadata)
        check_change_data(prepared, protocol, metadata, self.table, self.changes_from_files)
        preserved = self.row_ids_preserved or self.changes_from_files
        self.row_ids = prepare_row_tracking(prepared, self.snapshot, protocol, metadata, preserved)
        app_ids = [a.app_id for a in prepared if isinstance(a, SetTransaction)]
        if len(app_ids) != len(set(app_ids)):
            raise InvalidCommitError(
                f"Table {self.table}: a commit can carry at most one txn action per appId "
                f"(found {sorted(app_ids)})"
            )
        domains = any(isinstance(a, DomainMetadata) for a in prepared)
        if domains and "domainMetadata" not in writer_features(protocol):
            raise DeltaProtocolError(
                f"Table {self.table}: domainMetadata actions need the domainMetadata writer feature"
            )
        return prepared

    def _with_identity_marks(self, metadatas: list[Metadata]) -> list[Metadata]:
        """The commit's metadata carrying the identity high-water marks: those this
        transaction handed out (a metadata action is added for them), and never behind the
        read snapshot's (a RESTORE or schema overwrite must not hand values out twice)."""
        if not metadatas and not self.identity_high_water_marks:
            return metadatas
        marks = {} if self.read_version < 0 else identity_marks(self.snapshot.metadata)
        marks.update(self.identity_high_water_marks)
        new = metadatas[0] if metadatas else self.snapshot.metadata
        return [with_identity_high_water_marks(new, marks)]

    @contextmanager
    def lock_commit_if_enabled(self) -> Iterator[None]:
        """Serialise commits to this table from writers sharing this process, when enabled."""
        if not self.properties.commit_lock:
            yield
            return
        with _commit_locks_guard:
            lock = _commit_locks.setdefault(self.location.log_path, threading.Lock())
        with lock:
            yield

    def do_commit_retry_iteratively(
        self,
        attempt_version: int,
        commit_info: CommitInfo,
        actions: list[Action],
        isolation_level: IsolationLevel,
    ) -> int:
        """Write the commit at `attempt_version`, checking conflicts and moving on when taken."""
        started = time.monotonic()
        first_version = attempt_version
        max_attempts = max(1, self.properties.max_commit_attempts)
        current: CurrentTransactionInfo | None = None
        while True:
            self.attempts += 1
            try:
                with self.lock_commit_if_enabled():
                    self.do_commit(attempt_version, commit_info, actions, isolation_level)
                return attempt_version
            except FileExistsError:
                if self.attempts >= max_attempts:
                    elapsed = int((time.monotonic() - started) * 1000)
                    raise CommitFailedError(
                        f"This commit has failed as it has been tried {self.attempts} times but "
                        "did not succeed.\nThis can be caused by the Delta table being committed "
                        "continuously by many concurrent commits.\n\n"
                        f"Table: {self.table}\n"
                        f"Commit started at version: {first_version}\n"
                        f"Commit failed at version: {attempt_version}\n"
                        f"Number of actions attempted to commit: {len(actions)}\n"
                        f"Total time spent attempting this commit: {elapsed} ms\n"
                        "Raise max_commit_attempts, or reduce the number of concurrent writers."
                    ) from None
                # Wait first, then look at the log: the version found is the freshest possible
                # when the retry is written (sleeping after the check would retry a stale one).
                self._backoff()
                current = current or self._current_transaction_info(actions, isolation_level)
                next_version = self.check_for_conflicts(attempt_version, current)
                if next_version < 0:  # our own earlier attempt won
                    return -next_version - 1
                attempt_version = next_version

    def do_commit(
        self,
        attempt_version: int,
        commit_info: CommitInfo,
        actions: list[Action],
        isolation_level: IsolationLevel,
    ) -> None:
        """One attempt: write `attempt_version`.json put-if-absent (FileExistsError if taken)."""
        log.debug(
            "Attempting to commit version %s with %s actions with %s isolation level",
            attempt_version,
            len(actions) + 1,
            isolation_level.value,
        )
        if TableConfig(self.metadata.configuration).in_commit_timestamps_enabled:
            read = self.snapshot.metadata if self.read_version >= 0 else None
            enabling = attempt_version > 0 and enables_in_commit_timestamps(actions, read)
            ict = in_commit_timestamp(
                self.location, attempt_version, lambda: self._stale_error(attempt_version, None),
                enabling,
            )  # fmt: skip
            commit_info.info["inCommitTimestamp"] = ict
            if enabling:  # the provenance readers of the earlier commits' timestamps need
                actions = with_enablement(actions, attempt_version, ict)
        if self.row_ids is not None:  # fresh row ids above the mark, as of this attempt
            actions = self.row_ids.assign(actions, attempt_version)
        self.committed_actions = actions
        data = serialize_actions([commit_info, *actions])
        path = self.location.log_file(filenames.delta_file(attempt_version))
        self.location.store.write(path, data, overwrite=False)
        self._check_not_stale(attempt_version, path)

    def _check_not_stale(self, version: int, path: str) -> None:
        """Withdraw commit `version` (just written at `path`) if no reader can ever see it.

        Expired-log cleanup deletes commit files below a checkpoint. A writer whose snapshot
        is older than that checkpoint finds the name of its next version free again, and its
        put-if-absent succeeds below the checkpoint, where every reader starts after it. Such
        a commit has a checkpoint at or above its version older than the commit file (built
        from the earlier commit of that number). Object stores keep whole seconds: a checkpoint
        as old as the commit counts when the commit has no sound predecessor (the commit or
        checkpoint of `version - 1` missing, or written after that checkpoint: another stale
        writer's). It is deleted again and StaleCommitError raised. This holds whatever order
        the cleanup's deletes land in. A commit above the `_last_checkpoint` hint whose
        predecessor exists needs no listing (the common case: one small read and one probe);
        without a hint (no checkpoint yet, or the hint lost) the listing decides.
        """
        store, log_path = self.location.store, self.location.log_path
        if version == 0:
            return
        hint = read_last_checkpoint(store, log_path)
        if (hint is not None and hint["version"] < version) and store.exists(
            self.location.log_file(filenames.delta_file(version - 1))
        ):
            return
        listing = store.list_from(log_path, filenames.version_prefix(version - 1))
        name = filenames.delta_file(version)
        written_at = next((f.modification_time for f in listing if f.name == name), None)
        predecessor: int | None = None  # when the commit or a checkpoint of version - 1 was
        before, tied = [], []  # checkpoints at or above `version` older than the commit, same age
        for f in listing:
            parsed = filenames.parse_log_file_name(f.name)
            if parsed is None or parsed.kind not in ("commit", "checkpoint"):
                continue
            if parsed.version == version - 1:
                predecessor = min(predecessor or f.modification_time, f.modification_time)
            elif parsed.kind == "checkpoint" and parsed.version >= version:
                if written_at is None or f.modification_time < written_at:
                    before.append((parsed.version, f.modification_time))
                elif f.modification_time == written_at:
                    tied.append((parsed.version, f.modification_time))
        # a tie may be a checkpoint built from this very commit (see above)
        if not before and (
            not tied or (predecessor is not None and predecessor <= min(t for _, t in tied))
        ):
            return
        store.delete(path)
        raise self._stale_error(version, min(v for v, _ in before + tied))

    def _stale_error(self, version: int, checkpoint: int | None) -> StaleCommitError:
        where = f" and a checkpoint at version {checkpoint}" if checkpoint is not None else ""
        return StaleCommitError(
            f"Table {self.table}: this transaction read version {self.read_version}, but the "
            f"table has moved on{where} and expired-log cleanup removed the commit files after "
            f"version {self.read_version}, so commit {version} could never be seen by a reader "
            "and was withdrawn; nothing was committed. Retry the operation on a fresh snapshot "
            "(an Airflow task retry does that). If writers often lag this far behind, raise "
            "delta.logRetentionDuration."
        )

    def _current_transaction_info(
        self, actions: Sequence[Action], isolation_level: IsolationLevel
    ) -> CurrentTransactionInfo:
        removes = [a.to_json_dict() for a in actions if isinstance(a, RemoveFile)]
        return CurrentTransactionInfo(
            table=self.table,
            read_version=self.read_version,
            isolation_level=isolation_level,
            read_predicates=list(self.read_predicates),
            read_files=pa.concat_arrays(self.read_files)
            if self.read_files
            else pa.nulls(0, ADD_TYPE),
            read_whole_table=any(p.matches_all() for p in self.read_predicates),
            read_app_ids=set(self.read_txn),
            metadata_changed=any(isinstance(a, Metadata) for a in actions),
            removed_files=array_from_pylist(removes, REMOVE_TYPE),
            domains={
                a.domain
                for a in actions
                if isinstance(a, DomainMetadata) and a.domain != ROW_TRACKING_DOMAIN
            },
        )

    def check_for_conflicts(self, check_version: int, current: CurrentTransactionInfo) -> int:
        """Check the commits from `check_version` on; the next version to try.

        Returns `-(v + 1)` when commit `v` is this transaction's own earlier attempt (its txnId),
        so that a retried write is never committed twice.
        """
        started = time.monotonic()
        next_version = self.get_next_attempt_version(check_version)
        store = self.location.store
        for version in range(check_version, next_version):
            path = self.location.log_file(filenames.delta_file(version))
            try:
                data = store.read(path)
            except FileNotFoundError:  # cleaned up before we could check it
                raise self._stale_error(next_version, None) from None
            winner = WinningCommitSummary(version, parse_log_batch(data, path))
            if winner.commit_info and winner.commit_info.info.get("txnId") == self.txn_id:
                log.info("Commit %s of %s is this transaction's own attempt", version, self.table)
                return -version - 1
            ConflictChecker(current, winner).check_conflicts()
            if self.row_ids is not None:
                self.row_ids.observe(winner.batch.domains)
            self.conflicts_checked.append(version)
            log.info(
                "Completed checking for conflicts Version: %s Attempt: %s Time: %s ms",
                version,
                self.attempts,
                int((time.monotonic() - started) * 1000),
            )
        log.info(
            "No logical conflicts with deltas [%s, %s), retrying.", check_version, next_version
        )
        return next_version

    def get_next_attempt_version(self, previous_attempt_version: int) -> int:
        """One past the latest commit in the log (listing from the attempt that failed)."""
        return latest_version(self.location, start=previous_attempt_version) + 1

    def _backoff(self) -> None:
        ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (self.attempts - 1))
        time.sleep(random.uniform(0, ceiling))

    # -- after the commit -------------------------------------------------------------------

    def post_commit(self, commit_version: int, needs_checkpoint: bool) -> None:
        """Mark the transaction committed and checkpoint when the interval says so."""
        self.committed = True
        if not needs_checkpoint:
            return
        try:
            self.committed_snapshot(commit_version).write_checkpoint()
            self.checkpointed_version = commit_version
            self.hook_results["interval_checkpoint"] = "ok"
        except Exception as exc:
            log.warning("Failed to checkpoint table state.", exc_info=True)
            self.hook_results["interval_checkpoint"] = f"failed: {exc}"
            return
        # As Delta does, expired log files are cleaned up after a checkpoint.
        self.register_post_commit_hook(LogCleanupHook())

    def committed_snapshot(self, version: int) -> Snapshot:
        """The table at `version`, the one this transaction committed: loaded once, for the
        checkpoint and every hook."""
        if self._committed_snapshot is None or self._committed_snapshot.version != version:
            self._committed_snapshot = load_snapshot(self.location, version)
        return self._committed_snapshot

    def run_post_commit_hooks(self, version: int, committed_actions: Sequence[Action]) -> None:
        """Run every registered hook; a hook's error is logged and handed to the hook."""
        if not self.committed:
            raise self._state_error("Can't call post commit hooks before committing")
        for hook in self.post_commit_hooks:
            try:
                hook.run(self, version, committed_actions)
                self.hook_results[hook.name] = "ok"
            except Exception as exc:
                log.error(
                    "Error when executing post-commit hook %s for commit %s",
                    hook.name,
                    version,
                    exc_info=True,
                )
                self.hook_results[hook.name] = f"failed: {exc}"
                hook.handle_error(exc, version)


def start_transaction(
    location: TableLocation,
    snapshot: Snapshot | None = None,
    properties: CommitProperties | None = None,
) -> OptimisticTransaction:
    """A transaction on `snapshot` (default: the latest; version -1 for a new table)."""
    if snapshot is None:
        try:
            snapshot = load_snapshot(location)
        except TableNotFoundError:
            snapshot = Snapshot.empty(location)
    return OptimisticTransaction(location, snapshot, properties)
