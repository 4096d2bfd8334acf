"""The engine package: its public names resolve, and they load on first use only."""

from __future__ import annotations

import subprocess
import sys

import airflow_delta.engine as engine


def test_every_public_name_resolves() -> None:
    for name in engine.__all__:
        assert getattr(engine, name).__name__ == name
    assert set(engine.__all__) <= set(dir(engine))


def test_light_modules_load_without_pyarrow() -> None:
    script = (
        "import sys\n"
        "import airflow_delta.engine.errors\n"
        "import airflow_delta.engine.protocol.filenames\n"
        "print(sorted(m for m in ('pyarrow', 'numpy', 'fsspec') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
