"""Value expressions in the in-process MERGE's assignments (`t.k + s.k`, CASE, functions over
both sides), evaluated by the engine's evaluator with Spark's semantics: the rows equal those of
deltalake's MERGE with the same assignments (hypothesis over table rows, sources and
expressions), and an expression the engine does not evaluate sends the MERGE to Spark."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import UnsupportedMergeError
from tests.engine.commands.dml_tables import ROWS as TABLE_ROWS
from tests.engine.commands.dml_tables import SCHEMA, batch, batches, create, deltalake_rows, rows

#: Update assignments both engines evaluate alike (no NULL-sensitive string functions).
UPDATES = [
    {"k": "t.k + s.k"},
    {"k": "CASE WHEN s.k > t.k THEN s.k ELSE t.k - 1 END", "s": "upper(s.s)"},
    {"s": "coalesce(s.s, t.s)", "k": "abs(t.k - 7)"},
    {"k": "s.k * 2 + 1", "p": "t.p"},
]
INSERTS = [
    {"id": "s.id", "k": "s.k * 10", "s": "lower(s.s)", "p": "s.p"},
    {"id": "s.id + 100", "k": "CAST(s.id AS INT)", "s": "'new'", "p": "s.p"},
]


def _source(ids: list[int], strings: list[str | None]) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "k": [i % 4 for i in ids],
            "s": strings,
            "p": ["a" if i % 2 else "b" for i in ids],
        },
        SCHEMA,
    )


def test_expressions_over_both_sides(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(6)), partitioned=False)
    source = _source([1, 2, 9], ["X", None, "y"])
    builder = (
        merge_arrow(uri, source, "t.id = s.id")
        .when_matched_update({"k": "t.k + s.k * 10", "s": "coalesce(s.s, concat(t.s, '!'))"})
        .when_not_matched_insert(INSERTS[0])
    )
    builder.execute()
    assert builder.executor == "in-process"
    got = {r[0]: r[1:3] for r in rows(uri)}
    assert got[1] == (1 + 10, "X")
    assert got[2] == (2 + 20, "s2!")
    assert got[9] == (10, "y")


def test_an_expression_the_engine_lacks_goes_to_spark(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(3)), partitioned=False)
    builder = merge_arrow(uri, _source([1], ["x"]), "t.id = s.id").when_matched_update(
        {"s": "sha2(s.s, 256)"}
    )
    with pytest.raises(UnsupportedMergeError, match="does not evaluate 'sha2"):
        builder.execute()


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    table_rows=TABLE_ROWS,
    commits=st.integers(1, 2),
    source_ids=st.lists(st.integers(0, 40), min_size=1, max_size=8, unique=True),
    strings=st.lists(st.sampled_from(["Ab", "cD", None]), min_size=8, max_size=8),
    update=st.sampled_from(UPDATES),
    insert=st.sampled_from(INSERTS),
)
def test_expression_merges_match_deltalake(
    tmp_path_factory: Any,
    table_rows: list[Any],
    commits: int,
    source_ids: list[int],
    strings: list[str | None],
    update: dict[str, str],
    insert: dict[str, str],
) -> None:
    root = tmp_path_factory.mktemp("merge_expr")
    data = batches(table_rows, commits)
    ours, theirs = create(root / "ours", *data), create(root / "theirs", *data)
    source = _source(source_ids, strings[: len(source_ids)])
    merge_arrow(ours, source, "t.id = s.id").when_matched_update(update).when_not_matched_insert(
        insert
    ).execute()
    DeltaTable(theirs).merge(
        source, "t.id = s.id", source_alias="s", target_alias="t"
    ).when_matched_update(update).when_not_matched_insert(insert).execute()
    assert rows(ours) == deltalake_rows(theirs)
    shutil.rmtree(root)
