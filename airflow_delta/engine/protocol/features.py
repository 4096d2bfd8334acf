"""Protocol versions and table features: what this engine can honour, and refusals.

Reading the *log* of a table only depends on the features that change how the log is
replayed. Features that change how *data* is read (deletion vectors, column mapping, type
widening, variant, ...) are accepted here; the data plane decides for itself what it can read.
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_delta.engine.errors import DeltaProtocolError
from airflow_delta.engine.protocol.actions import (
    Action,
    AddCDCFile,
    AddFile,
    Metadata,
    Protocol,
    RemoveFile,
)

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


#: Writer features whose rules a commit from this engine (with the Spark data plane) honours.
WRITER_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "timestampNtz",
        "domainMetadata",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "deletionVectors",
        "inCommitTimestamp",
        "typeWidening",
        "typeWidening-preview",
        "columnMapping",
        "changeDataFeed",
        "rowTracking",
        "identityColumns",
        "generatedColumns",
        "clustering",
    }
)

#: Legacy writer versions and the features each one implies.
_LEGACY_WRITER_FEATURES = {
    2: {"appendOnly", "invariants"},
    3: {"checkConstraints"},
    4: {"changeDataFeed", "generatedColumns"},
    5: {"columnMapping"},
    6: {"identityColumns"},
}

MAX_WRITER_VERSION = 7


def writer_features(protocol: Protocol) -> set[str]:
    """The writer features a protocol requires, legacy versions expanded."""
    if protocol.min_writer_version >= 7:
        return set(protocol.writer_features or [])
    return {
        f
        for version, features in _LEGACY_WRITER_FEATURES.items()
        if protocol.min_writer_version >= version
        for f in features
    }


def check_writer_support(protocol: Protocol, table: str, metadata: Metadata | None = None) -> None:
    """Raise DeltaProtocolError unless this engine can commit to a table with `protocol`.

    With `metadata`, a legacy protocol (writer version < 7) only requires the features its
    version implies that the table actually uses: a writer-5 table (column mapping) without
    generated columns and without change data feed is writable.
    """
    check_reader_support(protocol, table)
    if protocol.min_writer_version > MAX_WRITER_VERSION:
        raise DeltaProtocolError(
            f"Table {table} requires Delta writer version {protocol.min_writer_version}; "
            f"airflow-delta supports writer versions up to {MAX_WRITER_VERSION}."
        )
    required = writer_features(protocol)
    if metadata is not None and protocol.min_writer_version < 7:
        required -= _LEGACY_FEATURES_IN_USE_ONLY - _features_in_use(metadata)
    required -= _VARIANT_FEATURES  # variant columns are written as their two binaries
    unsupported = sorted(required - WRITER_FEATURES)
    if unsupported:
        raise DeltaProtocolError(
            f"Cannot write to table {table}: it requires writer features this engine does not "
            f"support: {', '.join(unsupported)}. Write to it with an engine that supports them."
        )


#: The variant type's features: unshredded variant columns are written (a struct of `value`
#: and `metadata` binaries, nullCount stats only); shredding (variantShredding) is not.
_VARIANT_FEATURES = frozenset({"variantType", "variantType-preview"})


#: Legacy writer features that bind a writer only when the table uses them.
_LEGACY_FEATURES_IN_USE_ONLY = frozenset({"changeDataFeed", "generatedColumns", "identityColumns"})


def change_data_feed_enabled(protocol: Protocol, metadata: Metadata) -> bool:
    """Whether commits to the table must write change data (`cdc` actions): the table sets
    delta.enableChangeDataFeed=true and its protocol binds writers to it (writer version 4 to
    6, or the changeDataFeed writer feature)."""
    enabled = metadata.configuration.get("delta.enableChangeDataFeed", "false").lower() == "true"
    return enabled and "changeDataFeed" in writer_features(protocol)


def _features_in_use(metadata: Metadata) -> set[str]:
    """Which of the use-only legacy features the table's metadata uses."""
    used = set()
    if metadata.configuration.get("delta.enableChangeDataFeed", "false").lower() == "true":
        used.add("changeDataFeed")
    schema = metadata.schema_string or ""
    if "delta.generationExpression" in schema:
        used.add("generatedColumns")
    if "delta.identity." in schema:
        used.add("identityColumns")
    return used


#: Table properties that need a table feature, and the feature.
PROPERTY_FEATURES = {
    "delta.appendOnly": "appendOnly",
    "delta.enableDeletionVectors": "deletionVectors",
    "delta.enableInCommitTimestamps": "inCommitTimestamp",
    "delta.enableChangeDataFeed": "changeDataFeed",
    "delta.enableRowTracking": "rowTracking",
    "delta.columnMapping.mode": "columnMapping",
    "delta.checkpointPolicy": "v2Checkpoint",
    "delta.enableTypeWidening": "typeWidening",
}

#: Features that readers must know too (reader-writer features).
READER_WRITER_FEATURES = frozenset(
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
    }
)


def required_protocol(current: Protocol | None, features: set[str]) -> Protocol:
    """The protocol a table needs to use `features`, upgrading `current` as little as possible.

    Legacy (1, 2) and (1, 3) cover appendOnly, invariants and checkConstraints; any other feature
    moves the table to reader 3 / writer 7 with explicit feature lists.
    """
    base = current or Protocol(1, 2)
    needed = features | writer_features(base) | reader_features(base)
    legacy = {"appendOnly", "invariants", "checkConstraints"}
    if base.min_writer_version < 7 and needed <= legacy:
        writer = 3 if "checkConstraints" in needed else 2
        return Protocol(base.min_reader_version, max(base.min_writer_version, writer))
    readers = sorted(needed & READER_WRITER_FEATURES)
    if readers or base.min_reader_version >= 3:
        reader_version, reader_list = 3, sorted(set(readers) | reader_features(base))
    else:
        reader_version, reader_list = base.min_reader_version, None
    return Protocol(reader_version, 7, reader_list, sorted(needed))


def check_change_data(
    actions: Sequence[Action],
    protocol: Protocol,
    metadata: Metadata,
    table: str,
    changes_from_files: bool = False,
) -> None:
    """DeltaProtocolError for a commit to a change-data-feed table that rewrites data files
    (removes and adds them, with dataChange) without change data files (`cdc` actions).

    Readers take the changes of a commit without cdc actions from its add and remove actions:
    every row of a removed file as deleted, every row of an added file as inserted. That is
    right for appends, for removals of whole files, and for replacing whole files
    (`changes_from_files`: an overwrite, a RESTORE), but not for a rewrite that copies rows,
    which would show the copies as deleted and inserted again.
    """
    if changes_from_files or not change_data_feed_enabled(protocol, metadata):
        return
    files = [a for a in actions if isinstance(a, AddFile | RemoveFile | AddCDCFile)]
    if any(isinstance(a, AddCDCFile) for a in files):
        return
    adds = any(isinstance(a, AddFile) and a.data_change for a in files)
    if adds and any(isinstance(a, RemoveFile) and a.data_change for a in files):
        raise DeltaProtocolError(
            f"Cannot commit to table {table}: it has the change data feed "
            "enabled (delta.enableChangeDataFeed=true, feature changeDataFeed) and this commit "
            "rewrites data files without change data files (cdc actions), so readers of the "
            "feed would see copied rows as deleted and inserted. Write the rows' changes as "
            "cdc actions (airflow-delta's DELETE, UPDATE, in-process MERGE and write_delta do), "
            "commit whole-file replacements with changes_from_files=True on the transaction, "
            "or unset delta.enableChangeDataFeed."
        )
