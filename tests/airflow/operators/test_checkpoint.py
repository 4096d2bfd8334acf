"""DeltaCheckpointOperator: checkpoint, expired log cleanup and VACUUM of a table. Its run in a
DAG, after a write and a MERGE, is in test_commit.py."""

from __future__ import annotations

from typing import Any

import pytest


def test_checkpoint_operator_vacuums_and_refuses_a_short_retention(tmp_path) -> None:
    """The maintenance steps of DeltaCheckpointOperator (its `execute` needs no context)."""
    from airflow_delta.engine.commands.maintenance import VacuumRetentionError
    from airflow_delta.operators.checkpoint import DeltaCheckpointOperator
    from tests.engine.commands.test_maintenance_vacuum import OLD_UNREFERENCED, build_table

    root, delta_log = build_table(tmp_path)
    version = delta_log.update().version

    def run(**kwargs: Any) -> dict[str, Any]:
        return DeltaCheckpointOperator(task_id="c", table_uri=str(root), **kwargs).execute({})

    with pytest.raises(VacuumRetentionError):
        run(vacuum_retention_hours=1)
    result = run(vacuum_retention_hours=168)
    assert (result["version"], result["parts"], result["cleaned"]) == (version, 1, 0)
    assert result["vacuumed"] == len(OLD_UNREFERENCED) and result["vacuumed_bytes"] > 0
    assert not any((root / f).exists() for f in OLD_UNREFERENCED)
    assert delta_log.update().log_segment.checkpoint_version == version


@pytest.mark.parametrize(
    ("rendered", "error", "message"),
    [
        ("abc", ValueError, "must be a number of hours >= 0, got 'abc'"),
        ("-1", ValueError, "must be a number of hours >= 0, got '-1'"),
        ("1", "VacuumRetentionError", "Nothing was done"),
    ],
)
def test_templated_retention_is_checked_before_the_checkpoint(
    tmp_path, rendered: str, error: Any, message: str
) -> None:
    """A templated vacuum_retention_hours is checked once rendered, before the checkpoint: a
    bad value leaves the table as it was (it was checked only at the VACUUM step, after
    checkpointing)."""
    from airflow_delta.engine import errors
    from airflow_delta.operators.checkpoint import DeltaCheckpointOperator
    from tests.engine.commands.test_maintenance_vacuum import build_table

    root, delta_log = build_table(tmp_path)
    op = DeltaCheckpointOperator(
        task_id="c", table_uri=str(root), vacuum_retention_hours="{{ params.hours }}"
    )
    op.render_template_fields({"params": {"hours": rendered}})  # type: ignore[arg-type]
    expected = getattr(errors, error) if isinstance(error, str) else error
    with pytest.raises(expected, match=message):
        op.execute({})
    assert delta_log.update().log_segment.checkpoint_version is None
    assert not list((root / "_delta_log").glob("*.checkpoint*.parquet"))


@pytest.mark.parametrize("hours", [-1, "abc", True])
def test_literal_retention_is_checked_at_parse_time(hours: Any) -> None:
    from airflow_delta.operators.checkpoint import DeltaCheckpointOperator

    with pytest.raises(ValueError, match="vacuum_retention_hours of table /tmp/t"):
        DeltaCheckpointOperator(task_id="c", table_uri="/tmp/t", vacuum_retention_hours=hours)
