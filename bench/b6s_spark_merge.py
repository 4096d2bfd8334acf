"""B6s: our MERGE on Spark against Spark's own floor for the same work.

B6's target (2M rows in 4 files) and source (200k rows, half matching, spread over every file);
the source is a Spark DataFrame (`spark.read.parquet`) and the in-process path is switched off
(`spark.airflow_delta.merge.inProcessSourceBytes=0`), so the MERGE runs as on a cluster.

* ours:        `merge_delta(p, source_df, "t.id = s.id").when_matched_update_all()
               .when_not_matched_insert_all().execute()`: finds the touched files (the source's
               keys are collected and unique, so on the driver: `spark/merge_driver.py`),
               rewrites them with the source's changes, writes the inserts, commits;
* spark-floor: the least Spark must do for the same result, knowing the touched files: read
               them as plain parquet, full outer join with the source on `id` (the source's
               values where it matches), write the rows as plain parquet. No Delta log, no
               search for touched files, no metrics.

Both run in one child per repetition (same JVM, same session as B5/B6: `bench.spark_util`),
after a warm-up of each kind on a table a tenth of the size (200k rows, a 20k-row source: the
JVM compiles the scan, join and write code it shares, which a tiny warm-up does not trigger, so
whichever runs first no longer pays that for the other); each repetition times ours and the
floor twice, on fresh copies of the target, alternating which goes first, and the child of
repetition k starts with the floor when k is odd. Medians over all of them. Ours' time is also
split by phase (the source facts job, findTouchedFiles, the write, the rest: load, pruning,
planning, commit), to show what stands above the floor.
"""

from __future__ import annotations

import os
from pathlib import Path
from time import perf_counter

ID = "B6s"
TITLE = "Spark MERGE (B6's upsert, on Spark) vs Spark's floor: read touched files, join, write"
TARGET = 1.3
HEADLINE = "merge on Spark"
BASELINE = "spark-floor"
ROUNDS = 2  # ours + floor pairs per child
WARM_ROWS = 200_000  # the warm-up table's rows (a tenth of B6's target)
_FIRST_ENV = "B6S_FLOOR_FIRST"  # "1": the child starts with the floor


def _floor(spark, table: str, source, out: str) -> int:
    """Read the table's files as plain parquet, upsert the source by a full outer join, write
    the result as plain parquet: the rows written."""
    from pyspark.sql import functions as F

    from airflow_delta.engine import DeltaLog

    paths = DeltaLog.for_table(table).update().files(stats=False).field("path").to_pylist()
    target = spark.read.parquet(*(f"{table}/{p}" for p in paths)).alias("t")
    matched = F.col("s.id").isNotNull()
    rows = target.join(source.alias("s"), F.col("t.id") == F.col("s.id"), "full_outer").select(
        F.coalesce(F.col("s.id"), F.col("t.id")).alias("id"),
        F.when(matched, F.col("s.name")).otherwise(F.col("t.name")).alias("name"),
        F.when(matched, F.col("s.value")).otherwise(F.col("t.value")).alias("value"),
    )
    rows.write.parquet(out)
    return spark.read.parquet(out).count()


def _child(path: str) -> dict:
    import airflow_delta.spark.merge as merge_module
    import airflow_delta.spark.merge_source as merge_source
    from airflow_delta.spark import merge_delta, write_delta
    from bench.b6_merge import CONDITION, INSERTED, MATCHED, TARGET_ROWS, source_path
    from bench.b6_merge import target_frame as frame
    from bench.spark_util import PhaseTimer, start_spark

    run = Path(path)
    spark, started = start_spark()
    spark.conf.set(merge_module.IN_PROCESS_SOURCE_BYTES, "0")

    phases = PhaseTimer()  # where ours spends its time (wrapping costs ~1 us per call)
    phases.wrap(merge_source.SourceFacts, "_summarize", "source facts")
    phases.wrap(merge_module.DeltaMergeBuilder, "_search_on_driver", "find touched files")
    phases.wrap(merge_module.DeltaMergeBuilder, "_find_touched_files", "find touched files")
    phases.wrap(merge_module, "write_files", "write files")

    def ours(table: str, source) -> None:
        phases.reset()
        builder = merge_delta(table, source, CONDITION)
        metrics = builder.when_matched_update_all().when_not_matched_insert_all().execute().metrics
        assert builder.executor == "spark", builder.executor
        got = (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"])
        if table.endswith("warm"):
            return
        assert got == (MATCHED, INSERTED), got

    warm_rows = WARM_ROWS
    warm_source = frame(spark, warm_rows // 10, 1).selectExpr(
        f"id * 2 + {warm_rows // 2} as id", "name", "value"
    )
    write_delta(frame(spark, warm_rows, 4), str(run / "warm"))
    ours(str(run / "warm"), warm_source)
    _floor(spark, str(run / "warm"), warm_source, str(run / "warm-floor"))
    sample: dict = {"spark:start": started, "ours": [], "floor": []}
    source = spark.read.parquet(str(source_path()))
    first = int(os.environ.get(_FIRST_ENV, "0"))
    for i in range(ROUNDS):
        for kind in ("ours", "floor") if (i + first) % 2 == 0 else ("floor", "ours"):
            table = str(run / f"table{i}-{kind}")
            t0 = perf_counter()
            if kind == "ours":
                ours(table, source)
            else:
                rows = _floor(spark, table, source, str(run / f"floor{i}"))
                assert rows == TARGET_ROWS + INSERTED, rows
            sample[kind].append(perf_counter() - t0)
            if kind == "ours":
                split = dict(phases.seconds)
                split["rest"] = sample[kind][-1] - sum(split.values())
                sample.setdefault("phases", []).append(split)
    spark.stop()
    return sample


CHILD_TASKS = {"child": _child}


def run(reps: int = 3):
    import shutil

    from bench.b6_merge import MAX_REPS, prepare
    from bench.common import BenchResult, run_child
    from bench.spark_util import CHILD_TIMEOUT, MASTER, SPARK_CONF
    from bench.tables import WORK_DIR, _sync_tree, drop_copy

    original = prepare()
    result = BenchResult(ID, TITLE, TARGET, HEADLINE, {}, baseline=BASELINE)
    result.info.update(reps=min(reps, MAX_REPS), rounds=ROUNDS, master=MASTER, conf=SPARK_CONF)
    for rep in range(min(reps, MAX_REPS)):
        os.environ[_FIRST_ENV] = str(rep % 2)
        work = WORK_DIR / "b6s"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        for i in range(ROUNDS):
            for kind in ("ours", "floor"):
                shutil.copytree(original, work / f"table{i}-{kind}")
                _sync_tree(work / f"table{i}-{kind}")
        sample = run_child("b6s_spark_merge", "child", work, timeout=CHILD_TIMEOUT)
        metric = result.metric(HEADLINE)
        metric.samples["ours"].extend(sample["ours"])
        metric.samples[BASELINE].extend(sample["floor"])
        for split in sample["phases"]:
            for phase, seconds in split.items():
                result.metric(f"ours: {phase}").samples["ours"].append(seconds)
        drop_copy(work)
        os.sync()
    result.notes.append(
        f"{result.info['reps']} children x {ROUNDS} rounds (ours and the floor on fresh copies, "
        "alternating order, odd children starting with the floor; a 200k-row warm-up of "
        f"both) on {MASTER} {SPARK_CONF}; the source is a Spark DataFrame and the in-process "
        "MERGE is off"
    )
    return result
