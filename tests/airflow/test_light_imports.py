"""DAG parsing stays light (issue 13, item 4; benchmark B11): importing the Airflow layer loads
no pyarrow, numpy, pandas, pyspark or fsspec, nor the engine or Spark layer that do.

Each check runs in a fresh interpreter (this pytest process has imported everything already).
Airflow itself imports fsspec (`airflow.sdk.io`, through BaseOperator's templater), so fsspec
is held against what Airflow's own base classes load, and the others against nothing.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import airflow_delta

#: Top-level packages a DAG file importing the provider must not load.
HEAVY = ("pyarrow", "numpy", "pandas", "pyspark", "fsspec")
#: Our packages that load them.
HEAVY_OURS = ("airflow_delta.engine", "airflow_delta.spark")
#: The provider's Airflow layer, imported by DAG files, the DAG processor and the triggerer.
LAYER_PACKAGES = ("hooks", "operators", "sensors", "triggers")
#: What every DAG file of an Airflow deployment imports anyway: the yardstick for fsspec.
AIRFLOW_BASE = (
    "airflow.sdk",
    "airflow.configuration",
    "airflow.triggers.base",
    "airflow.dag_processing.dagbag",
)

#: Prints the heavy modules loaded so far, as JSON (run after the imports under test).
LOADED = textwrap.dedent(
    f"""
    def loaded():
        import sys
        return sorted(
            name for name in sys.modules
            if name.split(".")[0] in {HEAVY!r} or name.startswith({HEAVY_OURS!r})
        )
    """
)


def layer_modules() -> list[str]:
    """Every module of the Airflow layer, plus `assets` and `provider`."""
    root = Path(airflow_delta.__file__).parent
    modules = ["airflow_delta.assets", "airflow_delta.provider"]
    for package in LAYER_PACKAGES:
        modules.append(f"airflow_delta.{package}")
        modules += [
            f"airflow_delta.{package}.{info.name}"
            for info in pkgutil.iter_modules([str(root / package)])
        ]
    return modules


def run_fresh(code: str, timeout: float = 120) -> Any:
    """Run `code` in a fresh interpreter with this process's environment (AIRFLOW_HOME of this
    worker); the JSON object its last output line holds."""
    env = dict(os.environ)
    repo = str(Path(airflow_delta.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", LOADED + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def roots(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules if not m.startswith(HEAVY_OURS)}


@pytest.fixture(scope="module")
def airflow_baseline() -> set[str]:
    """The heavy packages Airflow's own base loads (fsspec, on Airflow 3.x)."""
    loaded = run_fresh(
        f"""
        import importlib, json
        for name in {AIRFLOW_BASE!r}:
            importlib.import_module(name)
        from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator  # noqa: F401
        print(json.dumps(loaded()))
        """
    )
    base = roots(loaded)
    assert base <= {"fsspec"}, f"Airflow's own base loads {sorted(base)}"
    return base


def test_the_airflow_layer_imports_no_engine_nor_its_dependencies(
    airflow_baseline: set[str],
) -> None:
    """Each module, imported in turn in one fresh interpreter, adds no heavy module (the first
    module that would is named)."""
    modules = layer_modules()
    assert {"airflow_delta.operators.write", "airflow_delta.sensors.version"} <= set(modules)
    added = run_fresh(
        f"""
        import importlib, json
        for name in {AIRFLOW_BASE!r}:
            importlib.import_module(name)
        from airflow.sdk import BaseHook, BaseOperator, BaseSensorOperator  # noqa: F401
        before, added = set(loaded()), {{}}
        for name in {modules!r}:
            importlib.import_module(name)
            now = set(loaded())
            added[name] = sorted(now - before)
            before = now
        print(json.dumps(added))
        """
    )
    assert set(added) == set(modules)
    offenders = {name: new for name, new in added.items() if new}
    assert not offenders, f"modules loading heavy dependencies at import: {offenders}"


def test_provider_info_imports_no_airflow_and_no_engine() -> None:
    loaded = run_fresh(
        """
        import json, sys
        from airflow_delta.provider import get_provider_info
        get_provider_info()
        print(json.dumps(loaded() + [m for m in sys.modules if m.split(".")[0] == "airflow"]))
        """
    )
    assert loaded == []


