"""TableLocation: where a table lives (its URI, log store, table path and log path)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_delta.engine.log.log_store import LogStore, get_log_store
from airflow_delta.engine.log.storage_options import LOG_COMPACTION_OPTION
from airflow_delta.engine.protocol.paths import FileLocation, table_root


@dataclass(frozen=True, eq=False)
class TableLocation:
    """A table's URI and storage options, the log store serving it, and its two paths.

    Every engine object below the `DeltaLog` facade (snapshot, transaction, hooks, commands)
    holds one of these instead of the facade.

    >>> TableLocation.of("/data/events").log_path
    '/data/events/_delta_log'
    """

    uri: str
    storage_options: Mapping[str, str]
    store: LogStore
    table_path: str
    log_path: str

    @classmethod
    def of(cls, uri: str, storage_options: Mapping[str, str] | None = None) -> TableLocation:
        """The location of the table at `uri` (local path, file://, s3://, memory://...)."""
        options = dict(storage_options or {})
        store, table_path = get_log_store(uri, options)
        return cls(uri, options, store, table_path, store.join(table_path, "_delta_log"))

    def log_file(self, name: str) -> str:
        """The store path of `name` in `_delta_log`."""
        return self.store.join(self.log_path, name)

    @property
    def use_log_compaction(self) -> bool:
        """Whether replay may read log compaction files (storage option `use_log_compaction`,
        default true)."""
        return str(self.storage_options.get(LOG_COMPACTION_OPTION, "true")).lower() != "false"

    @property
    def root(self) -> FileLocation:
        """The table root, for resolving the paths the log holds."""
        return table_root(self.uri, self.table_path)

    def __repr__(self) -> str:
        return f"TableLocation({self.uri!r})"
