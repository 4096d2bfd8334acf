"""V2 checkpoints written for tables with the v2Checkpoint feature: a UUID-named top-level
file with a checkpointMetadata action, the file actions inline or, above a size, in a sidecar
file; read back by this engine and by DuckDB's delta extension (delta-kernel-rs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_delta.engine import AddFile, DeltaLog, Operation, delete, read_table
from airflow_delta.engine.log import checkpoints
from airflow_delta.engine.protocol import filenames

duckdb = pytest.importorskip("duckdb")


def _duckdb_ids(table: str) -> list[int]:
    import duckdb_ext

    ext = next(Path(next(iter(duckdb_ext.__path__))).glob("extensions/v*/*/delta.duckdb_extension"))
    con = duckdb.connect()
    con.execute("SET autoinstall_known_extensions=false; SET autoload_known_extensions=false")
    con.execute(f"LOAD '{ext}'")
    return sorted(r[0] for r in con.execute(f"SELECT id FROM delta_scan('{table}')").fetchall())


def _v2_table(path: Path, files: int) -> DeltaLog:
    """A v2Checkpoint table with `files` one-row files (ids 0 .. files - 1), a commit each."""
    log = DeltaLog.create_table(
        str(path), pa.schema([("id", pa.int64())]), configuration={"delta.checkpointPolicy": "v2"}
    )
    for i in range(files):
        pq.write_table(pa.table({"id": [i]}), path / f"f{i}.parquet")
        size = os.path.getsize(path / f"f{i}.parquet")
        add = AddFile(
            f"f{i}.parquet",
            {},
            size=size,
            stats=json.dumps(
                {
                    "numRecords": 1,
                    "minValues": {"id": i},
                    "maxValues": {"id": i},
                    "nullCount": {"id": 0},
                }
            ),
        )
        log.start_transaction().commit([add], Operation("WRITE"))
    return log


def _checkpoint_names(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").glob("*.checkpoint*"))


@pytest.mark.parametrize("sidecar", [False, True], ids=["inline", "sidecar"])
def test_v2_checkpoint_is_written_and_read_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sidecar: bool
) -> None:
    if sidecar:
        monkeypatch.setattr(checkpoints, "SIDECAR_MIN_ACTIONS", 3)
    path = tmp_path / "t"
    log = _v2_table(path, 6)
    delete(str(path), "id = 2")  # a tombstone in the checkpoint too
    result = log.checkpoint()
    (name,) = _checkpoint_names(path)
    parsed = filenames.parse_log_file_name(name)
    assert parsed is not None and parsed.uuid and name.endswith(".parquet")
    top = pq.read_table(path / "_delta_log" / name)
    assert top.column("checkpointMetadata").drop_null().to_pylist() == [
        {"version": result.version, "tags": None}
    ]
    sidecars = list((path / "_delta_log" / "_sidecars").glob("*.parquet"))
    assert len(sidecars) == int(sidecar)
    assert top.column("add").null_count == top.num_rows if sidecar else 5
    for version in range(result.version + 1):  # replay from the checkpoint alone
        (path / "_delta_log" / filenames.delta_file(version)).unlink()
    snapshot = DeltaLog.for_table(str(path)).update()
    assert snapshot.log_segment.checkpoint_version == result.version == snapshot.version
    assert sorted(read_table(str(path)).column("id").to_pylist()) == [0, 1, 3, 4, 5]
    assert len(snapshot.tombstones()) == 1
    assert _duckdb_ids(str(path)) == [0, 1, 3, 4, 5]


def test_classic_tables_keep_classic_checkpoints(tmp_path: Path) -> None:
    log = DeltaLog.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    log.checkpoint()
    assert _checkpoint_names(tmp_path / "t") == [filenames.checkpoint_file_single(0)]
