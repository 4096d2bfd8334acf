"""B6: MERGE upsert of 200k source rows into a 2M-row table (half the source matches).

The target (built once by `write_delta`, cached under `bench/.data/`, copied fresh for every
run of either system: both merge byte-identical tables) is unpartitioned, 2M rows in 4 files::

    spark.range(0, 2_000_000, 1, 4).selectExpr(
        "id", "concat('name-', cast(id as string)) as name", "cast(id as double) * 0.5 as value")

The source (built once with pyarrow, one parquet file) has 200k rows: 100k matching ids spread
over the whole target (`id = 20 * k + 7`, so every target file holds matches) and 100k new ids
(`2_000_000 + k`), with `name = 'upd-<id>'`, `value = id * 2.0 + 1`. Timed, from reading the
source file to the committed merge:

* ours:      `merge_delta(p, pq.read_table(src), "t.id = s.id")
             .when_matched_update_all().when_not_matched_insert_all().execute()`: an Arrow
             source, which the engine merges in process (no Spark job; headline)
* ours, Spark DataFrame source: the same with `spark.read.parquet(src)`, twice: as a local
  session runs it by default (the 3 MB source is collected and merged in process), and with
  the Spark conf `spark.airflow_delta.merge.inProcessSourceBytes=0`, on Spark's MERGE
* deltalake: `DeltaTable(p).merge(source=pq.read_table(src), predicate="t.id = s.id",
             source_alias="s", target_alias="t").when_matched_update_all()
             .when_not_matched_insert_all().execute()` (defaults: streamed_exec=True)

Each repetition of each system runs in a fresh process. Not timed: imports, a warm-up merge of
the same kind on a tiny scratch table (both systems), and for the Spark merge Spark's start, one
tiny job and a tiny warm-up merge of each kind. Timed (headline): the first full merge after
that; each child then merges a second fresh copy of the target ("merge, 2nd in the process").
Ours then starts Spark and merges a third copy from a Spark DataFrame (collected, in process),
and a fourth on Spark's MERGE, with its time split into phases by wrapping the Spark merge's
private steps (`_find_touched_files`, `write_files`, `_commit`; the rest is snapshot load,
planning, the source row count and the metrics). Their ratios are against deltalake's first
merge.

Checks: each child reads its merged tables back with its own reader (2.1M rows) and its merge
metrics (100k updated, 100k inserted); after the last repetition deltalake reads both merged
tables and they must be equal row for row.

The Spark-source merge runs in its own child (a JVM per run) in the first `MAX_REPS` (3)
repetitions only.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_delta.engine import CommitResult

ID = "B6"
TITLE = "MERGE upsert: 200k source rows (half match) into 2M rows, unpartitioned"
TARGET = 1.0
HEADLINE = "merge"

TARGET_ROWS = 2_000_000
TARGET_FILES = 4
MATCHED = 100_000
INSERTED = 100_000
MATCH_STRIDE = 20
MATCH_OFFSET = 7
CONDITION = "t.id = s.id"
#: (metric key prefix, table directory) of the merges the children time, on fresh copies: the
#: first two by `ours` and `deltalake`, the last two by `ours-spark` (a Spark DataFrame source,
#: merged as a local session does by default, then on Spark's MERGE).
RUNS = (("", "table"), ("2nd:", "table2"), ("spark:", "table3"), ("onspark:", "table4"))
MAX_REPS = 3
#: `bench/prof.py` is not wired for this benchmark: see the phase metrics of the Spark merge.
PROFILE = False
#: Bump when the generated target or source changes (cached copies are rebuilt).
GENERATOR_VERSION = 1


def _data_dir() -> Path:
    from bench.tables import DATA_DIR

    key = f"t{TARGET_ROWS}-f{TARGET_FILES}-m{MATCHED}-i{INSERTED}-g{GENERATOR_VERSION}"
    return DATA_DIR / f"b6-{key}"


def source_path() -> Path:
    return _data_dir() / "source.parquet"


def target_frame(spark, rows: int, files: int):
    return spark.range(0, rows, 1, files).selectExpr(
        "id", "concat('name-', cast(id as string)) as name", "cast(id as double) * 0.5 as value"
    )


def source_table(matched: int, inserted: int, target_rows: int):
    """The source rows as a pyarrow table (ids: spread matches, then new ids)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = np.concatenate(
        [
            np.arange(matched, dtype=np.int64) * MATCH_STRIDE + MATCH_OFFSET,
            target_rows + np.arange(inserted, dtype=np.int64),
        ]
    )
    assert ids[matched - 1] < target_rows
    id_array = pa.array(ids)
    names = pc.binary_join_element_wise("upd-", pc.cast(id_array, pa.string()), "")
    return pa.table({"id": id_array, "name": names, "value": pa.array(ids * 2.0 + 1.0)})


