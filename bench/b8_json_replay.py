"""B8: replay a log whose state lives in JSON commits (no checkpoint), then count the files.

The table: version 0 creates it (partitioned by `date`), then 100 commits of 1,000 adds and
100 removes each (of files the commit before added), as big MERGE/overwrite commits write them
between checkpoints; about 40 MB of JSON, 90,100 active files. Each repetition runs in a
fresh process; the child times load + count (imports excluded). Comparable calls:

* ours:      `len(DeltaLog.for_table(p).update().files())`
* deltalake: `len(DeltaTable(p).file_uris())`
"""

from __future__ import annotations

import json
from pathlib import Path
from time import perf_counter

ID = "B8"
TITLE = "JSON replay: 100 commits x (1,000 adds + 100 removes), no checkpoint, load + count"
TARGET = 0.5
HEADLINE = "load+count"
COMMITS = 100
ADDS = 1000
REMOVES = 100
ACTIVE = COMMITS * (ADDS - REMOVES)


def _ours(path: str) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import DeltaLog

    t1 = perf_counter()
    snap = DeltaLog.for_table(path).update()
    files = len(snap.files())
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "version": snap.version, "files": files}


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    dt = DeltaTable(path)
    files = len(dt.file_uris())
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "version": dt.version(), "files": files}


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}


def build(table: Path) -> None:
    """Write the table's log directly (the data files are never read)."""
    from bench.tables import created_log_actions, write_log_commit

    log = table / "_delta_log"
    write_log_commit(log, 0, created_log_actions("b8", 1_700_000_000_000, "CREATE TABLE"))
    for version in range(1, COMMITS + 1):
        ts = 1_700_000_000_000 + version * 60_000
        actions: list[dict] = [{"commitInfo": {"timestamp": ts, "operation": "MERGE"}}]
        for i in range(ADDS):
            date = f"2024-01-{i % 28 + 1:02d}"
            stats = {
                "numRecords": 1000,
                "minValues": {"id": i * 1000, "name": "a"},
                "maxValues": {"id": i * 1000 + 999, "name": "z"},
                "nullCount": {"id": 0, "name": 0},
            }
            actions.append(
                {
                    "add": {
                        "path": f"date={date}/part-{version:05d}-{i:05d}.snappy.parquet",
                        "partitionValues": {"date": date},
                        "size": 65536 + i,
                        "modificationTime": ts,
                        "dataChange": True,
                        "stats": json.dumps(stats),
                    }
                }
            )
        if version > 1:
            for i in range(REMOVES):
                date = f"2024-01-{i % 28 + 1:02d}"
                actions.append(
                    {
                        "remove": {
                            "path": f"date={date}/part-{version - 1:05d}-{i:05d}.snappy.parquet",
                            "deletionTimestamp": ts,
                            "dataChange": True,
                            "extendedFileMetadata": True,
                            "partitionValues": {"date": date},
                            "size": 65536 + i,
                        }
                    }
                )
        write_log_commit(log, version, actions)


def expected_files() -> int:
    return COMMITS * ADDS - (COMMITS - 1) * REMOVES


_METRICS = {"total": HEADLINE, "import": "import (not timed above)"}


def run(reps: int = 7):
    from bench.common import REPO, SYSTEMS, BenchResult, record, run_child

    table = REPO / "bench" / ".data" / "b8-json-100x1100"
    if not (table / "_delta_log" / f"{COMMITS:020d}.json").exists():
        build(table)
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    for system in SYSTEMS:  # warm-up (discarded)
        run_child("b8_json_replay", system, table)
    for rep in range(reps):
        for system in SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]:
            sample = run_child("b8_json_replay", system, table)
            if sample["version"] != COMMITS or sample["files"] != expected_files():
                raise RuntimeError(f"B8 {system}: wrong snapshot {sample}")
            record(result, system, sample, _METRICS)
    result.notes.append(
        "ours: len(DeltaLog.for_table(p).update().files()); deltalake: "
        "len(DeltaTable(p).file_uris()); fresh process per repetition"
    )
    return result
