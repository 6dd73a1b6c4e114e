"""Real Redis, PostgreSQL and S3 servers from Python packages, for `cardflow up` and the tests.

Public API:
    Backends(settings, data_dir, *, durable=True, die_with_owner=True, start_timeout=90.0)
        .start() -> Endpoints, .stop(), context manager (sync and async)
    Endpoints(redis_url, database_url, s3_endpoint, s3_access_key, s3_secret_key, s3_region, ...)
        .as_env() -> dict[str, str], .settings() -> Settings, .redacted(), .to_shell()
    running_instance(data_dir) -> Endpoints | None
    probe_backends(endpoints) -> list[BackendHealth]   (async)
"""

from shared.embedded.backends import Backends, running_instance
from shared.embedded.endpoints import Endpoints
from shared.embedded.health import BackendHealth, probe_backends, s3_client_kwargs
from shared.embedded.processes import EmbeddedServerError
from shared.embedded.state import InstanceAlreadyRunning

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
