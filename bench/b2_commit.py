"""B2: one blind-append commit on the 100k-file table (checkpoint at 100 + 100 commits -> v201).

Each repetition runs in a fresh process on its own fresh copy of the table (each commit changes
it); the child times opening the table + committing one add action (imports excluded and
reported separately). Both sides do log work only -- one add action of a data file that is not
written (neither system checks that it exists):

* ours:      `txn = DeltaLog.for_table(p).start_transaction()` then
             `txn.commit([AddFile(...)], Operation("WRITE", {"mode": "Append"}))`
* deltalake: `dt = DeltaTable(p)` then
             `dt.create_write_transaction([AddAction(...)], "append", schema=dt.schema(), ...)`

`create_write_transaction` is deltalake 1.6.6's cheapest commit of add actions without writing
data: its `without_files=` / `skip_stats=` load options are deprecated and ignored, and turning
its post-commit hooks off (`PostCommitHookProperties(False, False)`) changes nothing measurable.

The commit lands at v201: no checkpoint in the timed commit on either side (ours checkpoints
every `delta.checkpointInterval` = 10 versions, deltalake every 100); each sample checks that.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from time import perf_counter, time

ID = "B2"
TITLE = "one blind-append commit, fresh process (100k-file table: open + commit one add)"
TARGET = 0.2
HEADLINE = "open+commit"

#: The add action both systems commit (the data file does not exist: log work only).
NEW_FILE = "date=2024-01-01/part-00000-b2bench-0000-0000-0000-000000000000.c000.snappy.parquet"
NEW_PARTITION = {"date": "2024-01-01"}
NEW_SIZE = 1234
NEW_STATS = '{"numRecords":1,"minValues":{"id":1},"maxValues":{"id":1},"nullCount":{"id":0}}'


def _ours(path: str) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import AddFile, DeltaLog, Operation

    t1 = perf_counter()
    txn = DeltaLog.for_table(path).start_transaction()
    t2 = perf_counter()
    add = AddFile(NEW_FILE, dict(NEW_PARTITION), NEW_SIZE, int(time() * 1000), True, NEW_STATS)
    version = txn.commit([add], Operation("WRITE", {"mode": "Append"}))
    t3 = perf_counter()
    return _sample(path, version, t0, t1, t2, t3, attempts=txn.attempts)


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    t1 = perf_counter()
    dt = DeltaTable(path)
    t2 = perf_counter()
    add = AddAction(NEW_FILE, NEW_SIZE, dict(NEW_PARTITION), int(time() * 1000), True, NEW_STATS)
    dt.create_write_transaction(
        [add],
        mode="append",
        schema=dt.schema(),
        partition_by=dt.metadata().partition_columns,
    )
    t3 = perf_counter()
    # deltalake does not return the committed version (nor update `dt`): expected read + 1.
    return _sample(path, dt.version() + 1, t0, t1, t2, t3)


def _sample(path, version, t0, t1, t2, t3, attempts=None) -> dict:
    log_dir = Path(path) / "_delta_log"
    return {
        "import": t1 - t0,
        "open": t2 - t1,
        "commit": t3 - t2,
        "total": t3 - t1,
        "version": version,
        "attempts": attempts,
        "commit_file": (log_dir / f"{version:020d}.json").exists(),
        "checkpoints": sorted(p.name for p in log_dir.glob("*.checkpoint*.parquet")),
        "last_checkpoint": json.loads((log_dir / "_last_checkpoint").read_text())["version"],
    }


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}

_METRICS = {
    "total": HEADLINE,
    "open": "open (load for the commit)",
    "commit": "commit",
    "import": "import (not timed above)",
}


def _check(system: str, sample: dict, spec) -> None:
    want = spec.latest_version + 1
    if sample["version"] != want or not sample["commit_file"]:
        raise RuntimeError(f"B2 {system}: commit not at v{want}: {sample}")
    if sample["last_checkpoint"] != spec.checkpoint_version or len(sample["checkpoints"]) != 1:
        raise RuntimeError(f"B2 {system}: the timed commit wrote a checkpoint: {sample}")


def _cross_check(paths: dict[str, str], version: int, files: int) -> list[str]:
    """Each system reads the table the other committed to and finds the new file."""
    from deltalake import DeltaTable

    from airflow_delta.engine import DeltaLog
    from bench.tables import _relative

    snap = DeltaLog.for_table(paths["deltalake"]).update()
    ours_paths = set(snap.files().field("path").to_pylist())
    if snap.version != version or len(ours_paths) != files or NEW_FILE not in ours_paths:
        raise RuntimeError(f"B2: ours reading deltalake's commit: v{snap.version}")
    dt = DeltaTable(paths["ours"])
    dl_paths = {_relative(u, Path(paths["ours"])) for u in dt.file_uris()}
    if dt.version() != version or len(dl_paths) != files or NEW_FILE not in dl_paths:
        raise RuntimeError(f"B2: deltalake reading our commit: v{dt.version()}")
    return [f"cross-read OK: each system reads the other's v{version} commit ({files} files)"]


def run(reps: int = 9):
    import statistics

    from bench.common import SYSTEMS, BenchResult, record, run_child
    from bench.tables import LOG_100K, drop_copy, fresh_copy

    spec = LOG_100K
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    result.info["table"] = spec.key
    result.info["commit_version"] = spec.latest_version + 1
    rss: dict[str, list[float]] = {}
    attempts: list[int] = []
    last: dict[str, str] = {}
    for system in SYSTEMS:  # warm-up (discarded)
        path = fresh_copy(spec, f"b2-{system}")
        _check(system, run_child("b2_commit", system, path), spec)
        drop_copy(path)
    for rep in range(reps):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        for system in order:
            path = fresh_copy(spec, f"b2-{system}")
            sample = run_child("b2_commit", system, path)
            _check(system, sample, spec)
            record(result, system, sample, _METRICS)
            rss.setdefault(system, []).append(sample["maxrss_mb"])
            if sample["attempts"] is not None:
                attempts.append(sample["attempts"])
            if rep < reps - 1:
                drop_copy(path)
            else:
                last[system] = str(path)
            os.sync()  # flush this run's writes before the next run's fresh_copy/fsync
    result.info["ours_attempts"] = attempts
    result.info["peak_rss_mb_median"] = {k: round(statistics.median(v), 1) for k, v in rss.items()}
    result.notes.append(f"peak RSS of the child (median, MB): {result.info['peak_rss_mb_median']}")
    result.notes.append(
        "ours: DeltaLog.for_table(p).start_transaction().commit([AddFile]); deltalake: "
        "DeltaTable(p).create_write_transaction([AddAction], 'append'); log-only (no data "
        f"written); commit at v{spec.latest_version + 1}, no checkpoint on either side; "
        "fresh process and fresh table copy per repetition"
    )
    if len(last) == 2:
        result.notes += _cross_check(last, spec.latest_version + 1, spec.active_files + 1)
    for p in last.values():
        drop_copy(Path(p))
    return result
