"""B13: DELETE of 0.1% of the rows, spread over a 2M-row table (20 files of 100k rows).

Two tables built once by deltalake: the same rows, one with `delta.enableDeletionVectors`.
The predicate `id IN (<2,000 ids>)` hits every file. Each repetition deletes on a fresh copy
(the copy is not timed), in a fresh process, imports excluded:

* ours (deletion vectors): `airflow_delta.engine.delete(p_dv, predicate)`: a DV per file, no
  file rewritten (headline, against deltalake's rewrite: deltalake writes no DV);
* ours (rewrite):          `airflow_delta.engine.delete(p, predicate)`: the files rewritten;
* deltalake:               `DeltaTable(p).delete(predicate)` on the table without DVs.

Checks: 2,000 rows deleted by everyone.
"""

from __future__ import annotations

from time import perf_counter

ID = "B13"
TITLE = "DELETE 0.1% of 2M rows spread over every file: with DVs and without, vs deltalake"
TARGET = 0.3
HEADLINE = "delete (ours with DVs)"
FILES, ROWS = 20, 100_000
PREDICATE = "id IN (" + ", ".join(str(i * 1000 + 7) for i in range(FILES * ROWS // 1000)) + ")"


def _ours(path: str) -> dict:
    t0 = perf_counter()
    from airflow_delta.engine import delete

    t1 = perf_counter()
    metrics = delete(path, PREDICATE).metrics
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "deleted": metrics["numDeletedRows"]}


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    from deltalake import DeltaTable

    t1 = perf_counter()
    metrics = DeltaTable(path).delete(PREDICATE)
    t2 = perf_counter()
    return {"import": t1 - t0, "total": t2 - t1, "deleted": metrics["num_deleted_rows"]}


CHILD_TASKS = {"ours": _ours, "deltalake": _deltalake}


def build(table, dv: bool) -> None:
    import numpy as np
    import pyarrow as pa
    from deltalake import write_deltalake

    configuration = {"delta.enableDeletionVectors": "true"} if dv else None
    for n in range(FILES):
        ids = np.arange(n * ROWS, (n + 1) * ROWS, dtype=np.int64)
        data = pa.table({"id": ids, "value": ids * 0.5})
        write_deltalake(str(table), data, mode="append", configuration=configuration)


def run(reps: int = 3):
    from dataclasses import replace

    from bench.common import REPO, BenchResult
    from bench.tables import run_on_copies

    tables = {}
    for dv in (True, False):
        table = REPO / "bench" / ".data" / f"b13-delete-2m-{'dv' if dv else 'plain'}"
        if not (table / "_delta_log" / f"{FILES - 1:020d}.json").exists():
            build(table, dv)
        tables[dv] = table
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})

    def check(system: str, sample: dict) -> None:
        if sample["deleted"] != FILES * ROWS // 1000:
            raise RuntimeError(f"B13 {system}: deleted {sample['deleted']} rows")

    reps = min(reps, 5)
    # headline: ours on the DV table, deltalake on the plain one (it writes no DVs)
    with_dvs = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    run_on_copies(with_dvs, "b13_delete", tables[True], reps, HEADLINE, check, ["ours"])
    plain = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    run_on_copies(plain, "b13_delete", tables[False], reps, "delete (ours rewriting)", check)
    dv_metric, plain_metric = with_dvs.metric(HEADLINE), plain.metric("delete (ours rewriting)")
    result.metric(HEADLINE).samples["ours"] = dv_metric.samples["ours"]
    result.metric(HEADLINE).samples["deltalake"] = plain_metric.samples["deltalake"]
    result.metrics["delete (ours rewriting)"] = replace(plain_metric)
    result.notes.append(
        "headline: ours on the table with deletion vectors (a DV per file) vs deltalake on the "
        "same rows without (it rewrites: deltalake writes no DV); 'ours rewriting': both on the "
        "table without DVs (target <= 1.0); fresh process and table copy per repetition"
    )
    return result
