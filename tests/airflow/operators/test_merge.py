"""DeltaMergeOperator: its clauses (checked at parse time, or a builder callable), and a MERGE of
an Arrow source that runs in process. What every committing operator shares is in
test_commit.py."""

from __future__ import annotations

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import task_states, xcoms
from tests.airflow.operators.test_commit import fresh_table, rows


@pytest.mark.parametrize(
    ("clauses", "message"),
    [
        ([], "at least one clause"),
        ([{"when": "matched", "then": "insert"}], "'when'/'then' must be one of"),
        ([{"when": "matched", "then": "update"}], "needs 'set'"),
        ([{"when": "matched", "then": "delete", "set": {"a": "1"}}], "unknown key"),
    ],
)
def test_merge_operator_validates_clauses_at_parse_time(clauses: list, message: str) -> None:
    from airflow_delta.operators.merge import DeltaMergeOperator

    with pytest.raises(ValueError, match=message):
        DeltaMergeOperator(
            task_id="m",
            table_uri="/tmp/t",
            source="SELECT 1",
            condition="t.a = s.a",
            clauses=clauses,
        )


def test_merge_clauses_can_be_a_builder_callable() -> None:
    from airflow_delta.operators.merge import apply_clauses
    from airflow_delta.spark.merge import DeltaMergeBuilder

    builder = DeltaMergeBuilder("/tmp/t", None, "t.id = s.id")  # type: ignore[arg-type]
    built = apply_clauses(builder, lambda b: b.when_matched_delete("s.gone"))
    assert built is builder and [(c.kind, c.action) for c in builder.clauses] == [
        ("matched", "delete")
    ]
    as_data = DeltaMergeBuilder("/tmp/t", None, "t.id = s.id")  # type: ignore[arg-type]
    apply_clauses(as_data, [{"when": "not_matched", "then": "insert_all", "condition": "s.ok"}])
    assert [(c.kind, c.action, c.condition) for c in as_data.clauses] == [
        ("notMatched", "insert", "s.ok")
    ]


@pytest.mark.usefixtures("airflow_db")
def test_arrow_sources_write_and_merge_in_process() -> None:
    """Source callables returning pyarrow Tables: the write (`engine.write_table`) and the MERGE
    (the engine's pyarrow MERGE) run in process, with no Spark session, and the XComs say so."""
    uri = fresh_table("arrow_events")
    dag_run = load_dag("t_arrow_merge").test()
    assert task_states(dag_run) == {"write": "success", "merge": "success"}
    write = xcoms(dag_run, "write")["return_value"]
    assert (write["version"], write["executor"]) == (0, "in-process")
    assert write["metrics"]["numOutputRows"] == 10
    merged = xcoms(dag_run, "merge")["return_value"]
    assert (merged["version"], merged["executor"]) == (1, "in-process")
    assert merged["metrics"]["numTargetRowsUpdated"] == 2
    assert merged["metrics"]["numTargetRowsInserted"] == 2
    expected = [{"id": i, "p": str(i % 2), "v": i * (100 if i >= 8 else 10)} for i in range(12)]
    assert rows(uri) == expected
    assert DeltaLog.for_table(uri).history()[0]["airflow"]["task_id"] == "merge"
