"""DeltaDeleteOperator and DeltaUpdateOperator (`operators.dml`, on `operators.command`), run by
`dag.test()` on tables the engine writes (DAGs in tests/airflow/dags/command_dags.py): templated
predicates and assignments, XCom, the task log, asset events, deletion vectors, exactly-once on
a retry after a landed commit, no Spark; and their parse-time argument checks."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import asset_events, task_states, xcoms
from tests.airflow.operators.test_commit import fresh_table
from tests.engine.commands.dml_tables import batch, create, expected, rows

DATA = [batch(range(0, 6)), batch(range(6, 12))]


def task_log(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(r.getMessage() for r in caplog.records)


@pytest.mark.usefixtures("airflow_db", "no_spark")
@pytest.mark.parametrize("dv", [False, True], ids=["rewrite", "deletion-vectors"])
def test_delete_then_update_in_process(dv: bool, caplog: pytest.LogCaptureFixture) -> None:
    uri = create(fresh_table("dml"), *DATA, dv=dv)  # versions 0 (create), 1, 2
    caplog.set_level(logging.INFO, logger="airflow_delta")
    dag_run = load_dag("t_delete_update").test()
    assert task_states(dag_run) == {
        "delete": "success",
        "update": "success",
        "delete_nothing": "success",
    }

    deleted = xcoms(dag_run, "delete")
    result = deleted["return_value"]
    assert deleted["delta_commit"] == result
    assert (result["version"], result["operation"], result["skipped"]) == (3, "DELETE", False)
    assert (result["executor"], result["attempts"], result["conflicts"]) == ("in-process", 1, [])
    assert result["table"] == uri and result["read_version"] == 2
    assert result["app_id"] == f"airflow-delta/t_delete_update/delete/-1/{dag_run.run_id}"
    metrics = result["metrics"]
    assert metrics["numDeletedRows"] == 3  # id < {{ params.below }} = 3
    assert metrics["numDeletionVectorsAdded"] == (2 if dv else 0)  # files of p=a and p=b
    assert metrics["numCopiedRows"] == (0 if dv else 3)

    updated = xcoms(dag_run, "update")["return_value"]
    assert (updated["version"], updated["operation"]) == (4, "UPDATE")
    assert updated["metrics"]["numUpdatedRows"] == 4  # p = 'a' AND id >= 5: 5, 7, 9, 11
    assert updated["hooks"] == {"checkpoint": "ok"}

    nothing = xcoms(dag_run, "delete_nothing")["return_value"]
    assert nothing["skipped"] is True and nothing["version"] == 4  # the table's version
    assert nothing["metrics"]["numDeletedRows"] == 0 and nothing["app_id"] is None

    def keep(row: dict[str, Any]) -> bool:
        return row["id"] >= 3

    def after(row: tuple[Any, ...]) -> tuple[Any, ...]:
        id_, k, s, p = row
        return (id_, k, "late" if p == "a" and id_ >= 5 else s, p)

    assert rows(uri) == sorted((after(r) for r in expected(DATA, keep)), key=repr)

    history = DeltaLog.for_table(uri).history()
    assert [h["operation"] for h in history[:2]] == ["UPDATE", "DELETE"]
    assert history[1]["operationParameters"]["predicate"] == '["id < 3"]'  # rendered
    assert history[0]["operationParameters"]["predicate"] == "p = 'a' AND id >= 5"
    assert history[0]["airflow"]["task_id"] == "update"
    assert DeltaLog.for_table(uri).update().log_segment.checkpoint_version == 4

    events = asset_events(f"file://{uri}", dag_run.run_id)
    assert [(e["version"], e["operation"], e["skipped"]) for e in events] == [
        (3, "DELETE", False),
        (4, "UPDATE", False),
        (4, "DELETE", True),
    ]
    text = task_log(caplog)
    assert f"DELETE from table {uri} (version 2) where id < 3, in process" in text
    assert f"Committed version 3 of table {uri} (operation DELETE, run in process) after 1 " in (
        text
    )
    assert "commit attempt(s), 0 conflict(s); metrics {" in text
    assert "Post-commit hook checkpoint on version 4: ok" in text
    assert f"Skipped: DELETE found nothing to change in table {uri}" in text


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_retry_after_landed_commit_commits_once(caplog: pytest.LogCaptureFixture) -> None:
    """Each task commits, then fails; its retry finds the task instance's marker in the table
    and runs nothing: one DELETE and one UPDATE in the history."""
    uri = create(fresh_table("retried_dml"), *DATA)
    caplog.set_level(logging.INFO, logger="airflow_delta")
    dag_run = load_dag("t_command_retry").test()
    assert task_states(dag_run) == {"delete": "success", "update": "success"}
    assert [ti.try_number for ti in dag_run.get_task_instances()] == [2, 2]
    history = DeltaLog.for_table(uri).history()
    operations = [h["operation"] for h in history]
    assert operations == ["UPDATE", "DELETE", "WRITE", "WRITE", "CREATE TABLE"]
    assert [h["airflow"]["try_number"] for h in history[:2]] == [1, 1]
    for task_id, version in (("delete", 3), ("update", 4)):
        result = xcoms(dag_run, task_id)["return_value"]
        assert result["skipped"] is True and result["attempts"] == 0, result
        assert result["version"] == version  # the table's version when the retry looked
    text = task_log(caplog)
    assert text.count("already holds this write") == 2
    changed = {1: None, 2: "again"}
    assert rows(uri) == sorted(
        ((i, k, changed.get(i) or s, p) for i, k, s, p in expected(DATA, lambda r: True) if i != 1),
        key=repr,
    )


# -- parse time -----------------------------------------------------------------------------------


def test_templated_fields() -> None:
    from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaUpdateOperator

    assert set(DeltaDeleteOperator.template_fields) >= {"table_uri", "predicate"}
    assert "source" not in DeltaDeleteOperator.template_fields
    assert set(DeltaUpdateOperator.template_fields) >= {"table_uri", "predicate", "set"}
    op = DeltaDeleteOperator(task_id="d", table_uri="/lake/t", predicate="id = 1")
    assert op.outlets and op.outlets[0].uri == "file:///lake/t"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predicate": ""}, "predicate is empty; pass predicate=None to DELETE every row"),
        ({"predicate": 3}, "predicate must be SQL text"),
        ({"predicate": "id = 1", "source": "SELECT 1"}, "it takes no source"),
        ({"predicate": "id = 1", "source_options": {"a": 1}}, "it takes no source_options"),
        ({"predicate": "id = 1", "max_commit_attempts": 0}, "max_commit_attempts"),
        ({"predicate": "id = 1", "post_commit_hooks": ["vacuum"]}, "Unknown post-commit"),
    ],
)
def test_delete_refuses_bad_arguments_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    from airflow_delta.operators.dml import DeltaDeleteOperator

    with pytest.raises(ValueError, match=message):
        DeltaDeleteOperator(task_id="d", table_uri="/tmp/t", **kwargs)


def test_delete_needs_an_explicit_predicate() -> None:
    from airflow_delta.operators.dml import DeltaDeleteOperator

    with pytest.raises(TypeError, match="predicate"):
        DeltaDeleteOperator(task_id="d", table_uri="/tmp/t")  # type: ignore[call-arg]
    assert DeltaDeleteOperator(task_id="all", table_uri="/tmp/t", predicate=None).predicate is None


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        ({}, "UPDATE needs `set`: a non-empty dict"),
        (None, "UPDATE needs `set`"),
        ("s = 'x'", "UPDATE needs `set`"),
        ({"s": 5}, r"set\['s'\] must be SQL text"),
        ({"s": " "}, r"set\['s'\] must be SQL text"),
        ({"": "'x'"}, "column names must be non-empty"),
    ],
)
def test_update_refuses_bad_assignments_at_parse_time(assignments: Any, message: str) -> None:
    from airflow_delta.operators.dml import DeltaUpdateOperator

    with pytest.raises(ValueError, match=message):
        DeltaUpdateOperator(task_id="u", table_uri="/tmp/t", set=assignments, predicate=None)


def test_a_blank_rendered_predicate_fails_rather_than_change_every_row() -> None:
    from airflow_delta.operators.commit import rendered_scope

    assert rendered_scope("DELETE", "/t", "predicate", None, None) is None
    for rendered in ("  ", None, "None"):
        with pytest.raises(ValueError, match="refusing to run DELETE on the whole table"):
            rendered_scope("DELETE", "/t", "predicate", rendered, "{{ params.p }}")
