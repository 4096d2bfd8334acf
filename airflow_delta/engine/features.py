"""Protocol versions and table features: what this engine can honour, and refusals.

Reading the *log* of a table only depends on the features that change how the log is
replayed. Features that change how *data* is read (deletion vectors, column mapping, type
widening, variant, ...) are accepted here; the data plane decides for itself what it can read.
"""

from __future__ import annotations

from airflow_delta.engine.actions import Protocol
from airflow_delta.engine.errors import DeltaProtocolError

MAX_READER_VERSION = 3

#: Reader features whose tables this engine can replay and describe.
LOG_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding-preview",
    }
)


def reader_features(protocol: Protocol) -> set[str]:
    """The reader features a protocol requires, legacy versions expanded."""
    if protocol.min_reader_version >= 3:
        return set(protocol.reader_features or [])
    return {"columnMapping"} if protocol.min_reader_version == 2 else set()


def check_reader_support(protocol: Protocol, table: str) -> None:
    """Raise DeltaProtocolError unless this engine can replay the log of a table with `protocol`."""
    if protocol.min_reader_version > MAX_READER_VERSION:
        raise DeltaProtocolError(
            f"Table {table} requires Delta reader version {protocol.min_reader_version}; "
            f"airflow-delta supports reader versions up to {MAX_READER_VERSION}. "
            "Upgrade airflow-delta or read the table with an engine that supports it."
        )
    unsupported = sorted(reader_features(protocol) - LOG_READER_FEATURES)
    if unsupported:
        raise DeltaProtocolError(
            f"Table {table} requires reader features this engine does not support: "
            f"{', '.join(unsupported)}. Supported reader features: "
            f"{', '.join(sorted(LOG_READER_FEATURES))}."
        )


#: Writer features whose actions this engine preserves whole in a checkpoint.
CHECKPOINT_WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "identityColumns",
        "deletionVectors",
        "rowTracking",
        "timestampNtz",
        "domainMetadata",
        "v2Checkpoint",
        "icebergCompatV1",
        "icebergCompatV2",
        "clustering",
        "liquid",
        "collations",
        "collations-preview",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding-preview",
        "inCommitTimestamp",
        "allowColumnDefaults",
    }
)


def check_checkpoint_support(protocol: Protocol, table: str) -> None:
    """Raise DeltaProtocolError unless a checkpoint written here keeps every action whole."""
    check_reader_support(protocol, table)
    if protocol.min_writer_version >= 7:
        unknown = sorted(set(protocol.writer_features or []) - CHECKPOINT_WRITER_FEATURES)
        if unknown:
            raise DeltaProtocolError(
                f"Cannot checkpoint table {table}: it uses writer features this engine does "
                f"not support: {', '.join(unknown)}."
            )
