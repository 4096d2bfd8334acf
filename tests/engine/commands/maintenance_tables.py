"""Tables for the maintenance tests (symlink manifests, expired log cleanup) and the post-commit
hooks that run them: data files on disk with their AddFiles, commits, log ages."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest

from airflow_delta.engine import AddFile, DeltaLog, Operation
from airflow_delta.engine.errors import VersionNotFoundError
from airflow_delta.engine.protocol.schema import partition_path

SCHEMA = pa.schema([("x", pa.int64()), ("a", pa.string()), ("b", pa.string())])
SYMLINK = {"delta.compatibility.symlinkFormatManifest.enabled": "true"}
WRITE = Operation("WRITE")

Partition = dict[str, str | None]


def new_file(root: Path, partition: Partition, name: str, columns=("a", "b")) -> AddFile:
    """A data file on disk and its AddFile (path URL-encoded, as writers log it)."""
    relative = f"{partition_path(partition, columns)}/{name}" if columns else name
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"PAR1 data")
    return AddFile(
        path=quote(relative, safe="/="),
        partition_values=dict(partition),
        size=9,
        modification_time=int(time.time() * 1000),
    )


def commit(delta_log: DeltaLog, actions, operation: Operation = WRITE) -> tuple[int, dict]:
    txn = delta_log.start_transaction()
    version = txn.commit(actions, operation)
    return version, dict(txn.hook_results)


# -- expired log cleanup -----------------------------------------------------------------------


def log_dir(delta_log: DeltaLog) -> Path:
    return Path(delta_log.log_path)


def age(paths, days: float) -> None:
    stamp = time.time() - days * 86_400
    for path in paths:
        os.utime(path, (stamp, stamp))


def appended_table(root: Path, commits: int, configuration=None) -> tuple[DeltaLog, dict[int, int]]:
    """A table with `commits` appends after version 0; num_files of every version."""
    delta_log = DeltaLog.create_table(str(root), SCHEMA, [], configuration)
    for i in range(commits):
        commit(delta_log, [new_file(root, {}, f"f{i}.parquet", columns=())])
    counts = {v: delta_log.snapshot_at(version=v).num_files for v in range(commits + 1)}
    return delta_log, counts


def assert_versions(delta_log: DeltaLog, counts: dict[int, int], first_readable: int) -> None:
    for version, num_files in counts.items():
        if version >= first_readable:
            assert delta_log.snapshot_at(version=version).num_files == num_files, version
        else:
            with pytest.raises(VersionNotFoundError):
                delta_log.snapshot_at(version=version)
