"""DeltaWriteOperator: its argument checks at parse time, and mapped write tasks committing to
disjoint partitions at once. What every committing operator shares (exactly-once, conflicts,
XCom, assets, lineage) is in test_commit.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import load_dag
from tests.airflow.operators.test_commit import PROCESSES_DEADLINE, fresh_table, rows
from tests.waiting import communicate_all


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mode": "upsert"}, "mode must be one of"),
        ({"replace_where": "p = '1'"}, "need mode='overwrite'"),
        ({"mode": "overwrite", "replace_where": "p = 1", "overwrite_schema": True}, "exclude"),
        ({"post_commit_hooks": ["vacuum"]}, "Unknown post-commit hook"),
        ({"isolation_level": "SnapshotIsolation"}, "isolation_level must be"),
        ({"max_commit_attempts": 0}, "at least 1"),
        ({"txn_app_id": "etl"}, "go together"),
        ({"source": 42}, "source must be"),
        ({"source": lambda spark, context: None, "source_format": "csv"}, "needs source to be"),
    ],
)
def test_write_operator_fails_early_on_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    from airflow_delta.operators.write import DeltaWriteOperator

    args = {"task_id": "w", "table_uri": "/tmp/t", "source": "SELECT 1 AS id", **kwargs}
    with pytest.raises(ValueError, match=message):
        DeltaWriteOperator(**args)


@pytest.mark.parametrize(
    ("hooks", "expected"),
    [
        ("checkpoint", ["checkpoint"]),
        ("log_cleanup, checkpoint", ["checkpoint", "log_cleanup"]),
        (["symlink_manifest", "checkpoint"], ["checkpoint", "symlink_manifest"]),
        ((), []),
    ],
)
def test_post_commit_hooks_take_one_string_or_a_list(hooks: Any, expected: list[str]) -> None:
    """A plain string is one hook name (or a comma-separated list), never read letter by
    letter."""
    from airflow_delta.operators.write import DeltaWriteOperator

    op = DeltaWriteOperator(
        task_id="w", table_uri="/tmp/t", source="SELECT 1 AS id", post_commit_hooks=hooks
    )
    assert op.post_commit_hooks == expected


@pytest.mark.parametrize("hooks", ["chekpoint", "checkpoint,vacuum", 42])
def test_bad_post_commit_hooks_name_the_valid_ones(hooks: Any) -> None:
    from airflow_delta.operators.dml import DeltaDeleteOperator

    with pytest.raises(ValueError, match="checkpoint, symlink_manifest, log_cleanup") as error:
        DeltaDeleteOperator(
            task_id="d", table_uri="/tmp/t", predicate="id = 1", post_commit_hooks=hooks
        )
    assert "['c'" not in str(error.value)


@pytest.mark.usefixtures("airflow_db", "spark")
@pytest.mark.timeout(900)
def test_mapped_tasks_write_disjoint_partitions_at_once(tmp_path: Path) -> None:
    """The mapped task instances run as three `airflow tasks test --map-index` processes at
    once (each its own Spark and its own copy of the metadata database)."""
    uri = fresh_table("mapped")
    dag_run = load_dag("t_mapped").test(mark_success_pattern="write_partition")
    home = Path(os.environ["AIRFLOW_HOME"])
    procs = []
    for index in range(3):
        own_home = tmp_path / f"home{index}"
        own_home.mkdir()
        shutil.copy(home / "airflow.db", own_home / "airflow.db")
        env = {
            "AIRFLOW_HOME": str(own_home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{own_home / 'airflow.db'}",
        }
        airflow = str(Path(sys.executable).with_name("airflow"))
        procs.append(
            subprocess.Popen(
                [
                    airflow,
                    "tasks",
                    "test",
                    "t_mapped",
                    "write_partition",
                    dag_run.run_id,
                    "--map-index",
                    str(index),
                ],
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = communicate_all(procs, PROCESSES_DEADLINE)
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)[-5000:]
    assert DeltaLog.for_table(uri).latest_version() == 2
    final = rows(uri)
    assert [r["id"] for r in final] == list(range(30))
    assert {r["p"] for r in final} == {"0", "1", "2"}
