"""Mapped committing tasks declare their outlets at parse time (`__init__` does not run for a
MappedOperator) and each mapped instance emits one asset event of its table, checked in the
metadata database (tests/airflow/dags/mapped_dags.py)."""

from __future__ import annotations

import pytest

from airflow_delta.assets import delta_table_asset, table_asset_uri
from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import asset_events, task_states
from tests.airflow.operators.test_commit import fresh_table


def test_partial_declares_the_outlet_of_a_literal_table_uri() -> None:
    from airflow.sdk import DAG, Asset, AssetAlias

    from airflow_delta.operators.merge import DeltaMergeOperator
    from airflow_delta.operators.optimize import DeltaOptimizeOperator
    from airflow_delta.operators.write import DeltaWriteOperator

    other = Asset(uri="s3://lake/audit")
    with DAG("parse_only", schedule=None):
        write = DeltaWriteOperator.partial(task_id="w", table_uri="/lake/t/").expand(
            source=["SELECT 1 AS id", "SELECT 2 AS id"]
        )
        merge = DeltaMergeOperator.partial(
            task_id="m", table_uri="/lake/t", condition="t.id = s.id", outlets=[other]
        ).expand(source=["SELECT 1 AS id"])
        optimize = DeltaOptimizeOperator.partial(task_id="o").expand(table_uri=["/a", "/b"])
    assert write.outlets == [delta_table_asset("/lake/t")]
    assert merge.outlets == [other, delta_table_asset("/lake/t")]
    assert optimize.outlets == [AssetAlias(name="delta-table-of-task:parse_only.o", group="delta")]


def test_the_alias_of_a_templated_table_is_the_tasks_own() -> None:
    """Two DAGs with a task `load` shared the alias `delta-table-of-task:load`, and Airflow
    resolved it to both tables (each task a producer of the other DAG's table): the alias
    names the DAG and the task with its group."""
    from airflow.sdk import DAG, TaskGroup

    from airflow_delta.operators.write import DeltaWriteOperator

    names = []
    for dag_id in ("one", "two"):
        with DAG(dag_id, schedule=None):
            with TaskGroup("g"):
                op = DeltaWriteOperator(task_id="load", table_uri="/x/{{ ds }}", source="x")
            mapped = DeltaWriteOperator.partial(task_id="load", source="x").expand(
                table_uri=["/a", "/b"]
            )
        names += [o.name for o in (*op.outlets, *mapped.outlets)]
    assert names == [
        "delta-table-of-task:one.g.load",
        "delta-table-of-task:one.load",
        "delta-table-of-task:two.g.load",
        "delta-table-of-task:two.load",
    ]


@pytest.mark.usefixtures("airflow_db", "spark")
def test_mapped_write_emits_one_asset_event_per_instance() -> None:
    uri = fresh_table("mapped_outlets")
    dag = load_dag("t_mapped_outlets")
    assert dag.get_task("write").outlets == [delta_table_asset(uri)]  # as parsed by a DagBag
    dag_run = dag.test()
    assert task_states(dag_run) == {f"write[{i}]": "success" for i in range(3)}
    events = asset_events(table_asset_uri(uri), dag_run.run_id)
    assert len(events) == 3
    assert sorted(e["version"] for e in events) == [0, 1, 2]
    assert {(e["operation"], e["table"], e["skipped"]) for e in events} == {("WRITE", uri, False)}
    assert DeltaLog.for_table(uri).update().version == 2


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_tasks_mapped_over_tables_emit_each_table_event_through_an_alias() -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    uris = [fresh_table(f"mapped_table_{n}") for n in range(3)]
    for uri in uris:
        write_deltalake(uri, pa.table({"id": pa.array([0, 1, 2], pa.int64())}))
    dag = load_dag("t_mapped_tables")
    assert [o.name for o in dag.get_task("delete").outlets] == [
        "delta-table-of-task:t_mapped_tables.delete"
    ]
    dag_run = dag.test()
    assert task_states(dag_run) == {f"delete[{i}]": "success" for i in range(3)}
    for uri in uris:
        events = asset_events(table_asset_uri(uri), dag_run.run_id)
        assert [(e["version"], e["operation"], e["table"]) for e in events] == [(1, "DELETE", uri)]
