"""What every operator that commits shares (`operators.commit`), run by `dag.test()` on real
local Spark and real tables (DAGs in tests/airflow/dags/): a write, a MERGE and a checkpoint in
one DAG, exactly-once on retries, conflicts between concurrent runs, XCom, asset events and
OpenLineage facets. The operators' own behaviours are in test_write.py, test_merge.py and
test_checkpoint.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import TABLES_ROOT, airflow_command, load_dag
from tests.airflow.metadata import asset_events, task_states, xcoms
from tests.spark.test_write import deltalake_rows
from tests.waiting import communicate_all

#: Seconds the tests that run DAG tasks in several processes at once (each starting its own
#: Spark) give them all, together; their pytest timeout is above it. Generous: on a loaded
#: two-core machine the JVMs alone take minutes to start side by side.
PROCESSES_DEADLINE = 780


def fresh_table(name: str) -> str:
    """The path of table `name` under the worker's tables root, with no table there yet (the
    root exists: a test may be the worker's first, and some DAGs write files beside tables)."""
    path = TABLES_ROOT / name
    shutil.rmtree(path, ignore_errors=True)
    TABLES_ROOT.mkdir(parents=True, exist_ok=True)
    return str(path)


def rows(uri: str) -> list[dict[str, Any]]:
    """The table's rows as deltalake reads them (partition values included), sorted by id."""
    return sorted(deltalake_rows(uri), key=lambda r: r["id"])


@pytest.mark.usefixtures("airflow_db", "spark")
def test_write_merge_checkpoint_pipeline() -> None:
    uri = fresh_table("events")
    dag_run = load_dag("t_write_merge").test()
    assert task_states(dag_run) == {"write": "success", "merge": "success", "checkpoint": "success"}

    write = xcoms(dag_run, "write")
    result = write["return_value"]
    assert write["delta_commit"] == result
    assert result["version"] == 0 and result["operation"] == "WRITE" and not result["skipped"]
    assert result["attempts"] == 1 and result["conflicts"] == []
    assert result["metrics"]["numOutputRows"] == 10
    assert result["hooks"] == {"checkpoint": "ok", "symlink_manifest": "ok"}
    assert result["app_id"] == f"airflow-delta/t_write_merge/write/-1/{dag_run.run_id}"

    merged = xcoms(dag_run, "merge")["return_value"]
    assert merged["version"] == 1 and merged["operation"] == "MERGE"
    assert merged["metrics"]["numTargetRowsUpdated"] == 2
    assert merged["metrics"]["numTargetRowsInserted"] == 2

    checkpoint = xcoms(dag_run, "checkpoint")["return_value"]
    assert {k: checkpoint[k] for k in ("version", "parts", "cleaned", "vacuumed")} == {
        "version": 1,
        "parts": 1,
        "cleaned": 0,
        "vacuumed": None,
    }
    assert checkpoint["num_actions"] >= 4 and checkpoint["manifests"] == 2

    expected = [{"id": i, "p": str(i % 2), "v": i * (100 if i >= 8 else 10)} for i in range(12)]
    assert rows(uri) == expected
    history = DeltaLog.for_table(uri).history()
    assert [h["operation"] for h in history] == ["MERGE", "WRITE"]
    assert history[1]["airflow"]["task_id"] == "write"
    manifests = sorted(p.relative_to(uri).as_posix() for p in Path(uri).rglob("manifest"))
    assert manifests == [
        "_symlink_format_manifest/p=0/manifest",
        "_symlink_format_manifest/p=1/manifest",
    ]

    events = asset_events(f"file://{uri}")
    assert [(e["version"], e["operation"]) for e in events] == [(0, "WRITE"), (1, "MERGE")]


