"""A fuzz of log contents: whatever a commit or `_last_checkpoint` holds, loading the table
gives a typed error (a DeltaError) or the snapshot deltalake (delta-rs) sees: same version,
same active files. Never another exception, never a different snapshot.

Examples are derandomized, so CI runs exactly the examples a developer ran.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta.engine import DeltaLog
from airflow_delta.engine.errors import DeltaError
from tests.delta_log_builder import make_table

ACTIONS = ["add", "remove", "txn", "metaData", "protocol", "commitInfo", "domainMetadata", "x"]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_ADD_FIELDS = st.fixed_dictionaries(
    {"path": st.text(min_size=1, max_size=8)},
    optional={
        "partitionValues": _JSON,
        "size": _JSON,
        "modificationTime": _JSON,
        "dataChange": _JSON,
        "stats": _JSON,
        "deletionVector": _JSON,
    },
)
_LINE = st.one_of(
    st.tuples(st.sampled_from(ACTIONS), _JSON).map(lambda kv: json.dumps({kv[0]: kv[1]})),
    st.tuples(st.sampled_from(["add", "remove"]), _ADD_FIELDS).map(
        lambda kv: json.dumps({kv[0]: kv[1]})
    ),
    st.text(max_size=20),
)
_MUTATION = st.one_of(
    st.tuples(st.just("truncate"), st.integers(1, 3), st.floats(0, 1)),
    st.tuples(st.just("append"), st.integers(1, 3), _LINE),
    st.tuples(st.just("replace"), st.integers(1, 3), st.lists(_LINE, min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.integers(0, 3), st.none()),
    st.tuples(st.just("last_checkpoint"), st.just(0), st.one_of(_JSON.map(json.dumps), st.text())),
)


def _commit(table: Path, version: int) -> Path:
    return table / "_delta_log" / f"{version:020d}.json"


def _mutate(table: Path, mutation) -> None:
    kind, version, arg = mutation
    path = _commit(table, version)
    if kind != "last_checkpoint" and not path.exists():
        return  # deleted by an earlier mutation
    if kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * arg)])
    elif kind == "append":
        with path.open("a") as f:
            f.write(arg + "\n")
    elif kind == "replace":
        path.write_text("\n".join(arg) + "\n")
    elif kind == "delete":
        path.unlink()
    else:
        (table / "_delta_log" / "_last_checkpoint").write_text(arg)


def _ours(table: Path):
    try:
        snapshot = DeltaLog.for_table(str(table)).update()
        return snapshot.version, sorted(snapshot.files().field("path").to_pylist())
    except DeltaError as exc:
        return type(exc).__name__


def _deltalake(table: Path):
    from deltalake import DeltaTable

    try:
        dt = DeltaTable(str(table))
        return dt.version(), sorted(a["path"] for a in dt.get_add_actions(flatten=True).to_pylist())
    except Exception as exc:  # delta-rs raises a family of its own
        return type(exc).__name__


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(mutations=st.lists(_MUTATION, min_size=1, max_size=3))
def test_a_mutated_log_loads_as_deltalake_sees_it_or_fails_typed(tmp_path_factory, mutations):
    base = tmp_path_factory.mktemp("base")
    make_table(base / "t", 4)
    table = tmp_path_factory.mktemp("fuzz") / "t"
    shutil.copytree(base / "t", table)
    for mutation in mutations:
        _mutate(table, mutation)

    ours = _ours(table)  # anything but a DeltaError escapes and fails the test

    if isinstance(ours, tuple):
        theirs = _deltalake(table)
        if isinstance(theirs, tuple):
            assert ours == theirs
