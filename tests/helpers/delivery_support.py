"""Support for the delivery tests: a test event type, unique names, waiting, workers, fixtures.

Import the fixtures into a test module: `from tests.helpers.delivery_support import pool, redis, schema`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import asyncpg
import pytest
from redis.asyncio import Redis
from ulid import ULID

from shared.delivery import create_pool, migrate, migrate_delivery, record_consumed
from shared.embedded import Endpoints
from shared.events.envelope import Envelope

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER_MIGRATIONS = Path(__file__).parent / "sql"
WAIT_SECONDS = 60.0


class TestHappened(Envelope):
    """A minimal event for delivery tests (independent of the real event catalogue)."""

    __test__ = False  # not a pytest test class
    type: Literal["test.happened"] = "test.happened"
    data: dict[str, Any]


def a_test_event(n: int, *, subject: str = "test/1", seq: int = 1, **data: Any) -> TestHappened:
    return TestHappened(subject=subject, subject_seq=seq, producer="tests/1", actor="test:delivery", data={"n": n, **data})


def parse_test_event(body: bytes) -> TestHappened:
    return TestHappened.model_validate_json(body)


def unique(prefix: str) -> str:
    """A fresh lower-case name, valid as schema, stream, group or bucket name part."""
    return f"{prefix}_{str(ULID()).lower()}"


async def wait_until(condition: Callable[[], Awaitable[bool]], timeout: float = WAIT_SECONDS) -> bool:
    """Poll `condition` until it holds or `timeout` passes; return its last value (assert on that)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await condition():
            return True
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.05)


async def wait_for_exit(process: subprocess.Popen[bytes], timeout: float = WAIT_SECONDS) -> int | None:
    async def exited() -> bool:
        return process.poll() is not None

    await wait_until(exited, timeout)
    return process.poll()


def spawn_worker(module: str, backends: Endpoints, **env: str) -> subprocess.Popen[bytes]:
    """Run `python -m tests.helpers.<module>` against the test backends, with extra env vars."""
    environment = {**os.environ, **backends.as_env(), **env, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", f"tests.helpers.{module}"], cwd=REPO_ROOT, env=environment,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def stop_worker(process: subprocess.Popen[bytes]) -> str:
    """SIGTERM the worker if still running, wait, and return its output (for failure messages)."""
    if process.poll() is None:
        process.terminate()
    try:
        output, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    return output.decode(errors="replace")[-4000:]


async def prepare_worker_schema(pool: asyncpg.Pool, schema: str) -> None:
    await migrate_delivery(pool, schema)
    await migrate(pool, schema, WORKER_MIGRATIONS, component="worker")


async def apply_once(pool: asyncpg.Pool, schema: str, consumer: str, event: TestHappened) -> bool:
    """The workers' handler body: effect + inbox in one transaction; a dedupe hit is recorded."""
    async with pool.acquire() as conn, conn.transaction():
        if not await record_consumed(conn, schema, consumer, event.event_id):
            await conn.execute(f"INSERT INTO {schema}.duplicates (event_id) VALUES ($1)", event.event_id)
            return False
        await conn.execute(f"INSERT INTO {schema}.effects (event_id, n) VALUES ($1, $2)", event.event_id, event.data["n"])
    return True


async def count(pool: asyncpg.Pool, sql: str, *args: Any) -> int:
    return int(await pool.fetchval(sql, *args))


# ---- fixtures -----------------------------------------------------------------------


@pytest.fixture
async def pool(backends: Endpoints) -> AsyncIterator[asyncpg.Pool]:
    created = await create_pool(backends.database_url, min_size=1, max_size=12)
    yield created
    await created.close()


@pytest.fixture
async def redis(backends: Endpoints) -> AsyncIterator[Redis]:
    client = Redis.from_url(backends.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def schema(pool: asyncpg.Pool) -> AsyncIterator[str]:
    """A fresh schema name (not created); dropped after the test."""
    name = unique("t")
    yield name
    await pool.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
