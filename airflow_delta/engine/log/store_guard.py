"""The guard around every LogStore method that touches storage: a missing or refused
credential becomes StorageAccessError naming the path, and a write to a missing bucket or
container becomes TableNotFoundError naming the file."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from airflow_delta.engine.log.storage_errors import missing_bucket_error, storage_access_error

#: The LogStore methods that write: a missing bucket there is TableNotFoundError.
WRITING_METHODS = ("write", "write_parquet", "open_output")


def protocols_of(fs: Any) -> set[str]:
    """The protocols (URI schemes) an fsspec filesystem answers to."""
    protocol = fs.protocol
    return {protocol} if isinstance(protocol, str) else set(protocol)


#: The LogStore methods that touch storage: a missing or refused credential in any of them
#: becomes one StorageAccessError naming the path and where credentials come from.
GUARDED_METHODS = (
    "list_from",
    "list_range",
    "read",
    "write",
    "write_parquet",
    "exists",
    "delete",
    "delete_many",
    "list_recursive",
    "open_input",
    "open_parquet",
    "open_output",
)


def _access_error(store: Any, args: tuple[Any, ...], exc: BaseException, writes: bool) -> Any:
    """`exc`, or a StorageAccessError when it says credentials are missing or refused, or (for
    a method that `writes`) a TableNotFoundError when the bucket or container is missing."""
    path, protocols = (
        str(args[0]) if args and isinstance(args[0], str) else "the table",
        protocols_of(store.fs),
    )
    missing = missing_bucket_error(protocols, path, exc) if writes else None
    return missing or storage_access_error(protocols, path, exc) or exc


def guarded(method: Any) -> Any:
    """`method` of a LogStore raising StorageAccessError for a credential problem (and, if it
    writes, TableNotFoundError for a missing bucket)."""
    writes = method.__name__ in WRITING_METHODS
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def each(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                yield from method(self, *args, **kwargs)
            except Exception as exc:  # re-raised: typed when it is an access error
                error = _access_error(self, args, exc, writes)
                if error is exc:
                    raise
                raise error from None

        return each

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:  # re-raised: typed when it is an access error
            error = _access_error(self, args, exc, writes)
            if error is exc:
                raise
            raise error from None

    return call
