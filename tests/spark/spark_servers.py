"""Spark servers for tests: a standalone master + one worker, and a Spark Connect server.

Both run from the pip `pyspark` package (SPARK_HOME = the package folder) on 127.0.0.1 with free
ports, in their own process groups, and are stopped by PID (the whole group) when the session
ends. Their Python workers run this venv's interpreter with the repo root on PYTHONPATH, so they
can import `airflow_delta`. Logs go under pytest's tmp dir; a server that does not come up fails
with the tail of its log.

Use the session fixtures from a test module by binding them to module names
(`spark_standalone = spark_servers.spark_standalone`, as test_cluster.py does), or the context
managers `standalone_cluster(dir)` / `connect_server(dir)` directly. Clients run with
`spark_env(dir)` get the same environment (and `JAVA_TOOL_OPTIONS` for quick JVM start-ups).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

SPARK_HOME = Path(pyspark.__file__).resolve().parent
REPO_ROOT = Path(__file__).resolve().parents[2]
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: Seconds a server gets to start: generous (JVMs start slowly on a loaded two-core machine).
START_TIMEOUT_S = 240.0
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@dataclass
class StandaloneCluster:
    """A running standalone master (`master_url`, web UI `web_url`) with one 1-core worker."""

    master_url: str
    web_url: str
    host: str
    port: int
    pids: tuple[int, ...]
    log_dir: Path

    def state(self) -> dict[str, Any]:
        """The master's JSON status (workers, active and completed apps)."""
        return _get_json(f"{self.web_url}/json/")


