"""OptimisticTransaction: the seed's methods, messages and rules, on real local tables."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_delta.engine import (
    CommitProperties,
    DeltaLog,
    IsolationLevel,
    Metadata,
    Operation,
    Protocol,
    SetTransaction,
)
from airflow_delta.engine.errors import (
    CommitFailedError,
    DeltaProtocolError,
    InvalidCommitError,
    TransactionStateError,
)
from airflow_delta.engine.txn.post_commit import PostCommitHook
from tests.txn_helpers import APPEND, SCHEMA, add, append, new_table


def commit_json(table, version: int) -> list[dict]:
    text = (table / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines()]


def test_features_in_configuration_upgrade_the_protocol(tmp_path) -> None:
    snap = new_table(tmp_path, **{"delta.enableDeletionVectors": "true"}).update()
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (3, 7)
    assert snap.protocol.reader_features == ["deletionVectors"]
    assert set(snap.protocol.writer_features) >= {"deletionVectors", "appendOnly", "invariants"}
    snap = new_table(tmp_path / "ao", **{"delta.appendOnly": "true"}).update()
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (1, 2)


def test_unsupported_writer_features_are_refused(tmp_path) -> None:
    log = new_table(tmp_path)
    protocol = Protocol(1, 7, None, ["appendOnly", "invariants", "icebergCompatV2"])
    with pytest.raises(DeltaProtocolError, match="icebergCompatV2"):
        log.start_transaction().commit([protocol], Operation("UPGRADE PROTOCOL"))


def test_change_data_feed_tables_refuse_rewrites_without_cdc(tmp_path) -> None:
    log = new_table(tmp_path, **{"delta.enableChangeDataFeed": "true"})
    assert "changeDataFeed" in (log.update().protocol.writer_features or [])
    first = add("a")
    log.start_transaction().commit([first], APPEND)  # appends need no change data
    txn = log.start_transaction()
    with pytest.raises(DeltaProtocolError, match=r"change data feed.*cdc actions.*changes_from"):
        txn.commit([first.remove(1), add("a")], Operation("WRITE", {"mode": "Overwrite"}))
    txn = log.start_transaction()
    txn.changes_from_files = True  # a whole-file replacement: readers infer its changes
    assert txn.commit([first.remove(1), add("a")], Operation("WRITE", {"mode": "Overwrite"})) == 2


def test_commit_writes_commit_info_first(tmp_path) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction(properties=CommitProperties(user_metadata="nightly"))
    version = txn.commit([add("a")], Operation("WRITE", {"mode": "Append"}, {"numFiles": 1}))
    assert version == 1
    first = commit_json(tmp_path, 1)[0]["commitInfo"]
    assert first["operation"] == "WRITE"
    assert first["readVersion"] == 0
    assert first["isBlindAppend"] is True
    assert first["isolationLevel"] == "WriteSerializable"
    assert first["operationMetrics"] == {"numFiles": "1"}
    assert first["userMetadata"] == "nightly"
    assert first["txnId"] == txn.txn_id
    assert first["engineInfo"].startswith("airflow-delta/")


def test_transaction_commits_once(tmp_path) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction()
    txn.commit([add("a")], APPEND)
    with pytest.raises(TransactionStateError, match=r"Transaction already committed\."):
        txn.commit([add("a")], APPEND)


def test_update_metadata_rules(tmp_path) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction()
    txn.update_metadata(txn.metadata)
    with pytest.raises(TransactionStateError, match="Cannot change the metadata more than once"):
        txn.update_metadata(txn.metadata)
    txn = log.start_transaction()
    txn.has_written = True
    with pytest.raises(TransactionStateError, match="already written data"):
        txn.update_metadata(txn.metadata)


def test_verify_new_metadata(tmp_path) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction()
    dup = json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": "a", "type": "long", "nullable": True, "metadata": {}},
                {"name": "A", "type": "long", "nullable": True, "metadata": {}},
            ],
        }
    )
    with pytest.raises(InvalidCommitError, match="duplicate column"):
        txn.update_metadata(Metadata(id="x", schema_string=dup))
    with pytest.raises(InvalidCommitError, match="invalid characters"):
        DeltaLog.create_table(str(tmp_path / "b"), pa.schema([("a b", pa.int64())]))
    with pytest.raises(InvalidCommitError, match="partition column 'nope'"):
        DeltaLog.create_table(str(tmp_path / "c"), SCHEMA, ["nope"])


def test_prepare_commit_rules(tmp_path) -> None:
    log = new_table(tmp_path)
    with pytest.raises(InvalidCommitError, match="partitioned by"):
        log.start_transaction().commit([add(None)], APPEND)
    txns = [SetTransaction("app", 1), SetTransaction("app", 2)]
    with pytest.raises(InvalidCommitError, match="at most one txn"):
        log.start_transaction().commit(txns, APPEND)
    with pytest.raises(InvalidCommitError, match="at most one protocol"):
        log.start_transaction().commit([Protocol(1, 2), Protocol(1, 3)], APPEND)
    fresh = DeltaLog.for_table(str(tmp_path / "new"))
    with pytest.raises(InvalidCommitError, match="version 0"):
        fresh.start_transaction().commit([add("a")], APPEND)
    assert log.update().version == 0  # nothing was committed


def test_append_only_tables_refuse_removes(tmp_path) -> None:
    log = new_table(tmp_path, **{"delta.appendOnly": "true"})
    f = add("a")
    log.start_transaction().commit([f], APPEND)
    with pytest.raises(InvalidCommitError, match="append-only"):
        log.start_transaction().commit([f.remove(0)], Operation("DELETE"))
    # dataChange=false rewrites (compaction) stay allowed
    log.start_transaction().commit([f.remove(0, data_change=False)], Operation("OPTIMIZE"))


def test_isolation_levels(tmp_path) -> None:
    log = new_table(tmp_path, **{"delta.isolationLevel": "Serializable"})
    txn = log.start_transaction()
    assert txn.get_isolation_level([add("a")]) is IsolationLevel.SERIALIZABLE
    compaction = add("a")
    compaction.data_change = False
    assert txn.get_isolation_level([compaction]) is IsolationLevel.SNAPSHOT_ISOLATION
    props = CommitProperties(isolation_level="WriteSerializable")
    txn = log.start_transaction(properties=props)
    assert txn.get_isolation_level([add("a")]) is IsolationLevel.WRITE_SERIALIZABLE


def test_filter_files_records_predicates_and_files(tmp_path) -> None:
    log = new_table(tmp_path)
    for part in ("a", "b", "b"):
        append(log, part)
    txn = log.start_transaction()
    files = txn.filter_files("part = 'b'")
    assert [f.partition_values for f in files] == [{"part": "b"}, {"part": "b"}]
    assert [p.text for p in txn.read_predicates] == ["part = 'b'"]
    assert len(txn.read_files[0]) == 2
    assert len(txn.filter_files()) == 3


def test_txn_version_and_idempotent_writes(tmp_path) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction()
    assert txn.txn_version("job") == -1
    assert txn.read_txn == {"job"}
    txn.commit([add("a"), SetTransaction("job", 7)], APPEND)
    assert log.start_transaction().txn_version("job") == 7
    assert log.update().transactions == {"job": 7}


class Boom(PostCommitHook):
    name = "boom"
    handled: list[int] = []

    def run(self, txn, committed_version, committed_actions) -> None:
        raise RuntimeError("kaput")

    def handle_error(self, error, version) -> None:
        Boom.handled.append(version)


def test_post_commit_hooks(tmp_path, caplog) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction()
    with pytest.raises(
        TransactionStateError, match=r"Can't call post commit hooks before committing"
    ):
        txn.run_post_commit_hooks(1, [])
    txn.register_post_commit_hook(Boom())
    txn.register_post_commit_hook(Boom())
    assert len(txn.post_commit_hooks) == 1
    with caplog.at_level(logging.ERROR):
        assert txn.commit([add("a")], APPEND) == 1
    assert "Error when executing post-commit hook boom for commit 1" in caplog.text
    assert Boom.handled == [1]
    assert txn.hook_results["boom"].startswith("failed")


def test_retry_after_a_concurrent_blind_append(tmp_path, caplog) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction()
    append(log, "b")  # wins version 1
    with caplog.at_level(logging.INFO):
        assert txn.commit([add("a")], APPEND) == 2
    assert txn.attempts == 2
    assert "No logical conflicts with deltas [1, 2), retrying." in caplog.text
    assert "Committed delta #2 to" in caplog.text


def test_commit_failed_after_max_attempts(tmp_path) -> None:
    log = new_table(tmp_path)

    class Racing(type(log.start_transaction())):
        """Another writer takes every version this transaction is about to try."""

        def do_commit(self, attempt_version, *args) -> None:
            append(log)
            super().do_commit(attempt_version, *args)

    txn = Racing(
        log.location, log.update(), CommitProperties(max_commit_attempts=3, commit_lock=False)
    )
    with pytest.raises(CommitFailedError) as err:
        txn.commit([add("a")], APPEND)
    text = str(err.value)
    assert "This commit has failed as it has been tried 3 times but did not succeed." in text
    assert "Commit started at version: 1" in text
    assert "Commit failed at version: 3" in text
    assert str(tmp_path) in text


def test_own_earlier_attempt_is_not_committed_twice(tmp_path) -> None:
    log = new_table(tmp_path)
    txn = log.start_transaction()
    # Simulate an attempt whose write landed although the writer saw an error: the commit
    # file already holds this transaction's txnId.
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_text(
        json.dumps({"commitInfo": {"txnId": txn.txn_id, "operation": "WRITE"}}) + "\n"
    )
    assert txn.commit([add("a")], APPEND) == 1
    assert log.update().version == 1


def test_in_commit_timestamps_are_monotonic(tmp_path) -> None:
    log = new_table(tmp_path, **{"delta.enableInCommitTimestamps": "true"})
    for _ in range(3):
        append(log)
    stamps = [commit_json(tmp_path, v)[0]["commitInfo"]["inCommitTimestamp"] for v in range(4)]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4
    assert "inCommitTimestamp" in log.update().protocol.writer_features


def test_app_transactions_expire_after_the_set_transaction_retention(tmp_path: Path) -> None:
    """`delta.setTransactionRetentionDuration`: txn entries older than it (by lastUpdated) leave
    the snapshot and the checkpoints; newer ones and those without lastUpdated stay."""
    log = new_table(tmp_path / "t", **{"delta.setTransactionRetentionDuration": "interval 1 hour"})
    now = int(time.time() * 1000)
    log.start_transaction().commit(
        [
            SetTransaction("old", 3, now - 2 * 3600 * 1000),
            SetTransaction("fresh", 4, now - 60 * 1000),
            SetTransaction("undated", 5, None),
        ],
        APPEND,
    )
    assert log.update().transactions == {"fresh": 4, "undated": 5}
    log.checkpoint()
    (tmp_path / "t" / "_delta_log" / "00000000000000000001.json").unlink()
    assert log.update().transactions == {"fresh": 4, "undated": 5}
    assert log.start_transaction().txn_version("old") == -1


def test_commit_properties_carry_app_transactions_and_hooks(tmp_path: Path) -> None:
    log = new_table(tmp_path / "t")
    properties = CommitProperties(
        app_transactions=[SetTransaction("etl", 7)], post_commit_hooks=["checkpoint"]
    )
    txn = log.start_transaction(properties=properties)
    assert not txn.already_committed()
    version = txn.commit([add("a")], APPEND)
    assert txn.hook_results == {"checkpoint": "ok"}
    assert (tmp_path / "t" / "_delta_log" / f"{version:020d}.checkpoint.parquet").exists()
    assert log.update().transactions == {"etl": 7}
    assert log.start_transaction(properties=properties).already_committed()
    with pytest.raises(ValueError, match="Unknown post-commit hook 'vacuum'"):
        log.start_transaction(properties=CommitProperties(post_commit_hooks=["vacuum"]))


# -- table properties are validated before the commit file is written ------------------------


def _set_property(table: Path, key: str, value: str) -> None:
    """Set a table property in version 0's metadata, as another engine might have."""
    commit_0 = table / "_delta_log/00000000000000000000.json"
    lines = [json.loads(line) for line in commit_0.read_text().splitlines()]
    for line in lines:
        if "metaData" in line:
            line["metaData"].setdefault("configuration", {})[key] = value
    commit_0.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("delta.checkpointInterval", "10.0", "positive integer"),
        ("delta.checkpointInterval", "0", "positive integer"),
        ("delta.deletedFileRetentionDuration", "interval -1 days", "negative"),
        ("delta.logRetentionDuration", "interval 1 month", "cannot be parsed"),
        ("delta.logRetentionDuration", "interval 7 days garbage", "cannot be parsed"),
        ("delta.appendOnly", "yes", "not a boolean"),
        ("delta.isolationLevel", "Chaos", "not an isolation level"),
    ],
)
def test_a_bad_table_property_fails_before_the_commit_lands(tmp_path, key, value, message) -> None:
    """Set by another engine: the next commit is refused and writes nothing, so a caller that
    retries never writes the data twice."""
    from airflow_delta.engine.errors import InvalidTablePropertyError

    log = new_table(tmp_path / "t")
    append(log)
    _set_property(tmp_path / "t", key, value)

    with pytest.raises(InvalidTablePropertyError, match=f"{key}.*{message}") as raised:
        DeltaLog.for_table(str(tmp_path / "t")).start_transaction().commit([add()], APPEND)
    assert isinstance(raised.value, InvalidCommitError)
    assert str(tmp_path / "t") in str(raised.value)
    assert sorted(p.name for p in (tmp_path / "t/_delta_log").glob("*.json")) == [
        "00000000000000000000.json",
        "00000000000000000001.json",
    ]


