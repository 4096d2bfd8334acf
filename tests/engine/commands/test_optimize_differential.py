"""OPTIMIZE against deltalake's own (delta-rs): hypothesis builds small tables (NULLs in data
and partition columns, one to four commits, deletion vectors on or off, a DELETE before), the
engine compacts or Z-orders the table, deltalake `optimize.compact()` / `optimize.z_order()` a
copy. The rows (as multisets) must be those before, the same for deltalake's result, and read
alike by the engine, deltalake and DuckDB (`dml_tables.rows`)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog, delete, optimize
from tests.engine.commands.dml_tables import SCHEMA, create, deltalake_rows, rows

ROWS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-3, 40)),
        st.sampled_from([None, "x", "y", "", "zz", "éa"]),
        st.sampled_from([None, "a", "b"]),
    ),
    min_size=1,
    max_size=40,
)
ZORDER = st.sampled_from([None, ["k"], ["k", "s"], ["s", "id"]])


def _batches(data: list[tuple[Any, ...]], commits: int) -> list[pa.Table]:
    records = [{"id": i, "k": k, "s": s, "p": p} for i, (k, s, p) in enumerate(data)]
    size = -(-len(records) // commits)
    return [
        pa.Table.from_pylist(records[i : i + size], SCHEMA) for i in range(0, len(records), size)
    ]


@settings(max_examples=20, derandomize=True, deadline=None)
@given(
    data=ROWS,
    commits=st.integers(1, 4),
    dv=st.booleans(),
    partitioned=st.booleans(),
    deleted=st.sampled_from([None, "k < 5", "s = 'x'", "id IN (0, 3, 6, 9, 21)", "k IS NULL"]),
    zorder=ZORDER,
)
def test_optimize_keeps_the_rows_deltalake_keeps(
    data: list[tuple[Any, ...]],
    commits: int,
    dv: bool,
    partitioned: bool,
    deleted: str | None,
    zorder: list[str] | None,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ours = create(Path(tmp) / "ours", *_batches(data, commits), dv=dv, partitioned=partitioned)
        if deleted:
            delete(ours, deleted)
        theirs = str(Path(tmp) / "theirs")
        shutil.copytree(ours, theirs)
        before = rows(ours)
        files_before = DeltaLog(ours).update().num_files
        result = optimize(ours, zorder_by=zorder)
        if zorder:
            DeltaTable(theirs).optimize.z_order(zorder)
        else:
            DeltaTable(theirs).optimize.compact()
        after = rows(ours)
        assert after == before
        assert deltalake_rows(theirs) == after
        snapshot = DeltaLog(ours).update()
        assert snapshot.num_files <= files_before
        # Every file with a deletion vector is rewritten without its deleted rows.
        assert all(f.deletion_vector is None for f in snapshot.all_files())
        if not result.skipped:
            assert result.metrics["numFilesRemoved"] >= 1
