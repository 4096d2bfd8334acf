"""`airflow-delta vacuum`: JSON on stdout, one error line on failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_delta.cli import main
from airflow_delta.engine import DeltaLog
from tests.engine.commands.test_maintenance_vacuum import OLD_UNREFERENCED, build_table


@pytest.fixture
def table(tmp_path: Path) -> tuple[Path, DeltaLog]:
    return build_table(tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ok_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run(capsys, *argv)
    assert (code, err) == (0, ""), err
    [line] = out.splitlines()
    return json.loads(line)


def test_vacuum_dry_run_then_real_run(table, capsys) -> None:
    root, _ = table
    dry = ok_json(capsys, "vacuum", str(root), "--dry-run")
    assert dry == {
        "files_deleted": 3,
        "bytes_deleted": 27,
        "dry_run": True,
        "retention_hours": 168.0,
        "files": OLD_UNREFERENCED,
    }
    assert all((root / f).exists() for f in OLD_UNREFERENCED)

    done = ok_json(capsys, "vacuum", str(root), "--retention-hours", "200")
    assert done["dry_run"] is False and done["retention_hours"] == 200
    assert done["files"] == OLD_UNREFERENCED
    assert not any((root / f).exists() for f in OLD_UNREFERENCED)
    assert ok_json(capsys, "vacuum", str(root))["files_deleted"] == 0


def test_vacuum_short_retention_is_an_error_line_unless_forced(table, capsys) -> None:
    root, _ = table
    code, out, err = run(capsys, "vacuum", str(root), "--retention-hours", "0.5")
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and err.endswith("\n")
    assert err.startswith("error: VacuumRetentionError: Cannot vacuum table ")
    assert "0.5 hours" in err and "168 hours" in err and "--force" in err
    assert (root / "_k=a/new-removed.parquet").exists()

    forced = ok_json(capsys, "vacuum", str(root), "--retention-hours", "0.5", "--force")
    assert "_k=a/new-removed.parquet" in forced["files"]
    assert not (root / "_k=a/new-removed.parquet").exists()


def test_vacuum_of_a_missing_table(tmp_path: Path, capsys) -> None:
    code, out, err = run(capsys, "vacuum", str(tmp_path / "nothing"))
    assert (code, out) == (1, "")
    assert err.startswith("error: TableNotFoundError: ") and err.count("\n") == 1


@pytest.mark.parametrize("hours", ["-1", "soon", "nan"])
def test_vacuum_rejects_bad_retention_arguments(tmp_path: Path, capsys, hours: str) -> None:
    code, out, err = run(capsys, "vacuum", str(tmp_path), "--retention-hours", hours)
    assert (code, out) == (2, "")
    assert "--retention-hours" in err