# -- children ----------------------------------------------------------------------------------


def _build(path: str) -> dict:
    """Write the target table at `path` with write_delta (the cached original)."""
    from bench.spark_util import start_spark

    spark, _ = start_spark()
    from airflow_delta.spark import write_delta

    result = write_delta(target_frame(spark, TARGET_ROWS, TARGET_FILES), path, mode="error")
    spark.stop()
    return {"version": result.version, "metrics": result.metrics}


def _merge_check(table: str, result: CommitResult) -> dict:
    """What `_check` compares after a merge of ours (a CommitResult; the row count is added
    later)."""
    metrics = result.metrics
    return {
        "updated": metrics["numTargetRowsUpdated"],
        "inserted": metrics["numTargetRowsInserted"],
        "files_removed": metrics["numTargetFilesRemoved"],
        "files_added": metrics["numTargetFilesAdded"],
        "version": result.version,
        "table": table,
    }


def _count_rows(table: str) -> int:
    """Rows of the active files of `table` as ours lists them, counted by pyarrow."""
    import pyarrow.dataset as ds

    from airflow_delta.engine import DeltaLog

    paths = [f"{table}/{f.path}" for f in DeltaLog.for_table(table).update().all_files()]
    return ds.dataset(paths, format="parquet").count_rows()


def _ours(path: str) -> dict:
    """Ours with an Arrow source: merged in process by the engine (no JVM)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = perf_counter()
    from airflow_delta.engine import DeltaLog
    from airflow_delta.spark import merge_delta

    imported = perf_counter() - t0
    run = Path(path)
    sample: dict = {"start": imported, "checks": []}

    # Arrow source: merged in process by the engine (no JVM running)
    warm = str(run / "warmup")
    ids = pa.array(range(1000), pa.int64())
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("value", pa.float64())])
    DeltaLog.create_table(warm, schema)
    names = pa.array([f"name-{i}" for i in range(1000)])
    warm_rows = pa.table([ids, names, pa.array([i * 0.5 for i in range(1000)])], schema=schema)
    merge_delta(warm, warm_rows, CONDITION).when_not_matched_insert_all().execute()
    (
        merge_delta(warm, warm_rows.slice(900), CONDITION)
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    for key, name in RUNS[:2]:
        table = str(run / name)
        t0 = perf_counter()
        source = pq.read_table(str(source_path()))
        metrics = (
            merge_delta(table, source, CONDITION)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        sample[key + "merge"] = perf_counter() - t0
        sample["checks"].append(_merge_check(table, metrics))

    for check in sample["checks"]:
        check["rows"] = _count_rows(check.pop("table"))
    return sample


def _ours_spark(path: str) -> dict:
    """Ours with a Spark DataFrame source (a separate child: a JVM per run), twice: as a local
    session runs it by default (the small source collected and merged in process), then with
    `IN_PROCESS_SOURCE_BYTES=0`, on Spark's MERGE (what a cluster runs), timed by phase."""
    import airflow_delta.spark.merge as merge_module
    from airflow_delta.spark import merge_delta, read_delta, write_delta
    from bench.spark_util import PhaseTimer, start_spark

    run = Path(path)
    sample: dict = {"checks": []}
    spark, started = start_spark()
    sample["spark:start"] = started

    def merge(table: str, source: object) -> tuple[dict, str]:
        builder = merge_delta(table, source, CONDITION)
        metrics = builder.when_matched_update_all().when_not_matched_insert_all().execute()
        return metrics, builder.executor

    warm_source = spark.range(900, 1100).selectExpr(
        "id", "concat('upd-', cast(id as string)) as name", "cast(id as double) as value"
    )
    for limit in ("", "0"):  # warm both paths
        spark.conf.set(merge_module.IN_PROCESS_SOURCE_BYTES, limit or "67108864")
        warm = str(run / f"warmup-spark{limit}")
        write_delta(target_frame(spark, 1000, 2), warm)
        merge(warm, warm_source)
    spark.conf.unset(merge_module.IN_PROCESS_SOURCE_BYTES)
    for (key, name), limit in zip(RUNS[2:], (None, "0"), strict=True):
        phases = PhaseTimer()
        if limit is not None:
            spark.conf.set(merge_module.IN_PROCESS_SOURCE_BYTES, limit)
            builder = merge_module.DeltaMergeBuilder
            phases.wrap(builder, "_find_touched_files", "find touched files")
            phases.wrap(merge_module, "write_files", "write files")
            phases.wrap(builder, "_commit", "commit")
        table = str(run / name)
        t0 = perf_counter()
        metrics, executor = merge(table, spark.read.parquet(str(source_path())))
        t1 = perf_counter()
        sample[key + "merge"] = t1 - t0
        sample[key + "executor"] = executor
        if len(phases.seconds) == 3:
            sample[key + "phase_rest"] = t1 - t0 - sum(phases.seconds.values())
            for phase, seconds in phases.seconds.items():
                sample[f"{key}phase:{phase}"] = seconds
        sample["checks"].append(_merge_check(table, metrics))
        phases.restore()
    for check in sample["checks"]:
        check["rows"] = read_delta(spark, check.pop("table")).count()
    spark.stop()
    return sample


