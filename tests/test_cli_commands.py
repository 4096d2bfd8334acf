"""`airflow-delta delete|update|optimize|restore` on tables deltalake writes: one JSON object
(the commit's result) on stdout, the rows the engine, deltalake and DuckDB then read, and the
error contract (exit 1, one `error: <Class>: <message>` line; argument errors exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from deltalake import write_deltalake

from airflow_delta.engine import DeltaLog
from tests import test_cli
from tests.engine.commands.dml_tables import batch, expected, rows
from tests.test_cli import REPO_ROOT, Run, assert_error, ok_json

run = test_cli.run  # the fixture running the CLI in this process

DATA = [batch(range(0, 6)), batch(range(6, 12)), batch(range(12, 18))]


@pytest.fixture
def table(tmp_path: Path) -> str:
    """A table deltalake wrote: three appends (versions 0-2), partitioned by p ('a'/'b')."""
    uri = str(tmp_path / "t")
    for data in DATA:
        write_deltalake(uri, data, partition_by=["p"], mode="append")
    return uri


def everything(row: dict[str, Any]) -> bool:
    return True


# -- delete ----------------------------------------------------------------------------------------


def test_delete_prints_the_commit(run: Run, table: str) -> None:
    out = ok_json(
        run, "delete", table, "--predicate", "id < 4 OR s = 's2'", "--user-metadata", "gdpr"
    )
    assert (out["version"], out["operation"], out["skipped"]) == (3, "DELETE", False)
    assert out["table"] == table and out["read_version"] == 2 and out["attempts"] == 1
    assert out["metrics"]["numDeletedRows"] == 9  # ids 0-3, and 5, 8, 11, 14, 17 (s2)
    assert rows(table) == expected(DATA, lambda r: not (r["id"] < 4 or r["s"] == "s2"))
    (last,) = DeltaLog.for_table(table).history(limit=1)
    assert (last["operation"], last["userMetadata"]) == ("DELETE", "gdpr")


def test_delete_matching_nothing_is_skipped(run: Run, table: str) -> None:
    out = ok_json(run, "delete", table, "--predicate", "id > 100")
    assert (out["version"], out["skipped"], out["metrics"]["numDeletedRows"]) == (None, True, 0)
    assert DeltaLog.for_table(table).latest_version() == 2


def test_delete_all_rows_must_be_asked_for(run: Run, table: str) -> None:
    assert run("delete", table)[0] == 2  # neither --predicate nor --all-rows
    assert run("delete", table, "--predicate", "id = 1", "--all-rows")[0] == 2
    out = ok_json(run, "delete", table, "--all-rows")
    assert out["metrics"]["numDeletedRows"] == 18 and rows(table) == []


def test_delete_errors(run: Run, table: str, tmp_path: Path) -> None:
    err = assert_error(run("delete", table, "--predicate", "nope = 1"), "InvalidPredicateError")
    assert "nope" in err
    assert_error(run("delete", table, "--predicate", "id <"), "InvalidPredicateError")
    missing = str(tmp_path / "missing")
    assert_error(run("delete", missing, "--predicate", "id = 1"), "TableNotFoundError")
    assert DeltaLog.for_table(table).latest_version() == 2


# -- update ----------------------------------------------------------------------------------------


def test_update_prints_the_commit(run: Run, table: str) -> None:
    out = ok_json(
        run,
        "update",
        table,
        "--set",
        "s='fixed'",
        "--set",
        " k = 42 ",
        "--predicate",
        "p = 'a' AND id >= 10",
    )
    assert (out["version"], out["operation"]) == (3, "UPDATE")
    assert out["metrics"]["numUpdatedRows"] == 4  # 11, 13, 15, 17

    def after(row: tuple[Any, ...]) -> tuple[Any, ...]:
        id_, p = row[0], row[3]
        return (id_, 42, "fixed", p) if p == "a" and id_ >= 10 else row

    assert rows(table) == sorted((after(r) for r in expected(DATA, everything)), key=repr)
    params = DeltaLog.for_table(table).history(limit=1)[0]["operationParameters"]
    assert params["predicate"] == "p = 'a' AND id >= 10"


def test_update_of_every_row_and_a_quoted_column(run: Run, table: str) -> None:
    out = ok_json(run, "update", table, "--set", "`s` = NULL", "--all-rows")
    assert out["metrics"]["numUpdatedRows"] == 18
    assert {r[2] for r in rows(table)} == {None}


def test_update_errors(run: Run, table: str) -> None:
    assert run("update", table, "--predicate", "id = 1")[0] == 2  # no --set
    assert run("update", table, "--set", "s", "--all-rows")[0] == 2  # no '='
    assert run("update", table, "--set", "s=", "--all-rows")[0] == 2  # no value
    assert run("update", table, "--set", "s='x'")[0] == 2  # no --predicate / --all-rows
    err = assert_error(
        run("update", table, "--set", "s='x'", "--set", "s='y'", "--all-rows"), "ValueError"
    )
    assert "--set assigns column 's' twice" in err
    assert_error(
        run("update", table, "--set", "k=shiftleft(k, 1)", "--all-rows"), "UnsupportedCommandError"
    )  # a function the engine does not evaluate
    assert_error(run("update", table, "--set", "k='x'", "--all-rows"), "InvalidArgumentError")
    assert DeltaLog.for_table(table).latest_version() == 2


# -- optimize --------------------------------------------------------------------------------------


def test_optimize_compacts_a_partition_then_zorders(run: Run, table: str) -> None:
    out = ok_json(run, "optimize", table, "--partition-filter", "p = 'a'")
    assert (out["version"], out["operation"]) == (3, "OPTIMIZE")
    assert (out["metrics"]["numFilesRemoved"], out["metrics"]["numFilesAdded"]) == (3, 1)
    again = ok_json(run, "optimize", table, "--partition-filter", "p = 'a'")
    assert again["skipped"] is True and again["version"] is None  # nothing left to compact
    out = ok_json(run, "optimize", table, "--zorder-by", "k,id", "--target-size", "1048576")
    assert out["version"] == 4 and out["metrics"]["partitionsOptimized"] == 2
    params = DeltaLog.for_table(table).history(limit=1)[0]["operationParameters"]
    assert json.loads(params["zOrderBy"]) == ["k", "id"]
    assert DeltaLog.for_table(table).update().num_files == 2
    assert rows(table) == expected(DATA, everything)


def test_optimize_errors(run: Run, table: str) -> None:
    assert run("optimize", table, "--target-size", "0")[0] == 2
    assert run("optimize", table, "--zorder-by", "k,,id")[0] == 2
    assert run("optimize", table, "--min-file-size", "-5")[0] == 2
    code, _, err = run("optimize", table, "--partition-filter", "id = 1")  # not a partition column
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, err
    code, _, err = run("optimize", table, "--zorder-by", "p")  # a partition column
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, err
    assert DeltaLog.for_table(table).latest_version() == 2


# -- restore ---------------------------------------------------------------------------------------


def test_restore_to_a_version_and_to_a_timestamp(run: Run, table: str) -> None:
    out = ok_json(run, "restore", table, "--version", "0")
    assert (out["version"], out["operation"]) == (3, "RESTORE")
    assert out["metrics"]["numRemovedFiles"] == 4 and out["metrics"]["numRestoredFiles"] == 0
    assert rows(table) == expected(DATA[:1], everything)
    stamps = {v: 1_767_225_600 + 3600 * v for v in range(4)}  # v0 at 2026-01-01T00:00Z, ...
    for version, stamp in stamps.items():
        os.utime(Path(table, "_delta_log", f"{version:020d}.json"), (stamp, stamp))
    out = ok_json(run, "restore", table, "--timestamp", "2026-01-01T02:30:00Z")  # -> v2
    assert out["version"] == 4 and out["metrics"]["numRestoredFiles"] == 4
    assert rows(table) == expected(DATA, everything)


def test_restore_errors(run: Run, table: str) -> None:
    assert run("restore", table)[0] == 2
    assert run("restore", table, "--version", "1", "--timestamp", "2026-01-01")[0] == 2
    assert run("restore", table, "--version", "-1")[0] == 2
    err = assert_error(run("restore", table, "--version", "2"), "InvalidArgumentError")
    assert "not an earlier version" in err
    assert_error(run("restore", table, "--version", "99"), "InvalidArgumentError")
    Path(table, DeltaLog.for_table(table).snapshot_at(0).all_files()[0].path).unlink()
    ok_json(run, "delete", table, "--all-rows")  # version 3
    assert_error(run("restore", table, "--version", "0"), "RestoreMissingFilesError")
    out = ok_json(run, "restore", table, "--version", "0", "--ignore-missing-files")
    assert out["version"] == 4 and out["metrics"]["numMissingFilesSkipped"] == 1


# -- as a process ----------------------------------------------------------------------------------


def test_commands_in_a_process(table: str) -> None:
    pythonpath = [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    cmd = [sys.executable, "-m", "airflow_delta.cli"]
    done = subprocess.run(
        [*cmd, "delete", table, "--predicate", "id = 3"], env=env, capture_output=True, text=True
    )
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert json.loads(done.stdout)["metrics"]["numDeletedRows"] == 1
    bad = subprocess.run(
        [*cmd, "restore", table, "--version", "7"], env=env, capture_output=True, text=True
    )
    assert_error((bad.returncode, bad.stdout, bad.stderr), "InvalidArgumentError")


# -- write ---------------------------------------------------------------------------------------


def test_write_appends_and_replaces_partitions_from_parquet_files(
    run: Run, table: str, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    landing = tmp_path / "landing"
    landing.mkdir()
    pq.write_table(batch([100, 102], p=["b", "b"]), landing / "part-0.parquet")
    out = ok_json(run, "write", table, "--source", str(landing))
    assert (out["version"], out["operation"], out["metrics"]["numOutputRows"]) == (3, "WRITE", 2)
    out = ok_json(
        run, "write", table, "--source", str(landing), "--mode", "overwrite",
        "--replace-where", "p = 'b'", "--user-metadata", "reload",
    )  # fmt: skip
    assert out["version"] == 4 and out["metrics"]["numRemovedFiles"] >= 1
    kept = expected(DATA, lambda r: r["p"] == "a")
    written = [(100, 0, "s1", "b"), (102, 2, "s0", "b")]
    assert sorted(rows(table), key=str) == sorted([*kept, *written], key=str)
    (last,) = DeltaLog.for_table(table).history(limit=1)
    assert (last["operation"], last["userMetadata"]) == ("WRITE", "reload")


def test_write_errors_follow_the_contract(run: Run, table: str, tmp_path: Path) -> None:
    assert_error(run("write", table, "--source", str(tmp_path / "missing")), "FileNotFoundError")
    import pyarrow.parquet as pq

    pq.write_table(batch([1], p=["a"]).append_column("extra", [[1]]), tmp_path / "x.parquet")
    result = run("write", table, "--source", str(tmp_path / "x.parquet"))
    assert_error(result, "SchemaMismatchError")
