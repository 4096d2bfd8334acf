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

The MERGE half runs on a second table of real data: 10,000 files of 100 rows (file `i` holding
ids [i*100, i*100+99], in 10 `date` partitions), and a source of 1,010 rows: 10 ids in each
of files 5000-5099 (1% of the files) and 10 new ids. Both run `t.id = s.id` with update-all
and insert-all on a fresh copy of the table (the copy is not timed):

* ours:      `merge_arrow(p, source, "t.id = s.id")...execute()`, files opened = the candidate
  files the transaction read (`txn.read_files`);
* deltalake: `DeltaTable(p).merge(source, "t.id = s.id", ...)...execute()`; its metrics do not
  count the files it opens (1.6.6 reports 0 scanned, 10,000 skipped), so the files it rewrites
  (`num_target_files_removed`) are reported instead.

Requirement: ours opens only the 100 files the keys can hit.
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


MERGE_FILES, MERGE_ROWS = 10_000, 100
MERGE_HIT = range(5000, 5100)  # the files the source's keys hit


def _merge_source():
    import pyarrow as pa

    ids = [i * MERGE_ROWS + k * 7 for i in MERGE_HIT for k in range(10)]
    ids += [MERGE_FILES * MERGE_ROWS + k for k in range(10)]  # new rows
    dates = [f"2024-01-{(i // MERGE_ROWS) % 10 + 1:02d}" for i in ids]
    return pa.table({"id": ids, "name": [f"new{i}" for i in ids], "date": dates})


def _fresh_copy(path: str) -> str:
    import shutil
    import tempfile

    target = Path(tempfile.mkdtemp(prefix="b10-merge-")) / "table"
    shutil.copytree(path, target)
    return str(target)


def _ours_merge(path: str) -> dict:
    path = _fresh_copy(path)
    source = _merge_source()
    t0 = perf_counter()
    from airflow_delta.engine.commands.merge_in_process import merge_arrow

    t1 = perf_counter()
    builder = merge_arrow(path, source, "t.id = s.id")
    metrics = builder.when_matched_update_all().when_not_matched_insert_all().execute().metrics
    t2 = perf_counter()
    assert builder.transaction is not None
    opened = sum(len(files) for files in builder.transaction.read_files)
    updated = metrics["numTargetRowsUpdated"]
    return {"import": t1 - t0, "total": t2 - t1, "files": opened, "updated": updated}


def _deltalake_merge(path: str) -> dict:
    path = _fresh_copy(path)
    source = _merge_source()
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    merger = DeltaTable(path).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    metrics = merger.when_matched_update_all().when_not_matched_insert_all().execute()
    t2 = perf_counter()
    opened = metrics["num_target_files_removed"]  # its scan metrics count nothing here
    updated = metrics["num_target_rows_updated"]
    return {"import": t1 - t0, "total": t2 - t1, "files": opened, "updated": updated}


CHILD_TASKS = {
    "ours": _ours,
    "deltalake": _deltalake,
    "ours_merge": _ours_merge,
    "deltalake_merge": _deltalake_merge,
}


def build_merge_table(table: Path) -> None:
    """MERGE_FILES parquet files of MERGE_ROWS rows and a log of their adds with stats."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.tables import created_log_actions, write_log_commit

    ts = 1_700_000_000_000
    actions = created_log_actions("b10-merge", ts, "WRITE")
    for i in range(MERGE_FILES):
        date = f"2024-01-{i % 10 + 1:02d}"
        low = i * MERGE_ROWS
        ids = list(range(low, low + MERGE_ROWS))
        path = f"date={date}/part-{i:05d}.snappy.parquet"
        (table / f"date={date}").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": ids, "name": [f"n{j}" for j in ids]}), table / path)
        stats = {
            "numRecords": MERGE_ROWS,
            "minValues": {"id": low, "name": f"n{low}"},
            "maxValues": {"id": low + MERGE_ROWS - 1, "name": f"n{low + MERGE_ROWS - 1}"},
            "nullCount": {"id": 0, "name": 0},
        }
        size = (table / path).stat().st_size
        add = {"path": path, "partitionValues": {"date": date}, "size": size}
        add.update(modificationTime=ts, dataChange=True, stats=json.dumps(stats))
        actions.append({"add": add})
    write_log_commit(table / "_delta_log", 0, actions)


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
MERGE_METRIC = "merge (keys hit 1% of files)"


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
    _run_merge(result, max(3, reps // 2))
    return result


def _run_merge(result, reps: int) -> None:
    from bench.common import REPO, SYSTEMS, record, run_child

    table = REPO / "bench" / ".data" / "b10-merge-10k"
    if not (table / "_delta_log" / f"{0:020d}.json").exists():
        build_merge_table(table)
    opened: dict[str, set[int]] = {s: set() for s in SYSTEMS}
    for rep in range(reps):
        for system in SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]:
            sample = run_child("b10_skipping", f"{system}_merge", table, timeout=600)
            if sample["updated"] != 10 * len(MERGE_HIT):
                raise RuntimeError(f"B10 MERGE {system}: wrong result {sample}")
            opened[system].add(sample["files"])
            record(result, system, sample, {"total": MERGE_METRIC})
    result.info["merge_files"] = {
        "ours_opened": sorted(opened["ours"]),
        "deltalake_rewritten": sorted(opened["deltalake"]),
    }
    if max(opened["ours"]) > len(MERGE_HIT):
        result.failed_requirements.append(
            f"MERGE opened {max(opened['ours'])} files; its keys hit {len(MERGE_HIT)}"
        )
    result.notes.append(
        f"MERGE of 1,010 source rows whose keys hit {len(MERGE_HIT)} of {MERGE_FILES} files: "
        f"files opened ours {sorted(opened['ours'])}; files rewritten deltalake "
        f"{sorted(opened['deltalake'])}"
    )
