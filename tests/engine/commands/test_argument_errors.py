"""Every command and reader refuses arguments it cannot take with one typed error,
InvalidArgumentError: a DeltaError (what callers catch for the engine's errors) and a ValueError
(what they caught before), naming the table, and leaving the table as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_delta.engine import (
    CommitProperties,
    DeltaLog,
    optimize,
    read_changes,
    read_table,
    restore,
    update,
    write_table,
)
from airflow_delta.engine.commands.merge_in_process import merge_arrow
from airflow_delta.engine.errors import DeltaError, InvalidArgumentError, InvalidPredicateError

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})


def _merge(uri: str, **clause: Any) -> Any:
    builder = merge_arrow(uri, ROWS, "t.id = s.id")
    if clause:
        builder.when_matched_update(clause["set"])
    return builder.execute()


CALLS: dict[str, Callable[[str], Any]] = {
    "restore: neither version nor timestamp": lambda uri: restore(uri),
    "restore: a version that is not earlier": lambda uri: restore(uri, version=1),
    "read_changes: no starting point": lambda uri: read_changes(uri),
    "read_changes: an end before the start": lambda uri: read_changes(uri, 1, 0),
    "read_changes: an unknown column": lambda uri: read_changes(uri, 0, columns=["nope"]),
    "update: an unknown column": lambda uri: update(uri, {"nope": "1"}),
    "update: no assignment": lambda uri: update(uri, {}),
    "merge: no clause": lambda uri: _merge(uri),
    "merge: an unknown column": lambda uri: _merge(uri, set={"nope": "s.name"}),
    "merge: assignments that are not SQL": lambda uri: _merge(uri, set={"name": 1}),
    "optimize: a negative min_file_size": lambda uri: optimize(uri, min_file_size=-1),
    "optimize: an unknown Z-order column": lambda uri: optimize(uri, zorder_by=["nope"]),
    "read_table: an unknown column": lambda uri: read_table(uri, ["nope"]),
    "read_table: a column twice": lambda uri: read_table(uri, ["id", "ID"]),
    "read_table: a version and a timestamp": lambda uri: read_table(
        uri, version=0, timestamp="2024-01-01"
    ),
    "read_table: a version that is not a number": lambda uri: read_table(uri, version="1"),
    "read_table: a timestamp that is not one": lambda uri: read_table(uri, timestamp="yesterday"),
    "read_table: a timestamp of no type it takes": lambda uri: read_table(uri, timestamp=[1]),
    "snapshot_at: a month 13": lambda uri: DeltaLog.for_table(uri).snapshot_at(
        timestamp="2024-13-01"
    ),
    "read_changes: a timestamp that is not one": lambda uri: read_changes(
        uri, starting_timestamp="soon"
    ),
    "restore: a version that is not a number": lambda uri: restore(uri, version="0"),
    "update: assignments that are not a mapping": lambda uri: update(uri, "id = 1"),  # type: ignore[arg-type]
    "write_table: an unknown mode": lambda uri: write_table(uri, ROWS, mode="upsert"),
    "vacuum: a negative retention": lambda uri: DeltaLog.for_table(uri).vacuum(-1),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_bad_arguments_are_invalid_argument_errors(
    tmp_path: Path, call: Callable[[str], Any]
) -> None:
    uri = str(tmp_path / "table")
    write_table(uri, ROWS, configuration={"delta.enableChangeDataFeed": "true"})
    write_table(uri, ROWS.slice(0, 1))
    with pytest.raises(InvalidArgumentError) as raised:
        call(uri)
    assert isinstance(raised.value, DeltaError) and isinstance(raised.value, ValueError)
    assert uri in str(raised.value)
    assert DeltaLog.for_table(uri).update().version == 1
    assert read_table(uri).num_rows == 4


PREDICATES: dict[str, Callable[[str], Any]] = {
    "read_table: an unknown column": lambda uri: read_table(uri, filter="nope = 1"),
    "read_table: not SQL text": lambda uri: read_table(uri, filter=5),  # type: ignore[arg-type]
    "read_table: a list holding no SQL": lambda uri: read_table(uri, filter=[1]),  # type: ignore[list-item]
    "update: a malformed predicate": lambda uri: update(uri, {"name": "'x'"}, "id = = 1"),
    "filter_files: an unknown column": lambda uri: (
        DeltaLog.for_table(uri).start_transaction().filter_files("nope > 1")
    ),
    "optimize: a data column as partition filter": lambda uri: optimize(uri, "id = 1"),
}


@pytest.mark.parametrize("call", PREDICATES.values(), ids=PREDICATES.keys())
def test_bad_predicates_are_delta_errors_naming_the_table(
    tmp_path: Path, call: Callable[[str], Any]
) -> None:
    """InvalidPredicateError is a DeltaError (and still a ValueError) whose message names the
    table and the version the predicate was parsed against, with the caret under the spot."""
    uri = str(tmp_path / "table")
    write_table(uri, ROWS)
    with pytest.raises(InvalidPredicateError) as raised:
        call(uri)
    assert isinstance(raised.value, DeltaError) and isinstance(raised.value, ValueError)
    assert str(raised.value).startswith(f"Table {uri} version 0: predicate ")
    assert DeltaLog.for_table(uri).update().version == 0


@pytest.mark.parametrize(
    ("properties", "fix"),
    [
        ({"user_metadata": 123}, "user_metadata must be text"),
        ({"user_metadata": {"run": 1}}, "custom_metadata"),
        ({"max_commit_attempts": 0}, "max_commit_attempts must be a positive int"),
        ({"max_commit_attempts": "3"}, "max_commit_attempts must be a positive int"),
    ],
)
def test_commit_properties_refuse_values_other_readers_cannot_take(
    tmp_path: Path, properties: dict[str, Any], fix: str
) -> None:
    """user_metadata is text for every reader (deltalake's history() fails on a number)."""
    uri = str(tmp_path / "t")
    write_table(uri, ROWS)
    with pytest.raises(InvalidArgumentError, match=fix):
        write_table(uri, ROWS, mode="append", commit_properties=CommitProperties(**properties))
    assert DeltaLog.for_table(uri).update().version == 0
