"""The Airflow asset of a Delta table: one URI per table, the same for producers and consumers.

Operators that commit declare the table's asset as their outlet and put the committed version
in each asset event's `extra`; a DAG scheduled on `delta_table_asset(uri)` then knows which
version woke it (`triggering_asset_events`).
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from airflow.sdk import Asset


def table_asset_uri(table_uri: str) -> str:
    """The canonical asset URI of a table: local paths become absolute `file://` URIs, other
    URIs lose a trailing slash.

    >>> table_asset_uri("/data/events/")
    'file:///data/events'
    """
    scheme = urlsplit(table_uri).scheme
    if scheme in ("", "file") or len(scheme) == 1:  # a path, file:..., or a Windows drive
        path = urlsplit(table_uri).path if scheme == "file" else table_uri
        return "file://" + str(PurePosixPath(os.path.abspath(path)))
    return table_uri.rstrip("/")


def delta_table_asset(table_uri: str) -> Asset:
    """The Asset of the Delta table at `table_uri` (schedule DAGs on it, or use it as outlet).

    Example: `@dag(schedule=[delta_table_asset("s3://lake/events")])`.
    """
    return Asset(uri=table_asset_uri(table_uri), group="delta")
