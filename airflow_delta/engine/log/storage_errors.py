"""Storage errors: transient (retry later) or permanent (fail now), and access problems.

A caller that polls a table (the version sensor and its trigger) retries a transient error
(a dropped connection, a timeout, throttling, an HTTP 5xx) and gives up at once on a permanent
one (no credentials, access denied, a missing bucket, a corrupt log, a protocol this engine
cannot read, a bad URI). An unknown error is permanent: retrying a bug until a timeout only
hides it.

An exception is judged with the exceptions it was raised from (`raise ... from`, or raised
while handling another): s3fs, for example, turns an S3 error code it does not know into a bare
`OSError(EIO)` whose cause is botocore's ClientError. The first exception of that chain that
says something definite decides; a bare OSError alone counts as transient.

botocore and aiohttp are never imported here: an exception of theirs can only exist once its
module is loaded, so the classes are looked up in `sys.modules`.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterator
from typing import Any, Literal

from airflow_delta.engine.errors import DeltaError, StorageAccessError, TableNotFoundError

Verdict = Literal["transient", "permanent", "generic"] | None

#: errno values of an OSError that a retry can cure. (EIO, or no errno, says little: the
#: exception it was raised from decides, else it counts as transient.)
TRANSIENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EAGAIN",
        "EBUSY",
        "ECONNABORTED",
        "ECONNREFUSED",
        "ECONNRESET",
        "EHOSTDOWN",
        "EHOSTUNREACH",
        "EINTR",
        "ENETDOWN",
        "ENETRESET",
        "ENETUNREACH",
        "ENOBUFS",
        "EPIPE",
        "EREMOTEIO",
        "ESTALE",
        "ETIMEDOUT",
    )
    if hasattr(errno, name)
)
#: errno values of an OSError that a retry cannot cure (s3fs maps S3 error codes onto these).
PERMANENT_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (
        "EACCES",
        "EEXIST",
        "EINVAL",
        "EISDIR",
        "EMSGSIZE",
        "ENAMETOOLONG",
        "ENOENT",
        "ENOSYS",
        "ENOTDIR",
        "ENOTEMPTY",
        "EPERM",
        "EREMCHG",
        "EROFS",
    )
    if hasattr(errno, name)
)
#: Error codes of AWS (and S3-compatible) services that mean "slow down" or "try again".
TRANSIENT_CODES = frozenset(
    {
        "BandwidthLimitExceeded",
        "InternalError",
        "InternalServerError",
        "PriorRequestNotComplete",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "SlowDown",
        "ThrottledException",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
    }
)
#: Error codes of AWS (and S3-compatible) services that mean "these credentials may not".
ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AccountProblem",
        "AllAccessDisabled",
        "ExpiredToken",
        "InvalidAccessKeyId",
        "InvalidClientTokenId",
        "InvalidSecurity",
        "InvalidToken",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
    }
)
_PERMANENT_OS_ERRORS = (
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
_TRANSIENT_OS_ERRORS = (ConnectionError, TimeoutError, InterruptedError, BlockingIOError)


def is_transient_storage_error(exc: BaseException) -> bool:
    """Whether a retry of the storage call that raised `exc` may succeed.

    >>> is_transient_storage_error(ConnectionResetError(104, "Connection reset by peer"))
    True
    >>> is_transient_storage_error(PermissionError(13, "Permission denied"))
    False
    """
    generic = False
    for link in _chain(exc):
        verdict = _verdict(link)
        if verdict == "generic":
            generic = True
        elif verdict is not None:
            return verdict == "transient"
    return generic


def is_access_error(exc: BaseException) -> bool:
    """Whether `exc` says the credentials are missing or may not read the table.

    >>> is_access_error(PermissionError(13, "Permission denied"))
    True
    """
    for link in _chain(exc):
        if isinstance(link, PermissionError) or _http_status(link) in (401, 403):
            return True
        if _code(link) in ACCESS_CODES:
            return True
        botocore = sys.modules.get("botocore.exceptions")
        if botocore is not None and isinstance(
            link, (botocore.NoCredentialsError, botocore.PartialCredentialsError)
        ):
            return True
    return False


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what it was raised from, as a traceback prints them (at most 16)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen and len(seen) < 16:
        seen.add(id(link))
        yield link
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)


def _verdict(exc: BaseException) -> Verdict:
    """What `exc` alone says: transient, permanent, generic (a bare OSError), or nothing."""
    if isinstance(exc, DeltaError):
        return "permanent"
    library = _library_verdict(exc)
    if library is not None:
        return library
    status = _http_status(exc)
    if status is not None:
        return "transient" if status in (408, 429) or status >= 500 else "permanent"
    if isinstance(exc, _PERMANENT_OS_ERRORS):
        return "permanent"
    if isinstance(exc, _TRANSIENT_OS_ERRORS):
        return "transient"
    if isinstance(exc, OSError):
        if exc.errno in PERMANENT_ERRNOS:
            return "permanent"
        if exc.errno in TRANSIENT_ERRNOS:
            return "transient"
        return "generic"
    return None


def _library_verdict(exc: BaseException) -> Verdict:
    """botocore's and aiohttp's exceptions (when those modules are loaded)."""
    botocore = sys.modules.get("botocore.exceptions")
    if botocore is not None:
        if isinstance(exc, botocore.ClientError):
            code = _code(exc)
            if code in TRANSIENT_CODES:
                return "transient"
            status = _http_status(exc)
            if status is not None and (status in (408, 429) or status >= 500):
                return "transient"
            return "permanent"
        if isinstance(exc, botocore.SSLError):  # a certificate problem: configuration
            return "permanent"
        transient = tuple(
            getattr(botocore, name)
            for name in (
                "ConnectionError",  # botocore's: EndpointConnectionError, ConnectTimeoutError
                "HTTPClientError",  # ReadTimeoutError, ConnectionClosedError
                "IncompleteReadError",
                "ResponseStreamingError",
            )
            if hasattr(botocore, name)
        )
        if isinstance(exc, transient):
            return "transient"
        if isinstance(exc, botocore.BotoCoreError):  # no credentials, no region, bad parameters
            return "permanent"
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is not None and isinstance(
        exc, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
    ):
        return "transient"
    return None


def _code(exc: BaseException) -> str | None:
    """The service error code of a botocore-style error (`response["Error"]["Code"]`)."""
    error = _response(exc).get("Error")
    code = error.get("Code") if isinstance(error, dict) else None
    return str(code) if code is not None else None


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status of the response an exception reports (botocore, aiohttp, requests,
    gcsfs, azure): only what the instance carries, never a class attribute (AirflowException
    has a `status_code` of 500 that says nothing about storage)."""
    if type(exc) is OSError and exc.errno is None and str(exc).startswith("Forbidden: "):
        return 403  # gcsfs raises a 403 as OSError(f"Forbidden: {path}\n{message}")
    metadata = _response(exc).get("ResponseMetadata")
    own = vars(exc)
    response = own.get("response")
    candidates = (
        metadata.get("HTTPStatusCode") if isinstance(metadata, dict) else None,
        own.get("status"),
        own.get("status_code"),
        getattr(response, "status_code", None) if response is not None else None,
        own.get("code"),
    )
    for value in candidates:
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    return None


