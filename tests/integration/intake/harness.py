"""Helpers of the intake tests: write `cf:ingest` like upstream, read events and dead letters back.

Services run in-process with `tests.helpers.running_services.RunningServices`:

    async with RunningServices(settings, INTAKE) as services:
        await xadd_ingest(redis, "task.submit", a_submission())
        assert await services.wait_until(lambda: ...)
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from shared.delivery.deadletter import DeadLetter, read_deadletters
from shared.events import Envelope, parse_event
from shared.names import EVENTS_STREAM, INGEST_STREAM, INTAKE_GROUP


async def published_events(redis: Redis, event_type: str | None = None) -> list[Envelope]:
    """Every event on `cf:events` (optionally of one type), oldest first."""
    entries = await redis.xrange(EVENTS_STREAM)
    events = [parse_event(fields[b"event"]) for _, fields in entries]
    return [e for e in events if event_type is None or e.type == event_type]


async def distinct_published_events(redis: Redis, event_type: str | None = None,
                                    seen: Collection[str] = ()) -> list[Envelope]:  # fmt: skip
    """`published_events`, each event once and none of `seen` (ids): an outbox relay is at-least-once (one
    stopped between its XADD and its COMMIT publishes the row again), consumers dedupe by event id
    (docs/delivery.md "Relay")."""
    events: dict[str, Envelope] = {}
    for event in await published_events(redis, event_type):
        if event.event_id not in seen:
            events.setdefault(event.event_id, event)
    return list(events.values())


async def ingest_pending(redis: Redis) -> int | None:
    """Entries of `cf:ingest` read by intake but not acked yet; None before intake created its group."""
    try:
        return int((await redis.xpending(INGEST_STREAM, INTAKE_GROUP))["pending"])
    except ResponseError:
        return None


async def deadletters(redis: Redis) -> list[DeadLetter]:
    return await read_deadletters(redis, count=10_000)


async def xadd_ingest(redis: Redis, entry_type: str, payload: Any, *, stream: str = INGEST_STREAM, **fields: str) -> str:
    """Append an entry the way a plain upstream client does (payload dumped to JSON unless text)."""
    body = payload if isinstance(payload, str) else json.dumps(payload)
    entry_id = await redis.xadd(stream, {"type": entry_type, "payload": body, **fields})
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
