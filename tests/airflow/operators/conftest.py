"""Fixtures of the operator tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to start a Spark session fails the task (`dag.test()` runs tasks in this
    process): for the operators that run the engine's commands in process."""
    from airflow_delta.hooks.delta import DeltaHook

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an in-process table command started a Spark session")

    monkeypatch.setattr(DeltaHook, "get_spark_session", refuse)
