"""B14: RESTORE over 1,000 versions: back from version 1,000 to version 500.

The table (built once, cached): version 0 creates it, then 1,000 commits of one small file each
(real parquet files, written by the engine's commit API, which checkpoints every 10 versions:
the log holds 1,000 commits and 100 checkpoints, `_last_checkpoint` at 1,000). Each repetition
restores a fresh copy (not timed) in a fresh process, imports excluded:

* ours:      `airflow_delta.engine.restore(p, version=500)`
* deltalake: `DeltaTable(p).restore(500)`

Checks: 500 files removed by both.
"""

from __future__ import annotations

from time import perf_counter

ID = "B14"
TITLE = "RESTORE over 1,000 versions (1,000 -> 500), no checkpoint"
TARGET = 0.5
HEADLINE = "restore"
COMMITS, TO = 1000, 500


def _ours(path: str) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import restore

    t1 = perf_counter()
    metrics = restore(path, TO).metrics
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "removed": metrics["numRemovedFiles"]}


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    metrics = DeltaTable(path).restore(TO)
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "removed": metrics["numRemovedFile"]}


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}


def build(table) -> None:
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_delta.engine import AddFile, DeltaLog, Operation

    log = DeltaLog.create_table(str(table), pa.schema([("id", pa.int64())]))
    for n in range(1, COMMITS + 1):
        name = f"part-{n:05d}.parquet"
        pq.write_table(pa.table({"id": pa.array([n], pa.int64())}), table / name)
        stats = f'{{"numRecords":1,"minValues":{{"id":{n}}},"maxValues":{{"id":{n}}}}}'
        add = AddFile(name, {}, size=os.path.getsize(table / name), stats=stats)
        log.start_transaction().commit([add], Operation("WRITE", {"mode": "Append"}))


def run(reps: int = 3):
    from bench.common import REPO, BenchResult
    from bench.tables import run_on_copies

    table = REPO / "bench" / ".data" / "b14-restore-1000"
    if not (table / "_delta_log" / f"{COMMITS:020d}.json").exists():
        build(table)
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})

    def check(system: str, sample: dict) -> None:
        if sample["removed"] != COMMITS - TO:
            raise RuntimeError(f"B14 {system}: removed {sample['removed']} files")

    run_on_copies(result, "b14_restore", table, min(reps, 5), HEADLINE, check)
    result.notes.append(
        "ours: engine.restore(p, 500); deltalake: DeltaTable(p).restore(500); fresh process "
        "and fresh table copy per repetition (copy not timed)"
    )
    return result
