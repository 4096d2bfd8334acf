"""Sessions from Airflow connection fields, and no silent reuse of a session for another target.

The mapping tests are pure (no JVM). The reuse tests use fake active sessions, and the shared
local `spark` fixture for the real thing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_delta.spark import session as session_module
from airflow_delta.spark.session import (
    SparkSessionConflictError,
    SparkTarget,
    executor_python_conf,
    get_spark,
    spark_session_from_connection,
    spark_target_from_connection,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def target(conn_type: str, host: str | None, port: int | None = None, extra: Any = None,
           config_kwargs: Any = None, **kw: Any) -> SparkTarget:  # fmt: skip
    return spark_target_from_connection(conn_type, host, port, extra, config_kwargs, **kw)


# -- `spark` connections: master URLs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "master"),
    [
        (None, None, "local[*]"),
        ("", 7077, "local[*]"),
        ("local", None, "local"),
        ("local[4]", None, "local[4]"),
        ("local[*]", 1234, "local[*]"),
        ("yarn", None, "yarn"),
        ("spark://master", None, "spark://master:7077"),
        ("spark://master", 7078, "spark://master:7078"),
        ("spark://master:7079", None, "spark://master:7079"),
        ("spark://master:7079", 7079, "spark://master:7079"),
        ("spark://m1:7077,m2:7077", None, "spark://m1:7077,m2:7077"),
        ("spark-master", None, "spark://spark-master:7077"),
        ("spark-master", 17077, "spark://spark-master:17077"),
        ("10.0.0.5:7000", None, "spark://10.0.0.5:7000"),
        ("k8s://https://kube.example.com", 443, "k8s://https://kube.example.com:443"),
        ("k8s://https://kube.example.com:6443", None, "k8s://https://kube.example.com:6443"),
        ("k8s://kube.example.com", 6443, "k8s://kube.example.com:6443"),
        ("k8s://https://kube.example.com", None, "k8s://https://kube.example.com"),
    ],
)
def test_spark_connection_master(host: str | None, port: int | None, master: str) -> None:
    assert target("spark", host, port, {}) == SparkTarget(master=master, conf={})


def test_spark_connection_port_conflict_with_host_port() -> None:
    with pytest.raises(ValueError, match="port other than port=7078"):
        target("spark", "spark://master:7077", 7078)


def test_unknown_conn_type_is_a_master_like_the_provider() -> None:
    assert target("spark_sql", "spark://m", 7077).master == "spark://m:7077"


def test_spark_connection_extras_become_conf_and_config_kwargs_override() -> None:
    got = target(
        "spark",
        "spark://master",
        7077,
        {"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": 8, "flag": True},
        {"spark.executor.memory": "4g", "spark.dynamicAllocation.enabled": False},
    )
    assert got == SparkTarget(
        master="spark://master:7077",
        conf={
            "spark.executor.memory": "4g",
            "spark.sql.shuffle.partitions": "8",
            "flag": "true",
            "spark.dynamicAllocation.enabled": "false",
        },
    )


def test_spark_submit_extras_are_mapped_or_dropped() -> None:
    extras = {"queue": "etl", "namespace": "spark-jobs", "deploy-mode": "client",
              "spark-binary": "spark3-submit", "spark_home": "/opt/spark", "other": 1}  # fmt: skip
    assert target("spark", "yarn", None, extras).conf == {
        "spark.yarn.queue": "etl",
        "spark.kubernetes.namespace": "spark-jobs",
        "other": "1",
    }


def test_cluster_deploy_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="cluster"):
        target("spark", "yarn", None, {"deploy-mode": "cluster"})


def test_spark_connection_with_sc_host_is_a_remote_like_the_provider() -> None:
    got = target("spark", "sc://connect-host", None, {"token": "t", "spark.x": "1"})
    assert got == SparkTarget(remote="sc://connect-host:15002/;token=t", conf={"spark.x": "1"})


# -- `spark_connect` connections: sc:// URLs ---------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "remote"),
    [
        ("spark-connect", None, "sc://spark-connect:15002"),
        ("spark-connect", 443, "sc://spark-connect:443"),
        ("sc://spark-connect", None, "sc://spark-connect:15002"),
        ("sc://spark-connect:16000", None, "sc://spark-connect:16000"),
        ("sc://spark-connect:16000/", 16000, "sc://spark-connect:16000"),
        (None, None, "sc://localhost:15002"),
        ("127.0.0.1", 15003, "sc://127.0.0.1:15003"),
    ],
)
def test_connect_connection_url(host: str | None, port: int | None, remote: str) -> None:
    assert target("spark_connect", host, port, {}) == SparkTarget(remote=remote, conf={})


def test_connect_connection_url_params_from_fields_and_extras() -> None:
    got = target(
        "spark_connect",
        "sc://h:15002/;user_agent=ua;token=from-host",
        None,
        {"use_ssl": True, "token": "from extra", "spark.sql.shuffle.partitions": 4},
        login="user/1",
        password="from-password",
    )
    # host params < login/password < extras; values URL-quoted per the Spark Connect URL spec.
    assert (
        got.remote == "sc://h:15002/;user_agent=ua;token=from%20extra;user_id=user%2F1;use_ssl=true"
    )
    assert got.conf == {"spark.sql.shuffle.partitions": "4"}


def test_connect_login_password_become_user_id_and_token() -> None:
    got = target("spark_connect", "h", 1, {}, login="me", password="secret")
    assert got.remote == "sc://h:1/;user_id=me;token=secret"


def test_connect_url_is_understood_by_pyspark() -> None:
    from pyspark.sql.connect.client.core import DefaultChannelBuilder

    got = target("spark_connect", "h", 1, {"use_ssl": False, "grpc_keepalive_time_ms": 5000},
                 login="a b", password="x;y=z")  # fmt: skip
    builder = DefaultChannelBuilder(got.remote)
    assert builder.endpoint == "h:1"
    assert builder.userId == "a b"
    assert builder.token == "x;y=z"
    assert builder.use_ssl is False
    assert builder.get("grpc_keepalive_time_ms") == "5000"


def test_connect_connection_rejects_a_path() -> None:
    with pytest.raises(ValueError, match="path"):
        target("spark_connect", "sc://h:1/some/path")


def test_connect_extras_and_config_kwargs() -> None:
    got = target("spark_connect", "h", None, {"spark.sql.ansi.enabled": "false"},
                 {"spark.sql.ansi.enabled": "true", "spark.sql.shuffle.partitions": 3})  # fmt: skip
    assert got.conf == {"spark.sql.ansi.enabled": "true", "spark.sql.shuffle.partitions": "3"}


# -- explicit spark.master / spark.remote keys ------------------------------------------------


def test_config_kwargs_master_overrides_the_connection() -> None:
    got = target(
        "spark_connect", "h", None, {"spark.remote": "sc://x"}, {"spark.master": "local[2]"}
    )
    assert got == SparkTarget(master="local[2]", conf={})


def test_extras_remote_overrides_the_host() -> None:
    got = target("spark", "spark://m", None, {"spark.remote": "sc://x:1", "a": "b"})
    assert got == SparkTarget(remote="sc://x:1", conf={"a": "b"})


def test_master_and_remote_at_one_level_is_an_error() -> None:
    with pytest.raises(ValueError, match="not both"):
        target("spark", "m", None, None, {"spark.master": "local", "spark.remote": "sc://x"})


def test_get_spark_master_and_remote_is_an_error() -> None:
    with pytest.raises(ValueError, match="not both"):
        get_spark("local[1]", "sc://x")


# -- executors' Python ------------------------------------------------------------------------


def test_executor_python_conf_local_and_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    for master in ("local[2]", "spark://127.0.0.1:7077", "spark://localhost:7077"):
        assert executor_python_conf(master) == {
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYTHONPATH": str(REPO_ROOT),
        }


def test_executor_python_conf_remote_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert executor_python_conf("yarn") == {"spark.executorEnv.PYTHONPATH": str(REPO_ROOT)}
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/python/bin/python3")
    assert executor_python_conf("spark://spark-master:7077")["spark.pyspark.python"] == (
        "/opt/python/bin/python3"
    )


def test_executor_python_conf_caller_wins() -> None:
    conf = {"spark.pyspark.python": "/x/python", "spark.executorEnv.PYTHONPATH": "/x"}
    assert executor_python_conf("local[1]", conf) == {}


def test_executor_python_conf_installed_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "_package_source_root", lambda: None)
    assert "spark.executorEnv.PYTHONPATH" not in executor_python_conf("local[1]")


# -- no silent reuse: fake active sessions (no JVM) -------------------------------------------


@pytest.fixture
def fake_classic(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    sc = SimpleNamespace(master="spark://10.0.0.1:7077")
    monkeypatch.setattr(session_module, "_active_spark_context", lambda: sc)
    monkeypatch.setattr(session_module, "_active_connect_session", lambda: None)
    return sc


@pytest.fixture
def fake_connect(monkeypatch: pytest.MonkeyPatch) -> Any:
    from pyspark.sql.connect.client.core import DefaultChannelBuilder

    session = SimpleNamespace(
        _client=SimpleNamespace(_builder=DefaultChannelBuilder("sc://10.0.0.2:15002/;user_id=u"))
    )
    monkeypatch.setattr(session_module, "_active_spark_context", lambda: None)
    monkeypatch.setattr(session_module, "_active_connect_session", lambda: session)
    return session


def test_classic_session_is_not_reused_for_another_master(fake_classic: Any) -> None:
    with pytest.raises(SparkSessionConflictError) as info:
        get_spark("local[1]")
    message = str(info.value)
    assert "master 'spark://10.0.0.1:7077'" in message
    assert "master 'local[1]'" in message
    assert "replace_active=True" in message


def test_classic_session_is_not_reused_for_a_remote(fake_classic: Any) -> None:
    with pytest.raises(SparkSessionConflictError, match="Spark Connect remote 'sc://h:1'"):
        spark_session_from_connection("spark_connect", "h", 1, {})
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ


def test_connect_session_is_not_reused_for_a_master(fake_connect: Any) -> None:
    with pytest.raises(
        SparkSessionConflictError, match=r"Spark Connect session to 'sc://10\.0\.0\.2"
    ):
        spark_session_from_connection("spark", "spark://m", None, {})


def test_connect_session_is_not_reused_for_another_remote(fake_connect: Any) -> None:
    with pytest.raises(SparkSessionConflictError, match=r"remote 'sc://10\.0\.0\.3:15002'"):
        get_spark(remote="sc://10.0.0.3:15002")
    with pytest.raises(SparkSessionConflictError):  # same endpoint, another user
        get_spark(remote="sc://10.0.0.2:15002/;user_id=v")


def test_remote_must_be_sc_url() -> None:
    with pytest.raises(ValueError, match="sc://"):
        get_spark(remote="http://h:15002")


# -- no silent reuse: the real local session ---------------------------------------------------


def test_local_sessions_start_no_web_ui(spark: Any) -> None:
    """Parallel tasks on one worker would fight over the UI's port (4040 and up)."""
    assert spark.conf.get("spark.ui.enabled") == "false"
    assert spark.sparkContext.uiWebUrl is None


def test_real_session_reused_for_same_or_no_master(spark: Any) -> None:
    assert get_spark() is spark
    assert get_spark(spark.sparkContext.master) is spark
    assert get_spark(conf={"spark.sql.shuffle.partitions": "4"}) is spark


def test_real_session_refused_for_another_master_or_remote(spark: Any) -> None:
    with pytest.raises(SparkSessionConflictError, match=r"master 'local\[3\]'"):
        get_spark("local[3]")
    with pytest.raises(SparkSessionConflictError, match=r"sc://127\.0\.0\.1:1"):
        get_spark(remote="sc://127.0.0.1:1")
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    assert spark.range(3).count() == 3  # still alive


def test_reuse_warns_about_static_conf(spark: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="airflow_delta.spark.session"):
        assert get_spark(conf={"spark.executor.memory": "3g"}) is spark
    assert "spark.executor.memory" in caplog.text
