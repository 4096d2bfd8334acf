"""DeltaRestoreOperator (`operators.restore`), run by `dag.test()` on a table the engine writes
(DAG t_restore in tests/airflow/dags/command_dags.py): RESTORE to a templated version, then to
a timestamp given in the run's conf; XCom metrics, exactly-once on a retry, no Spark; and its
parse-time argument checks."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.engine import delete
from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.metadata import task_states, xcoms
from tests.airflow.operators.test_commit import fresh_table
from tests.airflow.operators.test_dml import task_log
from tests.engine.commands.dml_tables import append, batch, create, expected, rows

DATA = [batch(range(0, 4)), batch(range(4, 8)), batch(range(8, 12))]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_restore_to_a_version_then_to_a_timestamp(caplog: pytest.LogCaptureFixture) -> None:
    uri = create(fresh_table("restored"), *DATA)  # v0 create, v1-v3 one batch each
    for version in range(4):  # commit times: v0 at T0, v1 at T0 + 1 h, ...
        stamp = (T0 + timedelta(hours=version)).timestamp()
        os.utime(Path(uri, "_delta_log", f"{version:020d}.json"), (stamp, stamp))
    caplog.set_level(logging.INFO, logger="airflow_delta")
    when = (T0 + timedelta(hours=2, minutes=30)).isoformat()  # -> version 2
    dag_run = load_dag("t_restore").test(run_conf={"timestamp": when})
    assert task_states(dag_run) == {"restore": "success", "restore_by_time": "success"}

    # restore (to {{ params.version }} = 1) commits version 4, fails, and its retry skips
    restored = xcoms(dag_run, "restore")["return_value"]
    assert restored["skipped"] is True and restored["version"] == 4
    by_time = xcoms(dag_run, "restore_by_time")["return_value"]
    assert (by_time["version"], by_time["operation"], by_time["skipped"]) == (5, "RESTORE", False)
    assert by_time["metrics"]["numRestoredFiles"] == 2  # batch 2's files, one per partition
    assert by_time["metrics"]["numRemovedFiles"] == 0

    history = DeltaLog.for_table(uri).history()
    assert [h["operation"] for h in history[:3]] == ["RESTORE", "RESTORE", "WRITE"]
    assert history[1]["operationParameters"]["version"] in (1, "1")
    assert history[1]["airflow"]["try_number"] == 1
    assert rows(uri) == expected(DATA[:2], lambda r: True)

    text = task_log(caplog)
    assert f"RESTORE table {uri} (version 3) to version 1, in process" in text
    assert f"RESTORE table {uri} (version 4) to timestamp {when}, in process" in text
    assert f"Committed version 5 of table {uri} (operation RESTORE, run in process)" in text
    assert "already holds this write" in text


@pytest.mark.usefixtures("airflow_db", "no_spark")
def test_restore_of_vacuumed_files_fails_unless_told(tmp_path: Path) -> None:
    """The engine's refusal reaches the task as the engine's error, nothing committed."""
    from airflow_delta.engine.errors import RestoreMissingFilesError
    from airflow_delta.operators.restore import DeltaRestoreOperator

    uri = create(tmp_path / "t", DATA[0])
    append(uri, DATA[1])
    delta_log = DeltaLog.for_table(uri)
    first = [f.path for f in delta_log.snapshot_at(1).all_files()]
    delete(uri, None)  # version 3: every file removed
    Path(uri, first[0]).unlink()
    op = DeltaRestoreOperator(task_id="r", table_uri=uri, version=1, exactly_once=False)
    with pytest.raises(RestoreMissingFilesError):
        op.run_command(delta_log.start_transaction(), {})  # type: ignore[arg-type]
    assert delta_log.latest_version() == 3
    lenient = DeltaRestoreOperator(
        task_id="r", table_uri=uri, version=1, ignore_missing_files=True, exactly_once=False
    )
    result = lenient.run_command(delta_log.start_transaction(), {})  # type: ignore[arg-type]
    assert result.version == 4 and result.metrics["numMissingFilesSkipped"] == 1


def test_templated_fields() -> None:
    from airflow_delta.operators.restore import DeltaRestoreOperator

    assert set(DeltaRestoreOperator.template_fields) >= {"table_uri", "version", "timestamp"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "RESTORE needs the version or the timestamp"),
        ({"version": 1, "timestamp": "2026-01-01"}, "a version or a timestamp, not both"),
        ({"version": "{{ v }}", "timestamp": "2026-01-01"}, "not both"),
        ({"version": -1}, "version must be >= 0"),
        ({"version": "one"}, "version must be a table version"),
        ({"version": True}, "version must be a table version"),
        ({"timestamp": 5}, "timestamp must be ISO 8601 text or a datetime"),
        ({"version": 1, "spark_conf": {"a": "b"}}, "takes no spark_conf"),
    ],
)
def test_restore_refuses_bad_arguments_at_parse_time(kwargs: dict[str, Any], message: str) -> None:
    from airflow_delta.operators.restore import DeltaRestoreOperator

    with pytest.raises(ValueError, match=message):
        DeltaRestoreOperator(task_id="r", table_uri="/tmp/t", **kwargs)


def test_two_templates_are_checked_when_rendered() -> None:
    from airflow_delta.operators.restore import DeltaRestoreOperator

    op = DeltaRestoreOperator(
        task_id="r",
        table_uri="/tmp/t",
        version="{{ params.version }}",
        timestamp="{{ params.timestamp }}",
    )
    op.version, op.timestamp = "None", "2026-01-02T00:00:00Z"
    assert op.target() == (None, "2026-01-02T00:00:00Z")
    op.version, op.timestamp = "7", ""
    assert op.target() == (7, None)
    op.version, op.timestamp = "", "None"
    with pytest.raises(ValueError, match="exactly one of them must be set"):
        op.target()
    op.version, op.timestamp = "3", "2026-01-02"
    with pytest.raises(ValueError, match="exactly one of them must be set"):
        op.target()
