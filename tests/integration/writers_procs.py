"""Process entry points for the concurrency and crash tests (run with the `spawn` start method).

Every worker is a module-level function so that a spawned child can import it by name.
`run_workers` starts them all, lets them meet at a barrier so they really contend, and
collects what each returns (or the traceback it died with).

`crash_writer` is the writer the crash tests kill with SIGKILL: it commits in a loop until
killed, and leaves markers in a file saying how far it got.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_delta.engine import AddFile, DeltaLog, Operation, SetTransaction
from tests.waiting import wait_until

APPEND = Operation("WRITE", {"mode": "Append"})
#: Schema of the tables both engines append to: what deltalake writes for `small_table`.
MIXED_SCHEMA = pa.schema([("id", pa.int64()), ("who", pa.string()), ("seq", pa.int64())])
#: Seconds a worker waits at the barrier for the others (still starting: a spawned Python
#: importing the engine takes a while on a loaded machine).
BARRIER_TIMEOUT = 600
#: Seconds `run_workers` gives all its workers together, start-up included. Generous: it only
#: turns a hang into a failure (tests using it have a pytest timeout above it).
WORKERS_TIMEOUT = 600


def small_table(who: str, seq: int) -> pa.Table:
    """One row naming its writer and sequence number."""
    return pa.table(
        {"id": [seq], "who": [who], "seq": [seq]},
        schema=MIXED_SCHEMA,
    )


def fake_add(path: str, rows: int = 1) -> AddFile:
    """An AddFile for a data file that need not exist (log-only tests)."""
    return AddFile(
        path=path,
        partition_values={},
        size=100,
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=json.dumps({"numRecords": rows}),
    )


# -- harness ------------------------------------------------------------------------------


def _entry(
    fn: Callable[..., Any], barrier: Any, queue: Any, idx: int, args: tuple[Any, ...]
) -> None:
    try:
        queue.put((idx, "ok", fn(barrier, *args)))
    except BaseException:  # everything goes back to the test
        queue.put((idx, "error", traceback.format_exc()))


def run_workers(
    jobs: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]], timeout: float = WORKERS_TIMEOUT
) -> list[Any]:
    """Run each `fn(barrier, *args)` in its own spawned process; their results, in order.

    Raises AssertionError with the child's traceback when a worker fails, dies or hangs.
    """
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(jobs))
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_entry, args=(fn, barrier, queue, i, args), daemon=True)
        for i, (fn, args) in enumerate(jobs)
    ]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) + len(errors) < len(jobs):
            try:
                idx, status, value = queue.get(timeout=1)
            except Exception:  # queue.Empty
                # A worker that exited without an answer died (a worker may also end badly
                # after it answered: deltalake can abort at exit).
                dead = [
                    p
                    for i, p in enumerate(procs)
                    if i not in results and i not in errors and p.exitcode not in (None, 0)
                ]
                if dead:
                    # its answer is written before it exits: give the queue a moment to show it
                    with contextlib.suppress(TimeoutError):
                        wait_until(lambda: not queue.empty(), timeout=10)
                    if queue.empty():
                        raise AssertionError(
                            f"worker(s) died: {[(p.pid, p.exitcode) for p in dead]}"
                        ) from None
                if time.monotonic() > deadline:
                    raise AssertionError(f"workers did not finish within {timeout} s") from None
                continue
            if status == "ok":
                results[idx] = value
            else:
                errors[idx] = f"worker {idx}:\n{value}"
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise AssertionError("\n".join(errors[i] for i in sorted(errors)))
    return [results[i] for i in range(len(jobs))]


# -- workers --------------------------------------------------------------------------------


def engine_appends(
    barrier: Any,
    uri: str,
    storage_options: dict[str, str] | None,
    n: int,
    who: str,
    real_data: bool = False,
) -> dict[str, Any]:
    """`n` blind appends of one file each, one transaction per append.

    With `real_data`, each file is a one-row parquet file (`small_table`) in the table
    directory (local tables only), so that every engine can read the rows.
    """
    log = DeltaLog.for_table(uri, storage_options)
    barrier.wait(BARRIER_TIMEOUT)
    started = time.monotonic()
    versions, paths, attempts, max_attempts = [], [], 0, 0
    for i in range(n):
        name = f"{who}-{i:04d}-{uuid.uuid4().hex[:8]}.parquet"
        if real_data:
            full = os.path.join(uri, name)
            pq.write_table(small_table(who, i), full)
            add = fake_add(name)
            add.size = os.path.getsize(full)
        else:
            add = fake_add(name)
        txn = log.start_transaction()
        versions.append(txn.commit([add], APPEND))
        paths.append(name)
        attempts += txn.attempts
        max_attempts = max(max_attempts, txn.attempts)
    return {
        "who": who,
        "versions": versions,
        "paths": paths,
        "attempts": attempts,
        "max_attempts": max_attempts,
        "seconds": time.monotonic() - started,
    }


def engine_appends_for(barrier: Any, uri: str, seconds: float, who: str) -> dict[str, Any]:
    """Blind appends of one file each, back to back for `seconds`; failed commits counted.

    Returns the paths committed, the attempts of each commit and the CommitFailedError
    messages (a failed append is not retried: the failures are what is measured).
    """
    from airflow_delta.engine.errors import CommitFailedError

    log = DeltaLog.for_table(uri)
    barrier.wait(BARRIER_TIMEOUT)
    end = time.monotonic() + seconds
    paths, attempts, failed, slowest = [], [], [], 0.0
    while time.monotonic() < end:
        add = fake_add(f"{who}-{len(paths) + len(failed):05d}-{uuid.uuid4().hex[:8]}.parquet")
        started = time.monotonic()
        txn = log.start_transaction()
        try:
            txn.commit([add], APPEND)
            paths.append(add.path)
        except CommitFailedError as exc:
            failed.append(" ".join(str(exc).split("\n")[:1] + str(exc).split("\n")[3:8]))
        attempts.append(txn.attempts)
        slowest = max(slowest, time.monotonic() - started)
    return {"who": who, "paths": paths, "attempts": attempts, "failed": failed, "slowest": slowest}


def deltalake_appends(barrier: Any, uri: str, n: int, who: str) -> dict[str, Any]:
    """`n` appends of one row each through deltalake's `write_deltalake`.

    When deltalake gives up on a commit under contention (its CommitFailedError, after its
    own retry limit) the same append is tried again, so exactly `n` appends land; the give-ups
    are counted and returned.
    """
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    barrier.wait(BARRIER_TIMEOUT)
    started = time.monotonic()
    gave_up: list[str] = []
    for i in range(n):
        data = small_table(who, i)
        while True:
            try:
                write_deltalake(uri, data, mode="append")
                break
            except CommitFailedError as exc:
                gave_up.append(str(exc).splitlines()[0][:200])
                if len(gave_up) > 20 * n:
                    raise
    return {"who": who, "gave_up": gave_up, "seconds": time.monotonic() - started}


def idempotent_rounds(barrier: Any, uri: str, app_id: str, rounds: int, who: str) -> list[Any]:
    """For each version v: all workers race to commit (app_id, v) once, checked by txn_version.

    Returns per round ("committed", version), ("skipped", seen) or ("conflict", error name).
    """
    from airflow_delta.engine.errors import ConcurrentTransactionException

    log = DeltaLog.for_table(uri)
    outcomes: list[Any] = []
    for v in range(rounds):
        barrier.wait(BARRIER_TIMEOUT)
        txn = log.start_transaction()
        seen = txn.txn_version(app_id)
        if seen >= v:
            outcomes.append(("skipped", seen))
            continue
        actions = [
            fake_add(f"{who}-txn-{v}-{uuid.uuid4().hex[:8]}.parquet"),
            SetTransaction(app_id, v, int(time.time() * 1000)),
        ]
        try:
            outcomes.append(("committed", txn.commit(actions, APPEND)))
        except ConcurrentTransactionException as exc:
            outcomes.append(("conflict", type(exc).__name__))
    return outcomes


# -- the writer the crash tests kill --------------------------------------------------------


def crash_writer(uri: str, seed: int, journal: str, markers: str, checkpoint_parts: int) -> None:
    """Commit forever: mostly 1-5 files, a quarter of the commits 2000 files (a long write).

    Writes `ready` to the `markers` file once started, then announces each commit (`C <n>`,
    `V <version>` when it returned) and each file write to the log (`W <name> <bytes>`, or
    `W <name> parquet` for a checkpoint part, `w` when done; the writes themselves are the
    engine's), and journals each commit after it
    returns (`{"version", "n",
    "first"}`, one line, one write). With `checkpoint_parts` > 0 it also writes multi-part
    checkpoints of that part size (`K <version>` / `k`), besides the table's interval
    checkpoints. An unexpected error is written to `markers` as `E <traceback>`.
    """
    import random

    fd = os.open(markers, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(text: str) -> None:
        os.write(fd, (text + "\n").encode())

    try:
        rng = random.Random(seed)
        log = DeltaLog.for_table(uri)
        write = log.store.write

        def announced_write(path: str, data: bytes, overwrite: bool = False) -> None:
            emit(f"W {os.path.basename(path)} {len(data)}")
            write(path, data, overwrite)
            emit("w")

        write_parquet = log.store.write_parquet

        def announced_write_parquet(path: str, tables: Any, schema: Any, **options: Any) -> int:
            emit(f"W {os.path.basename(path)} parquet")
            size = write_parquet(path, tables, schema, **options)
            emit("w")
            return size

        log.store.write = announced_write  # type: ignore[method-assign]
        log.store.write_parquet = announced_write_parquet  # type: ignore[method-assign]
        out = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        emit("ready")
        i = 0
        while True:
            n = 2000 if rng.random() < 0.25 else rng.randint(1, 5)
            run = uuid.uuid4().hex[:12]
            adds = [fake_add(f"w-{run}-{k:05d}.parquet") for k in range(n)]
            emit(f"C {n}")
            version = log.start_transaction().commit(adds, APPEND)
            emit(f"V {version}")
            line = json.dumps({"version": version, "n": n, "first": adds[0].path}) + "\n"
            os.write(out, line.encode())
            if checkpoint_parts and i % 2 == 1:
                snapshot = log.update()
                emit(f"K {snapshot.version}")
                log.checkpoint(snapshot, part_size=checkpoint_parts)
                emit("k")
            i += 1
    except BaseException:
        emit("E " + traceback.format_exc().replace("\n", " | "))
        raise
