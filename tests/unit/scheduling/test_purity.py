"""The scheduling core and card matching import only pure standard-library modules.

No I/O, no clock, no randomness, no concurrency: a plan must depend on its arguments alone, so the
dispatcher, the simulator and an auditor replaying history all get the same answer.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

from shared.scheduling.model import Snapshot
from shared.scheduling.plan import plan
from shared.scheduling.policies import POLICIES

from .builders import HOUR, NOW, a_lease, a_node, a_task, built

ROOT = Path(__file__).resolve().parents[3]
PURE_PATHS = [*sorted((ROOT / "shared" / "scheduling").glob("*.py")), ROOT / "shared" / "cards" / "matching.py",
              ROOT / "shared" / "cards" / "model.py", ROOT / "shared" / "cards" / "why_not.py"]
ALLOWED_STDLIB = {
    "__future__", "array", "bisect", "collections", "copy", "contextlib", "dataclasses", "enum", "functools", "gc", "heapq",
    "itertools", "math", "operator", "typing", "types", "abc",
}
ALLOWED_PROJECT = ("shared.scheduling", "shared.cards.model", "shared.cards.matching", "shared.cards.why_not")
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



def test_plan_leaves_no_reference_cycles_behind():
    """plan() pauses the cyclic garbage collector (plan.py): that is only free if it creates no
    cycles, so everything it allocates must be freed by reference counting alone."""
    nodes = [built(a_node(f"n{i}").free(2)) for i in range(4)]
    leases = [built(a_lease(f"L{i}").on(f"n{i}").gpus(2, 3, 4, 5, 6, 7).opportunistic().started(NOW - HOUR))
              for i in range(4)]
    tasks = [built(a_task(f"t{i}").gpus(1 + i % 4).submitted(NOW - i * 100)) for i in range(12)]
    tasks.append(built(a_task("c").core().gpus(8).submitted(NOW - 2 * HOUR)))
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        plan(Snapshot(tuple(nodes), tuple(leases)), tasks, POLICIES["cardflow"], NOW)
        assert gc.collect() == 0
    finally:
        if was_enabled:
            gc.enable()
