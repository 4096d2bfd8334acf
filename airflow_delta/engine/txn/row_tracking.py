"""Row tracking (feature `rowTracking`): fresh row ids and row commit versions for every file a
commit adds, and the row-id high-water mark in the `delta.rowTracking` metadata domain.

As delta-spark's RowId / RowCommitVersion: at each commit attempt every AddFile without a
`baseRowId` gets the next free id above the high-water mark (advanced by its stats'
numRecords), and every AddFile without a `defaultRowCommitVersion` gets the attempt's version;
the new high-water mark is committed as `{"rowIdHighWaterMark": N}` in the same commit. The
domain is system-controlled: a concurrent commit that moved it is no conflict, the ids are
assigned again above the winner's mark on the retry (`RowIdAssigner.observe`). AddFiles that
carry a `baseRowId` already (a file given a deletion vector, a RESTORE re-adding old files)
keep it, as the protocol requires of recommitted files.

When the table also *enables* row tracking (`delta.enableRowTracking=true`) rows keep stable
row ids across rewrites through the materialized columns named in the configuration
(`delta.rowTracking.materializedRowIdColumnName`, `...materializedRowCommitVersionColumnName`,
assigned here when a commit enables the property). A commit that rewrites rows into new files
must have preserved them (`OptimisticTransaction.row_ids_preserved`, set by a writer that
wrote the materialized columns); otherwise it is refused rather than renumbering the rows.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence

from airflow_delta.engine.errors import DeltaProtocolError
from airflow_delta.engine.log.snapshot import Snapshot
from airflow_delta.engine.protocol.actions import (
    Action,
    AddFile,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
)
from airflow_delta.engine.protocol.config import (
    ENABLE_ROW_TRACKING,
    MATERIALIZED_ROW_COMMIT_VERSION,
    MATERIALIZED_ROW_ID,
)
from airflow_delta.engine.protocol.features import writer_features

ROW_TRACKING_DOMAIN = "delta.rowTracking"


def row_tracking_supported(protocol: Protocol) -> bool:
    """Whether commits must assign row ids (the rowTracking writer feature)."""
    return "rowTracking" in writer_features(protocol)


def row_tracking_enabled(protocol: Protocol, metadata: Metadata) -> bool:
    """Whether rows must keep stable row ids (supported and delta.enableRowTracking=true)."""
    enabled = metadata.configuration.get(ENABLE_ROW_TRACKING, "false").lower() == "true"
    return enabled and row_tracking_supported(protocol)


def materialized_columns(metadata: Metadata) -> tuple[str | None, str | None]:
    """The names of the materialized row-id and row-commit-version columns (None: unset)."""
    conf = metadata.configuration
    return conf.get(MATERIALIZED_ROW_ID), conf.get(MATERIALIZED_ROW_COMMIT_VERSION)


def high_water_mark(domains: Mapping[str, DomainMetadata] | Iterable[DomainMetadata]) -> int:
    """The row-id high-water mark the domains hold (-1: no row id assigned yet)."""
    values = domains.values() if isinstance(domains, Mapping) else domains
    mark = -1
    for domain in values:
        if domain.domain == ROW_TRACKING_DOMAIN and not domain.removed:
            conf = json.loads(domain.configuration or "{}")
            found = conf.get("rowIdHighWaterMark", conf.get("highWaterMark"))
            if found is not None:
                mark = max(mark, int(found))
    return mark


def with_materialized_column_names(metadata: Metadata) -> Metadata:
    """`metadata` with materialized column names assigned, as delta-spark names them, when it
    enables row tracking and has none (unchanged otherwise)."""
    if metadata.configuration.get(ENABLE_ROW_TRACKING, "false").lower() != "true":
        return metadata
    conf = dict(metadata.configuration)
    conf.setdefault(MATERIALIZED_ROW_ID, f"_row-id-col-{uuid.uuid4()}")
    conf.setdefault(MATERIALIZED_ROW_COMMIT_VERSION, f"_row-commit-version-col-{uuid.uuid4()}")
    if conf == metadata.configuration:
        return metadata
    return dataclasses.replace(metadata, configuration=conf)


class RowIdAssigner:
    """Assigns fresh row ids above the high-water mark, again at every commit attempt."""

    def __init__(self, table: str, mark: int) -> None:
        self.table = table
        self.high_water_mark = mark

    def observe(self, domains: Iterable[DomainMetadata]) -> None:
        """Take in a winning commit's domains: its high-water mark, when it moved it."""
        self.high_water_mark = max(self.high_water_mark, high_water_mark(domains))

    def assign(self, actions: Sequence[Action], version: int) -> list[Action]:
        """`actions` with row ids and row commit versions (as committed at `version`) and the
        new high-water mark's domain action."""
        next_id = self.high_water_mark + 1
        out: list[Action] = []
        for action in actions:
            if isinstance(action, DomainMetadata) and action.domain == ROW_TRACKING_DOMAIN:
                continue  # system-controlled: derived here
            if isinstance(action, AddFile):
                base, commit_version = action.base_row_id, action.default_row_commit_version
                if base is None:
                    records = action.num_records
                    if records is None:
                        raise DeltaProtocolError(
                            f"Cannot commit to table {self.table}: it tracks row ids (feature "
                            f"rowTracking) and file {action.path} has no numRecords in its "
                            "stats, so its rows cannot be given row ids. Write the file with "
                            "stats (every airflow-delta writer does)."
                        )
                    base, next_id = next_id, next_id + int(records)
                action = dataclasses.replace(
                    action,
                    base_row_id=base,
                    default_row_commit_version=version
                    if commit_version is None
                    else commit_version,
                )
            out.append(action)
        if next_id - 1 > self.high_water_mark:
            conf = json.dumps({"rowIdHighWaterMark": next_id - 1}, separators=(",", ":"))
            out.append(DomainMetadata(ROW_TRACKING_DOMAIN, conf))
        return out


