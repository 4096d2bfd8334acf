"""The OpenLineage events of the operators that commit (`operators.lineage`), emitted by the
real OpenLineage provider (file transport) in an `airflow dags test` run of
tests/airflow/dags/lineage_dags.py, and the dataset names of each storage scheme."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from airflow_delta.operators.lineage import openlineage_dataset_name
from tests.airflow.conftest import airflow_command
from tests.airflow.operators.test_commit import fresh_table


def fields(facet_fields: list[dict[str, Any]]) -> list[tuple[str, str, Any]]:
    """(name, type, nested fields) of schema facet fields, recursively."""
    return [
        (f["name"], f["type"], fields(f["fields"]) if f.get("fields") else None)
        for f in facet_fields
    ]


@pytest.mark.usefixtures("airflow_db")
def test_outputs_carry_the_schema_and_only_the_versions_committed(tmp_path: Path) -> None:
    uri = fresh_table("lineage")
    events_file = tmp_path / "ol.jsonl"
    transport = {"type": "file", "log_file_path": str(events_file), "append": True}
    # the run gets its own copy of the metadata database, as every other `airflow` process of
    # the tests does: a second process writing this worker's live SQLite file broke this
    # worker's later connections ('disk I/O error' opening them) in the full suite
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(Path(os.environ["AIRFLOW_HOME"]) / "airflow.db", home / "airflow.db")
    env = {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
    }
    result = airflow_command("dags", "test", "t_lineage", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    complete = {
        e["job"]["name"].rsplit(".", 1)[-1]: e for e in events if e["eventType"] == "COMPLETE"
    }
    started = {e["job"]["name"].rsplit(".", 1)[-1]: e for e in events if e["eventType"] == "START"}
    outputs = {task: e["outputs"] for task, e in complete.items() if "." not in task}
    # the START event names the table already (templates are rendered by then), no version
    for task in ("write", "again", "delete_nothing"):
        (dataset,) = started[task]["outputs"]
        assert (dataset["namespace"], dataset["name"]) == ("file", uri), task
        assert "version" not in dataset.get("facets", {}), task
    assert set(outputs) >= {"write", "again", "delete_nothing"}
    for task in ("write", "again", "delete_nothing"):
        (dataset,) = outputs[task]
        assert (dataset["namespace"], dataset["name"]) == ("file", uri)
        assert fields(dataset["facets"]["schema"]["fields"]) == [
            ("id", "long", None),
            ("p", "string", None),
            ("s", "struct", [("x", "long", None), ("y", "string", None)]),
            ("tags", "array", [("_element", "string", None)]),
            ("m", "map", [("key", "string", None), ("value", "integer", None)]),
        ], task
    assert outputs["write"][0]["facets"]["version"]["datasetVersion"] == "0"
    # The retry committed nothing: no version is claimed (version 0 is the first task's).
    assert "version" not in outputs["again"][0]["facets"]
    # A DELETE of no row still commits its exactly-once marker: version 1 is its own.
    assert outputs["delete_nothing"][0]["facets"]["version"]["datasetVersion"] == "1"
    # The sensor reads the table: its input, with the version it observed once it has
    for event, version in ((started["watch"], None), (complete["watch"], "1")):
        assert event["outputs"] == []
        (dataset,) = event["inputs"]
        assert (dataset["namespace"], dataset["name"]) == ("file", uri)
        assert dataset["facets"].get("version", {}).get("datasetVersion") == version


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("/data/events/", ("file", "/data/events")),
        ("file:///data/events", ("file", "/data/events")),
        ("s3://lake/db/events/", ("s3://lake", "db/events")),
        ("s3a://lake/db/events", ("s3://lake", "db/events")),
        ("s3n://lake/events", ("s3://lake", "events")),
        ("gs://lake/events", ("gs://lake", "events")),
        (
            "abfss://box@acct.dfs.core.windows.net/db/events",
            ("abfss://box@acct.dfs.core.windows.net", "db/events"),
        ),
        ("abfs://box@acct.dfs.core.windows.net/t", ("abfss://box@acct.dfs.core.windows.net", "t")),
    ],
)
def test_dataset_names_follow_the_openlineage_naming_spec(
    uri: str, expected: tuple[str, str]
) -> None:
    assert openlineage_dataset_name(uri) == expected


@pytest.mark.parametrize("scheme", ["abfs", "abfss", "az"])
def test_an_azure_table_is_named_by_the_account_of_its_connection(
    scheme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """adlfs's `abfs://container/path` names no account: the lineage took the container alone
    for the namespace (`abfs://box`), which no other integration reports."""
    from airflow_delta.operators.write import DeltaWriteOperator

    extra = {"account_name": "acct", "account_key": "k"}
    monkeypatch.setenv(
        "AIRFLOW_CONN_DELTA_AZURE", json.dumps({"conn_type": "delta", "extra": extra})
    )
    op = DeltaWriteOperator(
        task_id="w",
        table_uri=f"{scheme}://box/db/events",
        source=f"{scheme}://box/landing/",
        source_format="json",
        delta_conn_id="delta_azure",
    )
    namespace = "abfss://box@acct.dfs.core.windows.net"
    for lineage in (
        op.get_openlineage_facets_on_start(),
        op.get_openlineage_facets_on_complete(None),
    ):
        assert [(d.namespace, d.name) for d in lineage.outputs] == [(namespace, "db/events")]
        assert [(d.namespace, d.name) for d in lineage.inputs] == [(namespace, "landing")]


def test_the_lineage_of_a_task_failed_by_its_connection_still_names_the_table() -> None:
    """The FAIL event of a task whose connection is missing (the OpenLineage provider calls
    the same method): reading the connection for an account must not drop the datasets."""
    from airflow_delta.operators.write import DeltaWriteOperator

    op = DeltaWriteOperator(
        task_id="w", table_uri="s3://lake/events", source="SELECT 1", delta_conn_id="absent"
    )
    (dataset,) = op.get_openlineage_facets_on_complete(None).outputs
    assert (dataset.namespace, dataset.name) == ("s3://lake", "events")
    assert "version" not in dataset.facets
