"""Checks of a commit's actions and schema that need no transaction state: column names,
partition values, append-only tables, stats of clustering columns, and the table features a
new metadata needs."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

import pyarrow as pa

from airflow_delta.engine.errors import InvalidCommitError, SchemaMismatchError
from airflow_delta.engine.protocol.actions import (
    Action,
    AddFile,
    DomainMetadata,
    Metadata,
    RemoveFile,
)
from airflow_delta.engine.protocol.column_mapping import (
    COLUMN_MAPPING_PHYSICAL_NAME,
    column_mapping_problems,
)
from airflow_delta.engine.protocol.config import FEATURE_REQUEST_PREFIX, TableConfig
from airflow_delta.engine.protocol.features import PROPERTY_FEATURES
from airflow_delta.engine.protocol.schema import delta_field_metadata, is_variant

#: The domain where a clustered table names its clustering columns (PROTOCOL.md).
CLUSTERING_DOMAIN = "delta.clustering"

_INVALID_NAME_CHARS = set(" ,;{}()\n\t=")


def check_file_actions(
    actions: Sequence[Action],
    metadata: Metadata,
    table: str,
    domains: Mapping[str, DomainMetadata] | None = None,
) -> None:
    """InvalidCommitError for removes on an append-only table, for adds whose partition
    values do not name the table's partition columns, and for adds to a clustered table
    (`domains`: its domain metadata) whose writers collect no stats on a clustering column."""
    if domains and any(isinstance(a, AddFile) for a in actions):
        check_clustering_stats(metadata, domains, table)
    columns = set(metadata.physical_partition_columns)
    if TableConfig(metadata.configuration).append_only:
        removing = [a.path for a in actions if isinstance(a, RemoveFile) and a.data_change]
        if removing:
            raise InvalidCommitError(
                f"Table {table} is append-only (delta.appendOnly=true): this commit "
                f"removes data files (e.g. {removing[0]}). Only appends are allowed; unset "
                "delta.appendOnly to delete or overwrite."
            )
    for a in actions:
        if isinstance(a, AddFile) and set(a.partition_values) != columns:
            raise InvalidCommitError(
                f"Table {table}: file {a.path} has partition values for "
                f"{sorted(a.partition_values)} but the table is partitioned by "
                f"{sorted(columns)}"
            )


def check_new_metadata(metadata: Metadata, table: str) -> None:
    """InvalidCommitError for a metadata without a struct schema, with invalid column names,
    with a schema column mapping does not cover (when the table maps columns), or with a
    partition column missing from the schema, not of a primitive type, named twice, or with
    every column a partition column (as delta-spark refuses); SchemaMismatchError for a
    column of type `void` (Spark's NullType)."""
    schema = json.loads(metadata.schema_string or "null")
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise InvalidCommitError(f"Table {table}: metadata has no struct schemaString")
    names = [f["name"] for f in schema.get("fields", [])]
    untyped = next(_void_columns(schema, ""), None)
    if untyped is not None:
        raise SchemaMismatchError(
            f"Table {table}: column {untyped} has no type (every value NULL, Spark's NullType "
            "`void`), which Delta cannot store; cast it to the type the column should have "
            "(e.g. F.lit(None).cast('string'))"
        )
    mapping = TableConfig(metadata.configuration, table).column_mapping_mode != "none"
    check_names(names, mapping, table)
    if mapping:
        max_id = int(metadata.configuration.get("delta.columnMapping.maxColumnId", 0))
        problems = column_mapping_problems(schema, max_id)
        if problems:
            raise InvalidCommitError(
                f"Table {table} uses column mapping "
                f"(delta.columnMapping.mode={metadata.column_mapping_mode}), but its new "
                "schema is not mapped: " + "; ".join(problems)
            )
    top = {f["name"]: f["type"] for f in schema.get("fields", [])}
    partitions = metadata.partition_columns
    if len({c.lower() for c in partitions}) != len(partitions):
        raise InvalidCommitError(
            f"Table {table}: partition columns {list(partitions)} name a column twice; "
            "name each partition column once"
        )
    if partitions and len(partitions) >= len(top):
        raise InvalidCommitError(
            f"Table {table}: cannot use all columns ({', '.join(names)}) for partition "
            "columns: data files need a data column; partition by fewer columns"
        )
    for column in partitions:
        if column not in top:
            raise InvalidCommitError(
                f"Table {table}: partition column '{column}' is not in the schema "
                f"(columns: {', '.join(names)})"
            )
        if isinstance(top[column], dict):
            raise InvalidCommitError(
                f"Table {table}: partition column '{column}' must have a primitive type"
            )


def _void_columns(data_type: object, path: str) -> Iterator[str]:
    """The paths of the columns of type `void` in a Delta schema (JSON) type."""
    if data_type == "void":
        yield path or "?"
    if not isinstance(data_type, dict):
        return
    for f in data_type.get("fields", []) if data_type.get("type") == "struct" else []:
        yield from _void_columns(f.get("type"), f"{path}.{f.get('name')}".lstrip("."))
    for key in ("elementType", "keyType", "valueType"):
        if key in data_type:
            yield from _void_columns(data_type[key], f"{path}.{key}")


def features_wanted(metadata: Metadata, new_table: bool, table: str = "") -> set[str]:
    """The table features `metadata` needs: those its properties enable, timestampNtz for such
    a column, checkConstraints for a constraint, domainMetadata with rowTracking, and, for a
    `new_table`, generatedColumns and identityColumns for such columns.

    An existing table keeps its protocol for generation expressions and identity metadata it
    already carries: a (1, 2) table written by an old writer (DBR 8.0) has expressions in its
    schema that no writer is bound to, and adding the feature would start enforcing them.
    """
    configuration = metadata.configuration
    config = TableConfig(configuration, table)
    wanted = {PROPERTY_FEATURES[key] for key, on in config.feature_flags.items() if on}
    if config.checkpoint_policy == "v2":
        wanted.add(PROPERTY_FEATURES["delta.checkpointPolicy"])
    if config.column_mapping_mode != "none":
        wanted.add(PROPERTY_FEATURES["delta.columnMapping.mode"])
    wanted |= config.requested_features
    schema = metadata.schema_string or ""
    if "timestamp_ntz" in schema:
        wanted.add("timestampNtz")
    if any(key.startswith("delta.constraints.") for key in configuration):
        wanted.add("checkConstraints")
    if "rowTracking" in wanted:
        wanted.add("domainMetadata")  # the row-id high-water mark lives in a domain
    if new_table and "delta.generationExpression" in schema:
        wanted.add("generatedColumns")
    if new_table and '"delta.identity.' in schema:
        wanted.add("identityColumns")
    return wanted


def without_feature_requests(metadata: Metadata) -> Metadata:
    """`metadata` without its `delta.feature.<name>` properties: the features they ask for go
    to the protocol (`features_wanted`), and delta-spark does not keep them either."""
    configuration = metadata.configuration
    if not any(key.startswith(FEATURE_REQUEST_PREFIX) for key in configuration):
        return metadata
    kept = {k: v for k, v in configuration.items() if not k.startswith(FEATURE_REQUEST_PREFIX)}
    return replace(metadata, configuration=kept)


def check_names(names: list[str], column_mapping: bool, table: str) -> None:
    """InvalidCommitError for duplicate column names, and for names with characters parquet
    and Hive paths cannot hold (unless column mapping renames them)."""
    lowered = [n.lower() for n in names]
    duplicates = sorted({n for n in names if lowered.count(n.lower()) > 1})
    if duplicates:
        raise InvalidCommitError(
            f"Table {table}: found duplicate column(s) in the schema: {', '.join(duplicates)}"
        )
    if not column_mapping:
        bad = [n for n in names if _INVALID_NAME_CHARS & set(n)]
        if bad:
            raise InvalidCommitError(
                f"Table {table}: column names {bad} contain invalid characters among "
                "' ,;{}()\\n\\t='; rename them or enable column mapping."
            )


def check_clustering_stats(
    metadata: Metadata, domains: Mapping[str, DomainMetadata], table: str
) -> None:
    """InvalidCommitError when the table is clustered (a `delta.clustering` domain) by a column
    outside the leaf columns whose stats this engine's writers collect (the first
    `delta.dataSkippingNumIndexedCols`): PROTOCOL.md requires stats on clustering columns."""
    domain = domains.get(CLUSTERING_DOMAIN)
    if domain is None or domain.removed:
        return
    wanted = json.loads(domain.configuration or "{}").get("clusteringColumns") or []
    paths = [tuple(c) if isinstance(c, list) else (c,) for c in wanted]
    num_indexed = TableConfig(metadata.configuration, table).num_indexed_cols
    leaves = list(_physical_leaves(metadata.schema))
    indexed = set(leaves if num_indexed < 0 else leaves[:num_indexed])
    missing = [".".join(p) for p in paths if p not in indexed]
    if missing:
        raise InvalidCommitError(
            f"Table {table} is clustered by {', '.join(missing)}, which is not among the first "
            f"{num_indexed} columns that get statistics (delta.dataSkippingNumIndexedCols); a "
            "clustered table needs statistics on its clustering columns. Raise "
            "delta.dataSkippingNumIndexedCols (-1: all columns) and write again."
        )


def _physical_leaves(
    fields: pa.Schema | pa.StructType, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """The leaf columns of a schema by physical name, in the order writers index them."""
    for f in fields:
        name = delta_field_metadata(f).get(COLUMN_MAPPING_PHYSICAL_NAME, f.name)
        if pa.types.is_struct(f.type) and not is_variant(f.type):
            yield from _physical_leaves(f.type, (*prefix, name))
        else:
            yield (*prefix, name)
