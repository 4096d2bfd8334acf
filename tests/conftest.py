"""Shared fixtures: a moto S3 server on 127.0.0.1 and fresh buckets in it; a local Spark session
shared by the Spark and Airflow tests of one pytest worker."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.waiting import GENEROUS, wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

S3_REGION = "us-east-1"
S3_KEY = "testing"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        opener.open(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True  # any HTTP answer means the server is up
    except OSError:
        return False
    return True


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a moto S3 server started for this session (dummy credentials, us-east-1)."""
    # moto's server, with its conditional PUT made atomic (tests/moto_atomic_server.py)
    server = [sys.executable, "-m", "tests.moto_atomic_server"]
    aws_dir = tmp_path_factory.mktemp("aws")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_ACCESS_KEY_ID", S3_KEY)
        mp.setenv("AWS_SECRET_ACCESS_KEY", S3_KEY)
        mp.setenv("AWS_DEFAULT_REGION", S3_REGION)
        mp.setenv("AWS_REGION", S3_REGION)
        mp.setenv("AWS_CONFIG_FILE", str(aws_dir / "config"))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(aws_dir / "credentials"))
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("NO_PROXY", ",".join(filter(None, ["127.0.0.1", os.environ.get("NO_PROXY")])))
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with open(aws_dir / "moto.log", "wb") as out:
            proc = subprocess.Popen(
                [*server, "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=Path(__file__).resolve().parents[1],
            )
        try:

            def up() -> bool:
                assert proc.poll() is None, (aws_dir / "moto.log").read_text()
                return _answers(url)

            wait_until(up, timeout=GENEROUS, interval=0.1, message="moto_server did not start")
            yield url
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def s3_client(options: dict[str, str]):
    """A boto3 S3 client for the delta-rs style storage `options` of `s3_bucket`: a view of
    the bucket independent of the engine's s3fs."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=options["AWS_ENDPOINT_URL"],
        region_name=options["AWS_REGION"],
        aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"],
    )


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> tuple[str, dict[str, str]]:
    """A new empty bucket and delta-rs style storage options that reach it."""
    import boto3

    bucket = f"test-{uuid.uuid4().hex[:16]}"
    boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name=S3_REGION,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_KEY,
    ).create_bucket(Bucket=bucket)
    options = {
        "AWS_ACCESS_KEY_ID": S3_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_KEY,
        "AWS_REGION": S3_REGION,
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
    }
    return bucket, options


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from airflow_delta.spark.session import get_spark

    session = get_spark(
        "local[2]",
        conf={  # no spark.ui.enabled: local sessions start no UI by default (tested)
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
            # DataFrame sources stay on Spark's MERGE, which the Spark tests exercise; tests of
            # the automatic in-process choice raise this per test (test_merge_arrow.py)
            "spark.airflow_delta.merge.inProcessSourceBytes": "0",
        },
        app_name="airflow-delta-tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _spark_conf_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test using the `spark` session, its runtime conf is as before the test: a value
    the test set goes back, a key it added is unset (an `unset` of a key the session fixture
    sets would leave the default, and the next test on that worker would see it). Static confs,
    which no test can change, are left alone; Spark calls this package's confs (unknown to it)
    not modifiable, but they are."""
    if "spark" not in request.fixturenames:
        yield
        return
    session = request.getfixturevalue("spark")

    def modifiable(key: str) -> bool:  # Spark's own runtime confs, and this package's
        return key.startswith("spark.airflow_delta.") or bool(session.conf.isModifiable(key))

    before = session.conf.getAll
    yield
    after = session.conf.getAll
    for key, value in before.items():
        if after.get(key) != value and modifiable(key):
            session.conf.set(key, value)
    for key in after.keys() - before.keys():
        if modifiable(key):
            session.conf.unset(key)
