"""Run services in-process against `fresh_settings`, feed `cf:events`, read what they wrote.

    async with Running(settings, build_spec()) as running:
        await running.publish(event)
        assert await running.wait_until(lambda: ...)

Shared by the matcher and ledger integration tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from redis.asyncio import Redis

from services.common.runtime import ServiceSpec, run_service
from shared.delivery.db import create_pool
from shared.delivery.wire import wire_fields
from shared.events import Envelope, parse_event
from shared.names import EVENTS_STREAM
from shared.settings import Settings
from tests.helpers.delivery_support import WAIT_SECONDS


class Running:
    """`async with`: the services run as asyncio tasks; a Redis client and a pool for the test."""

    def __init__(self, settings: Settings, *specs: ServiceSpec) -> None:
        self.settings = settings
        self.specs = specs
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []
        self.redis = Redis.from_url(settings.redis_url or "")
        self.db: asyncpg.Pool | None = None

    async def __aenter__(self) -> Running:
        self.db = await create_pool(self.settings.database_dsn or "", min_size=1, max_size=2)
        self.tasks = [asyncio.create_task(run_service(spec, self.settings, self.stop)) for spec in self.specs]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        try:
            await asyncio.gather(*self.tasks)
        finally:
            await self.redis.aclose()
            if self.db is not None:
                await self.db.close()

    async def publish(self, *events: Envelope) -> None:
        """XADD events to `cf:events` exactly as an outbox relay does."""
        for event in events:
            await self.redis.xadd(EVENTS_STREAM, wire_fields(event))

    async def events(self, event_type: str | None = None) -> list[Envelope]:
        """Every event on `cf:events` (optionally of one type), oldest first."""
        entries = await self.redis.xrange(EVENTS_STREAM)
        events = [parse_event(fields[b"event"]) for _, fields in entries]
        return [e for e in events if event_type is None or e.type == event_type]

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Rows of a query; [] while the schema does not exist yet."""
        assert self.db is not None
        try:
            return await self.db.fetch(sql, *args)
        except asyncpg.UndefinedTableError:
            return []

    async def wait_until(self, condition: Callable[[], Awaitable[bool]], timeout: float = WAIT_SECONDS) -> bool:
        """Poll `condition` until it holds (True) or `timeout` passes (False); fail fast on a crash."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for task in self.tasks:
                if task.done():
                    task.result()
                    raise AssertionError("a service ended while the test ran")
            if await condition():
                return True
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)

    async def wait_for_events(self, event_type: str, count: int) -> list[Envelope]:
        """The events of `event_type` once at least `count` are published (assert on the result)."""
        found: list[Envelope] = []

        async def enough() -> bool:
            nonlocal found
            found = await self.events(event_type)
            return len(found) >= count

        await self.wait_until(enough)
        return found
