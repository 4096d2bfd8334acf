"""SparkSession from defaults (`local[*]`), a master URL, a Spark Connect `sc://` remote, or the
plain fields of an Airflow `spark` / `spark_connect` connection.

The connection mapping follows the apache-spark provider's PySparkOperator (see STYLE.md, "Spark
from a connection"): a `spark_connect` connection becomes a remote `sc://host:port`, anything
else a master URL; connection extras become Spark conf and the task's own `config_kwargs`
override them. Nothing here imports Airflow: the Airflow layer passes a connection's fields.

One process holds at most one Spark session target. Classic PySpark keeps one SparkContext per
process, and `getOrCreate()` silently hands back the existing session whatever master was asked
for; PySpark's functions (`pyspark.sql.functions.col`, ...) also pick classic or Connect
process-wide (`SPARK_CONNECT_MODE_ENABLED`). So `get_spark` reuses the active session only when it
points at the same target and otherwise raises `SparkSessionConflictError` (or stops the old
session first with `replace_active=True`).

Executors' Python (classic sessions): the executors run `spark.pyspark.python` (exported as
`PYSPARK_PYTHON`, the only knob an in-process driver reads). For `local[...]` masters and
clusters on this host (a loopback master address) it defaults to this interpreter
(`sys.executable`); for other clusters it is left to the caller (conf or `PYSPARK_PYTHON`,
else PySpark's `python3`). When `airflow_delta` is imported from a source checkout (not from
site-packages), that checkout's root is put on `spark.executorEnv.PYTHONPATH` so executors can
import it; a cluster on other hosts needs the package installed in the executors' Python (or
shipped with `spark.submit.pyFiles`). Caller conf always wins over these defaults. Spark Connect
sessions cannot set any of this: the server's own environment decides (`PYSPARK_PYTHON`,
`PYTHONPATH` of the server process).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, unquote, urlsplit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: Conf applied to every session this module builds (callers' conf wins). Spark Connect
#: sessions get only the `spark.sql.*` entries (the others are static on the server). Local
#: sessions also start no web UI (`spark.ui.enabled=false`): parallel tasks on one worker would
#: fight over its port; pass `{"spark.ui.enabled": "true"}` to have it.
DEFAULT_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
}

#: Default ports of the two connection kinds (Spark standalone master, Spark Connect server).
STANDALONE_DEFAULT_PORT = 7077
CONNECT_DEFAULT_PORT = 15002

#: Spark Connect URL parameters (`sc://host:port/;key=value`, see the Spark Connect client
#: connection string spec). Connection extras with these names go into the URL, not the conf.
CONNECT_URL_PARAMS: frozenset[str] = frozenset(
    {
        "use_ssl",
        "token",
        "user_id",
        "user_agent",
        "session_id",
        "grpc_keepalive_enabled",
        "grpc_keepalive_time_ms",
        "grpc_keepalive_timeout_ms",
        "grpc_keepalive_without_calls",
        "grpc_max_message_size",
    }
)

#: Extras of Airflow's `spark` connection that are spark-submit settings rather than Spark conf:
#: the ones with a Spark conf equivalent are renamed, launcher-only ones are dropped.
_SUBMIT_EXTRAS_AS_CONF = {"queue": "spark.yarn.queue", "namespace": "spark.kubernetes.namespace"}
_SUBMIT_EXTRAS_DROPPED = frozenset(
    {"spark-binary", "spark_binary", "spark-home", "spark_home", "deploy-mode", "deploy_mode"}
)

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class SparkSessionConflictError(RuntimeError):
    """The process already has an active Spark session pointing at another master or remote."""


@dataclass(frozen=True)
class SparkTarget:
    """Where a session goes: exactly one of `master` / `remote`, plus the Spark conf to apply.

    Example: `spark_target_from_connection("spark", "spark://m", None, {}).master`
    is `"spark://m:7077"`.
    """

    master: str | None = None
    remote: str | None = None
    conf: dict[str, str] = field(default_factory=dict)


def get_spark(
    master: str | None = None,
    remote: str | None = None,
    conf: Mapping[str, Any] | None = None,
    app_name: str = "airflow-delta",
    *,
    replace_active: bool = False,
) -> SparkSession:
    """A SparkSession: Spark Connect when `remote` (`sc://host:port`) is given, else `master`
    (default `local[*]`). `conf` entries are set on the builder and override the defaults.

    With neither `master` nor `remote`, an active session (classic or Connect) is reused as is.
    An explicit target that differs from the active session's raises
    `SparkSessionConflictError`, unless `replace_active=True`, which stops the active session
    first. Reusing a session cannot change its static conf (a warning names the ignored keys).

    Example: `get_spark("spark://127.0.0.1:7077", conf={"spark.executor.memory": "2g"})`.
    """
    if master and remote:
        raise ValueError(f"Give a master or a remote, not both (master={master!r}, {remote=!r})")
    conf_str: dict[str, Any] = {str(k): _conf_value(v) for k, v in (conf or {}).items()}
    if not master and not remote and _active_connect_session() is not None:
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        return cast("SparkSession", ConnectSession.builder.config(map=conf_str).getOrCreate())
    if remote:
        return _connect_session(remote, conf_str, replace_active)
    return _classic_session(master, conf_str, app_name, replace_active)


def is_connect(obj: Any) -> bool:
    """Whether `obj` (a session, DataFrame or reader) belongs to a Spark Connect session."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def runs_locally(df: Any) -> bool:
    """Whether the executors of `df`'s session run in this process, on this machine's disk: a
    classic session with a `local[...]` master."""
    return not is_connect(df) and (df.sparkSession.sparkContext.master or "").startswith("local")


