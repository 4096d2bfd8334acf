"""Read what a `dag.test()` run left in the Airflow metadata database: task states, XComs and
asset events."""

from __future__ import annotations

import json
from typing import Any


def task_states(dag_run: Any) -> dict[str, str]:
    """task id (with `[map index]` for mapped ones) -> state."""
    return {
        f"{ti.task_id}[{ti.map_index}]" if ti.map_index >= 0 else ti.task_id: ti.state
        for ti in dag_run.get_task_instances()
    }


def xcoms(dag_run: Any, task_id: str) -> dict[str, Any]:
    """key -> value of the XComs a task of `dag_run` pushed."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(XComModel.key, XComModel.value).where(
                XComModel.dag_id == dag_run.dag_id,
                XComModel.run_id == dag_run.run_id,
                XComModel.task_id == task_id,
            )
        ).all()
    return {key: json.loads(value) if isinstance(value, str) else value for key, value in rows}


def asset_events(uri: str, run_id: str | None = None) -> list[dict[str, Any]]:
    """The `extra` of the events of the asset `uri` (of one DAG run's tasks), oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    query = (
        select(AssetEvent.extra)
        .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
        .where(AssetModel.uri == uri)
        .order_by(AssetEvent.id)
    )
    if run_id is not None:
        query = query.where(AssetEvent.source_run_id == run_id)
    with create_session() as session:
        return list(session.scalars(query))
