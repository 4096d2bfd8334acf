"""What the in-process table-command operators share (`operators.command`): a conflict re-runs
the command on the new snapshot (dag.test() on a real table), OpenLineage facets, outlets, the
arguments they refuse, and the helpers reading rendered templates."""

from __future__ import annotations

import logging

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import task_states, xcoms
from tests.airflow.operators.test_commit import fresh_table
from tests.airflow.operators.test_dml import task_log
from tests.engine.commands.dml_tables import batch, create, rows


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_a_conflict_re_runs_the_command(caplog: pytest.LogCaptureFixture) -> None:
    """The first run's DELETE meets an append to the partition it read (Serializable):
    ConcurrentAppendException, then a second run on the new snapshot deletes the appended
    row too."""
    uri = create(fresh_table("contended"), batch(range(12)))  # v0 create, v1 rows
    caplog.set_level(logging.INFO, logger="airflow_delta")
    dag_run = load_dag("t_command_conflict").test()
    assert task_states(dag_run) == {"delete": "success"}
    result = xcoms(dag_run, "delete")["return_value"]
    assert (result["version"], result["read_version"]) == (3, 2)  # v2: the append
    assert result["attempts"] == 2  # one run lost to the conflict, one commit attempt
    assert [c["exception"] for c in result["conflicts"]] == ["ConcurrentAppendException"]
    assert result["metrics"]["numDeletedRows"] == 2  # id 5 and the appended id 100
    history = DeltaLog.for_table(uri).history()
    assert [h["operation"] for h in history] == ["DELETE", "WRITE", "WRITE", "CREATE TABLE"]
    assert [r[0] for r in rows(uri)] == sorted([i for i in range(12) if i != 5], key=repr)
    text = task_log(caplog)
    assert f"Conflict on table {uri} (run 1 of 3): ConcurrentAppendException" in text
    assert "Re-running read, write and commit." in text
    assert "after 2 commit attempt(s), 1 conflict(s)" in text


def test_openlineage_names_the_table_and_no_input() -> None:
    from airflow_delta.operators.optimize import DeltaOptimizeOperator

    op = DeltaOptimizeOperator(task_id="o", table_uri="s3://lake/events", zorder_by=["id"])
    op.result = {"version": 12}
    lineage = op.get_openlineage_facets_on_complete(None)
    (dataset,) = lineage.outputs
    assert (dataset.namespace, dataset.name) == ("s3://lake", "events")
    assert dataset.facets["version"].datasetVersion == "12"
    assert lineage.inputs == []


def test_outlets_and_no_template_files() -> None:
    from airflow.sdk import AssetAlias

    from airflow_delta.assets import delta_table_asset
    from airflow_delta.operators.dml import DeltaDeleteOperator
    from airflow_delta.operators.restore import DeltaRestoreOperator

    op = DeltaDeleteOperator(task_id="d", table_uri="/lake/t/", predicate="name = 'a.sql'")
    assert op.outlets == [delta_table_asset("/lake/t")]
    assert op.template_ext == ()  # a predicate is never read as a file
    templated = DeltaRestoreOperator(task_id="r", table_uri="/lake/{{ ds }}", version=1)
    assert templated.outlets == [AssetAlias(name="delta-table-of-task:r", group="delta")]


@pytest.mark.parametrize("name", ["source", "source_format", "source_options", "spark_conn_id"])
def test_source_and_spark_arguments_are_refused(name: str) -> None:
    from airflow_delta.operators.optimize import DeltaOptimizeOperator

    value = {"a": "b"} if name == "source_options" else "x"
    with pytest.raises(ValueError, match=f"runs the engine's OPTIMIZE in process .* no {name}"):
        DeltaOptimizeOperator(task_id="o", table_uri="/t", **{name: value})


def test_rendered_template_helpers() -> None:
    from airflow_delta.operators.command import optional_text, split_columns

    assert split_columns("a, b,,c ") == ["a", "b", "c"]
    assert split_columns(None) == [] and split_columns([]) == []
    assert [optional_text(v) for v in (None, "", " None ", " 3 ", 4)] == [
        None,
        None,
        None,
        "3",
        "4",
    ]