def _deltalake(path: str) -> dict:
    t0 = perf_counter()
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from deltalake import DeltaTable, write_deltalake

    imported = perf_counter() - t0
    run = Path(path)
    warm = str(run / "warmup")
    ids = pa.array(range(1000), pa.int64())
    write_deltalake(warm, pa.table({"id": ids, "name": pc.cast(ids, pa.string()), "value": ids}))
    warm_ids = pa.array(range(900, 1100), pa.int64())
    warm_source = pa.table(
        {"id": warm_ids, "name": pc.cast(warm_ids, pa.string()), "value": warm_ids}
    )
    DeltaTable(warm).merge(
        source=warm_source, predicate=CONDITION, source_alias="s", target_alias="t"
    ).when_matched_update_all().when_not_matched_insert_all().execute()

    sample: dict = {"start": imported, "checks": [], "deltalake_metrics": []}
    for key, name in RUNS[:2]:
        table = str(run / name)
        t0 = perf_counter()
        source = pq.read_table(str(source_path()))
        metrics = (
            DeltaTable(table)
            .merge(source=source, predicate=CONDITION, source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        sample[key + "merge"] = perf_counter() - t0
        dt = DeltaTable(table)
        sample["checks"].append(
            {
                "rows": dt.to_pyarrow_dataset().count_rows(),
                "updated": metrics["num_target_rows_updated"],
                "inserted": metrics["num_target_rows_inserted"],
                "files_removed": metrics["num_target_files_removed"],
                "files_added": metrics["num_target_files_added"],
                "version": dt.version(),
            }
        )
        sample["deltalake_metrics"].append(
            {
                k: metrics[k]
                for k in ("execution_time_ms", "scan_time_ms", "rewrite_time_ms")
                if k in metrics
            }
        )
    return sample


CHILD_TASKS = {
    "ours": _ours,
    "ours-spark": _ours_spark,
    "deltalake": _deltalake,
    "build": _build,
}

_METRICS = {
    "merge": HEADLINE,
    "2nd:merge": "merge, 2nd in the process",
    "spark:merge": "merge, DataFrame source (local: in process)",
    "onspark:merge": "merge, DataFrame source on Spark",
    "onspark:phase:find touched files": "Spark: find touched files (join)",
    "onspark:phase:write files": "Spark: write files (rewrite+insert)",
    "onspark:phase:commit": "Spark: commit",
    "onspark:phase_rest": "Spark: rest (load, plan, counts)",
    "spark:start": "Spark: start + tiny job (not timed)",
    "start": "import (not timed)",
}


# -- parent ------------------------------------------------------------------------------------


def prepare() -> Path:
    """The cached target table and source file (built and verified once); the target's path."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from bench.common import run_child
    from bench.spark_util import CHILD_TIMEOUT

    root = _data_dir()
    marker = root / "verified.json"
    if marker.exists():
        return root / "table"
    if root.exists():
        shutil.rmtree(root)
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pq.write_table(source_table(MATCHED, INSERTED, TARGET_ROWS), tmp / "source.parquet")
    built = run_child("b6_merge", "build", tmp / "table", timeout=CHILD_TIMEOUT)
    dt = DeltaTable(str(tmp / "table"))
    rows = dt.to_pyarrow_dataset().count_rows()
    if rows != TARGET_ROWS or len(dt.file_uris()) != TARGET_FILES or built["version"] != 0:
        raise RuntimeError(f"B6: built target has {rows} rows, {len(dt.file_uris())} files")
    tmp.rename(root)
    marker.write_text(json.dumps({"rows": rows, "files": TARGET_FILES, "build": built}, indent=2))
    return root / "table"


def _fresh_run_dir(original: Path, name: str, runs: tuple[tuple[str, str], ...]) -> Path:
    from bench.tables import WORK_DIR, _sync_tree

    run = WORK_DIR / name
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    for _, table in runs:
        shutil.copytree(original, run / table)
        _sync_tree(run / table)
    return run


def _check(system: str, sample: dict) -> None:
    want = {"rows": TARGET_ROWS + INSERTED, "updated": MATCHED, "inserted": INSERTED, "version": 1}
    for check in sample["checks"]:
        got = {k: check[k] for k in want}
        if got != want:
            raise RuntimeError(f"B6 {system}: after the merge {got}, expected {want}")


def _cross_check(runs: dict[str, Path]) -> str:
    """deltalake reads both merged tables: equal row for row."""
    from deltalake import DeltaTable

    tables = {
        system: DeltaTable(str(run / "table")).to_pyarrow_table().sort_by("id")
        for system, run in runs.items()
    }
    ours, theirs = tables["ours"], tables["deltalake"]
    if ours.num_rows != TARGET_ROWS + INSERTED or not ours.equals(theirs.select(ours.column_names)):
        raise RuntimeError("B6: the two merged tables differ")
    return f"cross-read OK: deltalake reads both merged tables, equal ({ours.num_rows} rows)"


def run(reps: int = 3):
    import statistics

    from bench.common import SYSTEMS, BenchResult, record, run_child
    from bench.spark_util import CHILD_TIMEOUT, MASTER, SPARK_CONF
    from bench.tables import drop_copy

    original = prepare()
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {})
    result.info.update(
        target_rows=TARGET_ROWS,
        target_files=TARGET_FILES,
        source_rows=MATCHED + INSERTED,
        matched=MATCHED,
        reps=reps,
        spark_reps=min(reps, MAX_REPS),
        master=MASTER,
        spark_conf=SPARK_CONF,
    )
    rss: dict[str, list[float]] = {}
    files: dict[str, list[tuple[int, int]]] = {}
    deltalake_metrics: list[dict] = []
    last: dict[str, Path] = {}
    for rep in range(reps):
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        children = [(system, system) for system in order]
        if rep < MAX_REPS:
            children.append(("ours", "ours-spark"))
        for system, task in children:
            path = _fresh_run_dir(original, f"b6-{task}", RUNS[2:] if "spark" in task else RUNS[:2])
            sample = run_child("b6_merge", task, path, timeout=CHILD_TIMEOUT)
            _check(task, sample)
            ran = (sample.get("spark:executor"), sample.get("onspark:executor"))
            if task == "ours-spark" and ran != ("in-process", "spark"):
                raise RuntimeError(f"B6 {task}: the DataFrame merges ran {ran}")
            if task == "deltalake":  # the Spark-source merge is compared with the same merge
                sample["spark:merge"] = sample["onspark:merge"] = sample["merge"]
            record(result, system, sample, _METRICS)
            rss.setdefault(task, []).append(sample["maxrss_mb"])
            first = sample["checks"][0]
            files.setdefault(task, []).append((first["files_removed"], first["files_added"]))
            deltalake_metrics += sample.get("deltalake_metrics", [])
            if rep == reps - 1 and task in SYSTEMS:
                last[system] = path
            else:
                drop_copy(path)
            os.sync()
    result.info["files_removed_added"] = files
    result.info["deltalake_metrics"] = deltalake_metrics
    result.info["driver_peak_rss_mb_median"] = {
        k: round(statistics.median(v), 1) for k, v in rss.items()
    }
    result.notes.append(
        f"{reps} reps per system ({min(reps, MAX_REPS)} of the Spark-source merge: a JVM per "
        f"run), fresh process and fresh table copy each, alternating order; the Spark merge on "
        f"{MASTER} {SPARK_CONF}; not timed: imports, a tiny warm-up merge (both systems), Spark "
        "start + tiny job"
    )
    result.notes.append(f"files removed/added per run: {files}")
    try:
        if len(last) == 2:
            result.notes.append(_cross_check(last))
    finally:
        for path in last.values():
            drop_copy(path)
    return result


if __name__ == "__main__":
    import sys

    sys.exit("run it with: .venv/bin/python -m bench.run B6")