def test_vacuum_refuses_a_negative_configured_retention(tmp_path) -> None:
    """A negative delta.deletedFileRetentionDuration would make vacuum delete the files of
    writes still in flight."""
    from airflow_delta.engine.commands.maintenance import vacuum
    from airflow_delta.engine.errors import InvalidTablePropertyError

    log = new_table(tmp_path / "t")
    _set_property(tmp_path / "t", "delta.deletedFileRetentionDuration", "interval -2 days")
    in_flight = tmp_path / "t/part=a/in-flight.parquet"
    in_flight.parent.mkdir(parents=True)
    in_flight.write_bytes(b"PAR1")
    with pytest.raises(InvalidTablePropertyError, match="negative"):
        vacuum(DeltaLog.for_table(str(tmp_path / "t")).location)
    assert in_flight.exists()
    assert log.table_uri


# -- fork safety ------------------------------------------------------------------------------


def _commit_in_child(table: str, queue) -> None:
    from airflow_delta.engine import DeltaLog as ChildLog
    from tests.txn_helpers import APPEND as CHILD_APPEND
    from tests.txn_helpers import add as child_add

    queue.put(ChildLog.for_table(table).start_transaction().commit([child_add()], CHILD_APPEND))


def test_a_child_forked_while_a_thread_holds_the_commit_lock_can_commit(tmp_path) -> None:
    """Airflow's executors fork: a commit lock held by another thread at the fork must not
    stay held forever in the child."""
    import multiprocessing
    import threading

    log = new_table(tmp_path / "t")
    txn = log.start_transaction()
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with txn.lock_commit_if_enabled():
            holding.set()
            release.wait(120)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(60)
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_commit_in_child, args=(str(tmp_path / "t"), queue))
        child.start()
        child.join(120)
        hung = child.is_alive()
        if hung:
            child.kill()
        assert not hung, "the forked child hung on the commit lock"
        assert child.exitcode == 0
        assert queue.get(timeout=10) == 1
    finally:
        release.set()
        holder.join()
