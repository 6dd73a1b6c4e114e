"""Run services in-process against `fresh_settings`, feed `cf:events`, read what they wrote.

    async with RunningServices(settings, SPEC_A, SPEC_B) as running:
        await running.publish(*events)              # XADD to cf:events (and routed streams) like the gate
        assert await running.wait_until(condition)  # fails fast if a service crashed
        rows = await running.fetch("SELECT ...")    # [] while the schema does not exist yet

Each service runs as an asyncio task of the test's loop with its own stop event and as its own
Redis user (tests/helpers/redis_users.py), so subclasses can start and stop instances one by one
(`start`/`stop_service`); `redis` and `pool` are the test's own (admin) clients. The gate runs too
(`with_gate=False` leaves it out): what the services emit reaches `cf:events` only through it. Shared by the console, matcher, ledger and dispatcher integration tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
from redis.asyncio import Redis

from services.common.runtime import ServiceSpec, run_service
from shared.delivery.db import create_pool
from shared.delivery.wire import extract_body, wire_fields
from shared.events import Envelope, parse_event
from shared.events.carried import with_carried_releases, with_carried_usage
from shared.events.routing import forwarded_to
from shared.names import EVENTS_STREAM
from shared.settings import Settings
from tests.helpers.delivery_support import WAIT_SECONDS
from tests.helpers.redis_users import service_settings

MISSING_SCHEMA = (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError)


async def poll_until(condition: Callable[[], Awaitable[Any]], timeout: float = WAIT_SECONDS) -> Any:
    """Poll `condition` until it returns something truthy (returned) or `timeout` passes (its last result)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = await condition()
        if result or loop.time() > deadline:
            return result
        await asyncio.sleep(0.05)


async def forward(redis: Redis, *events: Envelope) -> None:
    """XADD events to `cf:events`, and each to the routed streams of the groups that fold its type,
    exactly as the gate forwards them (`shared.events.routing.forwarded_to`)."""
    for event in events:
        for stream in forwarded_to(event.type.encode()):
            await redis.xadd(stream, wire_fields(event))


class RunningServices:
    """`async with`: the given services run as asyncio tasks; a Redis client and a pool for the test."""

    def __init__(self, settings: Settings, *specs: ServiceSpec, with_gate: bool = True) -> None:
        from services.gate.service import SPEC as gate

        self.settings = settings
        self.specs = (*specs, gate) if with_gate and gate not in specs else specs
        self.services: dict[str, tuple[asyncio.Event, asyncio.Task[None]]] = {}
        self.redis = Redis.from_url(settings.redis_url or "")
        self.pool: asyncpg.Pool | None = None

    async def __aenter__(self) -> RunningServices:
        self.pool = await create_pool(self.settings.database_dsn or "", min_size=1, max_size=3)
        for spec in self.specs:
            self.start_service(spec.name, spec)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            for stop, _ in self.services.values():
                stop.set()
            await asyncio.gather(*(task for _, task in self.services.values()))
        finally:
            self.services.clear()
            await self.redis.aclose()
            if self.pool is not None:
                await self.pool.close()

    # -- services --------------------------------------------------------------------------------

    def start_service(self, name: str, spec: ServiceSpec, settings: Settings | None = None) -> None:
        """Run `spec` (with `settings`, default the harness's) as a task called `name`."""
        stop = asyncio.Event()
        own = service_settings(self.settings, spec.name)
        task = asyncio.create_task(run_service(spec, settings or own, stop), name=name)
        self.services[name] = (stop, task)

    async def stop_service(self, name: str) -> None:
        """Stop the service called `name` and wait until it has ended (raising its error, if any)."""
        stop, task = self.services.pop(name)
        stop.set()
        await task

    def raise_if_crashed(self) -> None:
        for name, (_, task) in self.services.items():
            if task.done():
                task.result()  # raises the service's exception
                raise AssertionError(f"service {name} ended while the test ran")

    # -- writing ---------------------------------------------------------------------------------

    async def xadd_all(self, stream: str, *envelopes: Envelope) -> None:
        for envelope in envelopes:
            await self.redis.xadd(stream, wire_fields(envelope))

    async def publish(self, *events: Envelope) -> None:
        """XADD events where the gate forwards them (`forward`)."""
        await forward(self.redis, *events)

    # -- reading ---------------------------------------------------------------------------------

    async def events(self, event_type: str | None = None) -> list[Any]:
        """Every event on `cf:events` (optionally of one type), oldest first; asked for `lease.released`, the
        releases run ends carry too, and for `usage.recorded` the slices `usage.batch_recorded`s carry, as the
        events they stand for."""
        entries = await self.redis.xrange(EVENTS_STREAM)
        events = [parse_event(extract_body(fields)) for _, fields in entries]
        if event_type is None:
            return events
        unfolded = with_carried_releases(events)
        if event_type == "usage.recorded":
            unfolded = with_carried_usage(unfolded)
        return [e for e in unfolded if e.type == event_type]

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Rows of a query; [] while the schema does not exist yet."""
        assert self.pool is not None
        try:
            return await self.pool.fetch(sql, *args)
        except MISSING_SCHEMA:
            return []

    async def wait_until(self, condition: Callable[[], Awaitable[bool]], timeout: float = WAIT_SECONDS) -> bool:
        """Poll `condition` (missing tables count as False) until it holds or `timeout` passes; fail fast on a crash."""

        async def check() -> bool:
            self.raise_if_crashed()
            try:
                return bool(await condition())
            except MISSING_SCHEMA:
                return False

        return await poll_until(check, timeout)

    async def wait_for_count(self, read: Callable[[], Awaitable[list[Any]]], count: int) -> list[Any]:
        """What `read()` returns once it has at least `count` items (or at the timeout: assert on it)."""
        found: list[Any] = []

        async def enough() -> bool:
            nonlocal found
            found = await read()
            return len(found) >= count

        await self.wait_until(enough)
        return found

    async def wait_for_events(self, event_type: str, count: int = 1) -> list[Any]:
        """The events of `event_type` once at least `count` are published (assert on the result)."""
        return await self.wait_for_count(lambda: self.events(event_type), count)
