"""A checkpoint written on top of an older one streams that checkpoint's file actions.

`DeltaLog.checkpoint(snapshot)` of a snapshot whose file set was never resolved reads the old
checkpoint (parts, sidecars, JSON top-level files) `READ_BATCH_ROWS` rows at a time and writes
each piece as a row group, instead of holding the whole file set. These tests shrink the batch
to a few rows so that every table streams in many pieces, and check that the result is the same
checkpoint as the one written from a resolved snapshot, for deltalake and for this engine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import CorruptLogError
from airflow_delta.engine.log import checkpoints
from tests.interop.test_deltalake_interop import (
    assert_same,
    batch,
    build_checkpoint_source,
    data_ids,
    dl_files,
    drop_commits_through,
    engine_state,
    txn_props,
)
from tests.interop.test_golden_tables import GOLDEN


@pytest.fixture(autouse=True)
def tiny_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoints, "READ_BATCH_ROWS", 3)


def checkpoint_rows(log_dir: Path, version: int) -> list[dict]:
    """The rows of the checkpoint of `version` (all parts), dataChange aside, in file order."""
    rows = []
    for part in sorted(log_dir.glob(f"{version:020d}.checkpoint*.parquet")):
        rows += pq.read_table(part).to_pylist()
    return rows


@pytest.fixture(scope="module")
def layered(tmp_path_factory: pytest.TempPathFactory):
    """deltalake's checkpoint at v7, then commits that remove some of its files and add more."""
    w = build_checkpoint_source(tmp_path_factory.mktemp("layered") / "table")
    w.checkpoint()  # v7, read back by the replay below as the base checkpoint
    w.write(batch(8), commit_properties=txn_props(etl=4))  # v8
    w.delete("id < 450", lambda r: r["id"] >= 450)  # v9: removes files of the checkpoint
    w.write(batch(9, rows=2))  # v10
    return w


