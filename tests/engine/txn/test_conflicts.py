"""The conflict matrix: every operation against every concurrent winner, per isolation level.

Each case builds a partitioned table (partition column `part`) whose version 1 holds two files
in partition 'a' and two in 'b'. A *winner* and a *loser* transaction both start on that
snapshot (version 1). The loser does its reads, the winner then does its reads and commits
version 2, and finally the loser commits: it either retries and lands at version 3
(= read version + 2) or raises the exact Delta conflict exception.

The expected outcome of every case is written down in EXPECTED below, derived by hand from
Delta's ConflictChecker rules (not by running the engine). The checks run in delta-spark's order
(protocol, metadata, concurrent appends, deleted-read, deleted-deleted, txn appIds, domains):

* winner has a protocol action -> ProtocolChangedException;
* winner has a metadata action -> MetadataChangedException;
* concurrent appends: skipped under SnapshotIsolation (chosen automatically when all of our
  file actions have dataChange=false) and when we recorded no read predicate; under
  WriteSerializable a winner whose commitInfo.isBlindAppend=true is ignored unless our own
  transaction changes the metadata; otherwise any data-changing AddFile of the winner that
  matches one of our read predicates -> ConcurrentAppendException;
* winner removes a file we read (or removes anything when we read the whole table)
  -> ConcurrentDeleteReadException;
* winner removes a file we remove too -> ConcurrentDeleteDeleteException;
* winner writes a txn for an appId we read via txn_version -> ConcurrentTransactionException;
* winner writes a domainMetadata domain we write too -> ConcurrentTransactionException.

commitInfo.isBlindAppend is true when a commit removes no file and recorded no read (no read
predicate, no read file); reading an appId through txn_version does not count as a read, so the
idempotent streaming write and the pure metadata / protocol commits are blind appends.

The engine's commands run for real on the same table (its initial files are real parquet files
with stats, ids 1-2 in a1, 3-4 in a2, 5-6 in b1, 7-8 in b2), on the transaction the case gives
them:

* DELETE / UPDATE of `part = 'a' AND id = 1`: read that predicate (data skipping keeps only a1,
  which they record as read), remove a1 and add its rewritten rows (their new file's stats are
  exact, so a winner's file holding only id 2 provably does not match the loser's predicate);
* OPTIMIZE of `part = 'a'`: compacts a1 and a2 with dataChange=false, so SnapshotIsolation; it
  records no predicate and only the files it rewrites as read (delta-spark's trackFilesRead);
* RESTORE to version 0: reads the whole table, removes every file, and is checked as
  Serializable whatever the table's level (delta-spark fails a RESTORE on any concurrent commit).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import (
    AddFile,
    CommitProperties,
    CommitResult,
    DeltaLog,
    DomainMetadata,
    IsolationLevel,
    Operation,
    OptimisticTransaction,
    Protocol,
    RemoveFile,
    SetTransaction,
    delete,
    optimize,
    restore,
    update,
)
from airflow_delta.engine.errors import (
    ConcurrentAppendException,
    ConcurrentDeleteDeleteException,
    ConcurrentDeleteReadException,
    ConcurrentTransactionException,
    DeltaConcurrentModificationException,
    MetadataChangedException,
    ProtocolChangedException,
)
from airflow_delta.engine.protocol.actions import Action, parse_actions
from tests.txn_helpers import APPEND, SCHEMA, add, new_table

# -- the operations -------------------------------------------------------------------------

BA = "blind_append"
RA = "read_append"
OW = "overwrite_partition"
DEL = "delete_table"
COMPACT = "compaction"
META = "metadata_change"
PROTO = "protocol_change"
TXN = "same_app_txn"
DML_DEL = "dml_delete"
UPD = "dml_update"
OPT = "optimize"
RST = "restore"
COMMANDS = [DML_DEL, UPD, OPT, RST]
OPERATIONS = [BA, RA, OW, DEL, COMPACT, META, PROTO, TXN, *COMMANDS]

SER = IsolationLevel.SERIALIZABLE.value
WS = IsolationLevel.WRITE_SERIALIZABLE.value
SI = IsolationLevel.SNAPSHOT_ISOLATION.value

READ_VERSION = 1
WINNER_VERSION = READ_VERSION + 1
RETRIED = READ_VERSION + 2  # the loser's version after one conflict-free retry
APP_ID = "app"


@dataclasses.dataclass
class Planned:
    """What a transaction wants to commit, after its reads; or, for the engine's commands, the
    command to run on the transaction (`run`), its actions read back from its commit."""

    actions: list[Action]
    operation: Operation
    run: Callable[[], CommitResult] | None = None

    def commit(self, txn: OptimisticTransaction) -> int:
        if self.run is None:
            return txn.commit(self.actions, self.operation)
        version = self.run()
        assert version is not None and version >= 0, version
        path = txn.location.log_file(f"{version:020d}.json")
        committed = parse_actions(txn.location.store.read(path), path)
        self.actions = [a for a in committed if isinstance(a, AddFile | RemoveFile)]
        return version


def _now() -> int:
    return int(time.time() * 1000)


def _new_file(tag: str, part: str, data_change: bool = True) -> AddFile:
    f = add(part, name=f"{tag}-{uuid.uuid4()}.parquet")
    f.data_change = data_change
    return f


def _predicate(part: str) -> str:
    return f"part = '{part}'"


def blind_append(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """1. Append to `part` without reading anything."""
    return Planned([_new_file(tag, part)], Operation("WRITE", {"mode": "Append"}))


def read_append(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """2. Read `part`, then append a file to it."""
    assert txn.filter_files(_predicate(part))
    return Planned([_new_file(tag, part)], Operation("WRITE", {"mode": "Append"}))


def overwrite_partition(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """3. Read `part`, remove its files (dataChange=true) and add a replacement file."""
    files = txn.filter_files(_predicate(part))
    assert files
    removes: list[Action] = [f.remove(_now()) for f in files]
    return Planned(
        [*removes, _new_file(tag, part)],
        Operation("WRITE", {"mode": "Overwrite", "replaceWhere": _predicate(part)}),
    )


def delete_table(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """4. Read the whole table (no predicate) and remove every file."""
    files = txn.filter_files()
    assert len(files) == 4
    return Planned([f.remove(_now()) for f in files], Operation("DELETE", {"predicate": "[]"}))


def delete_partition(txn: OptimisticTransaction, tag: str, part: str = "b") -> Planned:
    """Read `part` and remove its files (for the disjoint-partition cases)."""
    files = txn.filter_files(_predicate(part))
    assert files
    return Planned(
        [f.remove(_now()) for f in files], Operation("DELETE", {"predicate": _predicate(part)})
    )


def compaction(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """5. Read `part`, rewrite its files as one, every file action with dataChange=false."""
    files = txn.filter_files(_predicate(part))
    assert files
    removes: list[Action] = [f.remove(_now(), data_change=False) for f in files]
    return Planned(
        [*removes, _new_file(tag, part, data_change=False)],
        Operation("OPTIMIZE", {"predicate": _predicate(part), "zOrderBy": "[]"}),
    )


def metadata_change(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """6. Set a new table property (update_metadata)."""
    current = txn.snapshot.metadata
    key = f"airflow_delta.test.{tag}"
    txn.update_metadata(
        dataclasses.replace(current, configuration={**current.configuration, key: "true"})
    )
    return Planned([], Operation("SET TBLPROPERTIES", {"properties": json.dumps({key: "true"})}))


def protocol_change(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """7. Upgrade the protocol to writer version 3."""
    return Planned([Protocol(1, 3)], Operation("UPGRADE PROTOCOL", {"newProtocol": "(1, 3)"}))


def same_app_txn(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """8. Idempotent write of application APP_ID: read its version, append + SetTransaction."""
    version = txn.txn_version(APP_ID) + 1
    return Planned(
        [_new_file(tag, part), SetTransaction(APP_ID, version, _now())],
        Operation("STREAMING UPDATE", {"outputMode": "Append", "queryId": APP_ID}),
    )


#: The first id of each initial file: a1 holds ids 1-2, a2 3-4, b1 5-6, b2 7-8.
FIRST_ID = {"a": 1, "b": 5}


def _row_predicate(part: str) -> str:
    return f"part = '{part}' AND id = {FIRST_ID[part]}"


def dml_delete(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """9. The engine's DELETE of one row of `part` (rewrites the file holding it)."""
    predicate = _row_predicate(part)
    run = lambda: delete(txn, predicate)  # noqa: E731
    return Planned([], Operation("DELETE", {"predicate": predicate}), run)