def prepare_row_tracking(
    actions: Sequence[Action],
    snapshot: Snapshot,
    protocol: Protocol,
    metadata: Metadata,
    rows_preserved: bool,
) -> RowIdAssigner | None:
    """Check that a commit of `actions` read from `snapshot` keeps row tracking's rules (see
    `check_row_tracking`); the RowIdAssigner of a table that tracks row ids, else None."""
    table = snapshot.location.uri
    exists = snapshot.version >= 0
    # only a commit that turns row tracking on needs the (costly) count of the active files
    starts = (
        exists
        and row_tracking_supported(protocol)
        and not row_tracking_supported(snapshot.protocol)
    )
    check_row_tracking(
        actions,
        protocol,
        metadata,
        table,
        files_without_row_ids=starts and snapshot.num_files > 0,
        rows_preserved=rows_preserved,
    )
    if not row_tracking_supported(protocol):
        return None
    return RowIdAssigner(table, high_water_mark(snapshot.domain_metadata) if exists else -1)


def check_row_tracking(
    actions: Sequence[Action],
    protocol: Protocol,
    metadata: Metadata,
    table: str,
    *,
    files_without_row_ids: bool,
    rows_preserved: bool,
) -> None:
    """DeltaProtocolError for a commit that would break row tracking.

    `files_without_row_ids`: the table has active files without baseRowId (a table on which
    the commit would start tracking row ids needs a backfill first, which this engine does
    not write). `rows_preserved`: the commit's writer kept the rewritten rows' row ids, or
    replaced whole files (an overwrite, a RESTORE), so no row was copied.
    """
    if not row_tracking_supported(protocol):
        return
    if "domainMetadata" not in writer_features(protocol):
        raise DeltaProtocolError(
            f"Table {table} has the rowTracking writer feature without domainMetadata, which "
            "row tracking needs for its high-water mark; the table's protocol is invalid."
        )
    if files_without_row_ids:
        raise DeltaProtocolError(
            f"Cannot commit to table {table}: the commit turns on row tracking (feature "
            "rowTracking) on a table whose files have no row ids (baseRowId); that needs a "
            "backfill, which airflow-delta does not write. Enable row tracking with delta-spark "
            "(ALTER TABLE ... SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')), or "
            "create the table with it."
        )
    if rows_preserved or not row_tracking_enabled(protocol, metadata):
        return
    removes = any(isinstance(a, RemoveFile) for a in actions)
    new_files = [a for a in actions if isinstance(a, AddFile) and a.base_row_id is None]
    if removes and new_files:
        raise DeltaProtocolError(
            f"Cannot commit to table {table}: it has row tracking enabled "
            "(delta.enableRowTracking=true, feature rowTracking) and this commit rewrites rows "
            f"into new files (e.g. {new_files[0].path}) without preserving their row ids in the "
            "materialized row-id columns, so the rows would get new ids. Run this operation "
            "with a writer that preserves row ids (delta-spark), or unset "
            "delta.enableRowTracking."
        )
