"""Is each backend reachable, and which server version answers? Used by start-up waits and `cardflow doctor`.

Probes talk the real protocol (Redis PING + INFO, a PostgreSQL login + `SHOW server_version`,
S3 ListBuckets) and never raise: failures come back as a `BackendHealth` with the error text.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
import redis.asyncio as aioredis
from aiobotocore.session import AioSession, get_session
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


@functools.cache
def _s3_session() -> AioSession:
    """One aiobotocore session for every S3 probe: botocore caches the models it loads in its session."""
    return get_session()


_s3_models_loaded = False
"""Has `_load_s3_models` loaded the session's models (once per process)?"""


async def _load_s3_models(endpoints: Endpoints) -> None:
    """Open and close one client in a worker thread, once per process, so the session holds botocore's S3
    models before a probe's clock runs. Loading them is seconds of CPU on a loaded machine; inside the probe
    it ate the S3 probe's timeout and, run on the event loop, stalled the loop the Redis and PostgreSQL
    probes time themselves on: all three failed at once (`cardflow doctor` at load 14). Start-up waits probe
    S3 again and again: after the first success the models are cached and nothing is loaded again."""
    global _s3_models_loaded
    if _s3_models_loaded:
        return

    async def open_and_close() -> None:
        async with _s3_session().create_client("s3", **s3_client_kwargs(endpoints)):
            pass

    await asyncio.to_thread(asyncio.run, open_and_close())
    _s3_models_loaded = True


async def probe_s3(endpoints: Endpoints) -> BackendHealth:
    async def check() -> str:
        async with _s3_session().create_client("s3", **s3_client_kwargs(endpoints)) as client:
            response = await client.list_buckets()
        server = response["ResponseMetadata"].get("HTTPHeaders", {}).get("server")
        return server or "S3 (server did not say)"

    try:
        await _load_s3_models(endpoints)  # no network: a bad endpoint or key fails in `check` or here
    except Exception as exc:  # a probe reports every failure, it never raises
        return BackendHealth("s3", endpoints.s3_endpoint, ok=False, error=f"{type(exc).__name__}: {exc}".strip())
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
