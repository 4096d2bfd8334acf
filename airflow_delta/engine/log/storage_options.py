"""Storage options: the ones the engine reads itself, and their translation for s3fs.

Storage options are what a user passes with a table URI (`storage_options`, or a `delta`
connection's extras). Most go to the fsspec filesystem as they are; the engine consumes a few
(`single_writer`, `use_log_compaction`) and translates delta-rs / object_store style AWS keys
into s3fs arguments, so one set of options serves deltalake and this engine alike.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

SINGLE_WRITER_OPTION = "single_writer"
#: Storage option: "false" makes log replay ignore log compaction files (`x.y.compacted.json`).
LOG_COMPACTION_OPTION = "use_log_compaction"

# delta-rs / object_store style keys and the S3FileSystem argument each one becomes.
_AWS_KEYS = {
    "AWS_ACCESS_KEY_ID": "key",
    "AWS_SECRET_ACCESS_KEY": "secret",
    "AWS_SESSION_TOKEN": "token",
    "AWS_ENDPOINT_URL": "endpoint_url",
    "AWS_ENDPOINT": "endpoint_url",
}
_AWS_REGION_KEYS = ("AWS_REGION", "AWS_DEFAULT_REGION")
# Accepted and consumed: s3fs speaks whatever scheme the endpoint URL names.
_AWS_CONSUMED_KEYS = ("AWS_ALLOW_HTTP",)


def s3fs_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Translate storage options into S3FileSystem arguments.

    s3fs's own (lower-case) arguments pass through and win over translated ones. The
    delta-rs / object_store keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
    AWS_REGION / AWS_DEFAULT_REGION, AWS_ENDPOINT_URL / AWS_ENDPOINT and AWS_ALLOW_HTTP are
    understood in any case. Every other upper-case key (AWS_S3_LOCKING_PROVIDER,
    AWS_S3_ALLOW_UNSAFE_RENAME, AWS_CONDITIONAL_PUT, DELTA_DYNAMO_TABLE_NAME, ...) configures
    delta-rs commit coordination or features s3fs lacks; it is dropped with a warning.
    Listing caches are always off: a stale listing would hide commits.
    """
    translated: dict[str, Any] = {}
    native: dict[str, Any] = {}
    region = None
    dropped = []
    for name, value in options.items():
        upper = name.upper()
        if upper in _AWS_KEYS:
            translated[_AWS_KEYS[upper]] = value
        elif upper in _AWS_REGION_KEYS:
            region = value
        elif upper in _AWS_CONSUMED_KEYS:
            continue
        elif upper.startswith("AWS_") or name.isupper():
            dropped.append(name)
        else:
            native[name] = value
    if dropped:
        log.warning("storage options not used for S3 (s3fs has no such setting): %s", dropped)
    if region is not None:
        native["client_kwargs"] = {"region_name": region, **native.get("client_kwargs", {})}
    return {**translated, **native, "use_listings_cache": False}


def truthy(value: Any) -> bool:
    """Read a boolean storage option given as a bool or a string."""
    return str(value).strip().lower() in ("true", "1", "yes", "on")
