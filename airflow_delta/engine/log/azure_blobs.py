"""Azure Blob names taken literally.

adlfs parses every path it is given as a URL, so a `?` or `#` in a blob name starts a query or
a fragment: `t/x.parquet#` addresses `t/x.parquet`, and `a?b#c/t` becomes `a#c/t?b`. The log
store deletes blobs by their literal names through the Azure SDK (`delete_blobs`), and refuses a
table whose own paths adlfs would address elsewhere (`check_addressable`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_delta.engine.errors import UnsupportedStorageError

#: Delete Blob requests in flight at once.
DELETE_CONCURRENCY = 64


async def delete_blobs(service: Any, by_container: Mapping[str, Sequence[str]]) -> None:
    """Delete each blob named literally in `by_container` (container -> blob names) with the
    async BlobServiceClient `service`; a blob already gone is fine."""
    from azure.core.exceptions import ResourceNotFoundError

    for container, names in by_container.items():
        async with service.get_container_client(container) as client:
            for start in range(0, len(names), DELETE_CONCURRENCY):
                batch = names[start : start + DELETE_CONCURRENCY]
                results = await asyncio.gather(
                    *(client.delete_blob(name) for name in batch), return_exceptions=True
                )
                for result in results:
                    if isinstance(result, BaseException) and not isinstance(
                        result, ResourceNotFoundError
                    ):
                        raise result


def check_addressable(uri: str, root: str, parse: Callable[[str], str]) -> None:
    """Raise UnsupportedStorageError when adlfs (its path parser `parse`) would address the
    files of the table `uri`, rooted at `root`, under other names than the URI gives."""
    literal = uri.split("://", 1)[1].rstrip("/")
    if "@" in literal.split("/", 1)[0]:  # container@account.host/path: adlfs's own form
        literal = root
    probe = f"{literal}/_delta_log/00000000000000000000.json"
    for named, addressed in ((literal, root), (probe, parse(probe))):
        if addressed != named:
            raise UnsupportedStorageError(
                f"Table {uri}: adlfs reads a '?' or '#' in an Azure path as a URL query or "
                f"fragment, so it would use {addressed!r} instead of {named!r}. Choose a table "
                "path without '?' and '#'."
            )
