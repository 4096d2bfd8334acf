"""is_transient_storage_error and is_access_error on the exceptions storage really raises.

The S3 cases use real botocore errors: ClientErrors with the responses S3 sends, turned into
Python exceptions by s3fs's own `translate_boto_error` (as s3fs raises them), and errors raised
by a real s3fs reaching a closed port or finding no credentials.
"""

from __future__ import annotations

import errno
import json
import socket
from pathlib import Path

import aiohttp
import pytest
from botocore.exceptions import ClientError, NoCredentialsError
from s3fs.errors import translate_boto_error

from airflow_delta.engine.errors import (
    CorruptLogError,
    DeltaProtocolError,
    StorageAccessError,
    TableNotFoundError,
    UnsupportedStorageError,
)
from airflow_delta.engine.log.log_segment import latest_version_since
from airflow_delta.engine.log.storage_errors import is_access_error, is_transient_storage_error
from airflow_delta.engine.log.table_location import TableLocation


class ClassStatus(Exception):
    """Like AirflowException: a `status_code` of 500 on the class, not from a response."""

    status_code = 500


def s3_error(code: str, status: int) -> BaseException:
    """The exception s3fs raises for an S3 error response `code` with HTTP `status`."""
    response = {
        "Error": {"Code": code, "Message": f"{code} says the service"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return translate_boto_error(ClientError(response, "GetObject"))  # type: ignore[arg-type]


def gcs_error(status: int, message: str) -> BaseException:
    """The exception gcsfs raises for a GCS error response (its own `validate_response`): a
    403 is a bare OSError("Forbidden: ..."), which was taken for a transient network error."""
    from gcsfs.retry import validate_response

    body = json.dumps({"error": {"code": status, "message": message}}).encode()
    try:
        validate_response(status, body, "b/lake/o")
    except Exception as exc:  # the point: what gcsfs raises
        return exc
    raise AssertionError(f"gcsfs raised nothing for HTTP {status}")


def raised(make: BaseException, cause: BaseException, suppress: bool = False) -> BaseException:
    """`make` raised while handling `cause`, chained as the interpreter chains them."""
    try:
        try:
            raise cause
        except BaseException:
            if suppress:
                raise make from None
            raise make  # noqa: B904 (implicit chaining is the point)
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"),
        TimeoutError("The read operation timed out"),
        BrokenPipeError(errno.EPIPE, "Broken pipe"),
        OSError(errno.ETIMEDOUT, "Connection timed out"),
        OSError(errno.ESTALE, "Stale file handle"),
        OSError(errno.EIO, "Input/output error"),
        OSError("something went wrong on the wire"),
        s3_error("SlowDown", 503),
        s3_error("ServiceUnavailable", 503),
        s3_error("InternalError", 500),
        s3_error("RequestTimeout", 400),
        s3_error("Throttling", 400),  # unknown to s3fs: an OSError(EIO) from the ClientError
        s3_error("BadGateway", 502),
        ClientError({"Error": {"Code": "TooManyRequestsException"}}, "ListObjectsV2"),
        aiohttp.ServerDisconnectedError(),
        aiohttp.ClientResponseError(None, (), status=503, message="Service Unavailable"),  # type: ignore[arg-type]
    ],
    ids=repr,
)
def test_transient(exc: BaseException) -> None:
    assert is_transient_storage_error(exc)
    assert not is_access_error(exc)


@pytest.mark.parametrize(
    "exc",
    [
        FileNotFoundError(errno.ENOENT, "No such file or directory"),
        NotADirectoryError(errno.ENOTDIR, "Not a directory"),
        OSError(errno.EROFS, "Read-only file system"),
        s3_error("NoSuchBucket", 404),
        s3_error("InvalidBucketName", 400),
        s3_error("PermanentRedirect", 301),
        s3_error("SomethingNew", 400),  # unknown code, a client error: the cause decides
        aiohttp.ClientResponseError(None, (), status=404, message="Not Found"),  # type: ignore[arg-type]
        CorruptLogError("t: commit 3 is not JSON"),
        DeltaProtocolError("t needs reader version 4"),
        TableNotFoundError("t is not a Delta table"),
        UnsupportedStorageError("no put-if-absent"),
        ValueError("Protocol not known: nosuchproto"),
        ImportError("Install s3fs to access S3"),
        KeyError("a bug"),
        ClassStatus("a class attribute is no HTTP answer"),
    ],
    ids=repr,
)
def test_permanent(exc: BaseException) -> None:
    assert not is_transient_storage_error(exc)
    assert not is_access_error(exc)


@pytest.mark.parametrize(
    "exc",
    [
        PermissionError(errno.EACCES, "Permission denied"),
        s3_error("AccessDenied", 403),
        s3_error("InvalidAccessKeyId", 403),
        s3_error("ExpiredToken", 400),
        s3_error("SignatureDoesNotMatch", 403),
        NoCredentialsError(),
        aiohttp.ClientResponseError(None, (), status=401, message="Unauthorized"),  # type: ignore[arg-type]
        gcs_error(401, "Invalid Credentials"),
        gcs_error(403, "anon does not have storage.objects.list access to the bucket."),
    ],
    ids=repr,
)
def test_access_errors_are_permanent(exc: BaseException) -> None:
    assert not is_transient_storage_error(exc)
    assert is_access_error(exc)


def test_the_chain_of_causes_decides() -> None:
    # the first exception of the chain that says something definite decides
    assert not is_transient_storage_error(raised(OSError("wrapped"), CorruptLogError("bad")))
    assert is_transient_storage_error(raised(RuntimeError("sync"), ConnectionResetError()))
    assert not is_transient_storage_error(raised(PermissionError("no"), ConnectionResetError()))
    assert is_access_error(raised(RuntimeError("wrapped"), PermissionError("no")))
    # `raise ... from None` hides the context, as it does in a traceback
    assert not is_transient_storage_error(
        raised(ValueError("bad"), ConnectionResetError(), suppress=True)
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_location(port: int, **options: object) -> TableLocation:
    """An S3 table behind 127.0.0.1:`port`, no botocore retries (an own s3fs instance)."""
    return TableLocation.of(
        "s3://bucket/t",
        {
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 5},
            **options,
        },
    )


def test_an_unreachable_endpoint_is_transient() -> None:
    location = s3_location(closed_port(), AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s")
    with pytest.raises(Exception) as caught:
        latest_version_since(location, 3)
    assert type(caught.value).__name__ == "EndpointConnectionError"
    assert is_transient_storage_error(caught.value)
    assert not is_access_error(caught.value)


def test_missing_credentials_are_a_permanent_typed_access_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(StorageAccessError) as caught:
        latest_version_since(s3_location(closed_port()), 3)
    assert not is_transient_storage_error(caught.value)
    assert is_access_error(caught.value)
    # one typed error (not a botocore traceback) naming the path and where credentials go
    message = str(caught.value)
    assert message.startswith("Cannot access s3://bucket/t/_delta_log/")
    assert "NoCredentialsError" in message and "AWS_ACCESS_KEY_ID" in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert isinstance(caught.value, PermissionError)  # callers catching PermissionError still do


def test_a_bad_uri_is_permanent() -> None:
    with pytest.raises(ValueError, match="nosuchproto") as caught:
        TableLocation.of("nosuchproto://bucket/t")
    assert not is_transient_storage_error(caught.value)
