"""dags_examples/delta_orders_changes.py: the orders' change data feed applied to a status
table exactly once, without Spark (the task's callable is run here directly, twice per range:
a repeated run applies nothing twice; tests/airflow/test_dags_examples.py parses the DAG)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaLog, delete, read_table, update
from airflow_delta.engine.commands.merge_in_process import merge_arrow

EXAMPLE = Path(__file__).resolve().parents[2] / "dags_examples" / "delta_orders_changes.py"
SCHEMA = pa.schema([("order_id", pa.int64()), ("status", pa.string()), ("amount", pa.float64())])


def _load(root: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("AIRFLOW_DELTA_DEMO_ROOT", str(root))
    monkeypatch.delenv("AIRFLOW_DELTA_CONN_ID", raising=False)
    spec = importlib.util.spec_from_file_location("dags_examples_delta_orders_changes", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _insert(uri: str, ids: list[int], status: str) -> None:
    rows = pa.table({"order_id": ids, "status": [status] * len(ids), "amount": [1.0] * len(ids)})
    merge_arrow(
        uri, rows.cast(SCHEMA), "t.order_id = s.order_id"
    ).when_not_matched_insert_all().execute()


def _status(uri: str) -> dict[int, str]:
    rows = read_table(uri).to_pylist()
    return {r["order_id"]: r["status"] for r in rows}


def test_changes_are_applied_once_per_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _load(tmp_path, monkeypatch)
    orders = module.ORDERS
    DeltaLog.create_table(orders, SCHEMA, configuration={"delta.enableChangeDataFeed": "true"})
    _insert(orders, [1, 2, 3], "new")  # version 1
    apply = module.dag.get_task("apply_changes").python_callable

    first = apply(params={"first_version": 0})
    assert (first["from"], first["to"], first["changes"]) == (0, 1, 3)
    assert _status(module.STATUS) == {1: "new", 2: "new", 3: "new"}
    assert apply(params={"first_version": 0})["changes"] == 0  # a rerun: nothing new

    update(orders, {"status": "'shipped'"}, "order_id = 2")  # version 2
    delete(orders, "order_id = 3")  # version 3
    _insert(orders, [4], "new")  # version 4
    update(orders, {"status": "'paid'"}, "order_id = 4")  # version 5: its last change wins
    second = apply(params={"first_version": 0})
    assert (second["from"], second["to"]) == (2, 5)
    assert _status(module.STATUS) == {1: "new", 2: "shipped", 4: "paid"}
    status_log = DeltaLog.for_table(module.STATUS).update()
    assert status_log.transactions[module.APP_ID] == 5
    assert apply(params={"first_version": 0})["changes"] == 0
