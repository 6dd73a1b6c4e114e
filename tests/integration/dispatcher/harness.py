"""Run dispatcher instances in-process against `fresh_settings`; write events and agent reports
to the streams; read leases, events and agent commands back.

    async with DispatcherHarness(settings) as h:
        await h.start()
        await h.publish(*a_ready_task("T1"))
        await h.report(registered("a1", "n1", gpus=2))
        assert await h.wait_until(lambda: ...)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from redis.asyncio import Redis

from services.common.runtime import run_service
from services.dispatcher.config import DispatcherConfig
from services.dispatcher.service import make_spec
from shared.delivery.wire import extract_body, wire_fields
from shared.events import Envelope, parse_command, parse_event
from shared.names import EVENTS_STREAM, REPORTS_STREAM, agent_inbox
from shared.settings import Settings
from tests.helpers.delivery_support import WAIT_SECONDS

FAST = DispatcherConfig(lease_ttl_s=30.0, tick_s=0.2, debounce_s=0.02, renewal_event_every_s=5.0, leader_poll_s=0.1)


class DispatcherHarness:
    """`async with`: a Redis client and a pool for the test; `start()` runs a dispatcher instance."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.instances: dict[str, tuple[asyncio.Event, asyncio.Task[None]]] = {}
        self.redis = Redis.from_url(settings.redis_url or "")
        self.db: asyncpg.Pool | None = None

    async def __aenter__(self) -> DispatcherHarness:
        self.db = await asyncpg.create_pool(self.settings.database_dsn, min_size=1, max_size=3)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            for name in list(self.instances):
                await self.stop(name)
        finally:
            await self.redis.aclose()
            if self.db is not None:
                await self.db.close()

    def start(self, name: str = "a", config: DispatcherConfig = FAST) -> None:
        """Start a dispatcher instance called `name` (its producer is `dispatcher/<name>-<pid>`)."""
        settings = self.settings.model_copy(update={"instance": name})
        stop = asyncio.Event()
        self.instances[name] = (stop, asyncio.create_task(run_service(make_spec(config), settings, stop)))

    async def stop(self, name: str = "a") -> None:
        stop, task = self.instances.pop(name)
        stop.set()
        await task

    # -- writing ---------------------------------------------------------------------------------

    async def publish(self, *events: Envelope) -> None:
        """XADD events to `cf:events` as an outbox relay does."""
        for event in events:
            await self.redis.xadd(EVENTS_STREAM, wire_fields(event))

    async def report(self, *reports: Envelope) -> None:
        """XADD agent reports to `cf:reports` as an agent does."""
        for report in reports:
            await self.redis.xadd(REPORTS_STREAM, wire_fields(report))

    # -- reading ---------------------------------------------------------------------------------

    async def events(self, event_type: str | None = None) -> list[Any]:
        """Every event on `cf:events` (optionally of one type), oldest first."""
        entries = await self.redis.xrange(EVENTS_STREAM)
        events = [parse_event(extract_body(fields)) for _, fields in entries]
        return [e for e in events if event_type is None or e.type == event_type]

    async def commands(self, agent_id: str) -> list[Any]:
        """Every command in the agent's inbox `cf:agent:<agent_id>`, oldest first."""
        return [parse_command(extract_body(fields)) for _, fields in await self.redis.xrange(agent_inbox(agent_id))]

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Rows of a query; [] while the schema does not exist yet."""
        assert self.db is not None
        try:
            return await self.db.fetch(sql, *args)
        except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
            return []

    async def wait_until(self, condition: Callable[[], Awaitable[bool]], timeout: float = WAIT_SECONDS) -> bool:
        """Poll `condition` until it holds (True) or `timeout` passes (False); fail fast on a crash."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for _, task in self.instances.values():
                if task.done():
                    task.result()
                    raise AssertionError("a dispatcher instance ended while the test ran")
            if await condition():
                return True
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)

    async def wait_for_events(self, event_type: str, count: int = 1) -> list[Any]:
        """The events of `event_type` once at least `count` are published (assert on the result)."""
        found: list[Any] = []

        async def enough() -> bool:
            nonlocal found
            found = await self.events(event_type)
            return len(found) >= count

        await self.wait_until(enough)
        return found

    async def wait_for_commands(self, agent_id: str, count: int = 1) -> list[Any]:
        found: list[Any] = []

        async def enough() -> bool:
            nonlocal found
            found = await self.commands(agent_id)
            return len(found) >= count

        await self.wait_until(enough)
        return found

    async def task_state(self, task_id: str) -> str | None:
        rows = await self.fetch("SELECT state FROM dispatcher.tasks WHERE task_id = $1", task_id)
        return rows[0]["state"] if rows else None

    async def leases(self, task_id: str) -> list[asyncpg.Record]:
        return await self.fetch("SELECT * FROM dispatcher.leases WHERE task_id = $1 ORDER BY granted_at", task_id)
