"""B15: MERGE into a table with the change data feed on, in process, vs deltalake.

The table (built once by deltalake, `delta.enableChangeDataFeed=true`): 400,000 rows in 4
files. The source: 40,000 rows, half of them matching ids spread over every file, half new.
Each repetition merges into a fresh copy (not timed) in a fresh process, imports excluded;
both write the change data (`_change_data` files with update pre/post images and inserts):

* ours:      `merge_arrow(p, source, "t.id = s.id").when_matched_update_all()
             .when_not_matched_insert_all().execute()`
* deltalake: `DeltaTable(p).merge(source, "t.id = s.id", ...)` with the same clauses

Checks: 20,000 updated and 20,000 inserted by both, and change files written by both.
"""

from __future__ import annotations

from time import perf_counter

ID = "B15"
TITLE = "MERGE into a change-data-feed table (400k rows, 40k source rows), in process"
TARGET = 1.0
HEADLINE = "merge (CDF)"
FILES, ROWS, SOURCE = 4, 100_000, 40_000


def _source():
    import numpy as np
    import pyarrow as pa

    half = SOURCE // 2
    matching = np.arange(half, dtype=np.int64) * (FILES * ROWS // half) + 3
    ids = np.concatenate([matching, FILES * ROWS + np.arange(half)])
    return pa.table({"id": ids, "value": ids * 2.0 + 1})


def _change_files(path: str) -> int:
    from pathlib import Path

    return len(list((Path(path) / "_change_data").rglob("*.parquet")))


def _ours(path: str) -> dict:
    source = _source()
    t0 = perf_counter()
    from airflow_delta.engine.commands.merge_in_process import merge_arrow

    t1 = perf_counter()
    builder = merge_arrow(path, source, "t.id = s.id")
    metrics = builder.when_matched_update_all().when_not_matched_insert_all().execute().metrics
    t2 = perf_counter()
    done = (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"])
    return {"import": t1 - t0, "total": t2 - t1, "done": done, "cdc": _change_files(path)}


def _deltalake(path: str) -> dict:
    source = _source()
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    merger = DeltaTable(path).merge(source, "t.id = s.id", source_alias="s", target_alias="t")
    metrics = merger.when_matched_update_all().when_not_matched_insert_all().execute()
    t2 = perf_counter()
    done = (metrics["num_target_rows_updated"], metrics["num_target_rows_inserted"])
    return {"import": t1 - t0, "total": t2 - t1, "done": done, "cdc": _change_files(path)}


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}


def build(table) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    for n in range(FILES):
        ids = np.arange(n * ROWS, (n + 1) * ROWS, dtype=np.int64)
        configuration = {"delta.enableChangeDataFeed": "true"}
        data = pa.table({"id": ids, "value": ids * 0.5})
        write_deltalake(str(table), data, mode="append", configuration=configuration)


def run(reps: int = 3):
    from bench.common import REPO, BenchResult
    from bench.tables import run_on_copies

    table = REPO / "bench" / ".data" / "b15-cdf-merge-400k"
    if not (table / "_delta_log" / f"{FILES - 1:020d}.json").exists():
        build(table)
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})

    def check(system: str, sample: dict) -> None:
        if tuple(sample["done"]) != (SOURCE // 2, SOURCE // 2) or not sample["cdc"]:
            raise RuntimeError(f"B15 {system}: {sample}")

    run_on_copies(result, "b15_cdf_merge", table, min(reps, 5), HEADLINE, check)
    result.notes.append(
        "ours: merge_arrow (in process); deltalake: DeltaTable.merge; both update-all + "
        "insert-all and write _change_data files; fresh process and table copy per repetition"
    )
    return result
