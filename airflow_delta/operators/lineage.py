"""OpenLineage of the operators that commit: dataset names per OpenLineage's naming spec, the
table's schema facet (nested fields included) and the version facet of the commit.

The OpenLineage provider calls `DeltaCommitOperator.get_openlineage_facets_on_start` when the
task starts (its templates rendered: the datasets by name) and
`get_openlineage_facets_on_complete` (for a failed task too) after it; this module imports
OpenLineage only then, so DAG parsing loads none of it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from airflow_delta.assets import table_asset_uri

log = logging.getLogger(__name__)

#: URI schemes of the same store that OpenLineage names by one scheme (Spark's `s3a://`).
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}
#: adlfs's schemes of Azure storage, named as ADLS Gen2 (`abfss://`) by OpenLineage.
AZURE_SCHEMES = ("abfs", "abfss", "az")


def openlineage_dataset_name(
    table_uri: str, storage_options: Mapping[str, Any] | None = None
) -> tuple[str, str]:
    """OpenLineage's (namespace, name) of a table: `("file", "/abs/path")` for local tables,
    `("s3://bucket", "key/path")` for object stores (`s3a://`, `s3n://` named as `s3://`, the
    way Spark's OpenLineage integration names them, so both join on one dataset).

    Azure (adlfs's `abfs://`, `abfss://`, `az://`) is named
    `abfss://{container}@{account}.dfs.core.windows.net`, the account taken from the URI or else
    from the storage options' `account_name` (the URI `abfs://container/path` holds none).

    >>> openlineage_dataset_name("s3a://lake/events/")
    ('s3://lake', 'events')
    >>> openlineage_dataset_name("az://box/db/t", {"account_name": "acct"})
    ('abfss://box@acct.dfs.core.windows.net', 'db/t')
    """
    uri = table_asset_uri(table_uri)
    parts = urlsplit(uri)
    name = parts.path.lstrip("/")
    if parts.scheme == "file":
        return "file", parts.path
    if parts.scheme in AZURE_SCHEMES:
        container, _, host = parts.netloc.partition("@")
        account = host.split(".", 1)[0] or (storage_options or {}).get("account_name")
        if account:
            return f"abfss://{container}@{account}.dfs.core.windows.net", name
    scheme = SCHEME_ALIASES.get(parts.scheme, parts.scheme)
    return f"{scheme}://{parts.netloc}", name


def schema_fields(schema: str | dict[str, Any]) -> list[Any]:
    """The OpenLineage SchemaDatasetFacetFields of a Delta schema (the metadata's schemaString):
    a struct's fields nested under it, an array's element as `_element`, a map's as `key` and
    `value` (the names Spark's OpenLineage integration gives them).

    >>> [f.name for f in schema_fields('{"type": "struct", "fields": [{"name": "id",'
    ...     ' "type": "long", "nullable": true, "metadata": {}}]}')]
    ['id']
    """
    struct = json.loads(schema) if isinstance(schema, str) else schema
    return [_field(f["name"], f["type"], f.get("metadata") or {}) for f in struct["fields"]]


def _field(name: str, delta_type: str | dict[str, Any], metadata: dict[str, Any]) -> Any:
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacetFields

    comment = metadata.get("comment")
    description = comment if isinstance(comment, str) else None
    if isinstance(delta_type, str):
        return SchemaDatasetFacetFields(name=name, type=delta_type, description=description)
    kind = delta_type.get("type")
    nested: list[Any] = []
    if kind == "struct":
        nested = schema_fields(delta_type)
    elif kind == "array":
        nested = [_field("_element", delta_type["elementType"], {})]
    elif kind == "map":
        nested = [_field("key", delta_type["keyType"], {})]
        nested.append(_field("value", delta_type["valueType"], {}))
    return SchemaDatasetFacetFields(
        name=name, type=str(kind), description=description, fields=nested or None
    )


def output_facets(result: dict[str, Any] | None, schema: str | None) -> dict[str, Any]:
    """The facets of the table as output dataset: storage, the schema when known, and the
    version this task committed (none when it committed nothing: a retry that found its
    commit already landed, or a command with nothing to change)."""
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet
    from openlineage.client.generated.storage_dataset import StorageDatasetFacet

    facets: dict[str, Any] = {
        "storage": StorageDatasetFacet(storageLayer="delta", fileFormat="parquet")
    }
    if schema:
        facets["schema"] = SchemaDatasetFacet(fields=schema_fields(schema))
    if result and not result.get("skipped") and result.get("version") is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(result["version"]))
    return facets


def lineage_storage_options(hook: Any, table_uri: str) -> Mapping[str, Any] | None:
    """The storage options of a task's connection (`hook`, a DeltaHook; an Azure URI may not
    name its account); None without a connection or when they cannot be read: the lineage of a
    task failed by its connection still names the table."""
    if not hook.delta_conn_id:
        return None
    try:
        return dict(hook.storage_options)
    except Exception as exc:  # a missing or malformed connection: the task failed on it
        log.debug("No storage options for the lineage of %s: %s", table_uri, exc)
        return None


def input_facets(found: Mapping[str, Any] | None) -> dict[str, Any]:
    """The facets of a table a sensor watched, as input dataset: storage, and the version it
    observed when it found one."""
    from openlineage.client.generated.dataset_version_dataset import DatasetVersionDatasetFacet
    from openlineage.client.generated.storage_dataset import StorageDatasetFacet

    facets: dict[str, Any] = {
        "storage": StorageDatasetFacet(storageLayer="delta", fileFormat="parquet")
    }
    if found and found.get("version") is not None:
        facets["version"] = DatasetVersionDatasetFacet(datasetVersion=str(found["version"]))
    return facets