def spark_target_from_connection(
    conn_type: str,
    host: str | None,
    port: int | None,
    extra: Mapping[str, Any] | None,
    config_kwargs: Mapping[str, Any] | None = None,
    *,
    login: str | None = None,
    password: str | None = None,
) -> SparkTarget:
    """Map an Airflow `spark` / `spark_connect` connection's plain fields to a `SparkTarget`
    (pure: no Spark, no Airflow).

    - `spark_connect`: `sc://host:port` (port default 15002); `login` becomes the `user_id` URL
      parameter, `password` the `token`, and extras named like Spark Connect URL parameters
      (`use_ssl`, `token`, `user_id`, `user_agent`, `session_id`, `grpc_*`) go into the URL too
      (extras win over login/password, which win over parameters written in `host`).
    - anything else (`spark`): the master URL from `host[:port]`: `local[*]` when no host,
      `local[...]`/`yarn` as is, `k8s://...` with the port appended, `spark://host` with port
      7077 by default; a bare hostname becomes `spark://host:port`. A host starting with
      `sc://` is a Spark Connect remote (as in the provider). The spark-submit extras `queue`
      and `namespace` become `spark.yarn.queue` / `spark.kubernetes.namespace`;
      `spark-binary`, `spark-home` and `deploy-mode: client` are dropped (`cluster` deploy mode
      cannot run in-process and raises `ValueError`).
    - every other extra becomes Spark conf; `config_kwargs` override extras. A `spark.remote` or
      `spark.master` key overrides the connection's target (`config_kwargs` first, then extras).

    Example: `spark_target_from_connection("spark_connect", "spark-connect", None,
    {"use_ssl": True, "spark.sql.shuffle.partitions": 8})` gives remote
    `sc://spark-connect:15002/;use_ssl=true` and conf `{"spark.sql.shuffle.partitions": "8"}`.
    """
    extra = dict(extra or {})
    task_conf = {str(k): _conf_value(v) for k, v in (config_kwargs or {}).items()}
    host = (host or "").strip() or None
    is_connect = conn_type == "spark_connect" or (host or "").lower().startswith("sc://")

    extra_conf, url_params = _split_extras(extra, is_connect)

    if is_connect:
        credentials = {}
        if login:
            credentials["user_id"] = login
        if password:
            credentials["token"] = password
        target = SparkTarget(remote=_connect_url(host, port, {**credentials, **url_params}))
    else:
        target = SparkTarget(master=_master_url(host, port))

    target = _explicit_target(task_conf, extra_conf) or target
    conf = {**extra_conf, **task_conf}
    conf.pop("spark.remote", None)
    conf.pop("spark.master", None)
    return SparkTarget(master=target.master, remote=target.remote, conf=conf)


