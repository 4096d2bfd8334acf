"""B12: OPTIMIZE (bin-packing compaction) of 2,000 small files: 2M rows in 20 partitions.

The table (built once by deltalake, cached): 100 appends of 20,000 rows, each writing one file
into each of 20 `part` partitions. Each repetition compacts a fresh copy (the copy is not
timed), in a fresh process, imports excluded:

* ours:      `airflow_delta.engine.optimize(p)`
* deltalake: `DeltaTable(p).optimize.compact()`

Checks: both remove the 2,000 files and leave 2M rows in one file per partition.
"""

from __future__ import annotations

from time import perf_counter

ID = "B12"
TITLE = "OPTIMIZE compaction: 2,000 small files (2M rows, 20 partitions)"
TARGET = 1.0
HEADLINE = "optimize"
APPENDS, ROWS, PARTS = 100, 20_000, 20


def _ours(path: str) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import optimize

    t1 = perf_counter()
    metrics = optimize(path).metrics
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "removed": metrics["numRemovedFiles"]}


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    metrics = DeltaTable(path).optimize.compact()
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "removed": metrics["numFilesRemoved"]}


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}


def build(table) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    for n in range(APPENDS):
        ids = np.arange(n * ROWS, (n + 1) * ROWS, dtype=np.int64)
        data = pa.table({"id": ids, "value": ids * 0.5, "part": (ids % PARTS).astype(np.int32)})
        write_deltalake(str(table), data, partition_by=["part"], mode="append")


def run(reps: int = 3):
    from bench.common import REPO, BenchResult
    from bench.tables import run_on_copies

    table = REPO / "bench" / ".data" / "b12-optimize-2000"
    if not (table / "_delta_log" / f"{APPENDS - 1:020d}.json").exists():
        build(table)
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})

    def check(system: str, sample: dict) -> None:
        if sample["removed"] != APPENDS * PARTS:
            raise RuntimeError(f"B12 {system}: removed {sample['removed']} files")

    run_on_copies(result, "b12_optimize", table, min(reps, 5), HEADLINE, check)
    result.notes.append(
        "ours: engine.optimize(p); deltalake: DeltaTable(p).optimize.compact(); fresh process "
        "and fresh table copy per repetition (copy not timed)"
    )
    return result
