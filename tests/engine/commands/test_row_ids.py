"""Rows keep their row ids through every in-process rewrite of a table with row tracking
enabled (PROTOCOL.md, "Row Tracking"): DELETE and UPDATE (rewriting files, or with deletion
vectors), the in-process MERGE and OPTIMIZE write the moved rows' ids and commit versions into
the materialized columns. Checked over random sequences of operations: a surviving row keeps
its id, an updated row keeps its id and takes the version that updated it, an inserted row gets
a fresh id, ids stay unique; deltalake and DuckDB read the same rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog, delete, optimize, update
from airflow_delta.engine.commands.data_reader import FileReader
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.commands.row_ids import RowTracking
from tests.engine.commands.dml_tables import SCHEMA, append, batch, create, rows

TRACKED = {"delta.enableRowTracking": "true"}


def tracked_rows(uri: str) -> dict[int, tuple[str, int, int]]:
    """id -> (s, row id, row commit version) of every live row (ids are unique here)."""
    snapshot = DeltaLog.for_table(uri).update()
    reader = FileReader(snapshot, SCHEMA)
    files = snapshot.files()
    data = reader.read(files, ["id", "s"])
    tracking = RowTracking.of(snapshot.metadata)
    assert tracking is not None
    ids = tracking.of_files(reader, files)
    out = {}
    for key, s, rid, version in zip(
        data.column("id").to_pylist(),
        data.column("s").to_pylist(),
        ids.column(tracking.row_id).to_pylist(),
        ids.column(tracking.commit_version).to_pylist(),
        strict=True,
    ):
        out[key] = (s, rid, version)
    return out


def test_a_rewriting_delete_keeps_the_row_ids_of_the_rows_it_copies(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(6)), batch(range(6, 9)), configuration=TRACKED)
    before = tracked_rows(uri)
    assert sorted(r[1] for r in before.values()) == list(range(9))  # fresh: base + index
    result = delete(uri, "id IN (1, 4)")
    after = tracked_rows(uri)
    assert result.metrics["numRemovedFiles"] >= 1
    assert after == {k: v for k, v in before.items() if k not in (1, 4)}


def test_update_merge_and_optimize_keep_ids(tmp_path: Path) -> None:
    uri = create(tmp_path / "t", batch(range(6)), configuration=TRACKED)
    before = tracked_rows(uri)
    version = update(uri, {"s": "'u'"}, "id = 2").version
    after = tracked_rows(uri)
    assert after[2] == ("u", before[2][1], version)  # same id, the update's version
    assert {k: v for k, v in after.items() if k != 2} == {k: v for k, v in before.items() if k != 2}
    source = batch([3, 50], s=["m", "m"])
    merged = merge_arrow(uri, source, "t.id = s.id").when_matched_update_all()
    version = merged.when_not_matched_insert_all().execute().version
    merged_rows = tracked_rows(uri)
    assert merged_rows[3] == ("m", before[3][1], version)
    assert merged_rows[50][1] > max(r[1] for r in after.values())  # a fresh id
    assert merged_rows[50][2] == version
    optimize(uri, min_file_size=10**9)
    assert tracked_rows(uri) == merged_rows  # compaction moves rows, never renumbers them
    assert len(rows(uri)) == len(merged_rows)  # engine, deltalake and DuckDB agree


OPS = st.lists(
    st.tuples(
        st.sampled_from(["delete", "update", "merge", "optimize", "append"]), st.integers(0, 20)
    ),
    min_size=1,
    max_size=5,
)


@settings(
    max_examples=10,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS, dv=st.booleans())
def test_row_ids_survive_any_sequence_of_rewrites(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]], dv: bool
) -> None:
    uri = create(tmp_path_factory.mktemp("ids"), batch(range(10)), dv=dv, configuration=TRACKED)
    state = tracked_rows(uri)
    next_id = 100
    for name, n in ops:
        if name == "delete":
            delete(uri, f"k = {n % 5}")
            expected = {k: v for k, v in state.items() if k % 5 != n % 5}
        elif name == "update":
            version = update(uri, {"s": f"'u{n}'"}, f"id >= {n}").version
            expected = {k: ((f"u{n}", v[1], version) if k >= n else v) for k, v in state.items()}
            if version is None:
                expected = state
        elif name == "merge":
            source = batch([n, next_id], s=[f"m{n}", f"m{n}"])
            builder = merge_arrow(uri, source, "t.id = s.id").when_matched_update_all()
            version = builder.when_not_matched_insert_all().execute().version
            expected = dict(state)
            if n in state:
                expected[n] = (f"m{n}", state[n][1], version)
            next_id += 1
        elif name == "optimize":
            optimize(uri, min_file_size=10**9)
            expected = state
        else:
            append(uri, batch([next_id]))
            next_id += 1
            expected = state
        got = tracked_rows(uri)
        for key, value in expected.items():
            assert got[key] == value, (name, n, key)
        fresh = set(got) - set(expected)
        ids = [v[1] for v in got.values()]
        assert len(ids) == len(set(ids))  # unique
        assert all(got[k][1] > max((v[1] for v in expected.values()), default=-1) for k in fresh)
        state = got
    assert len(rows(uri)) == len(state)  # engine, deltalake and DuckDB agree


def test_change_rows_do_not_carry_the_materialized_columns(tmp_path: Path) -> None:
    config = {**TRACKED, "delta.enableChangeDataFeed": "true"}
    uri = create(tmp_path / "t", batch(range(4)), configuration=config)
    update(uri, {"s": "'u'"}, "id = 1")
    from airflow_delta.engine import read_changes

    changes = read_changes(uri, 2)
    assert sorted(changes.column("_change_type").to_pylist()) == [
        "update_postimage",
        "update_preimage",
    ]
    assert set(changes.column_names) == {*SCHEMA.names, "_change_type", "_commit_version",
                                         "_commit_timestamp"}  # fmt: skip
