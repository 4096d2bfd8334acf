"""The engine's import graph: no cycles (TYPE_CHECKING and function-level imports count),
nothing below the DeltaLog facade imports it, layers point down, and no module imports another
module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_delta

PACKAGE = Path(airflow_delta.__file__).parent
ENGINE = "airflow_delta.engine"
FACADE = f"{ENGINE}.delta_log"

#: Lower numbers sit lower in the house: a module may import only its own layer or below.
LAYERS = {
    f"{ENGINE}.errors": 0,
    f"{ENGINE}.protocol": 1,
    f"{ENGINE}.expressions": 2,
    f"{ENGINE}.log": 3,
    f"{ENGINE}.commands.maintenance": 4,
    f"{ENGINE}.txn": 5,
    f"{ENGINE}.commands": 6,
    FACADE: 7,
    ENGINE: 8,  # the package's __init__: the public names
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(), str(p)) for p in PACKAGE.rglob("*.py")}


MODULES = all_modules()


def imports_of(name: str, tree: ast.Module) -> list[tuple[str, list[str]]]:
    """(imported module, names) for every import statement anywhere in the module."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{name}: use absolute imports"
            base = node.module or ""
            names = [alias.name for alias in node.names]
            # `from pkg import module` imports the module pkg.module
            modules = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
            out.append((base, [n for n in names if f"{base}.{n}" not in MODULES]))
            out.extend((m, []) for m in modules)
    return out


def engine_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, tree in MODULES.items():
        if not name.startswith(ENGINE):
            continue
        targets = {target for target, _ in imports_of(name, tree)}
        graph[name] = {t for t in targets if t.startswith(ENGINE) and t in MODULES and t != name}
    return graph


def layer(name: str) -> int:
    best = max(
        (prefix for prefix in LAYERS if name == prefix or name.startswith(prefix + ".")), key=len
    )
    return LAYERS[best]


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first walk of `graph` meets (each as the modules along it)."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == ENGINE:
                continue  # the package __init__ only re-exports
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_the_engine_has_no_import_cycle() -> None:
    graph = engine_graph()
    assert len(graph) > 30 and sum(map(len, graph.values())) > 60  # the walk sees the engine
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert import_cycles(graph) == [["a", "b", "c", "a"]]


def test_nothing_below_the_facade_imports_it() -> None:
    for name, targets in engine_graph().items():
        if name in (FACADE, ENGINE):
            continue
        assert FACADE not in targets, f"{name} imports the DeltaLog facade"
        assert ENGINE not in targets, f"{name} imports the engine package (the facade's names)"


def test_engine_layers_point_down() -> None:
    wrong = [
        f"{name} (layer {layer(name)}) imports {target} (layer {layer(target)})"
        for name, targets in engine_graph().items()
        for target in targets
        if layer(target) > layer(name)
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_engine_never_imports_spark_or_airflow() -> None:
    for name, tree in MODULES.items():
        if name.startswith(ENGINE):
            roots = {target.split(".")[0] for target, _ in imports_of(name, tree)}
            assert not roots & {"pyspark", "airflow"}, name


def test_no_module_imports_another_modules_private_names() -> None:
    wrong = [
        f"{name} imports {target}.{n}"
        for name, tree in MODULES.items()
        for target, names in imports_of(name, tree)
        if target.startswith("airflow_delta") and target != name
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_only_the_log_store_touches_fsspec() -> None:
    users = sorted(
        name
        for name, tree in MODULES.items()
        if name != f"{ENGINE}.log.log_store"
        and any(target.split(".")[0] == "fsspec" for target, _ in imports_of(name, tree))
    )
    assert users == []
