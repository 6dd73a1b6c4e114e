"""Run services in-process against `fresh_settings` for the console tests.

    async with Services(settings, VIEWS) as running:
        await running.publish(*events)              # XADD to cf:events like an outbox relay
        assert await running.wait_until(condition)  # fails fast if a service crashed
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg
from redis.asyncio import Redis

from services.common.runtime import ServiceSpec, run_service
from shared.delivery.db import create_pool
from shared.delivery.wire import wire_fields
from shared.events import Envelope
from shared.names import EVENTS_STREAM
from shared.settings import Settings
from tests.helpers.delivery_support import WAIT_SECONDS


class Services:
    """`async with`: the services run as asyncio tasks; `pool` and `redis` are the test's own."""

    def __init__(self, settings: Settings, *specs: ServiceSpec) -> None:
        self.settings = settings
        self.specs = specs
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.redis = Redis.from_url(settings.redis_url or "")
        self.pool: asyncpg.Pool | None = None

    async def __aenter__(self) -> Services:
        self.pool = await create_pool(self.settings.database_dsn or "", min_size=1, max_size=3)
        self.tasks = [asyncio.create_task(run_service(spec, self.settings, self.stop)) for spec in self.specs]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        try:
            await asyncio.gather(*self.tasks)
        finally:
            await self.redis.aclose()
            if self.pool is not None:
                await self.pool.close()

    async def publish(self, *events: Envelope) -> None:
        for event in events:
            await self.redis.xadd(EVENTS_STREAM, wire_fields(event))

    async def wait_until(self, condition: Callable[[], Awaitable[bool]], timeout: float = WAIT_SECONDS) -> bool:
        """Poll `condition` (missing tables count as False) until it holds or `timeout` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for task in self.tasks:
                if task.done():
                    task.result()
                    raise AssertionError("a service ended while the test ran")
            try:
                if await condition():
                    return True
            except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
                pass
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)
