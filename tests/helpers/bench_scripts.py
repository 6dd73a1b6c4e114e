"""Load a script of bench/ as a module for a test, the way `python bench/NAME.py` would see its world.

bench/ is not a package: its scripts import their neighbours by bare name (`import policies_grid`), so
bench/ goes on `sys.path` first; and the module is registered in `sys.modules` under its name before it
runs, because dataclasses (and pickling) look their defining module up there.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_script(script: str, module_name: str | None = None) -> ModuleType:
    """bench/`script`.py as a module named `module_name` (default: `script`); loaded once per process."""
    name = module_name or script
    if name in sys.modules:
        return sys.modules[name]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{script}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"no bench script {script!r} at {BENCH / f'{script}.py'}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
