"""Is each backend reachable, and which server version answers? Used by start-up waits and `cardflow doctor`.

Probes talk the real protocol (Redis PING + INFO, a PostgreSQL login + `SHOW server_version`,
S3 ListBuckets) and never raise: failures come back as a `BackendHealth` with the error text.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
import redis.asyncio as aioredis
from aiobotocore.session import get_session
from botocore.config import Config

from shared.embedded.endpoints import Endpoints
from shared.settings import redact_url

T = TypeVar("T")
PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class BackendHealth:
    name: str
    url_redacted: str
    ok: bool
    version: str | None = None
    error: str | None = None


async def _guarded(name: str, url: str, check: Callable[[], Awaitable[str]]) -> BackendHealth:
    try:
        version = await asyncio.wait_for(check(), PROBE_TIMEOUT_S)
    except Exception as exc:  # a probe reports every failure, it never raises
        return BackendHealth(name, url, ok=False, error=f"{type(exc).__name__}: {exc}".strip())
    return BackendHealth(name, url, ok=True, version=version)


async def probe_redis(url: str) -> BackendHealth:
    async def check() -> str:
        client = aioredis.from_url(url, socket_connect_timeout=PROBE_TIMEOUT_S)
        try:
            await client.ping()
            info = await client.info("server")
            return f"Redis {info['redis_version']}"
        finally:
            await client.aclose()

    return await _guarded("redis", redact_url(url) or "", check)


async def probe_postgres(dsn: str) -> BackendHealth:
    async def check() -> str:
        conn = await asyncpg.connect(dsn, timeout=PROBE_TIMEOUT_S)
        try:
            return f"PostgreSQL {await conn.fetchval('SHOW server_version')}"
        finally:
            await conn.close()

    return await _guarded("postgres", redact_url(dsn) or "", check)


def s3_client_kwargs(endpoints: Endpoints) -> dict[str, Any]:
    """Keyword arguments for `session.create_client("s3", **kwargs)` (aiobotocore or botocore)."""
    return {
        "endpoint_url": endpoints.s3_endpoint,
        "region_name": endpoints.s3_region,
        "aws_access_key_id": endpoints.s3_access_key,
        "aws_secret_access_key": endpoints.s3_secret_key,
        "config": Config(
            s3={"addressing_style": endpoints.s3_addressing_style},
            retries={"max_attempts": 1},
            connect_timeout=PROBE_TIMEOUT_S,
            read_timeout=PROBE_TIMEOUT_S,
        ),
    }


async def probe_s3(endpoints: Endpoints) -> BackendHealth:
    async def check() -> str:
        async with get_session().create_client("s3", **s3_client_kwargs(endpoints)) as client:
            response = await client.list_buckets()
        server = response["ResponseMetadata"].get("HTTPHeaders", {}).get("server")
        return server or "S3 (server did not say)"

    return await _guarded("s3", endpoints.s3_endpoint, check)


async def probe_backends(endpoints: Endpoints) -> list[BackendHealth]:
    """Probe Redis, PostgreSQL and S3 concurrently."""
    return list(
        await asyncio.gather(
            probe_redis(endpoints.redis_url),
            probe_postgres(endpoints.database_url),
            probe_s3(endpoints),
        )
    )


def run_sync(make_coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code, even if this thread already runs a loop."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make_coro())).result()
