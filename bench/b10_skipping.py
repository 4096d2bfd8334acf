"""B10: data skipping, a ~1% selective read on a non-partition column of a 10k-file table.

The table: one commit of 10,000 adds over 10 `date` partitions, file `i` holding ids
[i*1000, i*1000+999] (stats numRecords/minValues/maxValues/nullCount for `id` and `name`). The
log is written directly; the data files are never opened (both systems select files from the
log's statistics). The predicate `id >= 5000000 AND id < 5100000` matches 100 files. Each
repetition runs in a fresh process; the child times load + file selection (imports excluded):

* ours:      `DeltaLog.for_table(p).start_transaction().filter_files_arrow(PREDICATE)`
* deltalake: `DeltaTable(p).to_pyarrow_dataset().get_fragments(filter=...)`, the fragments
  its pyarrow dataset would open for that filter (stats become each fragment's guarantee).

Requirements: files kept <= deltalake's fragments, and never fewer than the 100 that match.
"""

from __future__ import annotations

import json
from pathlib import Path
from time import perf_counter

ID = "B10"
TITLE = "data skipping: a ~1% selective read on a 10k-file table (files kept, load + select)"
TARGET = 1.0
HEADLINE = "load+select"
FILES = 10_000
ROWS = 1000
LOW, HIGH = 5_000_000, 5_100_000
PREDICATE = f"id >= {LOW} AND id < {HIGH}"
MATCHING = (HIGH - LOW) // ROWS


def _ours(path: str) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import DeltaLog

    t1 = perf_counter()
    txn = DeltaLog.for_table(path).start_transaction()
    files = len(txn.filter_files_arrow(PREDICATE))
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "files": files}


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    t1 = perf_counter()
    dataset = DeltaTable(path).to_pyarrow_dataset()
    expression = (ds.field("id") >= LOW) & (ds.field("id") < HIGH)
    files = len(list(dataset.get_fragments(filter=expression)))
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "files": files}


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}


def build(table: Path) -> None:
    """Write the table's log directly: one commit of FILES adds with stats."""
    from bench.tables import created_log_actions, write_log_commit

    ts = 1_700_000_000_000
    actions = created_log_actions("b10", ts, "WRITE")
    for i in range(FILES):
        date = f"2024-01-{i % 10 + 1:02d}"
        stats = {
            "numRecords": ROWS,
            "minValues": {"id": i * ROWS, "name": f"a{i:05d}"},
            "maxValues": {"id": i * ROWS + ROWS - 1, "name": f"z{i:05d}"},
            "nullCount": {"id": 0, "name": 0},
        }
        add = {
            "path": f"date={date}/part-{i:05d}.snappy.parquet",
            "partitionValues": {"date": date},
            "size": 65536 + i,
            "modificationTime": ts,
            "dataChange": True,
            "stats": json.dumps(stats, separators=(",", ":")),
        }
        actions.append({"add": add})
    write_log_commit(table / "_delta_log", 0, actions)


_METRICS = {"total": HEADLINE, "import": "import (not timed above)"}


def run(reps: int = 7):
    from bench.common import REPO, SYSTEMS, BenchResult, record, run_child

    table = REPO / "bench" / ".data" / "b10-skipping-10k"
    if not (table / "_delta_log" / f"{0:020d}.json").exists():
        build(table)
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    kept: dict[str, set[int]] = {s: set() for s in SYSTEMS}
    for system in SYSTEMS:  # warm-up (discarded)
        run_child("b10_skipping", system, table)
    for rep in range(reps):
        for system in SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]:
            sample = run_child("b10_skipping", system, table)
            kept[system].add(sample["files"])
            record(result, system, sample, _METRICS)
    ours, theirs = max(kept["ours"]), min(kept["deltalake"])
    result.info["files_kept"] = {"ours": ours, "deltalake": theirs, "matching": MATCHING}
    if ours > theirs:
        result.failed_requirements.append(f"ours keeps {ours} files, deltalake {theirs}")
    if min(kept["ours"]) < MATCHING:
        result.failed_requirements.append(f"ours dropped matching files ({min(kept['ours'])})")
    result.notes.append(
        f"{PREDICATE} over {FILES} files ({MATCHING} match): files kept ours {ours}, "
        f"deltalake fragments {theirs}; fresh process per repetition"
    )
    return result
