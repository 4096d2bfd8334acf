"""The shape of the package: short functions and modules a reader can hold in mind."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_delta

PACKAGE = Path(airflow_delta.__file__).parent
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 700


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {lines}")
    assert not long, "functions over 80 lines:\n" + "\n".join(long)


def test_no_module_is_longer_than_700_lines() -> None:
    long = [
        f"{path.relative_to(PACKAGE)}: {n}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "modules over 700 lines:\n" + "\n".join(long)


def test_the_package_is_typed() -> None:
    assert (PACKAGE / "py.typed").is_file()
