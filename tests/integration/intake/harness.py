"""Run services in-process against `fresh_settings`, and read what they wrote.

    async with ServicesRunning(settings, INTAKE) as services:
        await redis.xadd(INGEST_STREAM, {...})
        assert await services.wait_until(lambda: ...)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from services.common.runtime import ServiceSpec, run_service
from shared.delivery.deadletter import DeadLetter, read_deadletters
from shared.events import Envelope, parse_event
from shared.names import EVENTS_STREAM, INGEST_STREAM, INTAKE_GROUP
from shared.settings import Settings
from tests.helpers.delivery_support import WAIT_SECONDS


class ServicesRunning:
    """`async with`: the given services run as asyncio tasks until the block ends."""

    def __init__(self, settings: Settings, *specs: ServiceSpec) -> None:
        self.settings = settings
        self.specs = specs
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> ServicesRunning:
        self.tasks = [asyncio.create_task(run_service(spec, self.settings, self.stop)) for spec in self.specs]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks)

    def raise_if_crashed(self) -> None:
        for task in self.tasks:
            if task.done():
                task.result()  # raises the service's exception
                raise AssertionError(f"service task {task.get_name()} ended while the test ran")

    async def wait_until(self, condition: Callable[[], Awaitable[bool]], timeout: float = WAIT_SECONDS) -> bool:
        """Poll `condition` until it holds (True) or `timeout` passes (False); fail fast on a crash."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self.raise_if_crashed()
            if await condition():
                return True
            if loop.time() > deadline:
                return False
            await asyncio.sleep(0.05)


async def published_events(redis: Redis, event_type: str | None = None) -> list[Envelope]:
    """Every event on `cf:events` (optionally of one type), oldest first."""
    entries = await redis.xrange(EVENTS_STREAM)
    events = [parse_event(fields[b"event"]) for _, fields in entries]
    return [e for e in events if event_type is None or e.type == event_type]


async def ingest_pending(redis: Redis) -> int | None:
    """Entries of `cf:ingest` read by intake but not acked yet; None before intake created its group."""
    try:
        return int((await redis.xpending(INGEST_STREAM, INTAKE_GROUP))["pending"])
    except ResponseError:
        return None


async def deadletters(redis: Redis) -> list[DeadLetter]:
    return await read_deadletters(redis, count=10_000)


async def xadd_ingest(redis: Redis, entry_type: str, payload: Any, **fields: str) -> str:
    """Append an entry the way a plain upstream client does (payload dumped to JSON unless text)."""
    body = payload if isinstance(payload, str) else json.dumps(payload)
    entry_id = await redis.xadd(INGEST_STREAM, {"type": entry_type, "payload": body, **fields})
    return entry_id.decode()


def a_submission(name: str = "train-llm", **overrides: Any) -> dict[str, Any]:
    """A valid submission body (schema v1) with `overrides` applied."""
    body: dict[str, Any] = {
        "name": name,
        "project": "proj-a",
        "priority_class": "standard",
        "gpus": 2,
        "estimate_gpu_hours": 4.0,
        "profile": "compute",
        "command": ["python", "train.py"],
    }
    body.update(overrides)
    return body