def _response(exc: BaseException) -> dict[str, Any]:
    response = getattr(exc, "response", None)
    return response if isinstance(response, dict) else {}


#: Where each storage takes credentials from, for StorageAccessError: (scheme, aliases, hint).
_CREDENTIAL_HINTS = (
    (
        "s3",
        {"s3", "s3a"},
        "Give AWS credentials: the Airflow connection (login = access key id, password = "
        "secret, or extras), storage_options such as {'AWS_ACCESS_KEY_ID': ..., "
        "'AWS_SECRET_ACCESS_KEY': ...}, or the environment (AWS_PROFILE, AWS_ACCESS_KEY_ID, "
        "an instance role), with rights to list, read and write the table's prefix.",
    ),
    (
        "gs",
        {"gs", "gcs"},
        "Give Google credentials: storage_options {'token': <path to a service account "
        "JSON>} or GOOGLE_APPLICATION_CREDENTIALS in the environment.",
    ),
    (
        "abfs",
        {"abfs", "abfss", "az", "adl"},
        "Give Azure credentials: storage_options {'account_name': ..., 'account_key': ...} "
        "(or 'sas_token', or a service principal's tenant_id/client_id/client_secret).",
    ),
    ("file", {"file", "local"}, "Check that this user may read and write the table's directory."),
)


def storage_access_error(
    protocols: set[str], path: str, exc: BaseException
) -> StorageAccessError | None:
    """The StorageAccessError for `exc` raised at `path` on a filesystem of `protocols`, when
    `exc` says the credentials are missing or refused (else None): it names the path and
    where that storage takes credentials from."""
    if isinstance(exc, StorageAccessError) or not is_access_error(exc):
        return None
    scheme, hint = "/".join(sorted(protocols)), "Check the credentials given to the storage."
    for name, aliases, text in _CREDENTIAL_HINTS:
        if protocols & aliases:
            scheme, hint = name, text
            break
    where = path if scheme == "file" or "://" in path else f"{scheme}://{path}"
    detail = str(exc).splitlines()[0] if str(exc) else "access denied"
    return StorageAccessError(f"Cannot access {where} ({type(exc).__name__}: {detail}). {hint}")


#: Protocols whose writes create missing directories: a FileNotFoundError there is no bucket.
_DIRECTORY_PROTOCOLS = frozenset({"file", "local", "memory"})


def missing_bucket_error(
    protocols: set[str], path: str, exc: BaseException
) -> TableNotFoundError | None:
    """The TableNotFoundError for `exc` raised writing `path` to an object store, when `exc`
    says its bucket (or container) does not exist (else None). An object store needs no
    parent directory, so a write's FileNotFoundError (s3fs: NoSuchBucket, gcsfs: 404) means
    the bucket is missing; adlfs raises azure's ContainerNotFound."""
    if protocols & _DIRECTORY_PROTOCOLS or isinstance(exc, DeltaError):
        return None
    for link in _chain(exc):
        code = vars(link).get("error_code") or _code(link)
        if isinstance(link, FileNotFoundError) or code in ("NoSuchBucket", "ContainerNotFound"):
            break
    else:
        return None
    scheme = sorted(protocols)[0]
    where = path if "://" in path else f"{scheme}://{path}"
    bucket = where.split("://", 1)[1].split("/", 1)[0]
    return TableNotFoundError(
        f"Cannot write {where}: the table's bucket (or container) {bucket!r} does not exist. "
        "Fix the table URI, or create the bucket: writes never create one."
    )
