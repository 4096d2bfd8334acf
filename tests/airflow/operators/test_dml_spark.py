"""DeltaDeleteOperator and DeltaUpdateOperator on local Spark (DAGs in
tests/airflow/dags/dml_spark_dags.py), run by `dag.test()` on tables the engine writes: a
predicate or assignment beyond the engine's evaluator runs on Spark, one it evaluates stays in
process; XCom and the task log say which ran; a retried task writes once; the errors when
neither executor can run it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import asset_events, task_states, xcoms
from tests.airflow.operators.test_commit import fresh_table
from tests.engine.commands.dml_tables import batch, create, deltalake_rows, engine_rows, expected

DATA = [batch(range(0, 6)), batch(range(6, 12))]


@pytest.fixture
def task_log() -> Iterator[list[str]]:
    """The messages of the package's loggers while the test runs (a handler on the package's
    logger: `dag.test()` replaces the root logger's handlers, caplog's among them)."""
    messages: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger, handler = logging.getLogger("airflow_delta"), Keep(logging.INFO)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    yield messages
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.mark.usefixtures("airflow_db", "spark")
def test_delete_and_update_on_spark_then_in_process(task_log: list[str]) -> None:
    uri = create(fresh_table("dml_spark"), *DATA)  # versions 0 (create), 1, 2
    dag_run = load_dag("t_dml_spark").test()
    assert task_states(dag_run) == {
        "delete_on_spark": "success",
        "update_on_spark": "success",
        "delete_in_process": "success",
    }

    deleted = xcoms(dag_run, "delete_on_spark")["return_value"]
    assert (deleted["version"], deleted["operation"], deleted["executor"]) == (3, "DELETE", "spark")
    assert deleted["metrics"]["numDeletedRows"] == 1  # 2 * id > 20: 11
    assert deleted["metrics"]["numCopiedRows"] == 2  # 7, 9 of the second file of p = 'a'
    assert deleted["metrics"]["numDeletionVectorsAdded"] == 0
    assert deleted["app_id"] == f"airflow-delta/t_dml_spark/delete_on_spark/-1/{dag_run.run_id}"

    updated = xcoms(dag_run, "update_on_spark")["return_value"]
    assert (updated["version"], updated["operation"], updated["executor"]) == (4, "UPDATE", "spark")
    assert updated["metrics"]["numUpdatedRows"] == 5  # p = 'a': 1, 3, 5, 7, 9

    local = xcoms(dag_run, "delete_in_process")["return_value"]
    assert (local["version"], local["executor"]) == (5, "in-process")
    assert local["metrics"]["numDeletedRows"] == 1

    def after(row: tuple[Any, ...]) -> tuple[Any, ...]:
        id_, k, s, p = row
        return (id_, k * 10, s.upper(), p) if p == "a" else row

    want = sorted((after(r) for r in expected(DATA, lambda r: 0 < r["id"] <= 10)), key=repr)
    assert engine_rows(uri) == want
    assert deltalake_rows(uri) == want

    history = DeltaLog.for_table(uri).history()
    assert [h["operation"] for h in history[:3]] == ["DELETE", "UPDATE", "DELETE"]
    assert history[2]["operationParameters"]["predicate"] == '["shiftleft(id, 1) > 20"]'  # rendered
    assert history[1]["operationParameters"]["predicate"] == "p = 'a'"
    assert history[1]["airflow"]["task_id"] == "update_on_spark"
    events = asset_events(f"file://{uri}", dag_run.run_id)
    assert [(e["version"], e["operation"]) for e in events] == [
        (3, "DELETE"),
        (4, "UPDATE"),
        (5, "DELETE"),
    ]

    text = "\n".join(task_log)
    assert f"The in-process DELETE cannot run it on table {uri}: InvalidPredicateError" in text
    assert f"DELETE from table {uri} (version 2) where shiftleft(id, 1) > 20, on Spark" in text
    assert f"The in-process UPDATE cannot run it on table {uri}: UnsupportedCommandError" in text
    assert f"Committed version 3 of table {uri} (operation DELETE, run on Spark)" in text
    assert f"Committed version 5 of table {uri} (operation DELETE, run in process)" in text


@pytest.mark.usefixtures("airflow_db", "spark")
def test_retry_on_spark_after_landed_commit_commits_once(task_log: list[str]) -> None:
    """Each task commits on Spark, then fails; its retry finds the task instance's marker in
    the table and runs nothing: one DELETE and one UPDATE in the history."""
    uri = create(fresh_table("retried_dml_spark"), *DATA)
    dag_run = load_dag("t_dml_spark_retry").test()
    assert task_states(dag_run) == {"delete": "success", "update": "success"}
    assert [ti.try_number for ti in dag_run.get_task_instances()] == [2, 2]
    history = DeltaLog.for_table(uri).history()
    assert [h["operation"] for h in history] == [
        "UPDATE",
        "DELETE",
        "WRITE",
        "WRITE",
        "CREATE TABLE",
    ]
    assert [h["airflow"]["try_number"] for h in history[:2]] == [1, 1]
    for task_id, version in (("delete", 3), ("update", 4)):
        result = xcoms(dag_run, task_id)["return_value"]
        assert result["skipped"] is True and result["attempts"] == 0, result
        assert result["version"] == version
    assert "\n".join(task_log).count("already holds this write") == 2
    want = sorted(
        (
            (i, k, s + "!" if i == 2 else s, p)
            for i, k, s, p in expected(DATA, lambda r: True)
            if i != 1
        ),
        key=repr,
    )
    assert engine_rows(uri) == want


@pytest.mark.usefixtures("spark")
def test_neither_executor_takes_it_names_the_table(tmp_path: Any) -> None:
    """A predicate neither the engine nor Spark resolves fails with InvalidPredicateError
    naming the table, nothing written."""
    from airflow_delta.engine.errors import InvalidPredicateError
    from airflow_delta.operators.commit import SparkOnDemand
    from airflow_delta.operators.dml import DeltaDeleteOperator

    uri = create(tmp_path / "t", *DATA)
    op = DeltaDeleteOperator(task_id="d", table_uri=uri, predicate="nope(id) > 1")
    txn = DeltaLog.for_table(uri).start_transaction()
    spark = SparkOnDemand(lambda: op.hook.get_spark_session())
    with pytest.raises(InvalidPredicateError, match=f"DELETE on table {uri} is taken neither"):
        op.commit_once(spark, {}, txn)  # type: ignore[arg-type]
    assert DeltaLog.for_table(uri).update().version == 2


def test_without_pyspark_the_error_names_the_table_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import importlib.util

    from airflow_delta.engine.errors import UnsupportedCommandError
    from airflow_delta.operators.commit import SparkOnDemand
    from airflow_delta.operators.dml import DeltaUpdateOperator

    uri = create(tmp_path / "t", *DATA)
    op = DeltaUpdateOperator(
        task_id="u", table_uri=uri, set={"k": "shiftleft(k, 1)"}, predicate="id = 1"
    )
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pyspark" else find_spec(name, *a),
    )

    def no_session() -> Any:
        raise AssertionError("no session may start")

    txn = DeltaLog.for_table(uri).start_transaction()
    with pytest.raises(
        UnsupportedCommandError, match=f"(?s)UPDATE of table {uri}: .*airflow-delta\\[spark\\]"
    ):
        op.commit_once(SparkOnDemand(no_session), {}, txn)  # type: ignore[arg-type]


def test_dml_operators_take_spark_arguments() -> None:
    from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaUpdateOperator

    op = DeltaDeleteOperator(
        task_id="d",
        table_uri="/t",
        predicate="id = 1",
        spark_conn_id="spark",
        spark_conf={"a": "b"},
    )
    assert (op.spark_conn_id, op.spark_conf) == ("spark", {"a": "b"})
    assert "spark_conf" in DeltaUpdateOperator.template_fields
    with pytest.raises(ValueError, match="it takes no source"):
        DeltaUpdateOperator(
            task_id="u", table_uri="/t", set={"s": "'x'"}, predicate=None, source="SELECT 1"
        )
