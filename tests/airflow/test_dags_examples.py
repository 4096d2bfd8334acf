"""The example DAGs of dags_examples/: every file parses, and `dag.test()` runs the nightly
maintenance DAG (OPTIMIZE with Z-order -> checkpoint -> VACUUM) on an orders table deltalake
wrote, in this process, without Spark (loaded through tests/airflow/dags/example_dags.py)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import TABLES_ROOT, load_dag
from tests.airflow.metadata import task_states, xcoms

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"


def test_every_example_dag_parses() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert not bag.import_errors, bag.import_errors
    assert set(bag.dags) >= {
        "delta_orders_pipeline",
        "delta_orders_watch",
        "delta_nightly_maintenance",
        "delta_pyspark_orders",
    }
    maintenance = bag.dags["delta_nightly_maintenance"]
    upstream = {t.task_id: t.upstream_task_ids for t in maintenance.tasks}
    assert upstream == {"optimize": set(), "checkpoint": {"optimize"}, "vacuum": {"checkpoint"}}


def orders(day: dt.date, first_id: int, n: int = 20) -> pa.Table:
    """`n` orders of one day, in the columns delta_orders_pipeline writes."""
    ids = range(first_id, first_id + n)
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "customer_id": pa.array([(i * 7919) % 500 for i in ids], pa.int32()),
            "amount": pa.array([float(i % 100) for i in ids], pa.float64()),
            "status": pa.array(["new"] * n, pa.string()),
            "order_date": pa.array([day] * n, pa.date32()),
        }
    )


def read_rows(uri: str) -> list[dict[str, Any]]:
    reader = QueryBuilder().register("t", DeltaTable(uri)).execute("SELECT * FROM t")
    return sorted(pa.table(reader.read_all()).to_pylist(), key=lambda r: r["order_id"])


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_nightly_maintenance_optimizes_checkpoints_and_vacuums() -> None:
    """Three batches on each of three recent days and one on a day long gone: OPTIMIZE
    Z-orders the recent partitions only, the checkpoint is of its version, and VACUUM (with
    the retention the run's conf sets, which the table allows) deletes exactly the files it
    replaced. Rows are unchanged."""
    uri = str(TABLES_ROOT / "demo" / "tables" / "orders")
    shutil.rmtree(uri, ignore_errors=True)
    today = dt.datetime.now(dt.UTC).date()
    recent = [today - dt.timedelta(days=d) for d in (0, 1, 2)]
    old = today - dt.timedelta(days=30)
    config = {"delta.deletedFileRetentionDuration": "interval 0 hours"}
    write_deltalake(uri, orders(old, 0), partition_by=["order_date"], configuration=config)
    for batch, day in enumerate(recent * 3):
        write_deltalake(uri, orders(day, 1000 * (batch + 1)), mode="append")
    before = read_rows(uri)
    version = DeltaLog.for_table(uri).latest_version()  # 9

    dag_run = load_dag("delta_nightly_maintenance").test(run_conf={"vacuum_retention_hours": 0})
    assert task_states(dag_run) == {
        "optimize": "success",
        "checkpoint": "success",
        "vacuum": "success",
    }

    optimized = xcoms(dag_run, "optimize")["return_value"]
    assert (optimized["version"], optimized["operation"]) == (version + 1, "OPTIMIZE")
    assert optimized["executor"] == "in-process"
    metrics = optimized["metrics"]
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (9, 3)
    assert metrics["partitionsOptimized"] == 3  # the old day's partition is left alone
    history = DeltaLog.for_table(uri).history(limit=1)[0]
    assert json.loads(history["operationParameters"]["zOrderBy"]) == ["customer_id"]
    week_ago = (today - dt.timedelta(days=7)).isoformat()
    assert json.loads(history["operationParameters"]["predicate"]) == [
        f"order_date >= DATE '{week_ago}'"
    ]

    checkpoint = xcoms(dag_run, "checkpoint")["return_value"]
    assert checkpoint["version"] == version + 1 and checkpoint["parts"] == 1
    vacuumed = xcoms(dag_run, "vacuum")["return_value"]
    assert vacuumed["files_deleted"] == 9 and vacuumed["retention_hours"] == 0

    snapshot = DeltaLog.for_table(uri).update()
    assert snapshot.log_segment.checkpoint_version == version + 1
    assert snapshot.num_files == 4  # one per recent day, plus the old day's
    parquet = [p for p in Path(uri).rglob("*.parquet") if "_delta_log" not in p.parts]
    assert len(parquet) == 4  # the replaced files are gone
    assert read_rows(uri) == before


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_events_ingest_replaces_the_run_day_without_spark() -> None:
    """Two runs of one day and one of the next: the table holds each day's events once, written
    in process (no Spark session), each run replacing its own partition only."""
    uri = str(TABLES_ROOT / "demo" / "tables" / "events")
    shutil.rmtree(uri, ignore_errors=True)
    dag = load_dag("delta_events_ingest")
    days = [dt.datetime(2026, 1, d, tzinfo=dt.UTC) for d in (5, 5, 6)]
    results = []
    for day in days:
        dag_run = dag.test(logical_date=day)
        assert task_states(dag_run) == {"ingest": "success"}
        results.append(xcoms(dag_run, "ingest")["return_value"])
    assert [r["executor"] for r in results] == ["in-process"] * 3
    assert [r["version"] for r in results] == [0, 1, 2]
    assert results[1]["metrics"]["numRemovedFiles"] == 1  # the day's earlier file, replaced
    assert results[2]["metrics"]["numRemovedFiles"] == 0  # the 5th is not touched
    table = DeltaTable(uri).to_pyarrow_table()
    per_day: dict[Any, int] = {}
    for day in table.column("event_date").to_pylist():
        per_day[day] = per_day.get(day, 0) + 1
    assert per_day == {dt.date(2026, 1, 5): 500, dt.date(2026, 1, 6): 500}
    assert len(set(table.column("event_id").to_pylist())) == 1000
    assert DeltaLog.for_table(uri).update().log_segment.checkpoint_version == 2
