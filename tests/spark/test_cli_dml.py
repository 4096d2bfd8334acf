"""`airflow-delta delete|update --spark`: the commands on Spark (the test session is the active
one the CLI reuses), for what the in-process commands refuse; the same JSON result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from airflow_delta.engine import DeltaLog
from tests import test_cli
from tests.engine.commands.dml_tables import batch, create, engine_rows, expected
from tests.test_cli import Run, assert_error, ok_json

run = test_cli.run  # the fixture running the CLI in this process

DATA = [batch(range(0, 6)), batch(range(6, 12))]


def test_update_and_delete_on_spark(spark: SparkSession, run: Run, tmp_path: Path) -> None:
    table = create(tmp_path / "t", *DATA)
    args = ["--set", "k=k * 10", "--set", "s=initcap(s)", "--predicate", "p = 'a'"]
    assert "run it on Spark" in assert_error(run("update", table, *args), "UnsupportedCommandError")
    out = ok_json(run, "update", table, *args, "--spark", "--user-metadata", "fix")
    assert (out["version"], out["operation"], out["skipped"]) == (3, "UPDATE", False)
    assert out["metrics"]["numUpdatedRows"] == 6
    out = ok_json(run, "delete", table, "--predicate", "id * 2 > 20", "--spark")
    assert (out["version"], out["metrics"]["numDeletedRows"]) == (4, 1)
    (last, before) = DeltaLog.for_table(table).history(limit=2)
    assert (last["operation"], before["userMetadata"]) == ("DELETE", "fix")

    def after(row: tuple[Any, ...]) -> tuple[Any, ...]:
        id_, k, s, p = row
        return (id_, k * 10, s.upper(), p) if p == "a" else row

    want = sorted((after(r) for r in expected(DATA, lambda r: r["id"] != 11)), key=repr)
    assert engine_rows(table) == want