def _split_extras(
    extra: Mapping[str, Any], is_connect: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """A connection's extras as (Spark conf, Spark Connect URL parameters)."""
    extra_conf: dict[str, str] = {}
    url_params: dict[str, str] = {}
    for key, value in extra.items():
        key = str(key)
        if is_connect and key in CONNECT_URL_PARAMS:
            url_params[key] = _conf_value(value)
        elif not is_connect and key in _SUBMIT_EXTRAS_AS_CONF:
            extra_conf[_SUBMIT_EXTRAS_AS_CONF[key]] = _conf_value(value)
        elif not is_connect and key in _SUBMIT_EXTRAS_DROPPED:
            if key.startswith("deploy") and str(value).lower() == "cluster":
                raise ValueError(
                    f"Connection extra {key}=cluster cannot be used for an in-process Spark "
                    "session (the Airflow task is the driver); use deploy mode 'client' or "
                    "SparkSubmitOperator for cluster deploy mode."
                )
        else:
            extra_conf[key] = _conf_value(value)
    return extra_conf, url_params


def _explicit_target(*levels: Mapping[str, str]) -> SparkTarget | None:
    """The target a `spark.remote` or `spark.master` key names, from the first level that
    has one (the task's config_kwargs, then the connection's extras)."""
    for level in levels:
        has_remote, has_master = "spark.remote" in level, "spark.master" in level
        if has_remote and has_master:
            raise ValueError(
                "Set spark.remote or spark.master, not both "
                f"(spark.remote={level['spark.remote']!r}, spark.master={level['spark.master']!r})"
            )
        if has_remote:
            return SparkTarget(remote=level["spark.remote"])
        if has_master:
            return SparkTarget(master=level["spark.master"])
    return None


def spark_session_from_connection(
    conn_type: str,
    host: str | None,
    port: int | None,
    extra: Mapping[str, Any] | None,
    config_kwargs: Mapping[str, Any] | None = None,
    app_name: str = "airflow-delta",
    *,
    login: str | None = None,
    password: str | None = None,
    replace_active: bool = False,
) -> SparkSession:
    """A SparkSession for an Airflow `spark` / `spark_connect` connection's fields (see
    `spark_target_from_connection` for the mapping and `get_spark` for session reuse).

    Example (in a task): `c = BaseHook.get_connection("spark_default");
    spark_session_from_connection(c.conn_type, c.host, c.port, c.extra_dejson,
    {"spark.executor.memory": "2g"}, login=c.login, password=c.password)`.
    """
    target = spark_target_from_connection(
        conn_type, host, port, extra, config_kwargs, login=login, password=password
    )
    return get_spark(
        master=target.master,
        remote=target.remote,
        conf=target.conf,
        app_name=app_name,
        replace_active=replace_active,
    )


def executor_python_conf(master: str, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """Defaults that let the Python workers of a classic session's executors import
    `airflow_delta` (see the module docstring); keys already in `conf` are left out.

    Example: `executor_python_conf("spark://127.0.0.1:7077")` gives `spark.pyspark.python`
    (this interpreter) and, from a source checkout, `spark.executorEnv.PYTHONPATH`.
    """
    conf = conf or {}
    out: dict[str, str] = {}
    python = os.environ.get("PYSPARK_PYTHON") or (sys.executable if _on_this_host(master) else "")
    if python and "spark.pyspark.python" not in conf:
        out["spark.pyspark.python"] = python
    root = _package_source_root()
    if root and "spark.executorEnv.PYTHONPATH" not in conf:
        out["spark.executorEnv.PYTHONPATH"] = root
    return out


# -- classic ---------------------------------------------------------------------------------


def _classic_session(
    master: str | None, conf: dict[str, Any], app_name: str, replace_active: bool
) -> SparkSession:
    from pyspark.sql import SparkSession

    connect = _active_connect_session()
    if connect is not None:
        _conflict(
            f"a Spark Connect session to {_connect_endpoint(connect)!r}",
            f"master {master or 'local[*]'!r}",
            replace_active,
        )
        connect.stop()
    os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)

    sc = _active_spark_context()
    if sc is not None and master is not None and sc.master != master:
        _conflict(
            f"a classic session on master {sc.master!r}", f"master {master!r}", replace_active
        )
        active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
        (active or sc).stop()
        sc = None
    if sc is not None:
        session = SparkSession.builder.config(map=conf).getOrCreate()
        _warn_ignored_static_conf(session, conf)
        return session

    master = master or "local[*]"
    if _on_this_host(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    local = {"spark.ui.enabled": "false"} if master.startswith("local") else {}
    full: dict[str, Any] = {**DEFAULT_CONF, **local, **executor_python_conf(master, conf), **conf}
    if "spark.pyspark.python" in full:
        # An in-process driver reads only the environment variable (SparkContext.pythonExec).
        os.environ["PYSPARK_PYTHON"] = full["spark.pyspark.python"]
    builder = SparkSession.builder.appName(app_name).master(master)
    return builder.config(map=full).getOrCreate()


def _active_spark_context() -> Any:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return sc if sc is not None and sc._jsc is not None else None


def _warn_ignored_static_conf(session: SparkSession, conf: Mapping[str, str]) -> None:
    spark_conf = session.sparkContext.getConf()
    ignored = [
        key
        for key, value in conf.items()
        if not session.conf.isModifiable(key) and spark_conf.get(key) != value
    ]
    if ignored:
        log.warning(
            "Reusing the active Spark session on master %s: static conf %s cannot change; "
            "stop the session (or pass replace_active=True) to apply it.",
            session.sparkContext.master,
            ", ".join(sorted(ignored)),
        )


# -- Spark Connect ---------------------------------------------------------------------------


def _connect_session(remote: str, conf: dict[str, str], replace_active: bool) -> SparkSession:
    if not remote.startswith("sc://"):
        raise ValueError(f"A Spark Connect remote must start with 'sc://', got {remote!r}")
    sc = _active_spark_context()
    if sc is not None:
        _conflict(
            f"a classic session on master {sc.master!r}",
            f"Spark Connect remote {remote!r}",
            replace_active,
            why=" (PySpark functions switch to Spark Connect process-wide)",
        )
        from pyspark.sql import SparkSession as ClassicSession

        (ClassicSession.getActiveSession() or ClassicSession._instantiatedSession or sc).stop()

    from pyspark.sql.connect.session import SparkSession as ConnectSession

    existing = _active_connect_session()
    if existing is not None and _connect_key(existing) != _connect_key(remote):
        _conflict(
            f"a Spark Connect session to {_connect_endpoint(existing)!r}",
            f"Spark Connect remote {remote!r}",
            replace_active,
        )
        existing.stop()
    # What pyspark's own builder does for remotes: functions/columns build Connect plans.
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    sql_defaults = {k: v for k, v in DEFAULT_CONF.items() if k.startswith("spark.sql.")}
    builder = ConnectSession.builder.remote(remote)
    return cast("SparkSession", builder.config(map={**sql_defaults, **conf}).getOrCreate())


def _active_connect_session() -> Any:
    module = sys.modules.get("pyspark.sql.connect.session")
    if module is None:  # never imported: no Connect session can exist
        return None
    cls = module.SparkSession
    return cls.getActiveSession() or cls._get_default_session()


def _connect_key(session_or_url: Any) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """(endpoint, sorted URL parameters) of a Connect URL or session, None when unknown."""
    if isinstance(session_or_url, str):
        from pyspark.sql.connect.client.core import DefaultChannelBuilder

        builder: Any = DefaultChannelBuilder(session_or_url)
    else:
        builder = getattr(getattr(session_or_url, "_client", None), "_builder", None)
    endpoint = getattr(builder, "endpoint", None)
    if endpoint is None:
        return None
    return endpoint, tuple(sorted(getattr(builder, "_params", {}).items()))


def _connect_endpoint(session: Any) -> str:
    key = _connect_key(session)
    return f"sc://{key[0]}" if key else "an unknown endpoint"


# -- connection mapping helpers --------------------------------------------------------------


def _conf_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _master_url(host: str | None, port: int | None) -> str:
    if not host:
        return "local[*]"
    lower = host.lower()
    if lower.startswith("local") or lower == "yarn":
        return host
    if lower.startswith("spark://"):
        hosts = host[len("spark://") :].rstrip("/")
        if "," in hosts:  # standalone HA: spark://h1:7077,h2:7077
            return f"spark://{hosts}"
        return "spark://" + _with_port(hosts, port, STANDALONE_DEFAULT_PORT, host)
    if lower.startswith("k8s://"):
        api = host[len("k8s://") :]
        split = urlsplit(api if "://" in api else f"//{api}")
        if port and split.port is None:
            netloc = f"{split.netloc}:{port}"
            api = split._replace(netloc=netloc).geturl().removeprefix("//")
        elif port and split.port != port:
            raise ValueError(f"Connection host {host!r} has a port other than port={port}")
        return f"k8s://{api}"
    if "://" in host:  # another scheme: pass it on with the port
        split = urlsplit(host)
        if port and split.port is None:
            return split._replace(netloc=f"{split.netloc}:{port}").geturl()
        return host
    return "spark://" + _with_port(host, port, STANDALONE_DEFAULT_PORT, host)


def _connect_url(host: str | None, port: int | None, params: Mapping[str, str]) -> str:
    raw = host or "localhost"
    if raw.lower().startswith("sc://"):
        raw = raw[len("sc://") :]
    netloc, _, rest = raw.partition("/")
    if rest and not rest.startswith(";"):
        raise ValueError(
            f"Spark Connect connection host {host!r} has a path; only sc://host:port/;params is "
            "supported"
        )
    host_params: dict[str, str] = {}
    for part in filter(None, rest.lstrip(";").split(";")):
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"Spark Connect URL parameter {part!r} in {host!r} is not key=value")
        host_params[key] = unquote(value)
    netloc = _with_port(netloc, port, CONNECT_DEFAULT_PORT, host or "")
    merged = {**host_params, **params}
    query = ";".join(f"{k}={quote(str(v), safe='')}" for k, v in merged.items())
    return f"sc://{netloc}/;{query}" if query else f"sc://{netloc}"


def _with_port(netloc: str, port: int | None, default: int, original: str) -> str:
    existing = urlsplit(f"//{netloc}").port
    if existing is not None:
        if port and port != existing:
            raise ValueError(f"Connection host {original!r} has a port other than port={port}")
        return netloc
    return f"{netloc}:{port or default}"


def _on_this_host(master: str) -> bool:
    """True for `local[...]` masters and standalone masters on a loopback address."""
    lower = master.lower()
    if lower.startswith("local"):
        return True
    if lower.startswith("spark://"):
        first = master[len("spark://") :].split(",")[0]
        return (urlsplit(f"//{first}").hostname or "") in _LOOPBACK_HOSTS
    return False


def _package_source_root() -> str | None:
    """The directory holding the `airflow_delta` package when it is a source checkout."""
    root = Path(__file__).resolve().parents[2]
    if root.name in ("site-packages", "dist-packages"):
        return None
    return str(root)


def _conflict(active: str, wanted: str, replace_active: bool, why: str = "") -> None:
    if replace_active:
        log.warning("Stopping %s to start a session for %s.", active, wanted)
        return
    raise SparkSessionConflictError(
        f"This process already has {active}; refusing to reuse it for {wanted}{why}. "
        "Stop that session first, pass replace_active=True to stop it here, or run the work "
        "in a separate process."
    )