DAG_FILE = '''
"""A DAG of every operator and the deferrable sensor of airflow-delta (parsed, never run)."""
import datetime as dt

from airflow.sdk import DAG

from airflow_delta.assets import delta_table_asset
from airflow_delta.operators.checkpoint import DeltaCheckpointOperator
from airflow_delta.operators.dml import DeltaDeleteOperator, DeltaUpdateOperator
from airflow_delta.operators.merge import DeltaMergeOperator
from airflow_delta.operators.optimize import DeltaOptimizeOperator
from airflow_delta.operators.restore import DeltaRestoreOperator
from airflow_delta.operators.write import DeltaWriteOperator
from airflow_delta.sensors.version import DeltaTableVersionSensor

SOURCE, TARGET = "/tmp/light-imports/source", "/tmp/light-imports/target"

with DAG("light_imports", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)):
    wait = DeltaTableVersionSensor(
        task_id="wait",
        table_uri=SOURCE,
        deferrable=True,
        poke_interval=30,
        outlets=[delta_table_asset(SOURCE)],
    )
    write = DeltaWriteOperator(
        task_id="write",
        table_uri=TARGET,
        source=SOURCE,
        source_format="delta",
        mode="overwrite",
        replace_where="day = '{{ ds }}'",
        partition_by=["day"],
        post_commit_hooks=["log_cleanup", "checkpoint"],
    )
    merge = DeltaMergeOperator(
        task_id="merge",
        table_uri=TARGET,
        source="SELECT * FROM updates",
        condition="t.id = s.id",
        clauses=[
            {"when": "matched", "then": "update_all"},
            {"when": "not_matched", "then": "insert_all"},
        ],
    )
    maintain = DeltaCheckpointOperator(task_id="maintain", table_uri=TARGET)
    delete = DeltaDeleteOperator(task_id="delete", table_uri=TARGET, predicate="day < '{{ ds }}'")
    update = DeltaUpdateOperator(
        task_id="update", table_uri=TARGET, set={"status": "'late'"}, predicate="id = 1"
    )
    optimize = DeltaOptimizeOperator(task_id="optimize", table_uri=TARGET, zorder_by=["id"])
    restore = DeltaRestoreOperator(task_id="restore", table_uri=TARGET, version="{{ params.v }}")
    wait >> write >> merge >> maintain >> delete >> update >> optimize >> restore
'''


def test_a_dag_of_the_operators_and_the_deferrable_sensor_parses_light(
    tmp_path: Path, airflow_baseline: set[str]
) -> None:
    """DagBag parses the DAG, the parse-time argument checks still fail early, and a trigger
    rebuilt from its serialized form (what the triggerer does) loads nothing heavy either."""
    dag_file = tmp_path / "light_imports_dag.py"
    dag_file.write_text(DAG_FILE)
    result = run_fresh(
        f"""
        import json
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder={str(dag_file)!r})
        dag = bag.dags.get("light_imports")  # get_dag would ask the database
        tasks = {{t.task_id: t for t in dag.tasks}} if dag else {{}}

        from airflow_delta.operators.write import DeltaWriteOperator
        from airflow_delta.sensors.version import DeltaTableVersionSensor
        from airflow_delta.triggers.version import DeltaTableVersionTrigger

        errors = []
        for cls, kwargs in [
            (DeltaWriteOperator, {{"post_commit_hooks": ["vacuum"]}}),
            (DeltaWriteOperator, {{"mode": "upsert"}}),
            (DeltaTableVersionSensor, {{"target_version": -1}}),
        ]:
            try:
                cls(task_id="bad", table_uri="/t", **(
                    {{"source": "SELECT 1", **kwargs}} if cls is DeltaWriteOperator else kwargs
                ))
            except ValueError as exc:
                errors.append(str(exc))
        path, kwargs = DeltaTableVersionTrigger("/t", 3, poll_interval=5.0).serialize()
        DeltaTableVersionTrigger(**kwargs)
        print(json.dumps({{
            "import_errors": {{str(k): str(v) for k, v in bag.import_errors.items()}},
            "tasks": sorted(tasks),
            "deferrable": getattr(tasks.get("wait"), "deferrable", None),
            "hooks": getattr(tasks.get("write"), "post_commit_hooks", None),
            "errors": errors,
            "loaded": loaded(),
        }}))
        """
    )
    assert result["import_errors"] == {}
    assert result["tasks"] == [
        "delete",
        "maintain",
        "merge",
        "optimize",
        "restore",
        "update",
        "wait",
        "write",
    ]
    assert result["deferrable"] is True
    assert result["hooks"] == ["checkpoint", "log_cleanup"]  # the order they run in
    assert len(result["errors"]) == 3, result["errors"]
    assert "Unknown post-commit hook(s) ['vacuum']: use checkpoint" in result["errors"][0]
    assert "mode must be one of" in result["errors"][1]
    assert "target_version must be a non-negative integer" in result["errors"][2]
    loaded = result["loaded"]
    assert not [m for m in loaded if m.startswith(HEAVY_OURS)], loaded
    assert roots(loaded) <= airflow_baseline, loaded


def test_the_post_commit_hook_names_are_the_engines() -> None:
    """The operators check hook names at parse time against a copy of the engine's registry."""
    from airflow_delta.engine.txn.post_commit import POST_COMMIT_HOOKS
    from airflow_delta.operators.commit import POST_COMMIT_HOOK_NAMES

    assert tuple(POST_COMMIT_HOOKS) == POST_COMMIT_HOOK_NAMES
