"""write_tasks (commands/data_files.py): each task's rows land in one file per partition,
whether they hold one partition (written as given) or several (grouped first)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine import DeltaLog, Operation
from airflow_delta.engine.commands.data_files import write_tasks
from airflow_delta.engine.commands.table_reader import read_table

CASES: dict[str, tuple[pa.DataType, list[Any]]] = {
    "one string": (pa.string(), ["x"] * 6),
    "string and empty": (pa.string(), ["x", "", "x", None, "", "x"]),  # "" is null
    "all null": (pa.string(), [None] * 6),
    "one int, then another": (pa.int32(), [1, 1, 1, 1, 1, 2]),
    "ints": (pa.int32(), [3, 1, 2, 1, 3, None]),
    "floats": (pa.float64(), [1.0, float("nan"), 1.0, 1.0, float("nan"), 1.0]),
    "one date": (pa.date32(), [dt.date(2024, 1, 2)] * 6),
    "booleans": (pa.bool_(), [True, False, True, True, True, True]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_write_tasks_writes_a_file_per_partition(tmp_path: Path, case: str) -> None:
    type_, values = CASES[case]
    schema = pa.schema([("id", pa.int64()), ("p", type_)])
    uri = str(tmp_path / "t")
    DeltaLog.create_table(uri, schema, ["p"])
    txn = DeltaLog.for_table(uri).start_transaction()
    pieces = [
        pa.table({"id": [i], "p": pa.array([v], type_)}, schema) for i, v in enumerate(values)
    ]
    rows = pa.concat_tables(pieces)  # a chunk per row, as rows read file by file are
    adds = write_tasks(txn, [lambda: rows], [], "WRITE")
    txn.commit(adds, Operation("WRITE"))
    partitions = {tuple(sorted(a.partition_values.items())) for a in adds}
    assert len(adds) == len(partitions)
    expected = pa.Table.from_pylist(rows.to_pylist(), schema)
    if type_ == pa.string():
        expected = pa.table({"id": expected["id"], "p": [v or None for v in values]}, schema)
    got = read_table(uri).sort_by("id")
    assert got.select(["id", "p"]).to_pylist() == expected.to_pylist() or case == "floats"
    if case == "floats":  # NaN != NaN: compare as text
        assert [str(r) for r in got.to_pylist()] == [str(r) for r in expected.to_pylist()]
