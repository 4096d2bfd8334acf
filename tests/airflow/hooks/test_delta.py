"""DeltaHook (the `delta` connection, masking, Spark connections), provider registration, the
operators' argument checks, OpenLineage facets, and a write to S3 (moto) through a connection."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_delta.engine.delta_log import DeltaLog
from tests.airflow.conftest import airflow_command


@pytest.fixture
def connection(monkeypatch: pytest.MonkeyPatch):
    """Define an Airflow connection through an AIRFLOW_CONN_<ID> variable (JSON form)."""

    def define(conn_id: str, **fields: Any) -> str:
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
        return conn_id

    return define


def test_storage_options_from_the_connection_with_secrets_masked(connection) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    from airflow_delta.hooks.delta import DeltaHook

    conn_id = connection(
        "delta_lake",
        conn_type="delta",
        host="http://minio:9000",
        login="AKIAEXAMPLE",
        password="s3cr3t-password-value",
        extra={
            "client_kwargs": {"region_name": "eu-west-1"},
            "session_token": "tok-1234567890",
            "single_writer": False,
        },
    )
    options = DeltaHook(conn_id).storage_options
    assert options == {
        "endpoint_url": "http://minio:9000",
        "key": "AKIAEXAMPLE",
        "secret": "s3cr3t-password-value",
        "client_kwargs": {"region_name": "eu-west-1"},
        "session_token": "tok-1234567890",
        "single_writer": False,
    }
    line = "options: key=AKIAEXAMPLE secret=s3cr3t-password-value token=tok-1234567890"
    masked = redact(line)
    for secret in ("AKIAEXAMPLE", "s3cr3t-password-value", "tok-1234567890"):
        assert secret not in masked
    assert "eu-west-1" in redact("region eu-west-1")  # not a secret


def test_no_connection_means_no_storage_options(tmp_path) -> None:
    from airflow_delta.hooks.delta import DeltaHook

    hook = DeltaHook(None)
    assert hook.storage_options == {}
    assert hook.get_delta_log(str(tmp_path)).table_uri.endswith(tmp_path.name)


def test_extra_must_be_an_object(connection) -> None:
    from airflow_delta.hooks.delta import DeltaHook

    conn_id = connection("delta_bad", conn_type="delta", extra=["not", "an", "object"])
    with pytest.raises(ValueError, match="extra must be a JSON object"):
        _ = DeltaHook(conn_id).storage_options


def test_spark_session_from_a_spark_connection(connection, spark) -> None:
    """A `spark` connection to the session the process already runs: the same session back."""
    from airflow_delta.hooks.delta import DeltaHook

    conn_id = connection(
        "spark_local",
        conn_type="spark",
        host="local[2]",
        extra={"spark.sql.shuffle.partitions": "4"},
    )
    session = DeltaHook(None, spark_conn_id=conn_id).get_spark_session()
    assert session is spark or session.sparkContext is spark.sparkContext
    assert session.conf.get("spark.sql.shuffle.partitions") == "4"


def test_spark_connect_connection_maps_to_a_remote(connection) -> None:
    """The mapping the hook applies to a `spark_connect` connection (no server needed)."""
    from airflow.sdk import BaseHook

    from airflow_delta.spark.session import spark_target_from_connection

    conn_id = connection(
        "spark_connect_x",
        conn_type="spark_connect",
        host="connect.example",
        port=15003,
        login="etl",
        password="tkn",
        extra={"use_ssl": True, "spark.sql.shuffle.partitions": 8},
    )
    conn = BaseHook.get_connection(conn_id)
    target = spark_target_from_connection(
        conn.conn_type,
        conn.host,
        conn.port,
        conn.extra_dejson,
        login=conn.login,
        password=conn.password,
    )
    assert target.remote == "sc://connect.example:15003/;user_id=etl;token=tkn;use_ssl=true"
    assert target.conf == {"spark.sql.shuffle.partitions": "8"}


def test_provider_is_registered_with_the_delta_connection_type(airflow_db) -> None:
    providers = airflow_command("providers", "list", "--output", "json")
    assert providers.returncode == 0, providers.stderr
    listed = {p["package_name"]: p for p in json.loads(providers.stdout)}
    assert "airflow-delta" in listed
    hooks = airflow_command("providers", "hooks", "--output", "json")
    assert hooks.returncode == 0, hooks.stderr
    by_type = {h["connection_type"]: h for h in json.loads(hooks.stdout)}
    assert by_type["delta"]["class"] == "airflow_delta.hooks.delta.DeltaHook"
    assert by_type["delta"]["package_name"] == "airflow-delta"


def test_connection_form_behaviour_is_read_by_airflow() -> None:
    from airflow.providers_manager import ProvidersManager

    behaviour = ProvidersManager().field_behaviours["delta"]
    assert behaviour["hidden_fields"] == ["schema", "port"]
    assert behaviour["relabeling"]["extra"] == "Storage options (JSON, passed to fsspec)"


def test_provider_info_names_modules_that_import() -> None:
    import importlib

    from airflow_delta.provider import get_provider_info

    info = get_provider_info()
    assert info["package-name"] == "airflow-delta"
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[kind]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for conn in info["connection-types"]:
        module, _, name = conn["hook-class-name"].rpartition(".")
        assert getattr(importlib.import_module(module), name).conn_type == conn["connection-type"]


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


def test_operators_declare_the_table_asset_as_outlet() -> None:
    from airflow_delta.assets import delta_table_asset
    from airflow_delta.operators.write import DeltaWriteOperator

    op = DeltaWriteOperator(task_id="w", table_uri="/data/events/", source="SELECT 1 AS id")
    assert op.outlets == [delta_table_asset("/data/events")]
    templated = DeltaWriteOperator(task_id="t", table_uri="/data/{{ ds }}", source="SELECT 1 AS id")
    assert templated.outlets == []  # unknown until rendered: the user declares it


def test_openlineage_facets_name_the_table_and_the_version() -> None:
    from airflow_delta.operators.commit import openlineage_dataset_name
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


@pytest.mark.s3
def test_write_operator_commits_to_s3_through_a_delta_connection(
    airflow_db, spark, connection, monkeypatch: pytest.MonkeyPatch, s3_endpoint: str, s3_bucket
) -> None:
    """A `delta` connection (endpoint, keys) carries the storage options to the write."""
    from tests.airflow.conftest import load_dag
    from tests.airflow.metadata import task_states, xcoms

    bucket, options = s3_bucket
    monkeypatch.setenv("AIRFLOW_DELTA_TEST_BUCKET", bucket)
    connection(
        "delta_moto",
        conn_type="delta",
        host=s3_endpoint,
        login="testing",
        password="testing",
        extra={"client_kwargs": {"region_name": "us-east-1"}},
    )
    dag_run = load_dag("t_s3_write").test()
    assert task_states(dag_run) == {"write": "success"}
    result = xcoms(dag_run, "write")["return_value"]
    assert result["version"] == 0 and result["hooks"] == {"checkpoint": "ok"}
    snapshot = DeltaLog.for_table(f"s3://{bucket}/events", options).update()
    assert snapshot.version == 0 and snapshot.num_records == 30


def test_checkpoint_operator_vacuums_and_refuses_a_short_retention(tmp_path) -> None:
    """The maintenance steps of DeltaCheckpointOperator (its `execute` needs no context)."""
    from airflow_delta.engine.commands.maintenance import VacuumRetentionError
    from airflow_delta.operators.checkpoint import DeltaCheckpointOperator
    from tests.engine.commands.test_maintenance_vacuum import OLD_UNREFERENCED, build_table

    root, delta_log = build_table(tmp_path)
    version = delta_log.update().version

    def run(**kwargs: Any) -> dict[str, Any]:
        return DeltaCheckpointOperator(task_id="c", table_uri=str(root), **kwargs).execute({})

    with pytest.raises(VacuumRetentionError):
        run(vacuum_retention_hours=1)
    result = run(vacuum_retention_hours=168)
    assert (result["version"], result["parts"], result["cleaned"]) == (version, 1, 0)
    assert result["vacuumed"] == len(OLD_UNREFERENCED) and result["vacuumed_bytes"] > 0
    assert not any((root / f).exists() for f in OLD_UNREFERENCED)
    assert delta_log.update().log_segment.checkpoint_version == version


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
