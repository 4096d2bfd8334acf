"""A checkpoint's AddFile stats are read only when a caller asks for them.

`Snapshot.files(stats=False)` leaves the stats of the checkpoint's files null (they are most of
a large table's memory); `files()` reads them then. Whatever the order of the calls, the state
is the same as a fresh load's, and a checkpoint written after a stats-less listing keeps every
file's stats.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog
from tests.delta_log_builder import add, commit_info, metadata, protocol, remove, write_commit


def _stats(i: int) -> str:
    return json.dumps({"numRecords": i, "minValues": {"x": i}, "maxValues": {"x": i + 1}})


def _table(tmp_path, n_base: int, later: list[tuple[str, int]], stats_every: int):
    """A checkpoint of `n_base` files (f0 and every `stats_every`-th after it without stats),
    then one commit per entry of `later`: ("add", i) adds file i (again, if it exists),
    ("remove", i) removes it.
    """
    base = [
        add(f"f{i}", **({"stats": _stats(i)} if i % stats_every else {"stats": None}))
        for i in range(n_base)
    ]
    write_commit(tmp_path, 0, [commit_info("CREATE"), protocol(), metadata(), *base])
    DeltaLog.for_table(str(tmp_path)).update().write_checkpoint()
    for version, (kind, i) in enumerate(later, start=1):
        action = add(f"f{i}", stats=_stats(1000 + i)) if kind == "add" else remove(f"f{i}")
        write_commit(tmp_path, version, [commit_info(), action])
    return str(tmp_path)


def _by_path(files: pa.StructArray) -> dict[str, dict]:
    return {row["path"]: row for row in files.to_pylist()}


later_actions = st.lists(
    st.tuples(st.sampled_from(["add", "remove"]), st.integers(0, 12)), max_size=6
)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(n_base=st.integers(0, 10), later=later_actions, stats_every=st.integers(1, 4))
def test_any_order_of_calls_gives_a_fresh_loads_state(tmp_path_factory, n_base, later, stats_every):
    path = _table(tmp_path_factory.mktemp("t"), n_base, later, stats_every)
    expected = _by_path(DeltaLog.for_table(path).update().files())

    snapshot = DeltaLog.for_table(path).update()
    light = _by_path(snapshot.files(stats=False))
    assert light.keys() == expected.keys()
    for name, row in light.items():
        assert {**row, "stats": expected[name]["stats"]} == expected[name]
    assert _by_path(snapshot.files()) == expected
    assert _by_path(snapshot.files(stats=False)) == expected  # stats, once read, stay

    # A checkpoint written after a stats-less listing keeps every file's stats.
    snapshot = DeltaLog.for_table(path).update()
    snapshot.files(stats=False)
    snapshot.write_checkpoint()
    checkpointed = _by_path(DeltaLog.for_table(path).update().files())
    assert checkpointed == {p: {**row, "dataChange": False} for p, row in expected.items()}


def test_stats_less_listing_does_not_read_the_stats(tmp_path) -> None:
    path = _table(tmp_path, 5, [("add", 7)], stats_every=9)
    files = DeltaLog.for_table(path).update().files(stats=False)
    by_path = _by_path(files)
    assert [by_path[f"f{i}"]["stats"] for i in range(5)] == [None] * 5
    assert by_path["f7"]["stats"] == _stats(1007)  # a commit's stats come with its add


def test_stats_from_a_checkpoint_with_only_stats_parsed(tmp_path) -> None:
    """Checkpoints written with `delta.checkpoint.writeStatsAsJson=false` carry `stats_parsed`
    only: the lazily read stats are converted from it, in the files' order."""
    path = _table(tmp_path, 4, [], stats_every=5)
    (checkpoint,) = (tmp_path / "_delta_log").glob("*.checkpoint.parquet")
    table = pq.read_table(checkpoint)
    adds = table.column("add").combine_chunks()
    parsed = pa.array(
        [None if s is None else json.loads(s) for s in adds.field("stats").to_pylist()]
    )
    names = [f.name for f in adds.type if f.name != "stats"]
    new_adds = pa.StructArray.from_arrays(
        [*(adds.field(n) for n in names), parsed],
        names=[*names, "stats_parsed"],
        mask=adds.is_null(),
    )
    table = table.set_column(table.schema.get_field_index("add"), "add", new_adds)
    pq.write_table(table, checkpoint)

    snapshot = DeltaLog.for_table(path).update()
    assert snapshot.files(stats=False).field("stats").null_count == 4
    stats = [s and json.loads(s) for s in snapshot.files().field("stats").to_pylist()]
    assert stats == [None, *(json.loads(_stats(i)) for i in range(1, 4))]  # f0 has none
