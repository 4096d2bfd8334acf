"""dags_examples/delta_orders_report.py: its task reads the orders table with the Spark-free
reader, at the version of the asset event that triggered the run (the task's callable is run
here directly; tests/airflow/test_dags_examples.py parses every example DAG)."""

from __future__ import annotations

import datetime as dt
import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

EXAMPLE = Path(__file__).resolve().parents[2] / "dags_examples" / "delta_orders_report.py"


def _load(root: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("AIRFLOW_DELTA_DEMO_ROOT", str(root))
    monkeypatch.delenv("AIRFLOW_DELTA_CONN_ID", raising=False)
    spec = importlib.util.spec_from_file_location("dags_examples_delta_orders_report", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _orders(day: dt.date, statuses: list[str], amounts: list[float | None]) -> pa.Table:
    n = len(statuses)
    return pa.table(
        {
            "order_id": pa.array(range(n), pa.int64()),
            "customer_id": pa.array([1] * n, pa.int32()),
            "amount": pa.array(amounts, pa.float64()),
            "status": statuses,
            "order_date": pa.array([day] * n, pa.date32()),
        }
    )


def test_the_report_reads_the_triggering_version_without_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _load(tmp_path, monkeypatch)
    uri = module.ORDERS
    today = dt.date(2026, 3, 10)
    old = _orders(today - dt.timedelta(days=30), ["new"], [1000.0])
    write_deltalake(uri, old, partition_by=["order_date"])  # version 0: out of the window
    recent = _orders(today, ["new", "new", "shipped", "shipped"], [10.0, 5.0, None, 7.5])
    write_deltalake(uri, recent, mode="append")  # version 1
    write_deltalake(uri, _orders(today, ["new"], [100.0]), mode="append")  # version 2
    asset = module.delta_table_asset(uri)
    events: dict[Any, Any] = {asset: [SimpleNamespace(extra={"version": 1})]}
    callable_ = module.dag.get_task("revenue_by_status").python_callable

    report = callable_(params={"days": 7}, ds=today.isoformat(), triggering_asset_events=events)

    assert report["version"] == 1
    assert report["statuses"] == {
        "new": {"orders": 2, "revenue": 15.0},
        "shipped": {"orders": 1, "revenue": 7.5},
    }
    latest = callable_(params={"days": 7}, ds=today.isoformat(), triggering_asset_events={})
    assert latest["statuses"]["new"] == {"orders": 3, "revenue": 115.0}
