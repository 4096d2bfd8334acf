"""Rendered template fields of the operators that commit, run by `dag.test()` on a real table
(DAGs in tests/airflow/dags/rendering_dags.py): a templated SQL argument whose None means the
whole table fails the task when it renders to nothing, whatever the rendering (native None,
"None", blank), and leaves the table as it was; text arguments rendered natively to other
objects reach the log as text, readable by deltalake."""

from __future__ import annotations

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import task_states, xcoms
from tests.airflow.operators.test_commit import fresh_table
from tests.engine.commands.dml_tables import batch, create, rows

WHOLE_TABLE_ARGS = {
    "delete": "predicate",
    "update": "predicate",
    "overwrite": "replace_where",
    "optimize": "partition_filter",
    "merge": "clauses[1] condition",
}


@pytest.mark.usefixtures("airflow_db", "no_spark")
@pytest.mark.parametrize(
    ("dag_id", "rendered"),
    [
        ("t_rendered_none_native", "None"),
        ("t_rendered_none_text", "'None'"),
        ("t_rendered_blank_text", "''"),
    ],
)
def test_a_whole_table_argument_rendered_to_nothing_fails_and_changes_nothing(
    dag_id: str, rendered: str, capfd: pytest.CaptureFixture[str]
) -> None:
    uri = create(fresh_table("rendered"), batch(range(6)), batch(range(6, 12)))
    before = rows(uri)
    version = DeltaLog.for_table(uri).update().version
    dag_run = load_dag(dag_id).test()
    assert task_states(dag_run) == dict.fromkeys([*WHOLE_TABLE_ARGS, "marker"], "failed")
    assert DeltaLog.for_table(uri).update().version == version
    assert rows(uri) == before
    text = capfd.readouterr().out
    for task_id, name in WHOLE_TABLE_ARGS.items():
        operation = {"overwrite": "WRITE"}.get(task_id, task_id.upper())
        assert f"{operation} of table {uri}: {name} " in text, task_id
    assert f"rendered to {rendered}; refusing to run DELETE on the whole table" in text
    assert f"writing {uri}: txn_app_id " in text
    assert f"rendered to {rendered}: every task whose template misses its value" in text


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_text_arguments_rendered_natively_are_written_as_text() -> None:
    """user_metadata from an int param was written as a JSON number: deltalake's history()
    then failed on the table (userMetadata must be a string)."""
    import deltalake

    uri = create(fresh_table("rendered"), batch(range(6)))
    dag_run = load_dag("t_rendered_native_text").test()
    assert task_states(dag_run) == {"write": "success"}
    result = xcoms(dag_run, "write")["return_value"]
    assert (result["app_id"], result["txn_version"]) == ("42", 7)
    latest = DeltaLog.for_table(uri).history(limit=1)[0]
    assert latest["userMetadata"] == "123"
    assert deltalake.DeltaTable(uri).history(1)[0]["userMetadata"] == "123"
    assert sorted(r[0] for r in rows(uri)) == [0, 2, 4, 100]  # p = 'a' (odd ids) replaced
