"""DeltaOptimizeOperator (`operators.optimize`), run by `dag.test()` on a table of small files
the engine writes (DAG t_optimize in tests/airflow/dags/command_dags.py): a templated partition
filter, Z-order, XCom metrics, dataChange=false in the log, exactly-once on a retry, no Spark;
and its parse-time argument checks."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import asset_events, task_states, xcoms
from tests.airflow.operators.test_commit import fresh_table
from tests.airflow.operators.test_dml import task_log
from tests.engine.commands.dml_tables import batch, create, expected, rows

#: Six appends of three rows: six small files in each of the partitions p=a and p=b.
DATA = [batch(range(i * 3, i * 3 + 3)) for i in range(6)]


def _commit_actions(uri: str, version: int) -> list[dict[str, Any]]:
    path = f"{uri}/_delta_log/{version:020d}.json"
    with open(path) as commit:
        return [json.loads(line) for line in commit]


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_compact_a_partition_then_zorder_the_table(caplog: pytest.LogCaptureFixture) -> None:
    uri = create(fresh_table("small_files"), *DATA)  # versions 0 (create) to 6
    caplog.set_level(logging.INFO, logger="airflow_delta")
    dag_run = load_dag("t_optimize").test()
    assert task_states(dag_run) == {"compact": "success", "zorder": "success"}

    compact = xcoms(dag_run, "compact")["return_value"]
    assert (compact["version"], compact["operation"], compact["executor"]) == (
        7,
        "OPTIMIZE",
        "in-process",
    )
    metrics = compact["metrics"]
    assert (metrics["numFilesRemoved"], metrics["numFilesAdded"]) == (6, 1)  # p = 'a' only
    assert metrics["partitionsOptimized"] == 1

    # zorder commits, fails after the commit, and its retry finds the marker: one commit
    (zorder_ti,) = [ti for ti in dag_run.get_task_instances() if ti.task_id == "zorder"]
    assert zorder_ti.try_number == 2
    zorder = xcoms(dag_run, "zorder")["return_value"]
    assert zorder["skipped"] is True and zorder["version"] == 8

    delta_log = DeltaLog.for_table(uri)
    history = delta_log.history()
    assert [h["operation"] for h in history[:3]] == ["OPTIMIZE", "OPTIMIZE", "WRITE"]
    assert history[1]["operationParameters"]["predicate"] == "[\"p = 'a'\"]"  # rendered
    assert json.loads(history[0]["operationParameters"]["zOrderBy"]) == ["id", "k"]
    assert history[0]["airflow"]["try_number"] == 1
    assert delta_log.latest_version() == 8
    assert delta_log.update().num_files == 2  # one per partition
    changes = [a for a in _commit_actions(uri, 8) if "add" in a or "remove" in a]
    assert changes and all(not next(iter(a.values()))["dataChange"] for a in changes)
    assert rows(uri) == expected(DATA, lambda r: True)  # the same rows, for all three readers

    events = asset_events(f"file://{uri}", dag_run.run_id)
    assert [(e["version"], e["operation"], e["skipped"]) for e in events] == [
        (7, "OPTIMIZE", False),
        (8, "OPTIMIZE", True),  # zorder's retry (its failed first try emitted none)
    ]
    text = task_log(caplog)
    assert f"OPTIMIZE table {uri} (version 6) where p = 'a', in process" in text
    assert f"OPTIMIZE table {uri} (version 7) ZORDER BY (id, k), in process" in text
    assert f"Committed version 7 of table {uri} (operation OPTIMIZE, run in process)" in text
    assert "already holds this write" in text


def test_templated_fields() -> None:
    from airflow_delta.operators.optimize import DeltaOptimizeOperator

    fields = set(DeltaOptimizeOperator.template_fields)
    assert fields >= {"table_uri", "partition_filter", "zorder_by", "target_size"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition_filter": " "}, "partition_filter must be SQL text"),
        ({"zorder_by": ["a", "a"]}, r"zorder_by names column\(s\) \['a'\] more than once"),
        ({"zorder_by": [1]}, "zorder_by must be column names"),
        ({"target_size": 0}, "target_size must be at least 1 bytes"),
        ({"target_size": "big"}, "target_size must be a number of bytes"),
        ({"min_file_size": -1}, "min_file_size must be at least 0 bytes"),
        ({"source": "SELECT 1"}, "takes no source"),
    ],
)
def test_optimize_refuses_bad_arguments_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    from airflow_delta.operators.optimize import DeltaOptimizeOperator

    with pytest.raises(ValueError, match=message):
        DeltaOptimizeOperator(task_id="o", table_uri="/tmp/t", **kwargs)


def test_templated_sizes_and_columns_are_read_when_rendered() -> None:
    from airflow_delta.operators.optimize import DeltaOptimizeOperator

    op = DeltaOptimizeOperator(
        task_id="o",
        table_uri="/tmp/t",
        zorder_by="{{ params.cols }}",
        target_size="{{ params.size }}",
    )
    op.target_size, op.min_file_size = "1048576", ""
    assert (op.size("target_size"), op.size("min_file_size")) == (1048576, None)
    op.target_size = "0"
    with pytest.raises(ValueError, match="target_size must be at least 1"):
        op.size("target_size")
