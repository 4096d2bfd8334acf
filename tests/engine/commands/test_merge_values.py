"""`match_keys`, the MERGE's join of target and source keys: the hash lookup (one key column,
unique source keys) and the hash join (anything else) both give exactly the pairs of a nested
loop over the rows, where NULL matches nothing and integers of any width compare by value."""

from __future__ import annotations

import subprocess
import sys
from unittest import mock

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine.commands import merge_values
from airflow_delta.engine.commands.merge_values import match_keys

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_INTS = st.one_of(st.none(), st.integers(-5, 5), st.sampled_from([-(2**63), 2**63 - 1]))
_TEXT = st.one_of(st.none(), st.sampled_from(["", "a", "b", "é", "a\x00", "long" * 10]))


def _pairs(table: pa.Table) -> list[tuple[int, int]]:
    return sorted(
        zip(table.column("row").to_pylist(), table.column("srow").to_pylist(), strict=True)
    )


def _nested_loop(target: list[tuple], source: list[tuple], eligible: list[bool]) -> list:
    return sorted(
        (r, s)
        for r, t in enumerate(target)
        for s, v in enumerate(source)
        if eligible[r] and None not in t and t == v
    )


@st.composite
def _sides(draw):
    width = draw(st.integers(1, 2))
    values = draw(st.sampled_from([_INTS, _TEXT]))
    rows = st.lists(st.tuples(*[values] * width), max_size=25)
    target, source = draw(rows), draw(rows)
    if draw(st.booleans()):  # unique source keys: the lookup's case
        source = list({k: k for k in source if None not in k}.values())
    eligible = draw(st.lists(st.booleans(), min_size=len(target), max_size=len(target)))
    return width, values is _INTS, target, source, eligible


@SETTINGS
@given(
    _sides(),
    st.sampled_from([pa.int8(), pa.int32(), pa.int64()]),
    st.sampled_from([0, merge_values.LOOKUP_ROWS]),  # 0: unique keys joined, not looked up
)
def test_match_keys_pairs_every_equal_non_null_key_of_an_eligible_row(sides, narrow, lookup_rows):
    width, ints, target, source, eligible = sides
    if ints and any(v is not None and not -128 <= v <= 127 for r in target for v in r):
        narrow = pa.int64()  # the target's column narrower than the source's when values fit

    def table(rows: list[tuple], prefix: str, kind: pa.DataType | None) -> pa.Table:
        columns = {f"{prefix}{i}": pa.array([r[i] for r in rows], kind) for i in range(width)}
        return pa.table(columns) if rows else pa.table({c: pa.array([], kind) for c in columns})

    kinds = (narrow, pa.int64()) if ints else (pa.string(), pa.string())
    left, right = table(target, "t", kinds[0]), table(source, "s", kinds[1])
    keys = [(f"t{i}", f"s{i}") for i in range(width)]
    with mock.patch.object(merge_values, "LOOKUP_ROWS", lookup_rows):
        got = match_keys(left, right, keys, np.array(eligible, dtype=bool))
    assert _pairs(got) == _nested_loop(target, source, eligible)


def test_a_merge_of_unique_keys_needs_no_query_engine():
    """The lookup imports nothing: Arrow's query engine (`pyarrow.acero`, which imports
    `pyarrow.dataset`) costs about 0.1 s on its first import, more than a small MERGE."""
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from airflow_delta.engine.commands.merge_values import match_keys\n"
        "t = pa.table({'id': [1, 2, None, 4]}); s = pa.table({'id': [4, 1, 9]})\n"
        "pairs = match_keys(t, s, [('id', 'id')], np.ones(4, dtype=bool))\n"
        "assert sorted(pairs.to_pylist(), key=str) == "
        "[{'row': 0, 'srow': 1}, {'row': 3, 'srow': 0}], pairs\n"
        "print('pyarrow.acero' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
