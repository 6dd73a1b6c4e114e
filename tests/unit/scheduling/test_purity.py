"""The scheduling core and card matching import only pure standard-library modules.

No I/O, no clock, no randomness, no concurrency: a plan must depend on its arguments alone, so the
dispatcher, the simulator and an auditor replaying history all get the same answer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PURE_PATHS = [*sorted((ROOT / "shared" / "scheduling").glob("*.py")), ROOT / "shared" / "cards" / "matching.py",
              ROOT / "shared" / "cards" / "model.py"]
ALLOWED_STDLIB = {
    "__future__", "bisect", "collections", "contextlib", "dataclasses", "enum", "functools", "gc", "heapq",
    "itertools", "math", "operator", "typing", "types", "abc",
}
ALLOWED_PROJECT = ("shared.scheduling", "shared.cards.model", "shared.cards.matching")
FORBIDDEN_NAMES = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "random", "urandom"}


def imported_modules(path: Path) -> list[str]:
    modules = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules.append(node.module or "")
    return modules


@pytest.mark.parametrize("path", PURE_PATHS, ids=lambda path: str(path.relative_to(ROOT)))
def test_pure_modules_import_only_pure_stdlib_and_core_modules(path: Path):
    assert path.exists(), path
    for module in imported_modules(path):
        allowed = module.split(".")[0] in ALLOWED_STDLIB or module.startswith(ALLOWED_PROJECT)
        assert allowed, f"{path.name} imports {module!r}, which is not a pure module"


@pytest.mark.parametrize("path", PURE_PATHS, ids=lambda path: str(path.relative_to(ROOT)))
def test_pure_modules_never_call_a_clock_or_random_source(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            assert node.func.attr not in FORBIDDEN_NAMES, f"{path.name} calls .{node.func.attr}()"


def test_the_check_itself_catches_an_impure_import(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom datetime import datetime\n")
    assert imported_modules(bad) == ["asyncio", "datetime"]
    assert not {"asyncio", "datetime"} & ALLOWED_STDLIB
