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
