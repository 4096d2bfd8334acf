"""The apache-spark provider beside ours: `pyspark` is the full distribution whose Python files
match its jars (pyspark-client, the provider's dependency, ships older copies of the same
files), `pip check` is clean, Airflow lists both providers and the provider's `spark` /
`spark_connect` connection types, and our hook maps those connections as the provider does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow.conftest import airflow_command

EXAMPLES = Path(__file__).resolve().parents[2] / "dags_examples"


def test_pyspark_python_files_match_the_jars() -> None:
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    core = [p.name for p in jars.glob("spark-core_*.jar")]
    assert len(core) == 1, core
    match = re.fullmatch(r"spark-core_[\d.]+-(.+)\.jar", core[0])
    assert match, core
    assert pyspark.__version__ == match.group(1), (
        f"pyspark's Python files are {pyspark.__version__} but its jars {match.group(1)}: "
        "pyspark-client was installed over pyspark; reinstall pyspark with --no-deps "
        "--force-reinstall (the Makefile's install step does)"
    )


def test_pip_check_is_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "check", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_airflow_lists_both_providers_and_the_spark_connection_types(airflow_db) -> None:
    env = {"AIRFLOW_HOME": str(airflow_db)}
    providers = airflow_command("providers", "list", "--output", "json", env=env)
    assert providers.returncode == 0, providers.stderr
    listed = {p["package_name"] for p in json.loads(providers.stdout)}
    assert {"airflow-delta", "apache-airflow-providers-apache-spark"} <= listed
    hooks = airflow_command("providers", "hooks", "--output", "json", env=env)
    assert hooks.returncode == 0, hooks.stderr
    by_type = {h["connection_type"]: h["package_name"] for h in json.loads(hooks.stdout)}
    assert by_type["delta"] == "airflow-delta"
    assert by_type["spark"] == "apache-airflow-providers-apache-spark"
    assert by_type["spark_connect"] == "apache-airflow-providers-apache-spark"


def test_our_hook_maps_spark_connect_connections_as_the_provider_does(monkeypatch) -> None:
    """The same `spark_connect` connection: our remote URL is the provider's (its URL holds
    user_id, token and use_ssl; ours the same parameters)."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk import BaseHook

    from airflow_delta.spark.session import spark_target_from_connection

    fields = {
        "conn_type": "spark_connect",
        "host": "connect.example",
        "port": 15003,
        "login": "etl",
        "password": "tkn",
        "extra": {"use_ssl": True},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SC_BOTH", json.dumps(fields))
    conn = BaseHook.get_connection("sc_both")
    ours = spark_target_from_connection(
        conn.conn_type,
        conn.host,
        conn.port,
        conn.extra_dejson,
        login=conn.login,
        password=conn.password,
    )
    theirs = SparkConnectHook("sc_both").get_connection_url()

    def parts(url: str) -> tuple[str, set[str]]:
        base, _, params = url.partition(";")
        return base.rstrip("/"), {p.lower() for p in params.split(";") if p}

    assert parts(ours.remote or "") == parts(theirs)


def test_our_hook_maps_spark_connections_as_the_provider_does(monkeypatch) -> None:
    """A `spark` connection (master URL in host, port apart; extras as Spark conf), as
    PySparkOperator reads it: `host:port`."""
    from airflow_delta.spark.session import spark_target_from_connection

    for host, port, master in [
        ("spark://127.0.0.1", 7077, "spark://127.0.0.1:7077"),
        ("local[2]", None, "local[2]"),
        ("yarn", None, "yarn"),
    ]:
        target = spark_target_from_connection(
            "spark", host, port, {"spark.executor.memory": "1g", "deploy-mode": "client"}
        )
        assert target.master == master
        assert target.conf == {"spark.executor.memory": "1g"}


@pytest.mark.timeout(600)
def test_pyspark_task_prepares_and_our_operators_commit_on_the_same_connection(
    tmp_path: Path,
) -> None:
    """dags_examples/delta_pyspark_orders.py under `airflow dags test` in its own process and
    AIRFLOW_HOME (the provider's task stops the process's Spark session when it ends): the
    `@task.pyspark` task stages parquet on a `spark` connection, DeltaWriteOperator commits it
    on that connection, DeltaMergeOperator corrects amounts."""
    from airflow_delta.engine.delta_log import DeltaLog

    home = tmp_path / "home"
    home.mkdir()
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(EXAMPLES),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW_DELTA_DEMO_ROOT": str(tmp_path / "demo"),
        "AIRFLOW_CONN_SPARK_EXAMPLE": json.dumps({"conn_type": "spark", "host": "local[1]"}),
        "AIRFLOW_DELTA_SPARK_CONN_ID": "spark_example",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    migrated = airflow_command("db", "migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr
    run = airflow_command("dags", "test", "delta_pyspark_orders", "2026-02-03", env=env)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-5000:]
    assert "state=success" in output, output[-5000:]
    table = str(tmp_path / "demo" / "tables" / "pyspark_orders")
    assert re.search(r"Committed version 0 of table \S+pyspark_orders \(operation WRITE", output)
    assert re.search(r"Committed version 1 of table \S+pyspark_orders \(operation MERGE", output)
    history = DeltaLog.for_table(table).history()
    assert [h["operation"] for h in history] == ["MERGE", "WRITE"]