@pytest.mark.usefixtures("airflow_db", "spark")
def test_retry_after_landed_commit_writes_once() -> None:
    uri = fresh_table("retried")
    calls = TABLES_ROOT / "retried.calls.log"
    calls.unlink(missing_ok=True)
    dag_run = load_dag("t_retry").test()
    assert task_states(dag_run) == {"write": "success"}
    tis = dag_run.get_task_instances()
    assert tis[0].try_number == 2
    assert len(rows(uri)) == 10  # one copy of the data
    assert DeltaLog.for_table(uri).latest_version() == 0
    result = xcoms(dag_run, "write")["return_value"]
    assert result["skipped"] is True and result["version"] == 0 and result["attempts"] == 0
    assert calls.read_text() == "try 1\n"  # the retry found the marker before the source


@pytest.mark.usefixtures("airflow_db", "spark")
@pytest.mark.timeout(900)  # a DAG run on Spark, then `airflow tasks test` in a new process
def test_asset_scheduled_dag_sees_the_committed_version() -> None:
    """The consumer's run is created by the scheduler's own code for asset-triggered runs (run
    in-process: no scheduler loop or API server here) and its task runs via `airflow tasks
    test`, reading `triggering_asset_events`."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.dag import DagModel
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    fresh_table("events")
    load_dag("t_write_merge").test()
    with create_session() as session:
        query, _ = DagModel.dags_needing_dagruns(session)
        consumers = [d for d in query.all() if d.dag_id == "t_asset_consumer"]
        assert consumers, "the write did not queue a run of the DAG scheduled on the table"
        SchedulerJobRunner(job=Job())._create_dag_runs_asset_triggered(
            dag_models=consumers, session=session
        )
        session.flush()
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == "t_asset_consumer").order_by(DagRun.id.desc())
        ).first()
        assert run is not None and run.run_type == "asset_triggered"
        extras = [e.extra for e in run.consumed_asset_events]
        run_id = run.run_id
    # the run consumes the events up to the one that queued it (the WRITE's, at least)
    assert extras[0] == {
        "table": str(TABLES_ROOT / "events"),
        "version": 0,
        "operation": "WRITE",
        "skipped": False,
    }
    version = extras[-1]["version"]
    out = airflow_command("tasks", "test", "t_asset_consumer", "report_version", run_id)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"TRIGGERED BY DELTA VERSION {version}" in out.stdout + out.stderr


_RUN_DAG = """
import os, sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=os.environ["AIRFLOW__CORE__DAGS_FOLDER"]).get_dag(sys.argv[1])
print("DAG RUN STATE", dag.test().state)
"""


@pytest.mark.usefixtures("airflow_db", "spark")
@pytest.mark.timeout(900)
def test_concurrent_dag_runs_conflict_or_both_land(tmp_path: Path) -> None:
    """Two processes run the same DAG at once: appends both land; an overwrite of the same
    partition without re-runs fails in one of them with the conflict; with re-runs both land."""
    uri = fresh_table("shared")
    sync = tmp_path / "barrier"
    sync.mkdir()
    home = Path(os.environ["AIRFLOW_HOME"])
    procs = []
    for party in ("1", "2"):
        own_home = tmp_path / f"home{party}"
        own_home.mkdir()
        shutil.copy(home / "airflow.db", own_home / "airflow.db")
        env = {
            **os.environ,
            "AIRFLOW_HOME": str(own_home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{own_home / 'airflow.db'}",
            "AIRFLOW_DELTA_TEST_BARRIER": str(sync),
            "AIRFLOW_DELTA_TEST_PARTY": party,
            "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _RUN_DAG, "t_concurrent"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    logs = communicate_all(procs, PROCESSES_DEADLINE)
    both = "\n".join(logs)
    assert all(p.returncode == 0 for p in procs), both[-5000:]

    history = DeltaLog.for_table(uri).history()
    modes = [h["operationParameters"]["mode"] for h in reversed(history)]
    # both appends; the overwrite that won; both re-run-able overwrites
    assert modes == ["Append", "Append", "Overwrite", "Overwrite", "Overwrite"]
    gave_up = [log for log in logs if "Gave up on table" in log]
    assert len(gave_up) == 1, both[-5000:]  # overwrite_once failed in exactly one run
    assert re.search(r"Concurrent(Append|DeleteRead)Exception: .*Table: ", gave_up[0])
    assert "conflicting commit: version 2" in gave_up[0]  # names the winner
    assert "Re-running read, write and commit" in both  # overwrite_retried re-ran and landed
    assert all("DAG RUN STATE success" in log for log in logs)
    final = rows(uri)
    assert len(final) == 5 and len({r["v"] for r in final}) == 1  # the last overwrite's rows


# -- parse time: assets and lineage ---------------------------------------------------------------


def test_operators_declare_the_table_asset_as_outlet() -> None:
    from airflow.sdk import AssetAlias

    from airflow_delta.assets import delta_table_asset
    from airflow_delta.operators.write import DeltaWriteOperator

    op = DeltaWriteOperator(task_id="w", table_uri="/data/events/", source="SELECT 1 AS id")
    assert op.outlets == [delta_table_asset("/data/events")]
    templated = DeltaWriteOperator(task_id="t", table_uri="/data/{{ ds }}", source="SELECT 1 AS id")
    # unknown until rendered: the task emits the table's event through an alias of its own
    assert templated.outlets == [AssetAlias(name="delta-table-of-task:t", group="delta")]


@pytest.mark.parametrize("table_uri", ["s3://rootbkt", "S3://lake/Events", "gs://bkt"])
def test_one_asset_outlet_and_the_event_of_a_table_airflow_normalises(table_uri: str) -> None:
    """`outlets=Asset(...)` (one, as BaseOperator takes it) failed with "not iterable"; a
    table whose asset URI Airflow normalises (a bucket root gets a slash) got an event with an
    empty `extra`. The events go through Airflow's own outlet accessors."""
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_delta.assets import delta_table_asset
    from airflow_delta.operators.write import DeltaWriteOperator

    audit = Asset(uri="s3://lake/audit")
    op = DeltaWriteOperator(
        task_id="w", table_uri=table_uri, source="SELECT 1 AS id", outlets=audit
    )
    assert op.outlets == [audit, delta_table_asset(table_uri)]
    events = OutletEventAccessors()
    op._emit_asset_event({"outlet_events": events}, {"version": 3, "skipped": False})
    assert events[audit].extra == {}
    assert events[op.outlets[1]].extra == {
        "table": table_uri,
        "version": 3,
        "operation": "WRITE",
        "skipped": False,
    }