@pytest.mark.parametrize("part_size", [None, 5], ids=["classic", "multipart"])
@pytest.mark.parametrize("resolve_first", [False, True], ids=["streamed", "resolved"])
def test_checkpoint_over_a_checkpoint(
    layered, tmp_path: Path, part_size: int | None, resolve_first: bool
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(layered.uri, copy)
    want = engine_state(DeltaLog.for_table(str(copy)).update())
    assert want["tombstones"] and want["txns"]["etl"]["version"] == 4

    delta_log = DeltaLog.for_table(str(copy))
    snapshot = delta_log.update()
    assert snapshot.log_segment.checkpoint_version == 7
    if resolve_first:
        snapshot.files()
    kwargs = {} if part_size is None else {"part_size": part_size}
    result = delta_log.checkpoint(snapshot, **kwargs)

    n_actions = 2 + len(want["txns"]) + len(want["files"]) + len(want["tombstones"])
    assert (result.version, result.num_actions) == (layered.version, n_actions)
    assert result.num_of_add_files == len(want["files"])
    assert result.parts == (1 if part_size is None else -(-n_actions // part_size))
    log_dir = copy / "_delta_log"
    hint = json.loads((log_dir / "_last_checkpoint").read_text())
    assert (hint["version"], hint["size"], hint["numOfAddFiles"]) == (
        layered.version,
        n_actions,
        len(want["files"]),
    )
    if part_size is None:
        single = pq.ParquetFile(log_dir / f"{layered.version:020d}.checkpoint.parquet")
        # streamed: one row group per piece of 3 old rows (plus the later commits' piece)
        assert (single.metadata.num_row_groups > 3) is not resolve_first
        assert single.metadata.num_rows == n_actions
    assert not list(log_dir.glob(".*.tmp"))

    drop_commits_through(copy, layered.version)
    table = DeltaTable(str(copy))
    assert table.version() == layered.version
    assert dl_files(table) == dl_files(DeltaTable(layered.uri))
    assert table.transaction_version("etl") == 4
    assert data_ids(table, str(copy)) == layered.model.ids
    from_checkpoint = DeltaLog.for_table(str(copy)).update()
    assert from_checkpoint.log_segment.checkpoint_version == layered.version
    assert engine_state(from_checkpoint) == want
    assert_same(table, from_checkpoint)


def test_streamed_and_resolved_checkpoints_hold_the_same_rows(layered, tmp_path: Path) -> None:
    rows = {}
    for resolve_first in (False, True):
        copy = tmp_path / f"copy-{resolve_first}"
        shutil.copytree(layered.uri, copy)
        delta_log = DeltaLog.for_table(str(copy))
        snapshot = delta_log.update()
        if resolve_first:
            snapshot.files()
        delta_log.checkpoint(snapshot)
        rows[resolve_first] = checkpoint_rows(copy / "_delta_log", layered.version)
    # the same actions; streamed pieces interleave each piece's adds and tombstones
    assert sorted(rows[False], key=_sort_key) == sorted(rows[True], key=_sort_key)
    assert rows[False][:2] == rows[True][:2]  # protocol and metadata first
    adds = [r["add"] for r in rows[False] if r["add"]]
    assert adds and not any(a["dataChange"] for a in adds)


def _sort_key(row: dict) -> str:
    return json.dumps(row, sort_keys=True, default=str)


GOLDEN_CHECKPOINTS = [
    "delta-rs__checkpoint-v2-table",  # v2, parquet top-level file with sidecars
    "delta__v2-checkpoint-json",  # v2, JSON top-level file with sidecars
    "delta__kernel-defaults__kernel-pagination-v2-checkpoint-parquet",
    "delta__kernel-defaults__kernel-pagination-multi-part-checkpoints",
]


@pytest.mark.parametrize("name", GOLDEN_CHECKPOINTS)
def test_golden_checkpoints_stream_into_the_same_snapshot(name: str, tmp_path: Path) -> None:
    copy = tmp_path / name
    shutil.copytree(GOLDEN / "tables" / name, copy)
    delta_log = DeltaLog.for_table(str(copy))
    snapshot = delta_log.update()
    assert snapshot.log_segment.checkpoint_version is not None
    want = engine_state(DeltaLog.for_table(str(copy)).update())
    pattern = f"{snapshot.version:020d}.checkpoint.*"
    before = {f.name for f in (copy / "_delta_log").glob(pattern)}
    result = delta_log.checkpoint(snapshot)
    assert result.num_of_add_files == len(want["files"])
    (ours,) = {f.name for f in (copy / "_delta_log").glob(pattern)} - before
    v2 = "v2Checkpoint" in (snapshot.protocol.writer_features or [])
    classic = f"{snapshot.version:020d}.checkpoint.parquet"
    assert (ours != classic) == v2  # a v2Checkpoint table gets a v2 (UUID-named) checkpoint
    written = pq.ParquetFile(copy / "_delta_log" / ours)
    assert written.metadata.num_rows == result.num_actions
    assert written.metadata.num_row_groups > 1  # streamed, 3 rows of the old one at a time

    # keep only our checkpoint of this version, then read it back
    for f in (copy / "_delta_log").glob(pattern):
        if f.name != ours:
            f.unlink()
    reread = DeltaLog.for_table(str(copy)).update()
    assert [f.name for f in reread.log_segment.checkpoint_files] == [ours]
    assert engine_state(reread) == want


def test_a_sidecar_lost_before_the_checkpoint_is_a_corrupt_log(tmp_path: Path) -> None:
    copy = tmp_path / "v2"
    shutil.copytree(GOLDEN / "tables" / "delta-rs__checkpoint-v2-table", copy)
    log_dir = copy / "_delta_log"
    before = sorted(p.name for p in log_dir.iterdir())
    delta_log = DeltaLog.for_table(str(copy))
    snapshot = delta_log.update()  # the sidecars are read only when the files are
    sidecar = next((log_dir / "_sidecars").glob("*.parquet"))
    sidecar.unlink()
    with pytest.raises(CorruptLogError, match=r"checkpoint sidecar .* is missing"):
        delta_log.checkpoint(snapshot)
    assert sorted(p.name for p in log_dir.iterdir()) == before  # nothing written, no temp file


def test_an_unreadable_old_checkpoint_fails_the_write_cleanly(layered, tmp_path: Path) -> None:
    """Pieces are read on a worker thread while the previous one is written: a read error
    there reaches the caller as CorruptLogError, and nothing is left behind."""
    copy = tmp_path / "copy"
    shutil.copytree(layered.uri, copy)
    delta_log = DeltaLog.for_table(str(copy))
    snapshot = delta_log.update()
    checkpoint = next((copy / "_delta_log").glob("*.checkpoint.parquet"))
    data = checkpoint.read_bytes()
    checkpoint.write_bytes(data[:4] + bytes(len(data) - 8) + data[-4:])  # pages zeroed
    with pytest.raises(CorruptLogError, match="cannot be read"):
        delta_log.checkpoint(snapshot)
    assert not list((copy / "_delta_log").glob(f"{layered.version:020d}.checkpoint*"))
    assert not list((copy / "_delta_log").glob(".*.tmp"))