def dml_update(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """10. The engine's UPDATE of one row of `part` (rewrites the file holding it)."""
    predicate = _row_predicate(part)
    run = lambda: update(txn, {"value": f"'{tag}'"}, predicate)  # noqa: E731
    return Planned([], Operation("UPDATE", {"predicate": predicate}), run)


def optimize_partition(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """11. The engine's OPTIMIZE of `part` (its two small files compacted into one)."""
    run = lambda: optimize(txn, _predicate(part))  # noqa: E731
    return Planned([], Operation("OPTIMIZE", {"predicate": _predicate(part)}), run)


def restore_to_empty(txn: OptimisticTransaction, tag: str, part: str = "a") -> Planned:
    """12. The engine's RESTORE to version 0 (the empty table: every file removed)."""
    run = lambda: restore(txn, version=0)  # noqa: E731
    return Planned([], Operation("RESTORE", {"version": 0}), run)


OPS: dict[str, Callable[..., Planned]] = {
    BA: blind_append,
    RA: read_append,
    OW: overwrite_partition,
    DEL: delete_table,
    COMPACT: compaction,
    META: metadata_change,
    PROTO: protocol_change,
    TXN: same_app_txn,
    DML_DEL: dml_delete,
    UPD: dml_update,
    OPT: optimize_partition,
    RST: restore_to_empty,
}

#: commitInfo.isBlindAppend of each operation (no remove and no recorded read).
BLIND_APPENDS = {BA, META, PROTO, TXN}

# -- the expected outcomes --------------------------------------------------------------------

CA = ConcurrentAppendException
CDR = ConcurrentDeleteReadException
CDD = ConcurrentDeleteDeleteException
MC = MetadataChangedException
PC = ProtocolChangedException
CT = ConcurrentTransactionException

Outcome = int | type[DeltaConcurrentModificationException]

#: (loser, winner, level) -> the loser's committed version, or the exact exception it raises.
#: `level` is the table's delta.isolationLevel for Serializable / WriteSerializable; for
#: SnapshotIsolation the loser asks for it through CommitProperties(isolation_level=...).
EXPECTED: dict[tuple[str, str, str], Outcome] = {
    # -- loser: blind append (no reads, no removes): only protocol / metadata changes matter.
    (BA, BA, SER): RETRIED,
    (BA, RA, SER): RETRIED,
    (BA, OW, SER): RETRIED,
    (BA, DEL, SER): RETRIED,
    (BA, COMPACT, SER): RETRIED,
    (BA, META, SER): MC,
    (BA, PROTO, SER): PC,
    (BA, TXN, SER): RETRIED,
    (BA, BA, WS): RETRIED,
    (BA, RA, WS): RETRIED,
    (BA, OW, WS): RETRIED,
    (BA, DEL, WS): RETRIED,
    (BA, COMPACT, WS): RETRIED,
    (BA, META, WS): MC,
    (BA, PROTO, WS): PC,
    (BA, TXN, WS): RETRIED,
    # -- loser: append after reading part='a'.
    (RA, BA, SER): CA,  # Serializable: the blind append's add in 'a' matches our predicate
    (RA, RA, SER): CA,
    (RA, OW, SER): CA,  # its new file in 'a' (appends are checked before deletes)
    (RA, DEL, SER): CDR,  # no add; it removed the 'a' files we read
    (RA, COMPACT, SER): CA,  # a non-blind winner's adds count whatever their dataChange
    (RA, META, SER): MC,
    (RA, PROTO, SER): PC,
    (RA, TXN, SER): CA,  # blind append into 'a'
    (RA, BA, WS): RETRIED,  # WriteSerializable ignores blind appends
    (RA, RA, WS): CA,  # not a blind append: it read 'a'
    (RA, OW, WS): CA,
    (RA, DEL, WS): CDR,
    (RA, COMPACT, WS): CA,
    (RA, META, WS): MC,
    (RA, PROTO, WS): PC,
    (RA, TXN, WS): RETRIED,  # blind append, and we never read appId 'app'
    # -- loser: overwrite of part='a' (reads 'a', removes its files, adds one).
    (OW, BA, SER): CA,
    (OW, RA, SER): CA,
    (OW, OW, SER): CA,  # appends first, before the delete-read / delete-delete overlap
    (OW, DEL, SER): CDR,  # delete-read is checked before delete-delete
    (OW, COMPACT, SER): CA,
    (OW, META, SER): MC,
    (OW, PROTO, SER): PC,
    (OW, TXN, SER): CA,
    (OW, BA, WS): RETRIED,
    (OW, RA, WS): CA,
    (OW, OW, WS): CA,
    (OW, DEL, WS): CDR,
    (OW, COMPACT, WS): CA,
    (OW, META, WS): MC,
    (OW, PROTO, WS): PC,
    (OW, TXN, WS): RETRIED,
    # -- loser: delete of the whole table (read with no predicate, remove every file).
    (DEL, BA, SER): CA,  # the whole-table predicate matches any data-changing add
    (DEL, RA, SER): CA,
    (DEL, OW, SER): CA,
    (DEL, DEL, SER): CDR,
    (DEL, COMPACT, SER): CA,
    (DEL, META, SER): MC,
    (DEL, PROTO, SER): PC,
    (DEL, TXN, SER): CA,
    (DEL, BA, WS): RETRIED,  # the blind-appended file survives our delete
    (DEL, RA, WS): CA,
    (DEL, OW, WS): CA,
    (DEL, DEL, WS): CDR,
    (DEL, COMPACT, WS): CA,
    (DEL, META, WS): MC,
    (DEL, PROTO, WS): PC,
    (DEL, TXN, WS): RETRIED,
    # -- loser: compaction of 'a' (dataChange=false => SnapshotIsolation whatever the table's
    #    level): appends never conflict, removes of the files we read do.
    (COMPACT, BA, SER): RETRIED,
    (COMPACT, RA, SER): RETRIED,
    (COMPACT, OW, SER): CDR,
    (COMPACT, DEL, SER): CDR,
    (COMPACT, COMPACT, SER): CDR,
    (COMPACT, META, SER): MC,
    (COMPACT, PROTO, SER): PC,
    (COMPACT, TXN, SER): RETRIED,
    (COMPACT, BA, WS): RETRIED,
    (COMPACT, RA, WS): RETRIED,
    (COMPACT, OW, WS): CDR,
    (COMPACT, DEL, WS): CDR,
    (COMPACT, COMPACT, WS): CDR,
    (COMPACT, META, WS): MC,
    (COMPACT, PROTO, WS): PC,
    (COMPACT, TXN, WS): RETRIED,
    # -- loser: metadata change (no reads, no file actions).
    (META, BA, SER): RETRIED,
    (META, RA, SER): RETRIED,
    (META, OW, SER): RETRIED,
    (META, DEL, SER): RETRIED,
    (META, COMPACT, SER): RETRIED,
    (META, META, SER): MC,
    (META, PROTO, SER): PC,
    (META, TXN, SER): RETRIED,
    (META, BA, WS): RETRIED,
    (META, RA, WS): RETRIED,
    (META, OW, WS): RETRIED,
    (META, DEL, WS): RETRIED,
    (META, COMPACT, WS): RETRIED,
    (META, META, WS): MC,
    (META, PROTO, WS): PC,
    (META, TXN, WS): RETRIED,
    # -- loser: protocol upgrade (no reads, no file actions).
    (PROTO, BA, SER): RETRIED,
    (PROTO, RA, SER): RETRIED,
    (PROTO, OW, SER): RETRIED,
    (PROTO, DEL, SER): RETRIED,
    (PROTO, COMPACT, SER): RETRIED,
    (PROTO, META, SER): MC,
    (PROTO, PROTO, SER): PC,
    (PROTO, TXN, SER): RETRIED,
    (PROTO, BA, WS): RETRIED,
    (PROTO, RA, WS): RETRIED,
    (PROTO, OW, WS): RETRIED,
    (PROTO, DEL, WS): RETRIED,
    (PROTO, COMPACT, WS): RETRIED,
    (PROTO, META, WS): MC,
    (PROTO, PROTO, WS): PC,
    (PROTO, TXN, WS): RETRIED,
    # -- loser: idempotent write of appId 'app' (read via txn_version; no file reads).
    (TXN, BA, SER): RETRIED,
    (TXN, RA, SER): RETRIED,
    (TXN, OW, SER): RETRIED,
    (TXN, DEL, SER): RETRIED,
    (TXN, COMPACT, SER): RETRIED,
    (TXN, META, SER): MC,
    (TXN, PROTO, SER): PC,
    (TXN, TXN, SER): CT,  # the winner wrote the appId we read
    (TXN, BA, WS): RETRIED,
    (TXN, RA, WS): RETRIED,
    (TXN, OW, WS): RETRIED,
    (TXN, DEL, WS): RETRIED,
    (TXN, COMPACT, WS): RETRIED,
    (TXN, META, WS): MC,
    (TXN, PROTO, WS): PC,
    (TXN, TXN, WS): CT,
    # -- the engine's commands as winners against the operations above (both levels alike).
    **{
        (loser, winner, level): outcome
        for level in (SER, WS)
        for loser, outcomes in {
            BA: (RETRIED, RETRIED, RETRIED, RETRIED),  # no reads, no removes
            RA: (CA, CA, CA, CDR),  # their new file in 'a'; RESTORE only removes (a1, read)
            OW: (CA, CA, CA, CDR),
            DEL: (CA, CA, CA, CDR),  # the whole-table predicate matches every add
            COMPACT: (CDR, CDR, CDR, CDR),  # SnapshotIsolation: each removed a file it read
            META: (RETRIED, RETRIED, RETRIED, RETRIED),  # RESTORE to a same metadata: none
            PROTO: (RETRIED, RETRIED, RETRIED, RETRIED),
            TXN: (RETRIED, RETRIED, RETRIED, RETRIED),
        }.items()
        for winner, outcome in zip(COMMANDS, outcomes, strict=True)
    },
    # -- loser: DELETE / UPDATE of `part = 'a' AND id = 1` (read a1 by data skipping, remove it).
    **{
        (loser, winner, level): outcome
        for loser in (DML_DEL, UPD)
        for level in (SER, WS)
        for winner, outcome in {
            # Serializable: the blind append's file (no min/max stats) may hold id 1; under
            # WriteSerializable blind appends go by, and it removed nothing.
            BA: CA if level == SER else RETRIED,
            RA: CA,
            OW: CA,  # its new file in 'a' (appends are checked before deletes)
            DEL: CDR,  # no add; it removed a1, which we read
            COMPACT: CA,  # a non-blind winner's adds count whatever their dataChange
            META: MC,
            PROTO: PC,
            TXN: CA if level == SER else RETRIED,  # a blind append into 'a'
            # DELETE's rewritten a1 holds only id 2: its stats prove it misses `id = 1`, so
            # the check moves on to the removes: a1, which we read.
            DML_DEL: CDR,
            UPD: CA,  # the updated a1 still holds id 1
            OPT: CA,  # the compacted file holds ids 1-4
            RST: CDR,  # removed a1
        }.items()
    },
    # -- loser: OPTIMIZE of 'a' (SnapshotIsolation whatever the table's level): appends never
    #    conflict; a winner that removed a1 or a2 (which it rewrites) does.
    **{
        (OPT, winner, level): outcome
        for level in (SER, WS)
        for winner, outcome in {
            BA: RETRIED,
            RA: RETRIED,
            OW: CDR,
            DEL: CDR,
            COMPACT: CDR,
            META: MC,
            PROTO: PC,
            TXN: RETRIED,
            DML_DEL: CDR,
            UPD: CDR,
            OPT: CDR,
            RST: CDR,
        }.items()
    },
    # -- loser: RESTORE to version 0 (whole table read, Serializable forced): every concurrent
    #    add matches its predicate; a winner that only removes files removed files it read.
    **{
        (RST, winner, level): outcome
        for level in (SER, WS)
        for winner, outcome in {
            BA: CA,
            RA: CA,
            OW: CA,
            DEL: CDR,
            COMPACT: CA,
            META: MC,
            PROTO: PC,
            TXN: CA,
            DML_DEL: CA,
            UPD: CA,
            OPT: CA,
            RST: CDR,
        }.items()
    },
    # -- SnapshotIsolation: compaction as the loser, with the level requested explicitly.
    (COMPACT, BA, SI): RETRIED,
    (COMPACT, RA, SI): RETRIED,
    (COMPACT, OW, SI): CDR,
    (COMPACT, DEL, SI): CDR,
    (COMPACT, COMPACT, SI): CDR,
    (COMPACT, META, SI): MC,
    (COMPACT, PROTO, SI): PC,
    (COMPACT, TXN, SI): RETRIED,
    # -- SnapshotIsolation forced on data-changing readers: concurrent appends (blind or not)
    #    are ignored where Serializable fails them; removes of what we read still conflict.
    (RA, BA, SI): RETRIED,
    (RA, RA, SI): RETRIED,
    (RA, OW, SI): CDR,
    (RA, DEL, SI): CDR,
    (RA, COMPACT, SI): CDR,
    (RA, META, SI): MC,
    (RA, PROTO, SI): PC,
    (RA, TXN, SI): RETRIED,
    (OW, BA, SI): RETRIED,
    (OW, RA, SI): RETRIED,
    (OW, OW, SI): CDR,
    (OW, DEL, SI): CDR,
    (OW, COMPACT, SI): CDR,
    (OW, META, SI): MC,
    (OW, PROTO, SI): PC,
    (OW, TXN, SI): RETRIED,
    (DEL, BA, SI): RETRIED,
    (DEL, RA, SI): RETRIED,
    (DEL, OW, SI): CDR,
    (DEL, DEL, SI): CDR,
    (DEL, COMPACT, SI): CDR,
    (DEL, META, SI): MC,
    (DEL, PROTO, SI): PC,
    (DEL, TXN, SI): RETRIED,
}

#: Where delta-spark's ConflictChecker source (master) is narrower than the rules above, for the
#: record; EXPECTED follows the rules stated above. delta-spark:
#: * checkProtocolCompatibility only throws ProtocolChangedException when the current
#:   transaction carries a Protocol action too (or the winner drops features), so a (1, 2) ->
#:   (1, 3) winner lets every loser but PROTO retry and commit;
#: The engine keeps the seed's stricter rule (any protocol change by a winner conflicts).
DELTA_SPARK_DIFFERS: dict[tuple[str, str], Outcome] = {
    **{(loser, PROTO): RETRIED for loser in OPERATIONS if loser != PROTO},
}

MATRIX_LEVELS = (SER, WS)


def test_expected_table_is_complete() -> None:
    matrix = {(lo, w, lvl) for lo in OPERATIONS for w in OPERATIONS for lvl in MATRIX_LEVELS}
    assert len(matrix) == 2 * len(OPERATIONS) ** 2 == 288
    assert matrix <= EXPECTED.keys()
    extras = EXPECTED.keys() - matrix
    assert {lvl for _, _, lvl in extras} == {SI}
    assert len(extras) == 32


# -- running a case ---------------------------------------------------------------------------


def make_table(path: Path, level: str | None) -> DeltaLog:
    """Version 0: the table (delta.isolationLevel = level); version 1: files a1, a2, b1, b2,
    real parquet files of two rows each (ids 1-2, 3-4, 5-6, 7-8) with exact stats."""
    config = {"delta.isolationLevel": level} if level in (SER, WS) else {}
    log = new_table(path, **config)
    initial = [_initial_file(path, p, i) for p in "ab" for i in (1, 2)]
    assert log.start_transaction().commit(initial, APPEND) == READ_VERSION
    return log


def _initial_file(root: Path, part: str, i: int) -> AddFile:
    f = add(part, name=f"init-{part}{i}.parquet", rows=2)
    first = FIRST_ID[part] + 2 * (i - 1)
    ids = [first, first + 1]
    data = pa.table({"id": ids, "value": [f"v{n}" for n in ids]}, SCHEMA.remove(2))
    (root / f"part={part}").mkdir(exist_ok=True)
    pq.write_table(data, root / f.path)
    f.size = (root / f.path).stat().st_size
    f.stats = json.dumps(
        {
            "numRecords": 2,
            "minValues": {"id": ids[0], "value": f"v{ids[0]}"},
            "maxValues": {"id": ids[1], "value": f"v{ids[1]}"},
            "nullCount": {"id": 0, "value": 0},
        }
    )
    return f


def commit_lines(path: Path, version: int) -> list[dict]:
    text = (path / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def commit_versions(path: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (path / "_delta_log").glob("*.json"))


def planned_lines(txn: OptimisticTransaction, plan: Planned) -> list[str]:
    """The non-commitInfo lines the commit of `plan` must hold, canonical and sorted."""
    actions = list(plan.actions)
    if txn.new_metadata is not None:
        actions.append(txn.new_metadata)
    if txn.new_protocol is not None and txn.new_protocol not in actions:
        actions.append(txn.new_protocol)
    return sorted(json.dumps({a.key: a.to_json_dict()}, sort_keys=True) for a in actions)


def committed_lines(path: Path, version: int) -> tuple[dict, list[str]]:
    lines = commit_lines(path, version)
    infos = [line["commitInfo"] for line in lines if "commitInfo" in line]
    assert len(infos) == 1, f"version {version} has {len(infos)} commitInfo lines"
    rest = sorted(json.dumps(line, sort_keys=True) for line in lines if "commitInfo" not in line)
    return infos[0], rest


def effective_level(op: str, level: str) -> str:
    if op in (COMPACT, OPT):
        return SI
    return SER if op == RST else level


def assert_commit(
    path: Path, version: int, txn: OptimisticTransaction, plan: Planned, op: str, level: str
) -> None:
    info, lines = committed_lines(path, version)
    assert info["txnId"] == txn.txn_id
    assert info["operation"] == plan.operation.name
    assert info["readVersion"] == READ_VERSION
    assert info["isBlindAppend"] is (op in BLIND_APPENDS)
    assert info["isolationLevel"] == effective_level(op, level)
    assert lines == planned_lines(txn, plan)


def run_concurrently(
    path: Path,
    loser: tuple[Callable[..., Planned], str],
    winner: tuple[Callable[..., Planned], str],
    level: str,
) -> tuple[DeltaLog, OptimisticTransaction, Planned, OptimisticTransaction, Planned]:
    """Both transactions start on version 1; the loser reads, the winner commits version 2.

    Returns the log, the loser's transaction and plan (not committed yet), the winner's.
    """
    log = make_table(path, level)
    snapshot = log.update()
    assert snapshot.version == READ_VERSION
    props = None
    if level == SI:
        props = CommitProperties(isolation_level=IsolationLevel.SNAPSHOT_ISOLATION)
    loser_txn = log.start_transaction(snapshot=snapshot, properties=props)
    winner_txn = log.start_transaction(snapshot=snapshot)
    loser_fn, loser_part = loser
    winner_fn, winner_part = winner
    loser_plan = loser_fn(loser_txn, "loser", loser_part)
    winner_plan = winner_fn(winner_txn, "winner", winner_part)
    assert winner_plan.commit(winner_txn) == WINNER_VERSION
    return log, loser_txn, loser_plan, winner_txn, winner_plan


def expected_state(plans: list[Planned]) -> set[str]:
    """The active file paths after the initial files and the commits of `plans`, in order."""
    active = {f"part={p}/init-{p}{i}.parquet" for p in "ab" for i in (1, 2)}
    for plan in plans:
        for a in plan.actions:
            if isinstance(a, RemoveFile):
                active.discard(a.path)
            elif isinstance(a, AddFile):
                active.add(a.path)
    return active


def assert_retried_and_committed(
    path: Path,
    loser_txn: OptimisticTransaction,
    loser_plan: Planned,
    loser_op: str,
    winner_txn: OptimisticTransaction,
    winner_plan: Planned,
    winner_op: str,
    level: str,
) -> None:
    try:
        version = loser_plan.commit(loser_txn)
    except DeltaConcurrentModificationException as exc:
        pytest.fail(f"expected a retry to version {RETRIED}, got {type(exc).__name__}: {exc}")
    assert version == RETRIED
    assert loser_txn.attempts == 2
    assert loser_txn.conflicts_checked == [WINNER_VERSION]
    assert commit_versions(path) == [0, READ_VERSION, WINNER_VERSION, RETRIED]
    winner_level = WS if level == SI else level  # SI is only asked for by the loser
    assert_commit(path, WINNER_VERSION, winner_txn, winner_plan, winner_op, winner_level)
    assert_commit(path, RETRIED, loser_txn, loser_plan, loser_op, level)
    # The table loads, with both commits applied.
    snapshot = DeltaLog(str(path)).update()
    assert snapshot.version == RETRIED
    assert {f.path for f in snapshot.all_files()} == expected_state([winner_plan, loser_plan])
    for tag, op in (("winner", winner_op), ("loser", loser_op)):
        if op == META:
            assert snapshot.metadata.configuration[f"airflow_delta.test.{tag}"] == "true"
        if op == PROTO:
            protocol = snapshot.protocol
            assert (protocol.min_reader_version, protocol.min_writer_version) == (1, 3)
        if op == TXN:
            assert snapshot.transactions == {APP_ID: 0}


def assert_conflict(
    path: Path,
    loser_txn: OptimisticTransaction,
    loser_plan: Planned,
    winner_plan: Planned,
    expected: type[DeltaConcurrentModificationException],
) -> None:
    with pytest.raises(DeltaConcurrentModificationException) as err:
        loser_plan.commit(loser_txn)
    assert type(err.value) is expected, (
        f"expected {expected.__name__}, got {type(err.value).__name__}: {err.value}"
    )
    message = str(err.value)
    assert str(path) in message
    assert re.search(rf"\bversion {WINNER_VERSION}\b", message), message
    assert winner_plan.operation.name in message
    # No extra commit: the log ends at the winner's version and holds nothing of the loser.
    assert commit_versions(path) == [0, READ_VERSION, WINNER_VERSION]
    assert DeltaLog(str(path)).update().version == WINNER_VERSION
    assert not loser_txn.committed
    for version in commit_versions(path):
        assert loser_txn.txn_id not in (path / "_delta_log" / f"{version:020d}.json").read_text()


def _case_id(key: tuple[str, str, str]) -> str:
    loser, winner, level = key
    return f"{loser}-vs-{winner}-{level}"


@pytest.mark.parametrize("case", sorted(EXPECTED), ids=_case_id)
def test_conflict_matrix(tmp_path: Path, case: tuple[str, str, str]) -> None:
    loser, winner, level = case
    expected = EXPECTED[case]
    _, loser_txn, loser_plan, winner_txn, winner_plan = run_concurrently(
        tmp_path, (OPS[loser], "a"), (OPS[winner], "a"), level
    )
    if isinstance(expected, int):
        assert_retried_and_committed(
            tmp_path, loser_txn, loser_plan, loser, winner_txn, winner_plan, winner, level
        )
    else:
        assert_conflict(tmp_path, loser_txn, loser_plan, winner_plan, expected)


# -- disjoint partitions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loser", "winner"),
    [
        ((read_append, "a"), (delete_partition, "b")),
        ((delete_partition, "b"), (read_append, "a")),
    ],
    ids=["append-a-loses-to-delete-b", "delete-b-loses-to-append-a"],
)
def test_append_after_read_and_delete_of_other_partition_both_succeed(
    tmp_path: Path, loser, winner
) -> None:
    """Serializable: reading and appending to 'a' vs deleting 'b' never overlap."""
    _, loser_txn, loser_plan, _, winner_plan = run_concurrently(tmp_path, loser, winner, SER)
    assert loser_plan.commit(loser_txn) == RETRIED
    snapshot = DeltaLog(str(tmp_path)).update()
    assert snapshot.version == RETRIED
    paths = {f.path for f in snapshot.all_files()}
    assert paths == expected_state([winner_plan, loser_plan])
    assert {f.partition_values["part"] for f in snapshot.all_files()} == {"a"}
    assert len(paths) == 3  # a1, a2 and the new append to 'a'


@pytest.mark.parametrize("level", [SER, WS])
@pytest.mark.parametrize(
    "winner",
    [
        blind_append,
        read_append,
        overwrite_partition,
        compaction,
        delete_partition,
        same_app_txn,
        dml_delete,
        dml_update,
        optimize_partition,
    ],
)
@pytest.mark.parametrize(
    "loser",
    [read_append, overwrite_partition, compaction, dml_delete, dml_update, optimize_partition],
)
def test_winner_in_another_partition_does_not_conflict(
    tmp_path: Path, loser, winner, level: str
) -> None:
    """A winner that only changes partition 'b' never fails a transaction that read 'a'."""
    _, loser_txn, loser_plan, _, winner_plan = run_concurrently(
        tmp_path, (loser, "a"), (winner, "b"), level
    )
    assert loser_plan.commit(loser_txn) == RETRIED
    snapshot = DeltaLog(str(tmp_path)).update()
    assert snapshot.version == RETRIED
    assert {f.path for f in snapshot.all_files()} == expected_state([winner_plan, loser_plan])


# -- isolation level plumbing and the remaining rules ------------------------------------------


@pytest.mark.parametrize(
    ("table_level", "override", "expected"),
    [
        (None, None, RETRIED),  # the default level is WriteSerializable
        (None, SER, CA),
        (WS, SER, CA),
        (SER, WS, RETRIED),
        (SER, IsolationLevel.WRITE_SERIALIZABLE, RETRIED),
        (SER, None, CA),
    ],
)
def test_isolation_level_from_commit_properties_overrides_the_table(
    tmp_path: Path, table_level, override, expected
) -> None:
    """Append-after-read vs a concurrent blind append, level via CommitProperties."""
    log = make_table(tmp_path, table_level)
    snapshot = log.update()
    loser_txn = log.start_transaction(snapshot, CommitProperties(isolation_level=override))
    plan = read_append(loser_txn, "loser")
    winner_txn = log.start_transaction(snapshot)
    winner_plan = blind_append(winner_txn, "winner")
    assert winner_plan.commit(winner_txn) == WINNER_VERSION
    if expected == RETRIED:
        assert plan.commit(loser_txn) == RETRIED
        level = override or table_level or WS
        assert commit_lines(tmp_path, RETRIED)[0]["commitInfo"]["isolationLevel"] == level
    else:
        assert_conflict(tmp_path, loser_txn, plan, winner_plan, expected)


def test_write_serializable_checks_blind_appends_when_we_change_metadata(tmp_path: Path) -> None:
    """WriteSerializable ignores a blind append unless our transaction changes the metadata."""
    log = make_table(tmp_path, WS)
    snapshot = log.update()
    loser_txn = log.start_transaction(snapshot)
    metadata_change(loser_txn, "loser")
    plan = read_append(loser_txn, "loser")
    winner_txn = log.start_transaction(snapshot)
    winner_plan = blind_append(winner_txn, "winner")
    assert winner_plan.commit(winner_txn) == WINNER_VERSION
    assert_conflict(tmp_path, loser_txn, plan, winner_plan, CA)


def test_write_serializable_blind_append_elsewhere_with_metadata_change(tmp_path: Path) -> None:
    """...but the blind append must still match our read predicate to conflict."""
    log = make_table(tmp_path, WS)
    snapshot = log.update()
    loser_txn = log.start_transaction(snapshot)
    metadata_change(loser_txn, "loser")
    plan = read_append(loser_txn, "loser", "a")
    winner_txn = log.start_transaction(snapshot)
    winner_plan = blind_append(winner_txn, "winner", "b")
    assert winner_plan.commit(winner_txn) == WINNER_VERSION
    assert plan.commit(loser_txn) == RETRIED


def test_both_deleting_the_same_file_without_reading_it(tmp_path: Path) -> None:
    """A remove of a file the loser did not record as read -> ConcurrentDeleteDeleteException."""
    log = make_table(tmp_path, SER)
    snapshot = log.update()
    target = next(f for f in snapshot.all_files() if f.partition_values["part"] == "b")
    loser_txn = log.start_transaction(snapshot)
    winner_txn = log.start_transaction(snapshot)
    delete = Operation("DELETE", {"predicate": "[]"})
    assert winner_txn.commit([target.remove(_now())], delete) == WINNER_VERSION
    assert_conflict(
        tmp_path, loser_txn, Planned([target.remove(_now())], delete), Planned([], delete), CDD
    )


def test_different_app_ids_do_not_conflict(tmp_path: Path) -> None:
    log = make_table(tmp_path, SER)
    snapshot = log.update()
    loser_txn = log.start_transaction(snapshot)
    version = loser_txn.txn_version("other-app") + 1
    winner_txn = log.start_transaction(snapshot)
    winner_plan = same_app_txn(winner_txn, "winner")
    assert winner_plan.commit(winner_txn) == WINNER_VERSION
    actions = [_new_file("loser", "a"), SetTransaction("other-app", version)]
    assert loser_txn.commit(actions, Operation("STREAMING UPDATE")) == RETRIED
    assert DeltaLog(str(tmp_path)).update().transactions == {APP_ID: 0, "other-app": 0}


@pytest.mark.parametrize(("loser_domain", "expected"), [("shared", CT), ("mine", RETRIED + 1)])
def test_domain_metadata_conflicts_on_the_same_domain(
    tmp_path: Path, loser_domain: str, expected: Outcome
) -> None:
    log = make_table(tmp_path, SER)
    features = Protocol(1, 7, None, ["appendOnly", "domainMetadata", "invariants"])
    log.start_transaction().commit([features], Operation("UPGRADE PROTOCOL"))  # version 2
    snapshot = log.update()
    loser_txn = log.start_transaction(snapshot)
    winner_txn = log.start_transaction(snapshot)
    op = Operation("DOMAIN METADATA")
    winner_plan = Planned([DomainMetadata("shared", '{"w":1}')], op)
    assert winner_txn.commit(winner_plan.actions, op) == WINNER_VERSION + 1
    loser_actions: list[Action] = [DomainMetadata(loser_domain, '{"l":1}')]
    if expected == CT:
        with pytest.raises(DeltaConcurrentModificationException) as err:
            loser_txn.commit(loser_actions, op)
        assert type(err.value) is CT
        assert str(tmp_path) in str(err.value)
        assert commit_versions(tmp_path) == [0, 1, 2, 3]
    else:
        assert loser_txn.commit(loser_actions, op) == expected
