"""What launching one embedded server yields, and where the packaged server binaries live."""

from __future__ import annotations

import importlib.util
import shutil
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from shared.embedded.credentials import Credentials
from shared.embedded.processes import EmbeddedServerError, ManagedProcess
from shared.embedded.state import Layout


@dataclass(frozen=True)
class LaunchOptions:
    """How to run the embedded servers of one data directory."""

    layout: Layout
    credentials: Credentials
    durable: bool = True  # False: no fsync (tests); True: fsync'd writes (`cardflow up`)
    die_with_owner: bool = True  # servers get a parent-death signal (Linux, main thread only)
    start_timeout: float = 90.0
    postgres_settings: Mapping[str, str] | None = None  # extra `postgres -c` settings (e.g. a bench's pg_stat_statements)


@dataclass
class Launched:
    """A spawned server: its process, the URL clients use, and how to tell it is ready."""

    process: ManagedProcess
    url: str
    probe: Callable[[], str | None]  # None when ready, else the latest error
    after_ready: Callable[[], None] | None = None  # one-time set-up once it answers (e.g. CREATE DATABASE)
    before_restart: Callable[[], None] | None = None  # clean stale lock files before a restart


def package_dir(package: str) -> Path:
    """Directory of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(f"package {package!r} is not installed; run `pip install -e .`")
    return Path(next(iter(spec.submodule_search_locations)))


def script_path(name: str) -> Path:
    """An executable installed by a wheel into this environment's scripts dir, else found on PATH."""
    candidate = Path(sysconfig.get_path("scripts")) / name
    if candidate.exists():
        return candidate
    found = shutil.which(name)
    if found is None:
        raise EmbeddedServerError(f"executable {name!r} not found; is its package installed?")
    return Path(found)
