"""Real Redis, PostgreSQL and S3 servers from Python packages, for `cardflow up` and the tests.

Public API:
    Backends(settings, data_dir, *, durable=True, die_with_owner=True, start_timeout=90.0)
        .start() -> Endpoints, .stop(), context manager (sync and async)
    Endpoints(redis_url, database_url, s3_endpoint, s3_access_key, s3_secret_key, s3_region, ...)
        .as_env() -> dict[str, str], .settings() -> Settings, .redacted(), .to_shell()
    running_instance(data_dir) -> Endpoints | None
    probe_backends(endpoints) -> list[BackendHealth]   (async)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.embedded.backends import Backends, running_instance
    from shared.embedded.endpoints import Endpoints
    from shared.embedded.health import BackendHealth, probe_backends, s3_client_kwargs
    from shared.embedded.processes import EmbeddedServerError
    from shared.embedded.state import InstanceAlreadyRunning

_HOME = {
    "Backends": "backends", "running_instance": "backends", "Endpoints": "endpoints", "BackendHealth": "health",
    "probe_backends": "health", "s3_client_kwargs": "health", "EmbeddedServerError": "processes",
    "InstanceAlreadyRunning": "state",
}  # fmt: skip
"""Each public name's submodule: imported on first use, so a light submodule (`state`, used by the
CLI to find a running instance) does not pull the servers' and clients' code (boto, redis, asyncpg)."""


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'shared.embedded' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"shared.embedded.{_HOME[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BackendHealth",
    "Backends",
    "EmbeddedServerError",
    "Endpoints",
    "InstanceAlreadyRunning",
    "probe_backends",
    "running_instance",
    "s3_client_kwargs",
]
