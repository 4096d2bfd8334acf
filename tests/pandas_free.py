"""A check shared by the tests that guard the engine's pandas-free hot paths."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def imports_pandas(script: str) -> bool:
    """Run `script` (which must end by printing `'pandas' in sys.modules`) in a fresh
    interpreter and return what it printed."""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[1],
    )
    return out.stdout.strip() == "True"
