"""The dispatcher's rules (`shared/leasing`) are pure: they never load I/O libraries nor read a clock.

So a fold is tested by tables without PostgreSQL, and the simulator can reuse its lease-end rule.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LEASING = sorted((ROOT / "shared" / "leasing").glob("*.py"))
IO_LIBRARIES = ("asyncpg", "faststream", "redis", "aiobotocore", "httpx", "services")
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "random", "new_event_id"}


def test_importing_every_rule_loads_no_io_library() -> None:
    modules = ", ".join(f"shared.leasing.{path.stem}" for path in LEASING if path.stem != "__init__")
    probe = (f"import sys, {modules}; "
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {IO_LIBRARIES!r}))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize("path", LEASING, ids=lambda path: path.name)
def test_no_rule_reads_a_clock_or_a_random_source(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            assert name not in CLOCK_CALLS, f"{path.name} calls {name}()"