def test_a_txn_version_that_is_not_an_integer_names_the_parameter() -> None:
    from airflow_delta.operators.write import DeltaWriteOperator

    op = DeltaWriteOperator(
        task_id="w", table_uri="/data/t", source="SELECT 1 AS id", txn_app_id="a", txn_version="x"
    )
    with pytest.raises(ValueError, match="w writing /data/t: txn_version must be an integer"):
        op.commit_properties({"ti": None})


def test_openlineage_facets_name_the_table_and_the_version() -> None:
    from airflow_delta.operators.lineage import openlineage_dataset_name
    from airflow_delta.operators.write import DeltaWriteOperator

    op = DeltaWriteOperator(task_id="w", table_uri="s3://lake/events", source="SELECT 1 AS id")
    op.result = {"version": 7}
    lineage = op.get_openlineage_facets_on_complete(None)
    (dataset,) = lineage.outputs
    assert (dataset.namespace, dataset.name) == ("s3://lake", "events")
    assert dataset.facets["version"].datasetVersion == "7"
    assert dataset.facets["storage"].storageLayer == "delta"
    assert openlineage_dataset_name("/data/events") == ("file", "/data/events")
    assert lineage.inputs == []
    from_path = DeltaWriteOperator(
        task_id="p", table_uri="/data/t", source="s3://landing/day=1/", source_format="json"
    )
    (source,) = from_path.get_openlineage_facets_on_complete(None).inputs
    assert (source.namespace, source.name) == ("s3://landing", "day=1")
