"""DELETE and UPDATE against deltalake's own (delta-rs, an independent implementation).

Hypothesis builds small tables (NULLs in data and partition columns, one to three commits,
deletion vectors on or off) and a sequence DELETE, UPDATE, DELETE of predicates over data and
partition columns (comparisons, IN, BETWEEN, IS [NOT] NULL, AND/OR/NOT). The engine runs it on
the table, deltalake on a copy; the rows left, and the rows each command reports deleted or
updated, must be the same. deltalake's commands run on
tables whose deletion vectors the engine wrote, so they read them too; the engine's result is
read alike by the engine, deltalake and DuckDB (`dml_tables.rows`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine import delete, update
from tests.engine.commands.dml_tables import (
    ROWS,
    batches,
    combined_predicates,
    create,
    deltalake_rows,
    rows,
)

ATOMS = [
    "k < 2",
    "k >= 3",
    "k = 1",
    "k != 2",
    "k IS NULL",
    "k IS NOT NULL",
    "k IN (0, 4)",
    "k BETWEEN 1 AND 3",
    "s = 'x'",
    "s != 'y'",
    "s IS NULL",
    "s = ''",
    "s IN ('x', '')",
    "s > 'x'",
    "p = 'a'",
    "p IS NULL",
    "p != 'b'",
    "p IN ('a', 'b')",
    "id < 8",
    "id >= 20",
]
ASSIGNMENTS = [
    {"s": "'upd'"},
    {"k": "7"},
    {"k": "NULL"},
    {"s": "NULL", "k": "1"},
    {"k": "id"},
]


PREDICATES = combined_predicates(ATOMS)


@settings(max_examples=25, derandomize=True, deadline=None)
@given(
    data=ROWS,
    commits=st.integers(1, 3),
    dv=st.booleans(),
    partitioned=st.booleans(),
    first=PREDICATES,
    second=PREDICATES,
    third=PREDICATES,
    assignments=st.sampled_from(ASSIGNMENTS),
)
def test_delete_and_update_leave_the_rows_deltalake_leaves(
    data: list[tuple[Any, ...]],
    commits: int,
    dv: bool,
    partitioned: bool,
    first: str,
    second: str,
    third: str,
    assignments: dict[str, str],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ours = create(Path(tmp) / "ours", *batches(data, commits), dv=dv, partitioned=partitioned)
        theirs = str(Path(tmp) / "theirs")
        shutil.copytree(ours, theirs)
        deleted = delete(ours, first).metrics["numDeletedRows"]
        assert deleted == DeltaTable(theirs).delete(first)["num_deleted_rows"], first
        assert deltalake_rows(ours) == deltalake_rows(theirs), first
        updated = update(ours, assignments, second).metrics["numUpdatedRows"]
        metrics = DeltaTable(theirs).update(updates=assignments, predicate=second)
        assert updated == metrics["num_updated_rows"], (assignments, second)
        assert deltalake_rows(ours) == deltalake_rows(theirs), (assignments, second)
        delete(ours, third)
        DeltaTable(theirs).delete(third)
        assert rows(ours) == deltalake_rows(theirs), third
