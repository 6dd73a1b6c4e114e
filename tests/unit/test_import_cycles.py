"""No import circle: no module of `shared/` or `services/` imports, when it loads, a module that imports it back.

Read from the source (`ast`), not by importing: an edge is a module-level `import` / `from … import` (inside `if` and
`try` too, not under `if TYPE_CHECKING`) naming another module of the two trees (`from package import submodule`
is an edge to the submodule). Imports deferred into a function are left out, since they run after every module has
loaded, except in the dispatcher's folds and rules (`services/dispatcher`, `shared/leasing`), where issue 11 removed
a circle (`registration` ↔ `reports`) and none may come back by any import.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ("shared", "services")
STRICT = ("services.dispatcher", "shared.leasing")


def _modules() -> dict[str, Path]:
    found = {}
    for tree in TREES:
        for path in (ROOT / tree).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imported(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    if node.level:
        package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    return {f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names}


def _at_load(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module loads (not under `if TYPE_CHECKING`, not in functions)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            found += _at_load(node.body) + _at_load(node.orelse)
        elif isinstance(node, ast.Try):
            found += _at_load(node.body) + _at_load(node.orelse) + _at_load(node.finalbody)
            for handler in node.handlers:
                found += _at_load(handler.body)
    return found


def _graph(anywhere: bool) -> dict[str, set[str]]:
    """Each module and the modules of the two trees it imports (`anywhere`: also inside functions)."""
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = ([node for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)] if anywhere
                 else _at_load(tree.body))
        graph[module] = {target for node in nodes for target in _imported(module, node)
                         if target in MODULES and target != module}
    return graph


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of the graph (its modules, each imported by the next, the first repeated at the end), or []."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as error:
        return list(error.args[1])
    return []


def _within(graph: dict[str, set[str]], prefixes: tuple[str, ...]) -> dict[str, set[str]]:
    return {module: {target for target in targets if target.startswith(prefixes)}
            for module, targets in graph.items() if module.startswith(prefixes)}


def test_no_module_imports_at_load_a_module_that_imports_it_back() -> None:
    assert _circle(_graph(anywhere=False)) == []


def test_the_dispatchers_folds_and_rules_import_no_circle_even_inside_functions() -> None:
    assert _circle(_within(_graph(anywhere=True), STRICT)) == []


@pytest.mark.parametrize("anywhere", [False, True])
def test_a_circle_is_found_when_one_is_there(anywhere: bool) -> None:
    graph = _within(_graph(anywhere), STRICT)
    graph["shared.leasing.fencing"].add("services.dispatcher.store")
    graph["services.dispatcher.store"].add("shared.leasing.fencing")
    circle = _circle(graph)
    assert len(circle) > 2 and circle[0] == circle[-1]
    assert all(earlier in graph[later] for earlier, later in zip(circle, circle[1:]))  # each imported by the next
