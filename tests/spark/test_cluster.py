"""The Spark layer on a real cluster: a standalone master + worker, and a Spark Connect server.

Each backend is driven from its own Python process (`python -m tests.spark.test_cluster`), as an
Airflow task would be: one process holds one SparkContext, and PySpark switches its functions
between classic and Connect process-wide, so neither can share the pytest process with the
local `spark` fixture. The process builds its session from connection fields
(`spark_session_from_connection`), runs a mapInArrow job whose executors import `airflow_delta`,
checks that other targets are refused instead of silently reusing the session, then writes,
merges and reads a partitioned Delta table; it prints one JSON line that the tests check.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark import spark_servers
from tests.spark.spark_servers import (
    REPO_ROOT,
    ConnectServer,
    StandaloneCluster,
    spark_env,
    stop_process_group,
)
from tests.waiting import GENEROUS, wait_until

# The session-scoped server fixtures, used by this module.
spark_standalone = spark_servers.spark_standalone
spark_connect_server = spark_servers.spark_connect_server

RESULT_MARK = "@@AIRFLOW_DELTA_JOB@@"
#: Seconds the job process gets: generous, as is the tests' pytest timeout (below), which also
#: covers starting the servers (session fixtures) on a loaded two-core machine.
JOB_TIMEOUT_S = 420
pytestmark = pytest.mark.timeout(900)

# -- the job (runs in a child process) -------------------------------------------------------


def _executor_facts(batches: Iterator[Any]) -> Iterator[Any]:
    """mapInArrow body: where this Python worker runs and where it imports airflow_delta from."""
    import os
    import sys

    import pyarrow as pa

    import airflow_delta

    pid, jvm = os.getpid(), ""
    for _ in range(8):  # nearest JVM ancestor: the executor (or the Connect server's driver)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
        if pid <= 1:
            break
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().decode(errors="replace").split("\0")
        if args and args[0].endswith("java"):
            jvm = " ".join(a for a in args if a.startswith("org.apache.spark."))
            break
    for batch in batches:
        n = batch.num_rows
        yield pa.RecordBatch.from_pydict(
            {
                "module": [airflow_delta.__file__] * n,
                "python": [sys.executable] * n,
                "pid": [os.getpid()] * n,
                "jvm": [jvm] * n,
            }
        )


def _smoke(spark: Any) -> dict[str, Any]:
    schema = "module string, python string, pid long, jvm string"
    rows = spark.range(0, 8, 1, 2).mapInArrow(_executor_facts, schema).distinct().collect()
    return {
        "modules": sorted({r.module for r in rows}),
        "pythons": sorted({r.python for r in rows}),
        "jvms": sorted({r.jvm for r in rows}),
        "worker_pids": sorted({r.pid for r in rows}),
        "driver_pid": os.getpid(),
    }


def _refused(call: Any) -> str:
    from airflow_delta.spark.session import SparkSessionConflictError

    try:
        call()
    except SparkSessionConflictError as exc:
        return str(exc)
    return "NOT REFUSED"


def _conflicts_classic(spark: Any, port: int) -> dict[str, Any]:
    from airflow_delta.spark.session import get_spark, spark_session_from_connection

    return {
        "local": _refused(lambda: get_spark("local[1]")),
        "remote": _refused(lambda: get_spark(remote="sc://127.0.0.1:1")),
        "connect_mode_env": os.environ.get("SPARK_CONNECT_MODE_ENABLED"),
        "default_reused": get_spark() is spark,
        "same_reused": spark_session_from_connection("spark", "127.0.0.1", port, {}) is spark,
    }


def _conflicts_connect(spark: Any, url: str) -> tuple[Any, dict[str, Any]]:
    from airflow_delta.spark.session import get_spark

    out = {
        "local": _refused(lambda: get_spark("local[1]")),
        "other_user": _refused(lambda: get_spark(remote=url)),
        "same_reused": get_spark(remote=f"{url}/;user_id=airflow-delta-tests") is spark,
        "default_reused": get_spark(conf={"spark.sql.shuffle.partitions": "3"}) is spark,
    }
    replaced = get_spark(remote=f"{url}/;user_id=replacement", replace_active=True)
    out["replaced_works"] = replaced.range(3).count() == 3
    out["old_stopped"] = bool(spark.is_stopped)
    return replaced, out


def _delta_roundtrip(spark: Any, uri: str) -> dict[str, Any]:
    from airflow_delta.spark.merge import merge_delta
    from airflow_delta.spark.read import read_delta
    from airflow_delta.spark.write import write_delta

    schema = "id long, value string, part string"

    def rows(ids: range, prefix: str) -> list[tuple[int, str, str]]:
        return [(i, f"{prefix}{i}", "odd" if i % 2 else "even") for i in ids]

    write_delta(spark.createDataFrame(rows(range(10), "v"), schema), uri, mode="append",
                partition_by=["part"])  # fmt: skip
    first = sorted(tuple(r) for r in read_delta(spark, uri).select("id", "value", "part").collect())
    source = spark.createDataFrame(rows(range(5, 15), "new"), schema)
    result = (
        merge_delta(uri, source, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    after = sorted(tuple(r) for r in read_delta(spark, uri).select("id", "value", "part").collect())
    return {
        "first": first,
        "after": after,
        "merge": result.to_dict(),
        "identity": _identity_values(spark, f"{uri}-identity"),
    }


def _identity_values(spark: Any, uri: str) -> list[tuple[int, int]]:
    """(id, v) of a table whose identity column `id` numbered 9 rows from three partitions."""
    import pyarrow as pa

    from airflow_delta.engine import DeltaLog
    from airflow_delta.engine.protocol.schema import DELTA_METADATA_KEY
    from airflow_delta.spark.read import read_delta
    from airflow_delta.spark.write import write_delta

    meta = json.dumps({"delta.identity.start": 1, "delta.identity.step": 1})
    field = pa.field("id", pa.int64(), metadata={DELTA_METADATA_KEY: meta})
    DeltaLog.create_table(uri, pa.schema([field, ("v", pa.int64())]))
    write_delta(spark.range(9).selectExpr("id AS v").repartition(3), uri)
    return sorted(tuple(r) for r in read_delta(spark, uri).select("id", "v").collect())


def _job(kind: str, port: int, url: str, table: str) -> dict[str, Any]:
    from airflow_delta.spark.session import spark_session_from_connection

    out: dict[str, Any] = {"timings": {}}
    started = time.monotonic()

    def lap(name: str) -> None:
        out["timings"][name] = round(time.monotonic() - started, 1)

    if kind == "standalone":
        spark = spark_session_from_connection(
            "spark",
            "spark://127.0.0.1",
            port,
            {"spark.executor.memory": "512m", "spark.cores.max": 1, "spark.ui.enabled": False},
            {"spark.sql.shuffle.partitions": 2, "spark.default.parallelism": 2},
            app_name="airflow-delta-cluster-test",
        )
        spark.sparkContext.setLogLevel("ERROR")
        out["app_id"] = spark.sparkContext.applicationId
        out["conflicts"] = _conflicts_classic(spark, port)
    else:
        spark = spark_session_from_connection(
            "spark_connect", "127.0.0.1", port, {"spark.sql.shuffle.partitions": 2}, None,
            login="airflow-delta-tests",
        )  # fmt: skip
        spark, out["conflicts"] = _conflicts_connect(spark, url)
    lap("session")
    out["master"] = spark.conf.get("spark.master")
    out["smoke"] = _smoke(spark)
    lap("smoke")
    try:
        out["delta"] = _delta_roundtrip(spark, table)
    except Exception:
        out["delta_error"] = traceback.format_exc()
    lap("delta")
    spark.stop()
    lap("stop")
    return out


def _main() -> None:
    kind, port, url, table = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    print(RESULT_MARK + json.dumps(_job(kind, port, url, table), default=str), flush=True)


# -- running the job -------------------------------------------------------------------------


class _Job:
    """One backend's job in its own process group (killed whole on timeout): `result()`."""

    def __init__(self, kind: str, port: int, url: str, work: Path) -> None:
        self.kind, self.work, self.table = kind, work, str(work / "table")
        env = spark_env(work)
        # The session module must pick the executors' Python itself (loopback master).
        for name in ("PYSPARK_SUBMIT_ARGS", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
            env.pop(name, None)
        cmd = [sys.executable, "-m", "tests.spark.test_cluster", kind, str(port), url, self.table]
        self.started = time.monotonic()
        with open(work / "job.out", "wb") as out, open(work / "job.err", "wb") as err:
            self.proc = subprocess.Popen(
                cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=err, start_new_session=True
            )
        self._result: dict[str, Any] | None = None

    def result(self) -> dict[str, Any]:
        if self._result is None:
            try:
                self.proc.wait(timeout=max(1.0, self.started + JOB_TIMEOUT_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            finally:
                stop_process_group(self.proc)  # the driver JVM and anything else left behind
            stdout = (self.work / "job.out").read_text(errors="replace")
            stderr = (self.work / "job.err").read_text(errors="replace")
            lines = [ln for ln in stdout.splitlines() if ln.startswith(RESULT_MARK)]
            if self.proc.returncode != 0 or not lines:
                pytest.fail(
                    f"{self.kind} job failed (rc {self.proc.returncode}; timeout "
                    f"{JOB_TIMEOUT_S} s).\nstdout:\n{stdout[-4000:]}\nstderr:\n{stderr[-6000:]}"
                )
            self._result = json.loads(lines[-1][len(RESULT_MARK) :])
            self._result["table"] = self.table
            self._result["seconds"] = round(time.monotonic() - self.started, 1)
        return self._result


def _assert_executors_import_package(smoke: dict[str, Any], jvm_class: str) -> None:
    assert smoke["modules"] == [str(REPO_ROOT / "airflow_delta" / "__init__.py")]
    assert smoke["pythons"] == [sys.executable]
    assert smoke["driver_pid"] not in smoke["worker_pids"]
    assert smoke["jvms"] and all(jvm_class in jvm for jvm in smoke["jvms"]), smoke["jvms"]


def _assert_delta(run: dict[str, Any]) -> None:
    assert "delta_error" not in run, run["delta_error"]
    delta = run["delta"]
    expected_first = [[i, f"v{i}", "odd" if i % 2 else "even"] for i in range(10)]
    assert delta["first"] == expected_first
    expected = [[i, f"{'v' if i < 5 else 'new'}{i}", "odd" if i % 2 else "even"] for i in range(15)]
    assert delta["after"] == expected
    assert delta["merge"]["version"] == 1
    metrics = delta["merge"]["metrics"]
    assert metrics["numTargetRowsUpdated"] == 5
    assert metrics["numTargetRowsInserted"] == 5
    identity = delta["identity"]  # numbered by the partitions, dense
    assert sorted(i for i, _ in identity) == list(range(1, 10))
    assert sorted(v for _, v in identity) == list(range(9))
    table = Path(run["table"])
    assert {p.name for p in table.iterdir() if p.is_dir()} >= {
        "_delta_log",
        "part=odd",
        "part=even",
    }
    # An independent reader agrees (deltalake; read through pyarrow, see DESIGN.md).
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    dt = DeltaTable(str(table))
    assert dt.version() == 1
    assert ds.dataset(dt.file_uris()).count_rows() == 15


# -- the tests: one per backend, so that `pytest -n 2` runs them side by side ------------------


def test_standalone_cluster(
    spark_standalone: StandaloneCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A `spark` connection to the standalone master: the job runs on the worker's executor,
    which imports airflow_delta; the session refuses other targets; a partitioned Delta table
    is written, merged and read."""
    work = tmp_path_factory.mktemp("standalone-job")
    run = _Job("standalone", spark_standalone.port, spark_standalone.master_url, work).result()

    assert run["master"] == spark_standalone.master_url
    _assert_executors_import_package(run["smoke"], "CoarseGrainedExecutorBackend")
    seen: dict[str, Any] = {"state": None, "done": {}}

    def finished() -> bool:  # the master records the app as finished asynchronously
        try:
            seen["state"] = spark_standalone.state()
        except OSError:  # a slow answer of the master's web UI: ask again
            return False
        seen["done"] = {app["id"]: app for app in seen["state"].get("completedapps", [])}
        return run["app_id"] in seen["done"]

    with contextlib.suppress(TimeoutError):
        wait_until(finished, timeout=GENEROUS, interval=0.5)
    state, done = seen["state"], seen["done"]
    app = done.get(run["app_id"])
    assert app is not None, state
    assert (app["name"], app["state"]) == ("airflow-delta-cluster-test", "FINISHED")

    conflicts = run["conflicts"]
    assert "master 'local[1]'" in conflicts["local"]
    assert "spark://127.0.0.1" in conflicts["local"]
    assert "Spark Connect remote 'sc://127.0.0.1:1'" in conflicts["remote"]
    assert conflicts["connect_mode_env"] is None
    assert conflicts["default_reused"] is True
    assert conflicts["same_reused"] is True

    _assert_delta(run)  # the Spark layer's contract: write_delta, merge_delta, read_delta


def test_spark_connect_server(
    spark_connect_server: ConnectServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A `spark_connect` connection: the job runs in the server's Python workers, which import
    airflow_delta; the session refuses other targets (and `replace_active` swaps it); a
    partitioned Delta table is written, merged and read through Connect."""
    work = tmp_path_factory.mktemp("connect-job")
    run = _Job("connect", spark_connect_server.port, spark_connect_server.url, work).result()

    assert run["master"] == "local[1]"  # the server's master, read through Connect
    _assert_executors_import_package(run["smoke"], "SparkConnectServer")

    conflicts = run["conflicts"]
    assert "Spark Connect session to 'sc://127.0.0.1:" in conflicts["local"]
    assert "NOT REFUSED" not in conflicts["other_user"]
    assert conflicts["same_reused"] is True
    assert conflicts["default_reused"] is True
    assert conflicts["replaced_works"] is True
    assert conflicts["old_stopped"] is True

    _assert_delta(run)  # the Spark layer's contract: write_delta, merge_delta, read_delta


if __name__ == "__main__":
    _main()
