"""The example DAGs of dags_examples/ that `dag.test()` runs in the tests (tests/airflow/
test_dags_examples.py), loaded from their files with their tables under this worker's
$AIRFLOW_DELTA_TEST_ROOT/demo (Airflow 3's `dag.test()` runs only DAGs of the DAGs folder).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

ROOT = Path(os.environ.get("AIRFLOW_DELTA_TEST_ROOT", "/tmp/airflow-delta-test-tables"))
EXAMPLES = Path(__file__).resolve().parents[3] / "dags_examples"
os.environ["AIRFLOW_DELTA_DEMO_ROOT"] = str(ROOT / "demo")


def _example(name: str) -> object:
    spec = importlib.util.spec_from_file_location(f"dags_examples_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag


delta_nightly_maintenance = _example("delta_nightly_maintenance")
delta_events_ingest = _example("delta_events_ingest")
