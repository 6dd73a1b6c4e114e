"""Per-test isolation on the session's shared servers.

`fresh_settings`: a `Settings` pointing at a NEW PostgreSQL database and a freshly flushed Redis
logical database, so a test can run whole services (fixed schema and stream names) without
seeing another test's tables or streams. S3 is shared: use unique bucket names or keys.
`redis`: a client on that Redis database (closed after the test).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from shared.embedded import Endpoints
from shared.events import new_event_id
from shared.settings import Settings

_redis_dbs = itertools.cycle(range(1, 16))  # db 0 stays for tests that use backends directly


def with_path(url: str, path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=path))


@contextlib.asynccontextmanager
async def fresh_database_settings(backends: Endpoints) -> AsyncIterator[Settings]:
    """Settings on a new PostgreSQL database and a flushed Redis db (dropped on exit), for any fixture scope."""
    database = f"t_{new_event_id().lower()}"
    admin = await asyncpg.connect(backends.database_url)
    try:
        await admin.execute(f'CREATE DATABASE "{database}"')
    finally:
        await admin.close()
    redis_url = with_path(backends.redis_url, f"/{next(_redis_dbs)}")
    redis = Redis.from_url(redis_url)
    await redis.flushdb()
    await redis.aclose()
    settings = backends.settings().model_copy(
        update={"database_url": SecretStr(with_path(backends.database_url, f"/{database}")), "redis_url": redis_url}
    )
    try:
        yield settings
    finally:
        admin = await asyncpg.connect(backends.database_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest.fixture
async def fresh_settings(backends: Endpoints) -> AsyncIterator[Settings]:
    async with fresh_database_settings(backends) as settings:
        yield settings


@pytest.fixture
async def redis(fresh_settings: Settings) -> AsyncIterator[Redis]:
    client = Redis.from_url(fresh_settings.redis_url or "")
    yield client
    await client.aclose()
