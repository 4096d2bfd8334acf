"""OPTIMIZE beside appends and deletes, in separate processes (spawned, not threads) on one
local table: nothing appended is lost or duplicated, every deleted row is gone, and the log
replays (from the JSON commits and from a checkpoint) to the rows deltalake reads too.

Appenders blind-append batches of fresh ids; a deleter deletes seed rows one id at a time; an
optimizer compacts (and once Z-orders) the table in a loop. OPTIMIZE and DELETE may lose a
conflict to each other (Delta's rules: a DELETE fails on a concurrent compaction's adds to what
it read, a compaction on a concurrent remove of a file it rewrites); the loser runs again on a
fresh snapshot, as an Airflow retry would.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
from collections import Counter
from pathlib import Path

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import DeltaConcurrentModificationException

APPENDERS = 2
APPENDS = 8
ROWS_PER_APPEND = 5
SEED = 40
DELETED = list(range(0, SEED, 4))  # ten seed ids


def _appender(uri: str, worker: int, optimized: multiprocessing.synchronize.Event) -> None:
    """Half the appends, then (once the optimizer has committed, so that the two interleave
    however busy the machine is) the other half."""
    from tests.engine.commands.dml_tables import append, batch

    for n in range(APPENDS):
        if n == APPENDS // 2 and not optimized.wait(timeout=240):
            raise TimeoutError("the optimizer did not commit within 240 s")
        first = 1000 * (worker + 1) + n * ROWS_PER_APPEND
        append(uri, batch(range(first, first + ROWS_PER_APPEND)))


def _retry(command, *args, **kwargs) -> int:  # type: ignore[no-untyped-def]
    """Run a command until it does not lose a conflict; the conflicts lost."""
    lost = 0
    while True:
        try:
            command(*args, **kwargs)
            return lost
        except DeltaConcurrentModificationException:
            lost += 1
            if lost > 50:
                raise


def _deleter(uri: str, counts: multiprocessing.Queue) -> None:
    from airflow_delta.engine import delete

    counts.put(("delete", sum(_retry(delete, uri, f"id = {i}") for i in DELETED)))


def _optimizer(
    uri: str,
    counts: multiprocessing.Queue,
    rounds: int,
    optimized: multiprocessing.synchronize.Event,
) -> None:
    from airflow_delta.engine import optimize

    lost = 0
    for n in range(rounds):
        zorder = ["k", "id"] if n == rounds // 2 else None
        lost += _retry(optimize, uri, zorder_by=zorder, min_file_size=10**9)
        optimized.set()
    counts.put(("optimize", lost))


def test_optimize_beside_appends_and_deletes_loses_nothing(tmp_path: Path) -> None:
    from tests.engine.commands.dml_tables import batch, create, deltalake_rows, engine_rows

    seed = [batch(range(i, i + 4)) for i in range(0, SEED, 4)]
    uri = create(tmp_path / "t", *seed, dv=True)
    context = multiprocessing.get_context("spawn")
    counts: multiprocessing.Queue = context.Queue()
    optimized = context.Event()
    processes = [
        context.Process(target=_appender, args=(uri, w, optimized)) for w in range(APPENDERS)
    ]
    processes.append(context.Process(target=_deleter, args=(uri, counts)))
    processes.append(context.Process(target=_optimizer, args=(uri, counts, 6, optimized)))
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=300)
    assert [p.exitcode for p in processes] == [0] * len(processes)
    lost = dict(counts.get(timeout=5) for _ in range(2))

    appended = {
        1000 * (w + 1) + n * ROWS_PER_APPEND + r
        for w in range(APPENDERS)
        for n in range(APPENDS)
        for r in range(ROWS_PER_APPEND)
    }
    expected = Counter(appended | (set(range(SEED)) - set(DELETED)))
    ours = engine_rows(uri)
    assert Counter(r[0] for r in ours) == expected, lost
    assert deltalake_rows(uri) == ours

    log = DeltaLog(uri)
    snapshot = log.update()
    history = log.history()
    operations = Counter(h["operation"] for h in history)
    assert operations["WRITE"] == APPENDERS * APPENDS + len(seed)
    assert operations["DELETE"] == len(DELETED)
    assert operations["OPTIMIZE"] >= 1
    ordered = [h["operation"] for h in reversed(history)]
    first_optimize = ordered.index("OPTIMIZE")
    assert "WRITE" in ordered[first_optimize:] or "DELETE" in ordered[first_optimize:], ordered
    assert [h["version"] for h in history] == list(range(snapshot.version, -1, -1))
    log.checkpoint(snapshot)
    replayed = DeltaLog(uri).update()
    assert replayed.version == snapshot.version
    assert {f.path for f in replayed.all_files()} == {f.path for f in snapshot.all_files()}
    assert engine_rows(uri) == ours
