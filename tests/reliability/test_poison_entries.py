"""Poison entries: whatever their bytes, they end in the dead-letter stream with a reason, and a
poison entry never holds back the other entries of its batch."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from faststream.redis import RedisBroker
from redis.asyncio import Redis

from shared.delivery import read_deadletters, reliable_batch_subscriber, reliable_subscriber, wire_fields
from shared.delivery.deadletter import DeadLetter
from shared.embedded import Endpoints
from tests.helpers.delivery_support import TestHappened, a_test_event, parse_test_event, redis, unique, wait_until  # noqa: F401

NEVER_CLAIMED = {"min_idle_ms": 600_000, "claim_interval_ms": 50}
"""The claimer would only rescue an entry after 10 minutes: what happens sooner is the reader's doing."""
FAST = {"min_idle_ms": 150, "claim_interval_ms": 30}
BINARY = b"\xff\xfe\x00\x80 not UTF-8"


@pytest.fixture
async def broker(backends: Endpoints) -> AsyncIterator[RedisBroker]:
    created = RedisBroker(backends.redis_url, log_level=logging.WARNING)
    yield created
    await created.stop()


@pytest.fixture
def names() -> dict[str, str]:
    return {"stream": unique("cf:test:poison"), "group": "g", "deadletter": unique("cf:test:dead")}


async def deadletters(redis: Redis, stream: str) -> list[DeadLetter]:
    return await read_deadletters(redis, deadletter_stream=stream)


@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
async def test_entries_that_are_not_utf8_are_dead_lettered_with_the_reason_at_once(
    broker: RedisBroker, redis: Redis, names: dict[str, str], batch: bool
) -> None:
    handled: list[int] = []
    subscriber = reliable_batch_subscriber if batch else reliable_subscriber
    options = {"deadletter_stream": names["deadletter"], "max_deliveries": 3, **FAST}

    @subscriber(broker, stream=names["stream"], group=names["group"], parse=parse_test_event, **options)
    async def handle(event: TestHappened | list[TestHappened]) -> None:
        handled.extend(e.data["n"] for e in (event if isinstance(event, list) else [event]))

    poison_body = await redis.xadd(names["stream"], {"event": BINARY})
    poison_key = await redis.xadd(names["stream"], {BINARY: b"x", "event": BINARY})
    await redis.xadd(names["stream"], wire_fields(a_test_event(7)))
    await broker.start()

    async def settled() -> bool:
        # {7}, not [7]: delivery is at-least-once, and on a loaded machine the claimer (150 ms idle)
        # may hand the slow valid entry out again while it is being handled; that is allowed here.
        return set(handled) == {7} and len(await deadletters(redis, names["deadletter"])) == 2

    assert await wait_until(settled), (handled, await redis.xpending(names["stream"], names["group"]))
    dead = await deadletters(redis, names["deadletter"])
    assert [(d.entry_id, d.reason, d.deliveries) for d in dead] == [
        (poison_body.decode(), "invalid", 1), (poison_key.decode(), "invalid", 1)
    ]
    assert all("utf-8" in d.error.lower() or "json" in d.error.lower() for d in dead), [d.error for d in dead]
    assert dead[1].original == {BINARY: b"x", b"event": BINARY}, "the original bytes are kept"
    assert (await redis.xpending(names["stream"], names["group"]))["pending"] == 0


async def test_one_failing_entry_does_not_hold_back_the_other_199_of_its_batch(
    broker: RedisBroker, redis: Redis, names: dict[str, str]
) -> None:
    events = [a_test_event(n, poison=(n == 57)) for n in range(200)]
    for event in events:
        await redis.xadd(names["stream"], wire_fields(event))
    applied: Counter[int] = Counter()

    @reliable_batch_subscriber(
        broker, stream=names["stream"], group=names["group"], parse=parse_test_event,
        max_records=200, deadletter_stream=names["deadletter"], **NEVER_CLAIMED,
    )  # fmt: skip
    async def handle(batch: list[TestHappened]) -> None:
        if any(e.data.get("poison") for e in batch):
            raise RuntimeError("poison in batch")
        applied.update(e.data["n"] for e in batch)

    await broker.start()

    async def others_applied() -> bool:
        return len(applied) == 199

    assert await wait_until(others_applied), f"{len(applied)} of 199 applied"
    assert 57 not in applied and set(applied.values()) == {1}
    pending = await redis.xpending_range(names["stream"], names["group"], min="-", max="+", count=10)
    assert [p["message_id"].decode() for p in pending] == [await _entry_id_of(redis, names["stream"], 57)]


async def _entry_id_of(redis: Redis, stream: str, n: int) -> str:
    for entry_id, fields in await redis.xrange(stream):
        if TestHappened.model_validate_json(fields[b"event"]).data["n"] == n:
            return entry_id.decode()
    raise AssertionError(f"no entry {n}")