@dataclass
class ConnectServer:
    """A running Spark Connect server (`url` is `sc://127.0.0.1:port`, master `local[1]`)."""

    url: str
    host: str
    port: int
    pid: int
    log: Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_env(work_dir: Path) -> dict[str, str]:
    """Environment for Spark daemons and the Python workers they start."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_CONF_DIR", "MASTER")
    }
    python_path = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    # Short-lived test JVMs: the C1 JIT only and the serial GC halve their CPU time (which
    # matters on a 2-core machine); every JVM started with this env picks them up.
    java_opts = " ".join(filter(None, [env.get("JAVA_TOOL_OPTIONS"), TEST_JVM_OPTIONS]))
    env.update(
        JAVA_TOOL_OPTIONS=java_opts,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_DIRS=str(work_dir / "local"),
        SPARK_LOG_DIR=str(work_dir),
        SPARK_PID_DIR=str(work_dir),
        SPARK_DAEMON_MEMORY="512m",
        # The master's REST submission server would take the fixed port 6066.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(dict.fromkeys(python_path)),
        NO_PROXY=",".join(filter(None, ["127.0.0.1,localhost", env.get("NO_PROXY")])),
    )
    return env


def _spark_bin(name: str) -> str:
    path = SPARK_HOME / "bin" / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"{path} is missing or not executable: is the full `pyspark` installed?")
    return str(path)


def _start(cmd: list[str], log: Path, env: dict[str, str], cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,  # own process group: executors and Python workers included
        )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_group(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM the process group led by `proc`, SIGKILL what is left after `timeout` seconds,
    and check that nothing of the group survives."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _group_alive(pgid) and time.monotonic() < deadline:
        proc.poll()  # reap the leader so it does not linger as a zombie
        time.sleep(0.1)
    if _group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _group_alive(pgid):
        raise RuntimeError(f"Spark process group {pgid} ({proc.args!r}) survived SIGKILL")


def _tail(log: Path, lines: int = 40) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"<no log: {exc}>"
    return "\n".join(text[-lines:])


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return ""


def _logged_port(log: Path, service: str) -> int | None:
    """The port of the last "Successfully started service '<service>' on port N" line."""
    found = re.findall(rf"started service '{re.escape(service)}' on port (\d+)", _read(log))
    return int(found[-1]) if found else None


def _get_json(url: str) -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=2) as resp:
        return json.loads(resp.read())


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _wait_for(
    what: str, ready: Any, procs: list[tuple[subprocess.Popen[bytes], Path]], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for proc, log in procs:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{what}: `{' '.join(map(str, proc.args))}` exited with {proc.returncode} "
                    f"while starting. Log tail ({log}):\n{_tail(log)}"
                )
        with contextlib.suppress(OSError, ValueError):
            if ready():
                return
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {log}:\n{_tail(log)}" for _, log in procs)
            raise RuntimeError(f"{what} not ready within {timeout:.0f} s.\n{tails}")
        time.sleep(0.25)


@contextlib.contextmanager
def standalone_cluster(
    work_dir: Path, cores: int = 1, memory: str = "1g"
) -> Iterator[StandaloneCluster]:
    """Start a standalone master and one worker under `work_dir`; stop both on exit."""
    spark_class = _spark_bin("spark-class")
    work_dir.mkdir(parents=True, exist_ok=True)
    env = spark_env(work_dir)
    host, port, web_port, worker_web_port = "127.0.0.1", free_port(), free_port(), free_port()
    master_log, worker_log = work_dir / "master.log", work_dir / "worker.log"
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        master = _start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", host,
             "--port", str(port), "--webui-port", str(web_port)],
            master_log, env, work_dir,
        )  # fmt: skip
        started.append((master, master_log))

        def master_up() -> bool:
            # The ports the master bound (Spark moves to port+1 when one was taken meanwhile).
            nonlocal port, web_port
            rpc, ui = _logged_port(master_log, "sparkMaster"), _logged_port(master_log, "MasterUI")
            if rpc is None or ui is None:
                return False
            port, web_port = rpc, ui
            return _port_open(host, port)

        _wait_for("Spark master", master_up, started, START_TIMEOUT_S)
        master_url, web_url = f"spark://{host}:{port}", f"http://{host}:{web_port}"
        worker = _start(
            [spark_class, "org.apache.spark.deploy.worker.Worker", master_url, "--host", host,
             "--cores", str(cores), "--memory", memory, "--webui-port", str(worker_web_port),
             "--work-dir", str(work_dir / "worker")],
            worker_log, env, work_dir,
        )  # fmt: skip
        started.append((worker, worker_log))
        _wait_for(
            "Spark worker registration",
            lambda: _get_json(f"{web_url}/json/").get("aliveworkers", 0) >= 1,
            started,
            START_TIMEOUT_S,
        )
        yield StandaloneCluster(
            master_url=master_url,
            web_url=web_url,
            host=host,
            port=port,
            pids=tuple(p.pid for p, _ in started),
            log_dir=work_dir,
        )
    finally:
        for proc, _ in reversed(started):
            stop_process_group(proc)


@contextlib.contextmanager
def connect_server(work_dir: Path, master: str = "local[1]") -> Iterator[ConnectServer]:
    """Start a Spark Connect server (driver memory 1g) under `work_dir`; stop it on exit."""
    work_dir.mkdir(parents=True, exist_ok=True)
    # The gRPC port is not retried by Spark: a port taken between free_port() and the bind
    # (other test processes) means a new launch on another port.
    host = "127.0.0.1"
    for attempt in range(1, 4):
        port = free_port()
        log = work_dir / f"connect-{attempt}.log"
        proc = _launch_connect(work_dir, master, host, port, log)
        try:
            _wait_for(
                "Spark Connect server",
                lambda log=log, port=port: (
                    "Spark Connect server started at" in _read(log) and _port_open(host, port)
                ),
                [(proc, log)],
                START_TIMEOUT_S,
            )
        except RuntimeError:
            stop_process_group(proc)
            if attempt < 3 and "BindException" in _read(log):
                continue
            raise
        break
    try:
        yield ConnectServer(url=f"sc://{host}:{port}", host=host, port=port, pid=proc.pid, log=log)
    finally:
        stop_process_group(proc)


def _launch_connect(
    work_dir: Path, master: str, host: str, port: int, log: Path
) -> subprocess.Popen[bytes]:
    # Spark 4.x ships the Connect server in jars/ (spark-connect_2.13-*.jar) on the default
    # classpath: `--class` alone is enough, no primary resource / `spark-internal` needed.
    return _start(
        [_spark_bin("spark-submit"), "--class", CONNECT_SERVER_CLASS,
         "--name", "airflow-delta-tests-connect", "--master", master, "--driver-memory", "1g",
         "--conf", f"spark.connect.grpc.binding.address={host}",
         "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", "spark.ui.enabled=false",
         "--conf", "spark.sql.shuffle.partitions=2",
         "--conf", f"spark.sql.warehouse.dir={work_dir / 'warehouse'}",
         "--conf", f"spark.driver.extraJavaOptions=-Dderby.system.home={work_dir}"],
        log, spark_env(work_dir), work_dir,
    )  # fmt: skip


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone master + one worker (1 core, 1g) on 127.0.0.1 for this test session."""
    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server (master local[1]) on 127.0.0.1 for this test session."""
    with connect_server(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server
